// Tests of prefill attention (prefill_attention) against the double-precision reference and the
// decode kernel: chunks that cross tiles and key blocks, random span splits with padded rows,
// log-weighted spans, GQA groups, every dtype, the razor cache between chunks, strided and
// in-place outputs, scheduling, and the errors it shares with decode.
#include <gtest/gtest.h>

#include <razorkv/attention/decode.hpp>
#include <razorkv/attention/prefill.hpp>
#include <razorkv/attention/reference.hpp>
#include <razorkv/cache/dense_cache.hpp>
#include <razorkv/compress/razor_cache.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "support/expect_error.hpp"
#include "support/random_heads.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;
using razorkv_test::attention_tolerance;
using razorkv_test::random_heads;
using razorkv_test::split_at_random;

// prefill_attention into the accumulation type of the source (double for double sources).
template <class Source, class TQ>
auto run_prefill(const Source& source, const std::vector<TQ>& queries, index_t tokens,
                 index_t query_heads, const razorkv::attention_options& options = {}) {
  using TO = razorkv::accum_t<typename Source::value_type>;
  const index_t dim = source.head_dim();
  std::vector<TO> out(queries.size(), std::numeric_limits<TO>::quiet_NaN());
  razorkv::prefill_attention(source, 0,
                             layer_view<const TQ>::nhd(queries.data(), tokens, query_heads, dim),
                             layer_view<TO>::nhd(out.data(), tokens, query_heads, dim), options);
  return out;
}

template <class T>
class RazorkvPrefill : public ::testing::Test {};
TYPED_TEST_SUITE(RazorkvPrefill, razorkv_test::storage_dtypes);

// Chunks of 1 to 150 tokens over pasts of 0 to 300 entries: tiles of 64 query vectors split
// inside a token's GQA group, and key blocks of 256 entries split inside a span and at the
// causal frontier. A log-weighted entry (a compensation token) sits among the spans.
TYPED_TEST(RazorkvPrefill, MatchesTheReferenceOverChunksDimsGroupsAndSpanSplits) {
  using T = TypeParam;
  using Acc = razorkv::accum_t<T>;
  const index_t kv_heads = 2;
  std::vector<index_t> chunks = {1, 5, 22, 64, 150}, pasts = {0, 3, 300}, dims = {128, 33};
  if (RAZORKV_TEST_LEVEL == 0) chunks = {1, 22, 150};
  // Two seeds at most: the grid, not the seeds, is what reaches the tile and block edges (and
  // under ASan each seed costs 30 s of CI per dtype).
  std::vector<std::uint64_t> seeds = razorkv_test::test_seeds(20261203);
  seeds.resize(std::min<std::size_t>(seeds.size(), 2));
  for (const std::uint64_t seed : seeds) {
    std::mt19937_64 rng(seed);
    for (const index_t past : pasts) {
      for (const index_t chunk : chunks) {
        for (const index_t dim : dims) {
          for (const index_t group : {1, 3, 4}) {
            SCOPED_TRACE(::testing::Message()
                         << razorkv::dtype_name<T>() << " seed " << seed << " past " << past
                         << " chunk " << chunk << " dim " << dim << " group " << group);
            const index_t total = past + chunk, query_heads = kv_heads * group;
            const auto data = random_heads<T>(kv_heads, total, dim, rng);
            auto source = split_at_random(data, total, dim, rng);
            if (past > 0) {  // a log-weighted entry first, as a razor cache holds its sinks
              razorkv_test::span_list_cache<T> weighted(kv_heads, dim);
              const auto token = random_heads<T>(kv_heads, 1, dim, rng);
              for (index_t h = 0; h < kv_heads; ++h) {
                const auto i = static_cast<std::size_t>(h);
                weighted.add_span(h, token.keys[i].data(), token.values[i].data(), 1, 3.5f, 2);
                weighted.add_span(h, data.keys[i].data(), data.values[i].data(), total);
              }
              source = std::move(weighted);
            }
            const auto queries = razorkv_test::random_values<Acc>(
                static_cast<std::size_t>(chunk * query_heads * dim), rng, 2.0);
            const auto q = layer_view<const Acc>::nhd(queries.data(), chunk, query_heads, dim);
            const auto expected = razorkv::reference::decode_attention_multi(source, 0, q);
            const auto got = run_prefill(source, queries, chunk, query_heads);
            EXPECT_LE(razorkv_test::max_abs_diff(got, expected),
                      attention_tolerance<T>(razorkv_test::max_abs(expected)));

            std::vector<Acc> decoded(queries.size());
            razorkv::decode_attention_multi(
                source, 0, q, layer_view<Acc>::nhd(decoded.data(), chunk, query_heads, dim));
            EXPECT_LE(razorkv_test::max_abs_diff(got, decoded),
                      attention_tolerance<T>(razorkv_test::max_abs(expected)));
          }
        }
      }
    }
  }
}

