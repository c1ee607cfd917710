// razorkv_quickstart: the README's engine example, compiled and run by the tests. One sequence of
// a 4-layer model (4 query heads, 2 kv heads of dim 32, the trained model's shape) whose prefill
// K/V the engine holds in its own NHD buffers: compress with the plan, then decode one token.
//   razorkv_quickstart <plan.json>
#include <cstdio>
#include <random>
#include <vector>

#include <razorkv/io/plan_files.hpp>
#include <razorkv/razorkv.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <plan.json>\n", argv[0]);
    return 2;
  }
  const razorkv::index_t layers = 4, query_heads = 4, kv_heads = 2, dim = 32, tokens = 2048;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> k(tokens * kv_heads * dim), v(k.size()), q(query_heads * dim), out(q.size());
  for (auto* buffer : {&k, &v, &q})
    for (float& x : *buffer) x = normal(rng);

  // --- the engine's side: 20 lines ------------------------------------------------------------
  using view = razorkv::layer_view<const float>;  // [tokens, heads, dim], read in place
  const razorkv::head_plan plan =
      razorkv::io::parse_head_plan(razorkv::io::read_text_file(argv[1]));  // offline calibration
  razorkv::razor_config config;  // 4 sinks, window max(S0 = 4000, N / 5): the paper's defaults
  config.s0 = 256;               // a short window, so that this 2K-token prompt is compressed
  razorkv::razor_kv_cache<float> cache(plan, config);
  for (razorkv::index_t layer = 0; layer < layers; ++layer)  // after prefill, per layer:
    cache.compress_layer(layer, view::nhd(k.data(), tokens, kv_heads, dim),
                         view::nhd(v.data(), tokens, kv_heads, dim));
  // Each decode step, per layer: append the new token's K/V, then attend.
  for (razorkv::index_t layer = 0; layer < layers; ++layer) {
    cache.append(layer, view::nhd(k.data(), 1, kv_heads, dim),
                 view::nhd(v.data(), 1, kv_heads, dim));
    razorkv::decode_attention(cache, layer,
                              razorkv::matrix_view<const float>(q.data(), query_heads, dim),
                              razorkv::matrix_view<float>(out.data(), query_heads, dim));
  }
  // ---------------------------------------------------------------------------------------------

  std::printf("%lld of %lld kv groups kept whole; the cache holds %lld of %lld K/V bytes (%.3f)\n",
              static_cast<long long>(plan.num_retrieval()),
              static_cast<long long>(layers * kv_heads), static_cast<long long>(cache.kv_bytes()),
              static_cast<long long>(cache.dense_kv_bytes()), cache.compression_ratio());
  std::printf("decode output of query head 0: %.4f %.4f %.4f ...\n", out[0], out[1], out[2]);
  return 0;
}
