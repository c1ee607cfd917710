// Tests of decode attention against the double-precision reference: awkward sizes, head dims,
// GQA groups, random span splits with padded rows, log-weighted spans, huge logits, causal
// multi-query decode and aliasing (the caller's parallel-for hook: test_decode_threads.cpp).
#include <gtest/gtest.h>

#include <razorkv/attention/decode.hpp>
#include <razorkv/attention/reference.hpp>
#include <razorkv/cache/dense_cache.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "support/random_heads.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;
using razorkv::matrix_view;
using razorkv_test::attention_tolerance;
using razorkv_test::head_data;
using razorkv_test::random_heads;
using razorkv_test::span_list_cache;
using razorkv_test::split_at_random;

// Decode into the accumulation type of the cache (double for double caches).
template <class Cache, class TQ>
auto run_decode(const Cache& cache, const std::vector<TQ>& queries, index_t query_heads,
                const razorkv::attention_options& options = {}) {
  using TO = razorkv::accum_t<typename Cache::value_type>;
  const index_t dim = cache.head_dim();
  std::vector<TO> out(static_cast<std::size_t>(query_heads * dim),
                      std::numeric_limits<TO>::quiet_NaN());
  razorkv::decode_attention(cache, 0, matrix_view<const TQ>(queries.data(), query_heads, dim),
                            matrix_view<TO>(out.data(), query_heads, dim), options);
  return out;
}

template <class T>
class RazorkvDecode : public ::testing::Test {};
TYPED_TEST_SUITE(RazorkvDecode, razorkv_test::storage_dtypes);

TYPED_TEST(RazorkvDecode, MatchesReferenceOverSizesDimsGroupsAndSpanSplits) {
  using T = TypeParam;
  using Acc = razorkv::accum_t<T>;
  std::vector<index_t> token_counts = {1, 2, 3, 7, 17, 64, 1000, 4099};
  std::vector<index_t> dims = {64, 80, 96, 128, 256, 33};  // every specialised kernel, and not
  std::vector<index_t> groups = {1, 4, 8};
  if (RAZORKV_TEST_LEVEL == 0) token_counts = {1, 17, 1000};
  const index_t kv_heads = 2;
  for (const std::uint64_t seed : razorkv_test::test_seeds(20261202)) {
    std::mt19937_64 rng(seed);
    for (index_t tokens : token_counts) {
      for (index_t dim : dims) {
        // 96 and 256 add kernels, not lengths: the longest head is read by 64, 80, 128 and 33.
        if (tokens > 1000 && (dim == 96 || dim == 256)) continue;
        for (index_t group : groups) {
          SCOPED_TRACE(::testing::Message()
                       << razorkv::dtype_name<T>() << " seed " << seed << " tokens " << tokens
                       << " dim " << dim << " group " << group);
          const auto data = random_heads<T>(kv_heads, tokens, dim, rng);
          const auto cache = split_at_random(data, tokens, dim, rng);
          const index_t query_heads = kv_heads * group;
          // Queries in the accumulation type of T, and once in T itself.
          const auto queries = razorkv_test::random_values<Acc>(
              static_cast<std::size_t>(query_heads * dim), rng, 2.0);
          const auto expected = razorkv::reference::decode_attention(
              cache, 0, matrix_view<const Acc>(queries.data(), query_heads, dim));
          const auto got = run_decode(cache, queries, query_heads);
          EXPECT_LE(razorkv_test::max_abs_diff(got, expected),
                    attention_tolerance<T>(razorkv_test::max_abs(expected)));

          if (tokens == 17) {
            std::vector<T> narrow(queries.size());
            for (std::size_t i = 0; i < queries.size(); ++i) narrow[i] = static_cast<T>(queries[i]);
            const auto expected_narrow = razorkv::reference::decode_attention(
                cache, 0, matrix_view<const T>(narrow.data(), query_heads, dim));
            EXPECT_LE(
                razorkv_test::max_abs_diff(run_decode(cache, narrow, query_heads), expected_narrow),
                attention_tolerance<T>(razorkv_test::max_abs(expected_narrow)));
          }
        }
      }
    }
  }
}