// Keys of size ~100 give logits of order 1e4: the online softmax must rescale, not overflow,
// also when a later key block holds the largest logit of a query.
TYPED_TEST(RazorkvPrefill, HugeLogitsStayFinite) {
  using T = TypeParam;
  std::mt19937_64 rng(99);
  const index_t dim = 64, past = 700, chunk = 70, group = 2;
  const auto data = random_heads<T>(1, past + chunk, dim, rng, 100.0);
  const auto source = split_at_random(data, past + chunk, dim, rng);
  const auto queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(chunk * group * dim), rng, 100.0);
  const auto q = layer_view<const float>::nhd(queries.data(), chunk, group, dim);
  const auto expected = razorkv::reference::decode_attention_multi(source, 0, q);
  const auto got = run_prefill(source, queries, chunk, group);
  // Logits near 1e4 carry absolute rounding ~1e4 * 6e-8 in float, so compare loosely.
  EXPECT_LE(
      razorkv_test::max_abs_diff(got, expected),
      (std::is_same_v<T, double> ? 1e-9 : 5e-3) * std::fmax(1.0, razorkv_test::max_abs(expected)));
}

// The engine's case: a razor cache compressed chunk by chunk (sinks, compensation token, a
// window ring that wraps, a retrieval head's chained blocks), each chunk's queries attending
// to the cache right after compress_chunk.
TYPED_TEST(RazorkvPrefill, OverARazorCacheBetweenChunks) {
  using T = TypeParam;
  constexpr index_t kKvHeads = 2, kQueryHeads = 8, kDim = 64, kChunk = 40;
  razorkv::head_plan plan(razorkv::model_shape{1, kQueryHeads, kKvHeads, kDim});
  plan.set_retrieval(0, 1, true);
  razorkv::razor_config config;
  config.fixed_window = 48;
  razorkv::razor_kv_cache<T> cache(plan, config);
  std::mt19937_64 rng(5);
  for (index_t first = 0; first < 300; first += kChunk) {
    SCOPED_TRACE(::testing::Message() << "chunk at " << first);
    const auto n = static_cast<std::size_t>(kChunk * kKvHeads * kDim);
    const auto k = razorkv_test::random_values<T>(n, rng),
               v = razorkv_test::random_values<T>(n, rng);
    cache.compress_chunk(0, layer_view<const T>::nhd(k.data(), kChunk, kKvHeads, kDim),
                         layer_view<const T>::nhd(v.data(), kChunk, kKvHeads, kDim));
    const auto queries = razorkv_test::random_values<float>(
        static_cast<std::size_t>(kChunk * kQueryHeads * kDim), rng);
    const auto expected = razorkv::reference::decode_attention_multi(
        cache, 0, layer_view<const float>::nhd(queries.data(), kChunk, kQueryHeads, kDim));
    EXPECT_LE(
        razorkv_test::max_abs_diff(run_prefill(cache, queries, kChunk, kQueryHeads), expected),
        attention_tolerance<T>(razorkv_test::max_abs(expected)));
  }
}

TEST(RazorkvPrefill, StridedQueriesAndOutputInPlace) {
  std::mt19937_64 rng(11);
  const index_t kv_heads = 2, group = 4, dim = 128, past = 333, chunk = 90;
  const index_t query_heads = kv_heads * group, stride = dim + 16;
  razorkv::dense_kv_cache<Eigen::bfloat16> cache(1, kv_heads, dim);
  const auto k = razorkv_test::random_values<Eigen::bfloat16>(
      static_cast<std::size_t>((past + chunk) * kv_heads * dim), rng);
  const auto v = razorkv_test::random_values<Eigen::bfloat16>(k.size(), rng);
  cache.append(0, layer_view<const Eigen::bfloat16>::nhd(k.data(), past + chunk, kv_heads, dim),
               layer_view<const Eigen::bfloat16>::nhd(v.data(), past + chunk, kv_heads, dim));
  // Head-major queries with padded rows: token t of head h at (h * chunk + t) * stride.
  auto buffer = razorkv_test::random_values<float>(
      static_cast<std::size_t>(query_heads * chunk * stride), rng);
  const layer_view<float> in_place(buffer.data(), chunk, query_heads, dim, stride, chunk * stride);
  const auto expected =
      razorkv::reference::decode_attention_multi(cache, 0, layer_view<const float>(in_place));
  const std::vector<float> before = buffer;
  razorkv::prefill_attention(cache, 0, in_place, in_place);
  std::vector<float> got;
  for (index_t t = 0; t < chunk; ++t) {
    for (index_t h = 0; h < query_heads; ++h) {
      const float* row = in_place.token(t).row(h);
      got.insert(got.end(), row, row + dim);
      for (index_t c = dim; c < stride; ++c)
        ASSERT_EQ(row[c], before[static_cast<std::size_t>(row + c - buffer.data())])
            << "wrote into row padding";
    }
  }
  EXPECT_LE(razorkv_test::max_abs_diff(got, expected),
            attention_tolerance<float>(razorkv_test::max_abs(expected)));

  std::vector<Eigen::half> half_out(static_cast<std::size_t>(chunk * query_heads * dim));
  razorkv::prefill_attention(
      cache, 0,
      layer_view<const float>(before.data(), chunk, query_heads, dim, stride, chunk * stride),
      layer_view<Eigen::half>::nhd(half_out.data(), chunk, query_heads, dim));
  EXPECT_LE(razorkv_test::max_abs_diff(half_out, expected),
            2e-3 * std::fmax(1.0, razorkv_test::max_abs(expected)));
}

