// Writes per-layer post-RoPE Q/K dumps (L<l>_q.npy, L<l>_k.npy) of a 3-layer synthetic model
// with planted heads: an induction head in layer 0, kv group 1, and an echo head in layer 2,
// kv group 0; every other head is local, sink or previous-token.
//   make_synthetic_dumps DIR P R      (the probe has a BOS)
#include <razorkv/io/json.hpp>
#include <razorkv/io/npy.hpp>
#include <razorkv/razorkv.hpp>

#include <cstdlib>
#include <string>

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
      head_kind kind = h % 3 == 0 ? head_kind::kLocal : h % 3 == 1 ? head_kind::kSink : head_kind::kPreviousToken;
      if (layer == 0 && h == 5) kind = head_kind::kInduction;
      if (layer == 2 && h == 2) kind = head_kind::kEcho;
      config.query_heads.push_back({{{kind, 10.0}}, 0.1});
    }
    const auto planted = razorkv::make_planted_layer(probe, config);
    const std::string prefix = dir + "/L" + std::to_string(layer);
    razorkv::io::write_text_file(prefix + "_q.npy", razorkv::io::format_npy(planted.queries, {planted.length, 8, 64}));
    razorkv::io::write_text_file(prefix + "_k.npy", razorkv::io::format_npy(planted.keys, {planted.length, 2, 64}));
  }
  return 0;
}