TYPED_TEST(RazorkvDecode, LogWeightedTokenEqualsThatManyCopies) {
  using T = TypeParam;
  std::mt19937_64 rng(7);
  const index_t dim = 80, before = 37, after = 21, group = 4;
  for (index_t copies : {2, 5, 1000}) {
    SCOPED_TRACE(::testing::Message() << "copies " << copies);
    const auto prefix = random_heads<T>(1, before, dim, rng);
    const auto suffix = random_heads<T>(1, after, dim, rng);
    const auto token = random_heads<T>(1, 1, dim, rng);
    // weighted: prefix | token with log-weight ln(copies) | suffix
    span_list_cache<T> weighted(1, dim);
    weighted.add_span(0, prefix.keys[0].data(), prefix.values[0].data(), before);
    weighted.add_span(0, token.keys[0].data(), token.values[0].data(), 1,
                      static_cast<float>(std::log(static_cast<double>(copies))));
    weighted.add_span(0, suffix.keys[0].data(), suffix.values[0].data(), after);
    // repeated: prefix | token x copies | suffix
    std::vector<T> k(static_cast<std::size_t>(copies * dim)), v(k.size());
    for (index_t c = 0; c < copies; ++c) {
      std::copy(token.keys[0].begin(), token.keys[0].end(), k.begin() + c * dim);
      std::copy(token.values[0].begin(), token.values[0].end(), v.begin() + c * dim);
    }
    span_list_cache<T> repeated(1, dim);
    repeated.add_span(0, prefix.keys[0].data(), prefix.values[0].data(), before);
    repeated.add_span(0, k.data(), v.data(), copies);
    repeated.add_span(0, suffix.keys[0].data(), suffix.values[0].data(), after);

    // Queries aligned with the token make it dominate, so the weight matters.
    std::vector<float> queries(static_cast<std::size_t>(group * dim));
    for (index_t g = 0; g < group; ++g)
      for (index_t c = 0; c < dim; ++c)
        queries[static_cast<std::size_t>(g * dim + c)] =
            0.3f * static_cast<float>(g) *
            static_cast<float>(token.keys[0][static_cast<std::size_t>(c)]);
    const auto got_weighted = run_decode(weighted, queries, group);
    const auto got_repeated = run_decode(repeated, queries, group);
    const auto expected = razorkv::reference::decode_attention(
        repeated, 0, matrix_view<const float>(queries.data(), group, dim));
    // ln(n) is rounded to float in the span; that is a relative weight error of ~n * 6e-8.
    const double tol = attention_tolerance<T>(razorkv_test::max_abs(expected)) +
                       1e-7 * static_cast<double>(copies);
    EXPECT_LE(razorkv_test::max_abs_diff(got_weighted, expected), tol);
    EXPECT_LE(razorkv_test::max_abs_diff(got_repeated, expected),
              attention_tolerance<T>(razorkv_test::max_abs(expected)));
  }
}

TYPED_TEST(RazorkvDecode, HugeLogitsStayFiniteAndExact) {
  using T = TypeParam;
  std::mt19937_64 rng(99);
  const index_t dim = 64, tokens = 300, group = 2;
  // Keys and queries of size ~100 give logits of order 1e4 at scale 1/8.
  const auto data = random_heads<T>(1, tokens, dim, rng, 100.0);
  auto queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(group * dim), rng, 100.0);
  for (int variant = 0; variant < 4; ++variant) {
    auto cache = split_at_random(data, tokens, dim, rng);
    if (variant >= 2) {
      cache.add_span(0, data.keys[0].data(), data.values[0].data(), 3,
                     -1.0e4f);  // all but excluded
      cache.add_span(0, data.keys[0].data() + 3 * dim, data.values[0].data() + 3 * dim, 2,
                     1.0e4f);  // dominant
    }
    for (auto& q : queries) q = -q;
    const auto expected = razorkv::reference::decode_attention(
        cache, 0, matrix_view<const float>(queries.data(), group, dim));
    const auto got = run_decode(cache, queries, group);
    // Logits near 1e4 carry absolute rounding ~1e4 * 6e-8 in float, so compare loosely.
    EXPECT_LE(razorkv_test::max_abs_diff(got, expected),
              (std::is_same_v<T, double> ? 1e-9 : 5e-3) *
                  std::fmax(1.0, razorkv_test::max_abs(expected)));
  }
}

