// Bad input to decode attention: every case is a razorkv::error whose message names the
// parameter and its value, and the caller's output is left untouched.
#include <gtest/gtest.h>

#include <razorkv/attention/decode.hpp>
#include <razorkv/cache/dense_cache.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;
using razorkv::matrix_view;

class RazorkvDecodeErrors : public ::testing::Test {
 protected:
  static constexpr index_t kKvHeads = 4, kDim = 64, kTokens = 10, kQueryHeads = 8;

  RazorkvDecodeErrors() : cache(2, kKvHeads, kDim), empty(1, kKvHeads, kDim) {
    std::vector<float> k(static_cast<std::size_t>(kTokens * kKvHeads * kDim), 0.25f);
    cache.append(0, layer_view<const float>::nhd(k.data(), kTokens, kKvHeads, kDim),
                 layer_view<const float>::nhd(k.data(), kTokens, kKvHeads, kDim));
    queries.assign(static_cast<std::size_t>(kQueryHeads * kDim), 1.0f);
    out.assign(queries.size(), 42.0f);
  }

  void expect_out_untouched() {
    for (float x : out) ASSERT_EQ(x, 42.0f) << "output modified by a failed call";
  }

  matrix_view<const float> q(index_t heads = kQueryHeads, index_t dim = kDim) const {
    return matrix_view<const float>(queries.data(), heads, dim);
  }
  matrix_view<float> o(index_t heads = kQueryHeads, index_t dim = kDim) {
    return matrix_view<float>(out.data(), heads, dim);
  }

  razorkv::dense_kv_cache<float> cache;
  razorkv::dense_kv_cache<float> empty;
  std::vector<float> queries, out;
};

TEST_F(RazorkvDecodeErrors, EmptyCache) {
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(empty, 0, q(), o()), kInvalidArgument,
                       "layer 0 kv head 0 holds 0 entries");
  // Layer 1 of the filled cache has had no append yet.
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(cache, 1, q(), o()), kInvalidArgument,
                       "holds 0 entries");
  expect_out_untouched();
}

TEST_F(RazorkvDecodeErrors, MoreNewTokensThanEntries) {
  std::vector<float> many(static_cast<std::size_t>(11 * kQueryHeads * kDim), 1.0f);
  std::vector<float> many_out(many.size(), 42.0f);
  RAZORKV_EXPECT_ERROR(
      razorkv::decode_attention_multi(
          cache, 0, layer_view<const float>::nhd(many.data(), 11, kQueryHeads, kDim),
          layer_view<float>::nhd(many_out.data(), 11, kQueryHeads, kDim)),
      kInvalidArgument, "holds 10 entries, fewer than the 11 new token(s)");
  for (float x : many_out) ASSERT_EQ(x, 42.0f);
}

TEST_F(RazorkvDecodeErrors, MismatchedShapes) {
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(cache, 0, q(kQueryHeads / 2, kDim * 2),
                                                 o(kQueryHeads / 2, kDim * 2)),
                       kShapeMismatch, "queries.head_dim() (128) != cache.head_dim() (64)");
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(cache, 0, q(), o(kQueryHeads / 2)), kShapeMismatch,
                       "out is [4, 64], queries are [8, 64]");
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(cache, 0, q(6), o(6)), kShapeMismatch,
                       "num_query_heads (6) is not a multiple of num_kv_heads (4)");
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(cache, 0, q(2), o(2)), kShapeMismatch,
                       "num_query_heads (2) is not a multiple of num_kv_heads (4)");
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(cache, 0, q(0), o(0)), kInvalidArgument,
                       "num_query_heads (0) must be > 0");
  expect_out_untouched();
}

TEST_F(RazorkvDecodeErrors, LayerOutOfRange) {
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(cache, 2, q(), o()), kOutOfRange,
                       "layer (2) outside [0, 2)");
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(cache, -1, q(), o()), kOutOfRange, "layer (-1)");
  expect_out_untouched();
}

TEST_F(RazorkvDecodeErrors, ZeroOrNegativeDimsAndNullData) {
  RAZORKV_EXPECT_ERROR(matrix_view<const float>(queries.data(), kQueryHeads, 0), kInvalidArgument,
                       "cols (0)");
  RAZORKV_EXPECT_ERROR(matrix_view<const float>(queries.data(), -8, kDim), kInvalidArgument,
                       "rows (-8)");
  RAZORKV_EXPECT_ERROR(matrix_view<const float>(nullptr, kQueryHeads, kDim), kInvalidArgument,
                       "data is null with rows (8)");
  RAZORKV_EXPECT_ERROR(razorkv::dense_kv_cache<float>(1, 4, -64), kInvalidArgument,
                       "head_dim (-64)");
}

