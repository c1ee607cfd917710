// razorkv_trained_demo: the trained model end to end: calibration -> plan -> a long document with
// a random byte run hidden in it, compressed with RazorAttention -> the run asked for again and
// copied over the full and the razor cache (and StreamingLLM's), with the memory and time of each.
//   razorkv_trained_demo <model.safetensors> <repository root>
#include <chrono>
#include <cstdio>
#include <exception>
#include <random>
#include <string>

#include "tasks.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <model.safetensors> <repository root>\n", argv[0]);
    return 2;
  }
  try {
    using clock = std::chrono::steady_clock;
    const tiny_llama::model m = tiny_llama::model::load(argv[1]);
    const tiny_llama::config& c = m.cfg();
    std::printf(
        "model: %lld layers, %lld query / %lld kv heads of dim %lld, d_model %lld, context %lld, "
        "bytes as tokens\n",
        static_cast<long long>(c.num_layers), static_cast<long long>(c.num_q_heads),
        static_cast<long long>(c.num_kv_heads), static_cast<long long>(c.head_dim()),
        static_cast<long long>(c.d_model), static_cast<long long>(c.max_context));

    // 1. Calibration: prefill the probe, score every head, keep the top 14% induction + 1% echo
    // groups.
    auto start = clock::now();
    const razorkv::probe probe(tiny_llama::probe_config_for(c));
    const razorkv::head_scores scores = tiny_llama::score_heads(m, probe);
    const razorkv::head_plan plan =
        razorkv::select_retrieval_heads(scores, c.head_dim(), razorkv::selection_config{});
    std::printf(
        "\ncalibration: %lld-token probe prefilled and scored in %.2f s; retrieval groups (layer, "
        "kv head):",
        static_cast<long long>(probe.length()), seconds_since(start));
    for (razorkv::index_t l = 0; l < c.num_layers; ++l) {
      for (razorkv::index_t g : plan.retrieval_heads(l))
        std::printf(" (%lld, %lld)", static_cast<long long>(l), static_cast<long long>(g));
    }
    std::printf("  of %lld\n", static_cast<long long>(c.num_layers * c.num_kv_heads));

    // 2. A 1,024-token document of held-out text (razorkv's own headers) with a run of 32 random
    //    bytes at 30% of its length. The model, whose heads copy what they have seen, is then
    //    given the run's first byte and must recall the other 31 from the compressed cache.
    std::mt19937_64 rng(7);
    const tiny_llama::trial t =
        tiny_llama::needle_trial(tiny_llama::heldout_text(argv[2]), 1024, 0.3, rng);
    start = clock::now();
    const tiny_llama::prefill_state state = m.prefill(t.context, false);
    std::printf("prefill: %zu tokens in %.2f s (dense, the engine's own buffers)\n",
                t.context.size(), seconds_since(start));
    const razorkv::prompt_kv<float> prompt = m.prompt_of(state);
    std::printf("the hidden run (hex):      ");
    for (int id : t.continuation) std::printf("%02x", id);
    std::printf("\n\n");

    // 3. The run's recall over the full cache, RazorAttention and StreamingLLM, the last two at a
    //    third of the full cache's memory; each prediction is greedy, given the true bytes before.
    std::printf("%-14s %10s %8s %12s %13s  %s\n", "cache", "KV bytes", "of full", "compress ms",
                "ms per token", "bytes of the run recalled");
    const razorkv::policy policies[] = {razorkv::full_policy(),
                                        razorkv::razor_policy("razor", plan),
                                        razorkv::streaming_llm_policy()};
    double full_bytes = 0;
    for (const razorkv::policy& p : policies) {
      start = clock::now();
      razorkv::any_kv_cache<float> cache =
          razorkv::compress_prompt(p, prompt, razorkv::memory_budget::fraction_of_full(1.0 / 3.0));
      const double compress_ms = 1e3 * seconds_since(start);
      tiny_llama::trial_outcome outcome;
      outcome.kv_bytes = cache.kv_bytes();
      start = clock::now();
      tiny_llama::run_continuation(m, cache, t, outcome);
      const double per_token_ms =
          1e3 * seconds_since(start) / static_cast<double>(t.continuation.size());
      if (p.name == "full") full_bytes = static_cast<double>(outcome.kv_bytes);
      std::printf("%-14s %10lld %8.3f %12.2f %13.3f  %.0f of %.0f\n", p.name.c_str(),
                  static_cast<long long>(outcome.kv_bytes),
                  static_cast<double>(outcome.kv_bytes) / full_bytes, compress_ms, per_token_ms,
                  outcome.correct, outcome.predictions);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