// Tiles own disjoint rows of the output and each computes alone, so the order and the threads
// that run them change nothing, bit for bit.
TEST(RazorkvPrefill, SchedulingChangesNothing) {
  std::mt19937_64 rng(5);
  const index_t kv_heads = 4, group = 4, dim = 64, past = 500, chunk = 100;
  const index_t query_heads = kv_heads * group;
  const auto data = random_heads<float>(kv_heads, past + chunk, dim, rng);
  const auto source = split_at_random(data, past + chunk, dim, rng);
  const auto queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(chunk * query_heads * dim), rng);
  razorkv::attention_options serial;
  serial.parallel_for = [](index_t count, const std::function<void(index_t)>& body) {
    for (index_t i = 0; i < count; ++i) body(i);
  };
  razorkv::attention_options reversed;
  index_t tiles = 0;
  reversed.parallel_for = [&tiles](index_t count, const std::function<void(index_t)>& body) {
    tiles = count;
    for (index_t i = count; i-- > 0;) body(i);
  };
  const auto a = run_prefill(source, queries, chunk, query_heads, serial);
  const auto b = run_prefill(source, queries, chunk, query_heads, reversed);
  const auto c = run_prefill(source, queries, chunk, query_heads);
  EXPECT_EQ(tiles, kv_heads * ((chunk * group + 63) / 64));
  EXPECT_EQ(razorkv_test::max_abs_diff(a, b), 0.0);
  EXPECT_EQ(razorkv_test::max_abs_diff(a, c), 0.0);
}

TEST(RazorkvPrefill, SharesTheChecksOfDecode) {
  const index_t dim = 8;
  razorkv::dense_kv_cache<float> cache(1, 2, dim, 16);
  const std::vector<float> kv(static_cast<std::size_t>(3 * 2 * dim), 0.5f);
  cache.append(0, layer_view<const float>::nhd(kv.data(), 3, 2, dim),
               layer_view<const float>::nhd(kv.data(), 3, 2, dim));
  std::vector<float> q(static_cast<std::size_t>(5 * 4 * dim), 1.0f), out(q.size(), -7.0f);
  const auto queries = [&](index_t tokens, index_t heads) {
    return layer_view<const float>::nhd(q.data(), tokens, heads, dim);
  };
  const auto output = [&](index_t tokens, index_t heads) {
    return layer_view<float>::nhd(out.data(), tokens, heads, dim);
  };
  RAZORKV_EXPECT_ERROR(razorkv::prefill_attention(cache, 0, queries(4, 4), output(4, 4)),
                       kInvalidArgument, "fewer than the 4 new token(s)");
  RAZORKV_EXPECT_ERROR(razorkv::prefill_attention(cache, 0, queries(2, 3), output(2, 3)),
                       kShapeMismatch, "num_query_heads (3)");
  RAZORKV_EXPECT_ERROR(razorkv::prefill_attention(cache, 0, queries(2, 4), output(1, 4)),
                       kShapeMismatch, "prefill_attention: out is [1, 4, 8]");
  RAZORKV_EXPECT_ERROR(razorkv::prefill_attention(cache, 1, queries(2, 4), output(2, 4)),
                       kOutOfRange, "layer (1) outside [0, 1)");
  q[5] = std::numeric_limits<float>::quiet_NaN();
  razorkv::attention_options checked;
  checked.check_finite = true;
  RAZORKV_EXPECT_ERROR(razorkv::prefill_attention(cache, 0, queries(2, 4), output(2, 4), checked),
                       kInvalidArgument, "query");
  for (const float x : out) ASSERT_EQ(x, -7.0f) << "an error wrote to the output";

  // A razor cache bounds a chunk by the newest tokens every head keeps as they are.
  razorkv::razor_config config;
  config.fixed_window = 4;
  razorkv::razor_kv_cache<float> razor(razorkv::head_plan(razorkv::model_shape{1, 4, 2, dim}),
                                       config);
  const std::vector<float> prompt(static_cast<std::size_t>(20 * 2 * dim), 0.25f);
  razor.compress_layer(0, layer_view<const float>::nhd(prompt.data(), 20, 2, dim),
                       layer_view<const float>::nhd(prompt.data(), 20, 2, dim));
  RAZORKV_EXPECT_ERROR(razorkv::prefill_attention(razor, 0, queries(5, 4), output(5, 4)),
                       kInvalidArgument, "queries.tokens() (5) exceeds the 4 newest tokens");
}

}  // namespace
