// docs/using.md's chunked-prefill block (using_chunked): a chunk joins the cache, then its
// queries attend causally over the compressed past and the chunk.
#include "docs/doc_data.hpp"

int main() {
  const doc::index_t layers = 1, kv_heads = 2, query_heads = 4, dim = 32, chunk = 64;
  const doc::index_t layer = 0;
  razorkv::razor_config config;
  config.s0 = 128;
  razorkv::razor_kv_cache<float> cache(doc::plan(layers, query_heads, kv_heads, dim), config);
  using view = razorkv::layer_view<const float>;
  std::vector<float> o(static_cast<std::size_t>(chunk * query_heads * dim));
  for (unsigned c = 0; c < 8; ++c) {
    const auto k = doc::random(chunk * kv_heads * dim, 10 + c);
    const auto v = doc::random(chunk * kv_heads * dim, 20 + c);
    const auto q = doc::random(chunk * query_heads * dim, 30 + c);
    const view k_view = view::nhd(k.data(), chunk, kv_heads, dim);
    const view v_view = view::nhd(v.data(), chunk, kv_heads, dim);
    const view q_view = view::nhd(q.data(), chunk, query_heads, dim);
    const razorkv::layer_view<float> out_view =
        razorkv::layer_view<float>::nhd(o.data(), chunk, query_heads, dim);

    // @snippet
  }
  doc::expect_finite(o, "using_chunked");
  return cache.dropped_tokens() > 0 ? 0 : 1;
}