TEST_F(RazorkvDecodeErrors, NonFiniteScale) {
  razorkv::attention_options options;
  options.scale = std::numeric_limits<double>::quiet_NaN();
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(cache, 0, q(), o(), options), kInvalidArgument,
                       "scale (nan)");
  options.scale = std::numeric_limits<double>::infinity();
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(cache, 0, q(), o(), options), kInvalidArgument,
                       "scale (inf)");
  expect_out_untouched();
}

// A cache that breaks the span contract: values shorter than keys, or a NaN log-weight.
struct broken_cache {
  using value_type = float;
  std::vector<float> storage = std::vector<float>(64 * 4, 0.5f);
  float log_weight = 0.0f;
  index_t value_rows = 3;
  index_t num_layers() const { return 1; }
  index_t num_kv_heads() const { return 1; }
  index_t head_dim() const { return 64; }
  index_t num_spans(index_t, index_t) const { return 1; }
  razorkv::kv_span<float> span(index_t, index_t, index_t) const {
    return {matrix_view<const float>(storage.data(), 4, 64),
            matrix_view<const float>(storage.data(), value_rows, 64), log_weight};
  }
  void append(index_t, layer_view<const float>, layer_view<const float>) {}
};

TEST_F(RazorkvDecodeErrors, MalformedSpansFromACustomCache) {
  broken_cache broken;
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(broken, 0, q(2), o(2)), kShapeMismatch,
                       "has keys [4, 64] and values [3, 64]");
  broken.value_rows = 4;
  broken.log_weight = std::numeric_limits<float>::quiet_NaN();
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(broken, 0, q(2), o(2)), kInvalidArgument,
                       "log_weight (nan)");
  expect_out_untouched();
}

// NaN/Inf policy: by default (engines) non-finite input is not scanned for and propagates only
// to the outputs that read it; attention_options::check_finite names it before any write.
TEST(RazorkvDecodeFinite, UncheckedPropagatesCheckedNamesTheValue) {
  const index_t dim = 8, kv_heads = 2, query_heads = 4, tokens = 6;
  std::mt19937_64 rng(4);
  auto keys =
      razorkv_test::random_values<float>(static_cast<std::size_t>(tokens * kv_heads * dim), rng);
  const auto values = razorkv_test::random_values<float>(keys.size(), rng);
  keys[static_cast<std::size_t>((3 * kv_heads + 1) * dim + 5)] =
      std::numeric_limits<float>::quiet_NaN();  // token 3, kv head 1
  razorkv::dense_kv_cache<float> cache(1, kv_heads, dim);
  cache.append(0, layer_view<const float>::nhd(keys.data(), tokens, kv_heads, dim),
               layer_view<const float>::nhd(values.data(), tokens, kv_heads, dim));
  std::vector<float> queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(query_heads * dim), rng);
  std::vector<float> out(queries.size(), 7.0f);
  const matrix_view<const float> q(queries.data(), query_heads, dim);
  const matrix_view<float> o(out.data(), query_heads, dim);

  razorkv::decode_attention(cache, 0, q,
                            o);  // unchecked: kv head 0's query heads are untouched by the NaN
  for (index_t h = 0; h < query_heads; ++h) {
    for (index_t c = 0; c < dim; ++c)
      EXPECT_EQ(std::isfinite(out[static_cast<std::size_t>(h * dim + c)]), h < 2);
  }

  razorkv::attention_options checked;
  checked.check_finite = true;
  std::fill(out.begin(), out.end(), 7.0f);
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(cache, 0, q, o, checked), kInvalidArgument,
                       "decode_attention: key (nan) at kv head 1 entry 3 dim 5 is not finite");
  for (float x : out) EXPECT_EQ(x, 7.0f);
  keys[static_cast<std::size_t>((3 * kv_heads + 1) * dim + 5)] = 0.5f;
  razorkv::dense_kv_cache<float> clean(1, kv_heads, dim);
  clean.append(0, layer_view<const float>::nhd(keys.data(), tokens, kv_heads, dim),
               layer_view<const float>::nhd(values.data(), tokens, kv_heads, dim));
  razorkv::decode_attention(clean, 0, q, o, checked);  // finite input passes and decodes
  for (float x : out) EXPECT_TRUE(std::isfinite(x));
  queries[9] = std::numeric_limits<float>::infinity();
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(clean, 0, q, o, checked), kInvalidArgument,
                       "query (inf) at token 0 head 1 dim 1 is not finite");
  queries[9] = 3e38f;
  checked.scale = 100.0;
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(clean, 0, q, o, checked), kInvalidArgument,
                       "a query times the scale (inf) overflows");
}

}  // namespace
