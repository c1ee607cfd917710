// docs/using.md's workspace block (using_workspace): a decode loop over a bounded razor cache.
#include "docs/doc_data.hpp"

int main() {
  const doc::index_t layers = 1, kv_heads = 2, query_heads = 4, dim = 32, tokens = 400;
  const doc::index_t layer = 0, steps = 20;
  razorkv::razor_config config;
  config.s0 = 64;
  config.decode = razorkv::decode_mode::kBounded;
  razorkv::razor_kv_cache<float> cache(doc::plan(layers, query_heads, kv_heads, dim), config);
  using view = razorkv::layer_view<const float>;
  const auto k = doc::random(tokens * kv_heads * dim, 1),
             v = doc::random(tokens * kv_heads * dim, 2);
  cache.compress_layer(layer, view::nhd(k.data(), tokens, kv_heads, dim),
                       view::nhd(v.data(), tokens, kv_heads, dim));
  const auto kn = doc::random(kv_heads * dim, 3), vn = doc::random(kv_heads * dim, 4);
  const view new_keys = view::nhd(kn.data(), 1, kv_heads, dim);
  const view new_values = view::nhd(vn.data(), 1, kv_heads, dim);
  const auto q = doc::random(query_heads * dim, 5);
  std::vector<float> o(q.size());
  const razorkv::matrix_view<const float> queries(q.data(), query_heads, dim);
  const razorkv::matrix_view<float> out(o.data(), query_heads, dim);

  // @snippet

  doc::expect_finite(o, "using_workspace");
  return 0;
}
