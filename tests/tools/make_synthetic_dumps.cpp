// Writes per-layer post-RoPE Q/K dumps (L<l>_q.npy, L<l>_k.npy) and the attention they give
// (L<l>_attn.npy) of a 3-layer synthetic model
// with planted heads: an induction head in layer 0, kv group 1, and an echo head in layer 2,
// kv group 0; every other head is local, sink or previous-token.
//   make_synthetic_dumps DIR P R      (the probe has a BOS)
#include <razorkv/eval.hpp>
#include <razorkv/io/json.hpp>
#include <razorkv/io/npy.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  const std::string dir = argv[1];
  razorkv::probe_config c;
  c.num_random_tokens = std::atol(argv[2]);
  c.repeats = std::atol(argv[3]);
  c.max_id = 32000;
  c.bos_id = 1;
  const razorkv::probe probe(c);
  using razorkv::head_kind;
  for (int layer = 0; layer < 3; ++layer) {
    razorkv::planted_layer_config config;
    config.num_kv_heads = 2;
    config.head_dim = 64;
    config.seed = static_cast<std::uint64_t>(layer);
    for (int h = 0; h < 8; ++h) {
      head_kind kind = h % 3 == 0   ? head_kind::kLocal
                       : h % 3 == 1 ? head_kind::kSink
                                    : head_kind::kPreviousToken;
      if (layer == 0 && h == 5) kind = head_kind::kInduction;
      if (layer == 2 && h == 2) kind = head_kind::kEcho;
      config.query_heads.push_back({{{kind, 10.0}}, 0.1});
    }
    const auto planted = razorkv::make_planted_layer(probe, config);
    const std::string prefix = dir + "/L" + std::to_string(layer);
    razorkv::io::write_text_file(prefix + "_q.npy",
                                 razorkv::io::format_npy(planted.queries, {planted.length, 8, 64}));
    razorkv::io::write_text_file(prefix + "_k.npy",
                                 razorkv::io::format_npy(planted.keys, {planted.length, 2, 64}));
    // The same layer as attention probabilities [heads, L, L] (causal softmax, scale 1/8).
    const razorkv::index_t n = planted.length;
    std::vector<float> attn(static_cast<std::size_t>(8 * n * n), 0.0f);
    for (razorkv::index_t h = 0; h < 8; ++h) {
      for (razorkv::index_t i = 0; i < n; ++i) {
        std::vector<double> logits(static_cast<std::size_t>(i + 1));
        double top = -1e300, sum = 0.0;
        for (razorkv::index_t j = 0; j <= i; ++j) {
          double dot = 0.0;
          for (razorkv::index_t d = 0; d < 64; ++d) {
            dot += planted.queries[static_cast<std::size_t>((i * 8 + h) * 64 + d)] *
                   planted.keys[static_cast<std::size_t>((j * 2 + h / 4) * 64 + d)];
          }
          logits[static_cast<std::size_t>(j)] = dot / 8.0;
          top = std::max(top, dot / 8.0);
        }
        for (double& l : logits) sum += (l = std::exp(l - top));
        for (razorkv::index_t j = 0; j <= i; ++j) {
          attn[static_cast<std::size_t>((h * n + i) * n + j)] =
              static_cast<float>(logits[static_cast<std::size_t>(j)] / sum);
        }
      }
    }
    razorkv::io::write_text_file(prefix + "_attn.npy", razorkv::io::format_npy(attn, {8, n, n}));
  }
  return 0;
}
