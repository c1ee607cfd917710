// docs/using.md's paged block (using_paged): decode over pages and compression from them.
#include <cstdint>

#include "docs/doc_data.hpp"

int main() {
  const doc::index_t layers = 2, kv_heads = 2, query_heads = 4, dim = 32, num_pages = 8;
  const doc::index_t tokens = 100, table_pages = 7, layer = 1;  // 6 full pages of 16, then 4
  std::vector<std::vector<float>> k_storage, v_storage;
  doc::per_layer<const float*> k_pool, v_pool;
  for (doc::index_t l = 0; l < layers; ++l) {
    k_storage.push_back(doc::random(num_pages * 16 * kv_heads * dim, 10 + l));
    v_storage.push_back(doc::random(num_pages * 16 * kv_heads * dim, 20 + l));
    k_pool.push_back(k_storage.back().data());
    v_pool.push_back(v_storage.back().data());
  }
  const std::int32_t page_table[] = {5, 0, 7, 2, 3, 6, 1};
  const auto q = doc::random(query_heads * dim, 3);
  std::vector<float> o(q.size());
  const razorkv::matrix_view<const float> queries(q.data(), query_heads, dim);
  const razorkv::matrix_view<float> out(o.data(), query_heads, dim);
  razorkv::razor_config config;
  config.s0 = 16;
  razorkv::razor_kv_cache<float> razor_cache(doc::plan(layers, query_heads, kv_heads, dim), config);

  // @snippet

  doc::expect_finite(o, "using_paged");
  return razor_cache.dropped_tokens() > 0 ? 0 : 1;
}
