// Tests of dense_kv_cache: appends from NHD and HND sources, growth that keeps every token,
// spans that expose the stored rows, errors that leave the cache untouched, and buffers that come
// from the cache's memory resource and go back to it.
#include <gtest/gtest.h>

#include <razorkv/cache/dense_cache.hpp>

#include <limits>
#include <new>
#include <vector>

#include "support/counting_resource.hpp"
#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::dense_kv_cache;
using razorkv::index_t;
using razorkv::layer_view;

float tag(index_t t, index_t h, index_t d) {
  return static_cast<float>((t * 5 + h * 17 + d) % 241);
}

// [tokens, heads, dim] NHD source with token t of the sequence at `first + t`.
template <class T>
std::vector<T> nhd_tokens(index_t first, index_t tokens, index_t heads, index_t dim, float sign) {
  std::vector<T> out(static_cast<std::size_t>(tokens * heads * dim));
  for (index_t t = 0; t < tokens; ++t)
    for (index_t h = 0; h < heads; ++h)
      for (index_t d = 0; d < dim; ++d)
        out[static_cast<std::size_t>((t * heads + h) * dim + d)] = T(sign * tag(first + t, h, d));
  return out;
}

template <class T>
void expect_holds(const dense_kv_cache<T>& cache, index_t layer, index_t tokens) {
  ASSERT_EQ(cache.num_tokens(layer), tokens);
  for (index_t h = 0; h < cache.num_kv_heads(); ++h) {
    ASSERT_EQ(cache.num_spans(layer, h), tokens > 0 ? 1 : 0);
    if (tokens == 0) continue;
    const razorkv::kv_span<T> span = cache.span(layer, h, 0);
    ASSERT_EQ(span.length(), tokens);
    EXPECT_EQ(span.log_weight, 0.0f);
    for (index_t t = 0; t < tokens; ++t)
      for (index_t d = 0; d < cache.head_dim(); ++d) {
        ASSERT_EQ(static_cast<float>(span.keys.typed()(t, d)), tag(t, h, d))
            << "t " << t << " h " << h;
        ASSERT_EQ(static_cast<float>(span.values.typed()(t, d)), -tag(t, h, d));
      }
  }
}

template <class T>
class RazorkvDenseCache : public ::testing::Test {};
TYPED_TEST_SUITE(RazorkvDenseCache, razorkv_test::storage_dtypes);

TYPED_TEST(RazorkvDenseCache, AppendsTokenByTokenAndInChunksThroughGrowth) {
  using T = TypeParam;
  const index_t heads = 3, dim = 5;
  dense_kv_cache<T> cache(2, heads, dim);
  expect_holds(cache, 0, 0);
  index_t held = 0;
  for (index_t chunk : {1, 1, 7, 1, 30, 2, 100}) {
    const auto k = nhd_tokens<T>(held, chunk, heads, dim, 1.0f);
    const auto v = nhd_tokens<T>(held, chunk, heads, dim, -1.0f);
    cache.append(1, layer_view<const T>::nhd(k.data(), chunk, heads, dim),
                 layer_view<const T>::nhd(v.data(), chunk, heads, dim));
    held += chunk;
    expect_holds(cache, 1, held);
    EXPECT_GE(cache.capacity(1), held);
  }
  expect_holds(cache, 0, 0);  // layers are independent
  EXPECT_EQ(cache.kv_bytes(), 2 * held * heads * dim * static_cast<index_t>(sizeof(T)));
}