TYPED_TEST(RazorkvDecode, MultiQueryIsCausalAmongNewTokens) {
  using T = TypeParam;
  std::mt19937_64 rng(3);
  const index_t kv_heads = 2, group = 3, dim = 96, query_heads = kv_heads * group;
  for (index_t prompt : {0, 1, 50, 700}) {
    for (index_t fresh : {1, 2, 3, 5}) {
      SCOPED_TRACE(::testing::Message() << "prompt " << prompt << " new " << fresh);
      const index_t total = prompt + fresh;
      const auto data = random_heads<T>(kv_heads, total, dim, rng);
      const auto cache = split_at_random(data, total, dim, rng);
      const auto queries = razorkv_test::random_values<float>(
          static_cast<std::size_t>(fresh * query_heads * dim), rng);
      const auto view = layer_view<const float>::nhd(queries.data(), fresh, query_heads, dim);
      using TO = razorkv::accum_t<T>;
      std::vector<TO> out(queries.size(), std::numeric_limits<TO>::quiet_NaN());
      razorkv::decode_attention_multi(cache, 0, view,
                                      layer_view<TO>::nhd(out.data(), fresh, query_heads, dim));
      const auto expected = razorkv::reference::decode_attention_multi(cache, 0, view);
      EXPECT_LE(razorkv_test::max_abs_diff(out, expected),
                attention_tolerance<T>(razorkv_test::max_abs(expected)));

      // Token t of the new ones sees exactly the cache truncated after itself.
      for (index_t t = 0; t < fresh; ++t) {
        head_data<T> prefix;
        for (index_t h = 0; h < kv_heads; ++h) {
          const auto& k = data.keys[static_cast<std::size_t>(h)];
          const auto& v = data.values[static_cast<std::size_t>(h)];
          prefix.keys.emplace_back(k.begin(), k.begin() + (prompt + t + 1) * dim);
          prefix.values.emplace_back(v.begin(), v.begin() + (prompt + t + 1) * dim);
        }
        const auto truncated = split_at_random(prefix, prompt + t + 1, dim, rng);
        std::vector<float> q_t(queries.begin() + t * query_heads * dim,
                               queries.begin() + (t + 1) * query_heads * dim);
        const auto single = run_decode(truncated, q_t, query_heads);
        std::vector<TO> out_t(out.begin() + t * query_heads * dim,
                              out.begin() + (t + 1) * query_heads * dim);
        EXPECT_LE(razorkv_test::max_abs_diff(out_t, single), attention_tolerance<T>(1.0));
      }
    }
  }
}

TEST(RazorkvDecode, StridedQueriesAndOutputInPlace) {
  std::mt19937_64 rng(11);
  const index_t kv_heads = 4, group = 2, dim = 128, tokens = 333, query_heads = kv_heads * group;
  razorkv::dense_kv_cache<Eigen::bfloat16> cache(3, kv_heads, dim);
  for (index_t layer = 0; layer < 3; ++layer) {
    const auto k = razorkv_test::random_values<Eigen::bfloat16>(
        static_cast<std::size_t>(tokens * kv_heads * dim), rng);
    const auto v = razorkv_test::random_values<Eigen::bfloat16>(k.size(), rng);
    cache.append(layer, layer_view<const Eigen::bfloat16>::nhd(k.data(), tokens, kv_heads, dim),
                 layer_view<const Eigen::bfloat16>::nhd(v.data(), tokens, kv_heads, dim));
  }
  const index_t stride = dim + 16;
  auto buffer =
      razorkv_test::random_values<float>(static_cast<std::size_t>(query_heads * stride), rng);
  const auto expected = razorkv::reference::decode_attention(
      cache, 2, matrix_view<const float>(buffer.data(), query_heads, dim, stride));
  const std::vector<float> padding_before(buffer.begin(), buffer.end());
  // Output written over the queries it reads (a mutable view is accepted for the queries).
  const matrix_view<float> in_place(buffer.data(), query_heads, dim, stride);
  razorkv::decode_attention(cache, 2, in_place, in_place);
  std::vector<float> got;
  for (index_t h = 0; h < query_heads; ++h) {
    got.insert(got.end(), buffer.begin() + h * stride, buffer.begin() + h * stride + dim);
    for (index_t c = dim; c < stride && h + 1 < query_heads; ++c) {
      ASSERT_EQ(buffer[static_cast<std::size_t>(h * stride + c)],
                padding_before[static_cast<std::size_t>(h * stride + c)])
          << "wrote into row padding";
    }
  }
  EXPECT_LE(razorkv_test::max_abs_diff(got, expected),
            attention_tolerance<float>(razorkv_test::max_abs(expected)));

  // Half-precision output.
  std::vector<Eigen::half> half_out(static_cast<std::size_t>(query_heads * dim));
  razorkv::decode_attention(
      cache, 2, matrix_view<const float>(padding_before.data(), query_heads, dim, stride),
      matrix_view<Eigen::half>(half_out.data(), query_heads, dim));
  EXPECT_LE(razorkv_test::max_abs_diff(half_out, expected),
            2e-3 * std::fmax(1.0, razorkv_test::max_abs(expected)));
}

