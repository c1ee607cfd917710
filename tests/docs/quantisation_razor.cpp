// docs/quantisation.md's block (quantisation_razor): a razor cache whose windows are 4-bit and
// whose retrieval heads are 8-bit, keys rotated; compress, append, decode.
#include "docs/doc_data.hpp"

int main() {
  const doc::index_t layers = 2, kv_heads = 2, query_heads = 4, dim = 64, tokens = 5000;
  const doc::index_t layer = 0;
  const razorkv::head_plan plan = doc::plan(layers, query_heads, kv_heads, dim);
  using view = razorkv::layer_view<const float>;
  const auto k = doc::random(tokens * kv_heads * dim, 1);
  const auto v = doc::random(tokens * kv_heads * dim, 2);
  const view keys_view = view::nhd(k.data(), tokens, kv_heads, dim);
  const view values_view = view::nhd(v.data(), tokens, kv_heads, dim);
  const view new_keys = view::nhd(k.data(), 1, kv_heads, dim);
  const view new_values = view::nhd(v.data(), 1, kv_heads, dim);
  const auto q = doc::random(query_heads * dim, 5);
  std::vector<float> o(q.size());
  const razorkv::matrix_view<const float> queries(q.data(), query_heads, dim);
  const razorkv::matrix_view<float> out(o.data(), query_heads, dim);

  // @snippet

  doc::expect_finite(o, "quantisation_razor");
  // The windows' and retrieval heads' rows are blocks: the layer holds far less than float rows.
  const auto float_bytes = razorkv::head_kv_bytes(cache.entries(layer, 0), dim, 4) +
                           razorkv::head_kv_bytes(cache.entries(layer, 1), dim, 4);
  return cache.kv_bytes(layer) * 3 < float_bytes ? 0 : 1;
}