TYPED_TEST(RazorkvDenseCache, AppendsFromHndAndPaddedSources) {
  using T = TypeParam;
  const index_t heads = 2, dim = 4, tokens = 6, capacity = 8;
  // HND source with spare capacity per head.
  std::vector<T> k(static_cast<std::size_t>(heads * capacity * dim)), v(k.size());
  for (index_t h = 0; h < heads; ++h)
    for (index_t t = 0; t < tokens; ++t)
      for (index_t d = 0; d < dim; ++d) {
        k[static_cast<std::size_t>((h * capacity + t) * dim + d)] = T(tag(t, h, d));
        v[static_cast<std::size_t>((h * capacity + t) * dim + d)] = T(-tag(t, h, d));
      }
  dense_kv_cache<T> cache(1, heads, dim, /*reserve_tokens=*/4);
  cache.append(0, layer_view<const T>::hnd(k.data(), tokens, heads, dim, capacity),
               layer_view<const T>::hnd(v.data(), tokens, heads, dim, capacity));
  expect_holds(cache, 0, tokens);

  // The cache's own layer views are valid append sources, even when the append grows it.
  dense_kv_cache<T> copy(1, heads, dim);
  copy.append(0, cache.keys(0), cache.values(0));
  expect_holds(copy, 0, tokens);
  ASSERT_EQ(copy.capacity(0), tokens);
  copy.append(0, copy.keys(0), copy.values(0));  // grows while reading itself
  copy.reserve(4 * tokens);
  copy.append(0, copy.keys(0), copy.values(0));  // in place while reading itself
  ASSERT_EQ(copy.num_tokens(0), 4 * tokens);
  for (index_t t = 0; t < 4 * tokens; ++t) {
    EXPECT_EQ(static_cast<float>(copy.span(0, 1, 0).keys.typed()(t, 2)), tag(t % tokens, 1, 2));
    EXPECT_EQ(static_cast<float>(copy.span(0, 0, 0).values.typed()(t, 3)), -tag(t % tokens, 0, 3));
  }
}

TEST(RazorkvDenseCache, BadInputIsANamedErrorAndChangesNothing) {
  const index_t heads = 2, dim = 4;
  dense_kv_cache<float> cache(2, heads, dim);
  const auto k = nhd_tokens<float>(0, 3, heads, dim, 1.0f);
  const auto v = nhd_tokens<float>(0, 3, heads, dim, -1.0f);
  cache.append(0, layer_view<const float>::nhd(k.data(), 3, heads, dim),
               layer_view<const float>::nhd(v.data(), 3, heads, dim));

  RAZORKV_EXPECT_ERROR(dense_kv_cache<float>(0, 1, 1), kInvalidArgument, "num_layers (0)");
  RAZORKV_EXPECT_ERROR(dense_kv_cache<float>(1, -2, 1), kInvalidArgument, "num_kv_heads (-2)");
  RAZORKV_EXPECT_ERROR(dense_kv_cache<float>(1, 1, 0), kInvalidArgument, "head_dim (0)");
  RAZORKV_EXPECT_ERROR(dense_kv_cache<float>(1, 1, 1, -5), kInvalidArgument, "reserve_tokens (-5)");
  RAZORKV_EXPECT_ERROR(cache.append(2, layer_view<const float>::nhd(k.data(), 3, heads, dim),
                                    layer_view<const float>::nhd(v.data(), 3, heads, dim)),
                       kOutOfRange, "layer (2)");
  RAZORKV_EXPECT_ERROR(cache.append(0, layer_view<const float>::nhd(k.data(), 3, 1, dim),
                                    layer_view<const float>::nhd(v.data(), 3, heads, dim)),
                       kShapeMismatch, "keys.heads() (1) != num_kv_heads (2)");
  RAZORKV_EXPECT_ERROR(cache.append(0, layer_view<const float>::nhd(k.data(), 3, heads, dim),
                                    layer_view<const float>::nhd(v.data(), 2, heads, 3)),
                       kShapeMismatch, "values.head_dim() (3) != head_dim (4)");
  RAZORKV_EXPECT_ERROR(cache.append(0, layer_view<const float>::nhd(k.data(), 3, heads, dim),
                                    layer_view<const float>::nhd(v.data(), 2, heads, dim)),
                       kShapeMismatch, "keys.tokens() (3) != values.tokens() (2)");
  RAZORKV_EXPECT_ERROR(cache.span(0, 0, 1), kOutOfRange, "span (1)");
  RAZORKV_EXPECT_ERROR(cache.num_spans(0, 2), kOutOfRange, "kv_head (2)");
  RAZORKV_EXPECT_ERROR(cache.num_tokens(-1), kOutOfRange, "layer (-1)");
  expect_holds(cache, 0, 3);
  expect_holds(cache, 1, 0);
}