TEST(RazorkvDecode, ExplicitScaleIsUsed) {
  std::mt19937_64 rng(8);
  const index_t dim = 64, tokens = 40;
  const auto data = random_heads<float>(1, tokens, dim, rng);
  const auto cache = split_at_random(data, tokens, dim, rng);
  const auto queries = razorkv_test::random_values<float>(static_cast<std::size_t>(dim), rng);
  for (double scale : {0.0, 0.5, -0.25}) {
    razorkv::attention_options options;
    options.scale = scale;
    const auto expected = razorkv::reference::decode_attention(
        cache, 0, matrix_view<const float>(queries.data(), 1, dim), scale);
    EXPECT_LE(razorkv_test::max_abs_diff(run_decode(cache, queries, 1, options), expected),
              attention_tolerance<float>(1.0));
  }
}

}  // namespace

namespace {

// Heads longer than max_entries_per_task are read by several tasks whose partial softmax states
// are merged: the result matches the reference over awkward split sizes, span splits,
// log-weighted spans, the causal multi-token mask and every dtype.
TYPED_TEST(RazorkvDecode, SplittingLongHeadsAcrossTasksMatchesReference) {
  using T = TypeParam;
  using Acc = razorkv::accum_t<T>;
  std::mt19937_64 rng(41);
  const index_t kv_heads = 2, group = 4, dim = 40, query_heads = kv_heads * group;
  for (index_t tokens : {5, 130, 1000}) {
    for (index_t per_task : {1, 3, 64, 129, 999}) {
      SCOPED_TRACE(::testing::Message() << "tokens " << tokens << " entries per task " << per_task);
      const auto data = random_heads<T>(kv_heads, tokens, dim, rng, 3.0);
      auto cache = split_at_random(data, tokens, dim, rng);
      const auto token = random_heads<T>(kv_heads, 1, dim, rng);
      for (index_t h = 0; h < kv_heads; ++h) {  // a compensation-like token, then the rest
        cache.add_span(h, token.keys[static_cast<std::size_t>(h)].data(),
                       token.values[static_cast<std::size_t>(h)].data(), 1, 4.5f);
      }
      const index_t new_tokens = 3;
      const auto queries = razorkv_test::random_values<Acc>(
          static_cast<std::size_t>(new_tokens * query_heads * dim), rng, 2.0);
      const auto q = layer_view<const Acc>::nhd(queries.data(), new_tokens, query_heads, dim);
      const auto expected = razorkv::reference::decode_attention_multi(cache, 0, q);
      std::vector<Acc> got(expected.size());
      razorkv::attention_options options;
      options.max_entries_per_task = per_task;
      razorkv::decode_attention_multi(
          cache, 0, q, layer_view<Acc>::nhd(got.data(), new_tokens, query_heads, dim), options);
      EXPECT_LE(razorkv_test::max_abs_diff(got, expected),
                attention_tolerance<T>(razorkv_test::max_abs(expected)));
    }
  }
}

TEST(RazorkvDecode, NegativeEntriesPerTaskIsAnError) {
  razorkv::dense_kv_cache<float> cache(1, 1, 4, 4);
  const std::vector<float> kv(4, 1.0f);
  cache.append(0, layer_view<const float>::nhd(kv.data(), 1, 1, 4),
               layer_view<const float>::nhd(kv.data(), 1, 1, 4));
  std::vector<float> q(4, 1.0f), out(4, -7.0f);
  razorkv::attention_options options;
  options.max_entries_per_task = -1;
  try {
    razorkv::decode_attention(cache, 0, matrix_view<const float>(q.data(), 1, 4),
                              matrix_view<float>(out.data(), 1, 4), options);
    ADD_FAILURE() << "expected an error";
  } catch (const razorkv::error& e) {
    EXPECT_NE(std::string(e.what()).find("max_entries_per_task (-1)"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(out[0], -7.0f);
}

}  // namespace
