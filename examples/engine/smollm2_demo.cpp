// razorkv_smollm2_demo: a real pretrained LLM (SmolLM2-135M-Instruct, from its GGUF file) on the
// engine: a passphrase hidden in a ~6K-token document of held-out text, the document's K/V
// compressed by RazorAttention with the committed plan, and the passphrase asked for over the
// full cache, the razor cache and StreamingLLM's at the same memory.
//   razorkv_smollm2_demo <model.gguf> <repository root> [document tokens] [depth]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>

#include <razorkv/io/plan_files.hpp>

#include "smollm2.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5) {
    std::fprintf(stderr, "usage: %s <model.gguf> <repository root> [document tokens] [depth]\n",
                 argv[0]);
    return 2;
  }
  try {
    using clock = std::chrono::steady_clock;
    const std::string root = argv[2];
    const razorkv::index_t tokens = argc > 3 ? std::atoll(argv[3]) : 6000;
    const double depth = argc > 4 ? std::atof(argv[4]) : 0.4;
    auto start = clock::now();
    const tiny_llama::gguf_model m = tiny_llama::gguf_model::load(argv[1]);
    const tiny_llama::config& c = m.weights.cfg();
    std::printf(
        "model: SmolLM2-135M-Instruct (Q4_1 GGUF, float32 in memory), %lld layers, %lld query / "
        "%lld kv heads of dim %lld, context %lld, %lld-token BPE vocabulary; loaded in %.1f s\n",
        static_cast<long long>(c.num_layers), static_cast<long long>(c.num_q_heads),
        static_cast<long long>(c.num_kv_heads), static_cast<long long>(c.head_dim()),
        static_cast<long long>(c.max_context), static_cast<long long>(c.vocab_size),
        seconds_since(start));

    // The plan calibrated offline (razorkv_trained_calibrate on this file).
    const razorkv::head_plan plan = tiny_llama::smollm2_plan(root);
    plan.validate_against(m.weights.shape());
    std::printf("plan: %lld of %lld kv groups keep their whole cache (14%% induction + 1%% echo)\n",
                static_cast<long long>(plan.num_retrieval()),
                static_cast<long long>(c.num_layers * c.num_kv_heads));

    std::mt19937_64 rng(2);
    const tiny_llama::passphrase_trial t = tiny_llama::make_passphrase_trial(
        m, tiny_llama::smollm2_heldout_text(root), tokens, depth, rng);
    start = clock::now();
    const tiny_llama::prefill_state state = m.weights.prefill(t.document, false);
    std::printf(
        "document: %zu tokens of held-out text, the sentence \"The secret passphrase is "
        "%s.\" at %.0f%% of it; prefilled in %.1f s\n",
        t.document.size(), t.passphrase.c_str(), 100 * depth, seconds_since(start));
    std::printf("question: What is the secret passphrase in the text above?\n\n");
    const razorkv::prompt_kv<float> prompt = m.weights.prompt_of(state);

    std::printf("%-14s %10s %8s %12s %13s  %s\n", "cache", "KV bytes", "of full", "compress ms",
                "ms per token", "answer");
    const razorkv::policy policies[] = {razorkv::full_policy(),
                                        razorkv::razor_policy("razor", plan),
                                        razorkv::streaming_llm_policy()};
    double full_bytes = 0;
    int recalled = 0;
    for (const razorkv::policy& p : policies) {
      start = clock::now();
      razorkv::any_kv_cache<float> cache =
          razorkv::compress_prompt(p, prompt, razorkv::memory_budget::fraction_of_full(1.0 / 3.0));
      const double compress_ms = 1e3 * seconds_since(start);
      const razorkv::index_t bytes = cache.kv_bytes();
      start = clock::now();
      const std::string answer = tiny_llama::answer_passphrase(m, cache, t);
      const razorkv::index_t decoded =
          static_cast<razorkv::index_t>(t.question.size()) +
          static_cast<razorkv::index_t>(m.tokenizer.tokenize(answer).size());
      const double per_token_ms = 1e3 * seconds_since(start) / static_cast<double>(decoded);
      if (p.name == "full") full_bytes = static_cast<double>(bytes);
      const bool ok = tiny_llama::recalls_passphrase(answer, t.passphrase);
      recalled += ok ? 1 : 0;
      std::printf("%-14s %10lld %8.3f %12.1f %13.1f  \"%s\" %s\n", p.name.c_str(),
                  static_cast<long long>(bytes), static_cast<double>(bytes) / full_bytes,
                  compress_ms, per_token_ms, answer.c_str(), ok ? "(right)" : "(wrong)");
    }
    std::printf("\n%d of 3 caches recalled the passphrase\n", recalled);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