// Every K/V buffer of a dense cache built on a resource comes from it (what allocated_bytes()
// counts), through reserve, growth (from a view into the cache itself) and copies, and goes back
// on destruction; a growth whose allocation fails leaves the cache as it was.
TEST(RazorkvDenseCache, EveryBufferComesFromTheCachesResourceAndGoesBack) {
  const index_t heads = 3, dim = 5;
  razorkv_test::counting_resource pool;
  {
    dense_kv_cache<float> cache(2, heads, dim, 4, &pool);
    EXPECT_EQ(cache.memory_resource(), &pool);
    EXPECT_EQ(dense_kv_cache<float>(1, 1, 1).memory_resource(), std::pmr::get_default_resource());
    EXPECT_EQ(pool.outstanding, cache.allocated_bytes());
    index_t held = 0;
    for (index_t chunk : {3, 1, 9, 40}) {
      const auto k = nhd_tokens<float>(held, chunk, heads, dim, 1.0f);
      const auto v = nhd_tokens<float>(held, chunk, heads, dim, -1.0f);
      cache.append(1, layer_view<const float>::nhd(k.data(), chunk, heads, dim),
                   layer_view<const float>::nhd(v.data(), chunk, heads, dim));
      held += chunk;
      EXPECT_EQ(pool.outstanding, cache.allocated_bytes()) << held << " tokens";
    }
    expect_holds(cache, 1, held);
    const long bytes = cache.allocated_bytes();
    {
      const dense_kv_cache<float> copy = cache;
      EXPECT_EQ(copy.memory_resource(), &pool);
      EXPECT_EQ(pool.outstanding, 2 * bytes);
      expect_holds(copy, 1, held);
      EXPECT_EQ(copy.capacity(1), cache.capacity(1));
    }
    EXPECT_EQ(pool.outstanding, bytes);

    // Growth past the capacity, from the cache's own rows: its allocation fails, nothing changes.
    const index_t spare = cache.capacity(1) - held;
    pool.limit = pool.allocations;
    EXPECT_THROW(cache.append(1, cache.keys(1).middle_tokens(0, spare + 1),
                              cache.values(1).middle_tokens(0, spare + 1)),
                 std::bad_alloc);
    pool.limit = -1;
    expect_holds(cache, 1, held);
    EXPECT_EQ(pool.outstanding, bytes);
    cache.reserve(4 * held);
    EXPECT_EQ(pool.outstanding, cache.allocated_bytes());
    expect_holds(cache, 1, held);
  }
  EXPECT_EQ(pool.outstanding, 0);
  EXPECT_EQ(pool.smallest_alignment, 64u);
}

TEST(RazorkvDenseCache, ImpossibleCapacityIsAnOverflowError) {
  dense_kv_cache<float> cache(1, 1024, 1024);
  RAZORKV_EXPECT_ERROR(cache.reserve(std::numeric_limits<index_t>::max() / 2), kOverflow,
                       "overflows");
  EXPECT_EQ(cache.capacity(0), 0);
  // A size that fits in 64 bits but no 64-bit machine can address is the same error, not
  // std::bad_alloc: 2^40 tokens of 1024 kv heads of dim 1024 (2^62 bytes per buffer).
  RAZORKV_EXPECT_ERROR(cache.reserve(index_t{1} << 40), kOverflow,
                       "exceeds 2^57 bytes, more than a 64-bit machine can address");
  dense_kv_cache<float> narrow(1, 1, 1);
  RAZORKV_EXPECT_ERROR(narrow.reserve(index_t{1} << 58), kOverflow, "exceeds 2^57 bytes");
  EXPECT_EQ(narrow.capacity(0), 0);
  razorkv::attention_weights weights;
  RAZORKV_EXPECT_ERROR(weights.reset(1, 1, {index_t{1} << 56}), kOverflow, "exceeds 2^57 bytes");
}

}  // namespace
