// The SnapKV and H2O caches in every storage dtype: the kept rows are the prompt's, bit for bit,
// and the optimised decode over them agrees with the scalar reference, through decode steps; and
// their rows come from the memory resource they are given, and go back to it.
#include <gtest/gtest.h>

#include <razorkv/eval.hpp>

#include <new>
#include <vector>

#include "support/counting_resource.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;

template <class T>
class RazorkvPolicyCaches : public ::testing::Test {};
TYPED_TEST_SUITE(RazorkvPolicyCaches, razorkv_test::storage_dtypes);

// Every entry of `cache` (layer 0) equals the prompt row at its position, keys and values.
template <class Cache, class T>
void expect_rows_of_positions(const Cache& cache, index_t kv_head,
                              const std::vector<index_t>& positions,
                              const layer_view<const T>& keys, const layer_view<const T>& values) {
  index_t e = 0;
  for (index_t s = 0; s < cache.num_spans(0, kv_head); ++s) {
    const razorkv::kv_span<T> span = cache.span(0, kv_head, s);
    for (index_t r = 0; r < span.length(); ++r, ++e) {
      const index_t p = positions[static_cast<std::size_t>(e)];
      for (index_t c = 0; c < keys.head_dim(); ++c) {
        ASSERT_EQ(razorkv_test::to_double(span.keys.typed()(r, c)),
                  razorkv_test::to_double(keys.token(p)(kv_head, c)));
        ASSERT_EQ(razorkv_test::to_double(span.values.typed()(r, c)),
                  razorkv_test::to_double(values.token(p)(kv_head, c)));
      }
    }
  }
  EXPECT_EQ(e, static_cast<index_t>(positions.size()));
}

// decode_attention over `cache` against the reference, for the query of token t.
template <class Cache, class T>
void expect_decode_matches_reference(const Cache& cache, const layer_view<const T>& queries,
                                     index_t t) {
  const razorkv::matrix_view<const T> q = queries.token(t);
  std::vector<float> out(static_cast<std::size_t>(q.rows() * q.cols()));
  razorkv::decode_attention(cache, 0, q,
                            razorkv::matrix_view<float>(out.data(), q.rows(), q.cols()));
  const std::vector<double> want = razorkv::reference::decode_attention(cache, 0, q);
  EXPECT_LT(razorkv_test::max_abs_diff(out, want), 1e-4);
}

TYPED_TEST(RazorkvPolicyCaches, KeepThePromptsRowsAndDecodeLikeTheReference) {
  using T = TypeParam;
  const index_t prompt = 203, total = 211, kv_heads = 2, query_heads = 6, dim = 24;  // odd sizes
  std::mt19937_64 rng(21);
  // Padded rows (token stride kv_heads * dim + 5) as an engine's buffers may have.
  const index_t stride = kv_heads * dim + 5, q_stride = query_heads * dim;
  const auto keys_data =
      razorkv_test::random_values<T>(static_cast<std::size_t>(total * stride), rng);
  const auto values_data = razorkv_test::random_values<T>(keys_data.size(), rng);
  const auto queries_data =
      razorkv_test::random_values<T>(static_cast<std::size_t>(total * q_stride), rng);
  const auto keys = layer_view<const T>::nhd(keys_data.data(), total, kv_heads, dim, stride);
  const auto values = layer_view<const T>::nhd(values_data.data(), total, kv_heads, dim, stride);
  const auto queries = layer_view<const T>::nhd(queries_data.data(), total, query_heads, dim);

  razorkv::snapkv_config snap;
  snap.window = 8;
  razorkv::selected_kv_cache<T> snapkv(1, kv_heads, dim);
  razorkv::snapkv_compress_layer(snapkv, 0, queries.middle_tokens(prompt - 8, 8),
                                 keys.middle_tokens(0, prompt), values.middle_tokens(0, prompt), 40,
                                 snap);
  razorkv::h2o_kv_cache<T> h2o(1, kv_heads, dim, 40);
  h2o.compress_layer(
      0, keys.middle_tokens(0, prompt), values.middle_tokens(0, prompt),
      razorkv::observed_attention(queries.middle_tokens(0, prompt), keys.middle_tokens(0, prompt)));
  for (index_t t = prompt; t < total; ++t) {
    snapkv.append(0, keys.middle_tokens(t, 1), values.middle_tokens(t, 1));
    h2o.append(0, keys.middle_tokens(t, 1), values.middle_tokens(t, 1));
    expect_decode_matches_reference(snapkv, queries, t);
    expect_decode_matches_reference(h2o, queries, t);
    h2o.observe(0, queries.middle_tokens(t, 1));
  }
  for (index_t h = 0; h < kv_heads; ++h) {
    EXPECT_EQ(razorkv::num_entries(snapkv, 0, h), 40 + (total - prompt));
    EXPECT_EQ(razorkv::num_entries(h2o, 0, h), 40);
    expect_rows_of_positions(snapkv, h, snapkv.positions(0, h), keys, values);
    expect_rows_of_positions(h2o, h, h2o.positions(0, h), keys, values);
  }
}

