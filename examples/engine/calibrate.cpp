// razorkv_trained_calibrate: calibrates a model through the engine (the trained byte model, or
// SmolLM2 from its GGUF file): prefills razorkv's probe, scores every head from the post-RoPE
// Q/K, selects retrieval groups (14% induction + 1% echo) and writes scores.json and plan.json.
//   razorkv_trained_calibrate <model.safetensors or model.gguf> <output folder>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>

#include <razorkv/io/json.hpp>

#include "tiny_llama.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <model.safetensors or model.gguf> <output folder>\n", argv[0]);
    return 2;
  }
  try {
    const tiny_llama::model m = tiny_llama::model::load(argv[1]);
    const tiny_llama::config& c = m.cfg();
    const razorkv::probe probe(tiny_llama::probe_config_for(c));
    std::printf("probe: %lld random ids of [%lld, %lld) x %lld copies = %lld tokens\n",
                static_cast<long long>(probe.num_random_tokens()),
                static_cast<long long>(c.first_text_id), static_cast<long long>(c.vocab_size),
                static_cast<long long>(probe.repeats()), static_cast<long long>(probe.length()));
    const auto start = std::chrono::steady_clock::now();
    const razorkv::head_scores scores = tiny_llama::score_heads(m, probe);
    std::printf("prefilled and scored in %.1f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    const razorkv::head_plan plan =
        razorkv::select_retrieval_heads(scores, c.head_dim(), razorkv::selection_config{});
    const std::string out = argv[2];
    razorkv::io::write_text_file(out + "/scores.json", razorkv::io::head_scores_to_json(scores));
    razorkv::io::write_text_file(out + "/plan.json", razorkv::io::head_plan_to_json(plan));

    std::printf("\n%-6s %-6s %-8s %9s %9s  %s\n", "layer", "head", "kv head", "echo", "induction",
                "kept");
    for (razorkv::index_t l = 0; l < c.num_layers; ++l) {
      for (razorkv::index_t h = 0; h < c.num_q_heads; ++h) {
        const razorkv::index_t g = h / (c.num_q_heads / c.num_kv_heads);
        std::printf("%-6lld %-6lld %-8lld %9.4f %9.4f  %s\n", static_cast<long long>(l),
                    static_cast<long long>(h), static_cast<long long>(g), scores.echo(l, h),
                    scores.induction(l, h), plan.is_retrieval(l, g) ? "retrieval" : "");
      }
    }
    std::printf("\n%lld of %lld kv groups kept whole; wrote %s/scores.json and %s/plan.json\n",
                static_cast<long long>(plan.num_retrieval()),
                static_cast<long long>(c.num_layers * c.num_kv_heads), out.c_str(), out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
