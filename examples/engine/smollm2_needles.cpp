// razorkv_smollm2_needles: SmolLM2-135M-Instruct recalls a passphrase hidden in held-out text,
// over the full cache and over each policy at a third of its memory: the README's result table.
// Trial i hides its passphrase at depth (i + 0.5) / trials; an answer counts only when it
// holds the passphrase whole. Each recall rate comes with its 95% Wilson interval.
//   razorkv_smollm2_needles <model.gguf> <repository root> [trials (10)] [document tokens (3000)]
//                           [kind: words-and-number (default), number or word]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include <razorkv/eval.hpp>
#include <razorkv/io/json.hpp>
#include <razorkv/io/plan_files.hpp>

#include "smollm2.hpp"

namespace {

// The 95% Wilson score interval of k successes in n trials.
std::pair<double, double> wilson(int k, int n) {
  const double z = 1.959964, p = static_cast<double>(k) / n, z2n = z * z / n;
  const double centre = (p + z2n / 2) / (1 + z2n);
  const double half = z * std::sqrt(p * (1 - p) / n + z2n / (4.0 * n)) / (1 + z2n);
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 6) {
    std::fprintf(stderr,
                 "usage: %s <model.gguf> <repository root> [trials] [document tokens] [kind]\n",
                 argv[0]);
    return 2;
  }
  try {
    const std::string root = argv[2];
    const int trials = argc > 3 ? std::atoi(argv[3]) : 10;
    const razorkv::index_t tokens = argc > 4 ? std::atoll(argv[4]) : 3000;
    const std::string kind_name = argc > 5 ? argv[5] : "words-and-number";
    const tiny_llama::passphrase_kind kind =
        kind_name == "number" ? tiny_llama::passphrase_kind::kNumber
        : kind_name == "word" ? tiny_llama::passphrase_kind::kWord
                              : tiny_llama::passphrase_kind::kWordsAndNumber;
    RAZORKV_CHECK(kind_name == "number" || kind_name == "word" || kind_name == "words-and-number",
                  kInvalidArgument, "razorkv_smollm2_needles: kind \"", kind_name,
                  "\" is not words-and-number, number or word");
    RAZORKV_CHECK(trials >= 1, kInvalidArgument, "razorkv_smollm2_needles: trials (", trials,
                  ") must be >= 1");
    const auto start = std::chrono::steady_clock::now();
    const tiny_llama::gguf_model m = tiny_llama::gguf_model::load(argv[1]);
    const std::string dir = root + "/examples/engine/smollm2";
    const razorkv::head_plan plan = tiny_llama::smollm2_plan(root);
    const razorkv::head_scores scores =
        razorkv::io::head_scores_from_json(razorkv::io::read_text_file(dir + "/scores.json"));
    razorkv::selection_config more;  // 20% induction + 1% echo of the same scores
    more.induction_ratio = 0.20;
    const razorkv::head_plan plan20 =
        razorkv::select_retrieval_heads(scores, m.weights.cfg().head_dim(), more);
    const std::vector<razorkv::policy> policies = {
        razorkv::full_policy(),
        razorkv::razor_policy("razor", plan),
        razorkv::razor_policy("razor 20%", plan20),
        razorkv::razor_policy("razor, random heads",
                              razorkv::random_plan(m.weights.shape(), plan.num_retrieval(), 1)),
        razorkv::streaming_llm_policy(),
        razorkv::snapkv_policy()};
    const razorkv::memory_budget budget = razorkv::memory_budget::fraction_of_full(1.0 / 3.0);

    const std::string text = tiny_llama::smollm2_heldout_text(root);
    std::mt19937_64 rng(1);
    std::vector<int> recalled(policies.size(), 0);
    std::vector<double> bytes(policies.size(), 0);
    std::printf(
        "%d passphrases (%s) in %lld-token documents; every cache but full at a third of "
        "its memory (1 = recalled whole)\n\n%-7s",
        trials, kind_name.c_str(), static_cast<long long>(tokens), "depth");
    for (const razorkv::policy& p : policies) std::printf(" %s |", p.name.c_str());
    std::printf("\n");
    for (int i = 0; i < trials; ++i) {
      const double depth = (i + 0.5) / trials;
      const tiny_llama::passphrase_trial t =
          tiny_llama::make_passphrase_trial(m, text, tokens, depth, rng, kind);
      const tiny_llama::prefill_state state = m.weights.prefill(t.document, false);
      const razorkv::prompt_kv<float> prompt = m.weights.prompt_of(state);
      std::printf("%-7.2f", depth);
      for (std::size_t p = 0; p < policies.size(); ++p) {
        razorkv::any_kv_cache<float> cache = razorkv::compress_prompt(policies[p], prompt, budget);
        bytes[p] = static_cast<double>(cache.kv_bytes());
        const bool ok = tiny_llama::recalls_passphrase(tiny_llama::answer_passphrase(m, cache, t),
                                                       t.passphrase);
        recalled[p] += ok ? 1 : 0;
        std::printf(" %*d |", static_cast<int>(policies[p].name.size()), ok ? 1 : 0);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
    std::printf("\n%-20s %8s %10s  %s\n", "cache", "of full", "recalled", "95% interval");
    for (std::size_t p = 0; p < policies.size(); ++p) {
      const auto [low, high] = wilson(recalled[p], trials);
      std::printf("%-20s %8.3f %5d of %d  [%.2f, %.2f]\n", policies[p].name.c_str(),
                  bytes[p] / bytes[0], recalled[p], trials, low, high);
    }
    std::printf("\n%.0f s in all\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