// After decode: `pooled` holds what `heap` holds, every row it has allocated is out of `pool`,
// and a copy allocates as much again from it and gives it back.
template <class Cache>
void expect_pooled_like_heap(const Cache& pooled, const Cache& heap,
                             const razorkv_test::counting_resource& pool,
                             const layer_view<const float>& keys,
                             const layer_view<const float>& values) {
  const long rows_bytes = pooled.allocated_bytes();
  EXPECT_EQ(pool.outstanding, rows_bytes);
  for (index_t h = 0; h < pooled.num_kv_heads(); ++h) {
    EXPECT_EQ(pooled.positions(0, h), heap.positions(0, h));
    expect_rows_of_positions(pooled, h, pooled.positions(0, h), keys, values);
  }
  {
    const Cache copy = pooled;
    EXPECT_EQ(copy.memory_resource(), &pool);
    EXPECT_EQ(pool.outstanding, 2 * rows_bytes);
  }
  EXPECT_EQ(pool.outstanding, rows_bytes);
}

// Every K/V row of a SnapKV (selected) or H2O cache built on a resource comes from it (what
// allocated_bytes() counts), through compression, decode growth and copies, and goes back to it
// on destruction; the cache holds what a heap cache holds. A failed allocation during append
// leaves the cache as it was.
TEST(RazorkvPolicyCacheMemory, EveryRowComesFromTheCachesResourceAndGoesBack) {
  const index_t prompt = 300, total = 600, kv_heads = 2, query_heads = 4, dim = 16, budget = 40;
  std::mt19937_64 rng(23);
  const auto keys_data =
      razorkv_test::random_values<float>(static_cast<std::size_t>(total * kv_heads * dim), rng);
  const auto values_data = razorkv_test::random_values<float>(keys_data.size(), rng);
  const auto queries_data =
      razorkv_test::random_values<float>(static_cast<std::size_t>(total * query_heads * dim), rng);
  const auto keys = layer_view<const float>::nhd(keys_data.data(), total, kv_heads, dim);
  const auto values = layer_view<const float>::nhd(values_data.data(), total, kv_heads, dim);
  const auto queries = layer_view<const float>::nhd(queries_data.data(), total, query_heads, dim);
  const auto prompt_keys = keys.middle_tokens(0, prompt);
  const auto prompt_values = values.middle_tokens(0, prompt);

  razorkv_test::counting_resource pool;
  {
    razorkv::snapkv_config snap;
    snap.window = 8;
    razorkv::selected_kv_cache<float> pooled(1, kv_heads, dim, &pool), heap(1, kv_heads, dim);
    EXPECT_EQ(pooled.memory_resource(), &pool);
    EXPECT_EQ(heap.memory_resource(), std::pmr::get_default_resource());
    for (auto* cache : {&pooled, &heap}) {
      razorkv::snapkv_compress_layer(*cache, 0, queries.middle_tokens(prompt - 8, 8), prompt_keys,
                                     prompt_values, budget, snap);
    }
    EXPECT_EQ(pool.outstanding, pooled.allocated_bytes());
    for (index_t t = prompt; t < total; ++t) {  // blocks of 256 rows chained as decode grows
      pooled.append(0, keys.middle_tokens(t, 1), values.middle_tokens(t, 1));
      heap.append(0, keys.middle_tokens(t, 1), values.middle_tokens(t, 1));
    }
    expect_pooled_like_heap(pooled, heap, pool, keys, values);
    const long rows_bytes = pooled.allocated_bytes();

    // The next append needs a block: its allocation fails, and nothing changes.
    const index_t entries = razorkv::num_entries(pooled, 0, 0);
    const index_t free_rows = 2 * 256 - (total - prompt);  // two blocks chained for 300 tokens
    for (index_t t = 0; t < free_rows; ++t)
      pooled.append(0, keys.middle_tokens(t, 1), values.middle_tokens(t, 1));
    pool.limit = pool.allocations;
    EXPECT_THROW(pooled.append(0, keys.middle_tokens(0, 1), values.middle_tokens(0, 1)),
                 std::bad_alloc);
    EXPECT_EQ(razorkv::num_entries(pooled, 0, 0), entries + free_rows);
    EXPECT_EQ(pooled.num_tokens(0), total + free_rows);
    EXPECT_EQ(pool.outstanding, rows_bytes);
    pool.limit = -1;
  }
  EXPECT_EQ(pool.outstanding, 0);
  {
    razorkv::h2o_kv_cache<float> pooled(1, kv_heads, dim, budget, {}, &pool),
        heap(1, kv_heads, dim, budget);
    EXPECT_EQ(pooled.memory_resource(), &pool);
    EXPECT_EQ(heap.memory_resource(), std::pmr::get_default_resource());
    const auto mass = razorkv::observed_attention(queries.middle_tokens(0, prompt), prompt_keys);
    pooled.compress_layer(0, prompt_keys, prompt_values, mass);
    heap.compress_layer(0, prompt_keys, prompt_values, mass);
    const long rows_bytes = pooled.allocated_bytes();
    EXPECT_GT(rows_bytes, 0);
    EXPECT_EQ(pool.outstanding, rows_bytes);
    for (index_t t = prompt; t < total; ++t) {  // a fixed budget: decode allocates no rows
      pooled.append(0, keys.middle_tokens(t, 1), values.middle_tokens(t, 1));
      heap.append(0, keys.middle_tokens(t, 1), values.middle_tokens(t, 1));
      pooled.observe(0, queries.middle_tokens(t, 1));
      heap.observe(0, queries.middle_tokens(t, 1));
    }
    EXPECT_EQ(pooled.allocated_bytes(), rows_bytes);
    expect_pooled_like_heap(pooled, heap, pool, keys, values);
  }
  EXPECT_EQ(pool.outstanding, 0);
  EXPECT_GT(pool.allocations, 0);
  EXPECT_EQ(pool.smallest_alignment, 64u);
}

}  // namespace
