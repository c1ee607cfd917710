// docs/using.md's razor cache block (using_razor): compress a prefill, append, decode.
#include "docs/doc_data.hpp"

int main() {
  const doc::index_t layers = 2, kv_heads = 2, query_heads = 4, dim = 32, tokens = 5000;
  const doc::index_t layer = 0;
  const razorkv::head_plan plan = doc::plan(layers, query_heads, kv_heads, dim);
  using view = razorkv::layer_view<const Eigen::bfloat16>;
  const auto k = doc::random<Eigen::bfloat16>(tokens * kv_heads * dim, 1);
  const auto v = doc::random<Eigen::bfloat16>(tokens * kv_heads * dim, 2);
  const view keys_view = view::nhd(k.data(), tokens, kv_heads, dim);
  const view values_view = view::nhd(v.data(), tokens, kv_heads, dim);
  const view new_keys = view::nhd(k.data(), 1, kv_heads, dim);
  const view new_values = view::nhd(v.data(), 1, kv_heads, dim);
  const auto q = doc::random(query_heads * dim, 5);
  std::vector<float> o(q.size());
  const razorkv::matrix_view<const float> queries(q.data(), query_heads, dim);
  const razorkv::matrix_view<float> out(o.data(), query_heads, dim);

  // @snippet

  doc::expect_finite(o, "using_razor");
  return cache.dropped_tokens() > 0 ? 0 : 1;  // 5,000 tokens: past sinks + max(S0, N / C)
}
