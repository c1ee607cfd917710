// observed_attention (tiled GEMM + softmax) against its plain double reference over dtypes,
// awkward sizes and strides, and its error handling.
#include <gtest/gtest.h>

#include <razorkv/eval.hpp>

#include <vector>

#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;

template <class T>
class RazorkvObservedAttention : public ::testing::Test {};
TYPED_TEST_SUITE(RazorkvObservedAttention, razorkv_test::storage_dtypes);

TYPED_TEST(RazorkvObservedAttention, MatchesTheReferenceAndSumsToOnePerQuery) {
  using T = TypeParam;
  struct shape {
    index_t tokens, observed, query_heads, kv_heads, dim;
  };
  // One token; every query observed; one query; GQA 3:1; an odd head_dim; more rows than a block.
  const std::vector<shape> shapes = {{1, 1, 2, 1, 8},
                                     {37, 37, 4, 2, 16},
                                     {50, 1, 3, 3, 5},
                                     {300, 7, 6, 2, 33},
                                     {40000, 3, 2, 1, 8}};
  std::mt19937_64 rng(11);
  for (const shape& s : shapes) {
    SCOPED_TRACE(::testing::Message()
                 << s.tokens << " tokens, " << s.observed << " observed, " << s.query_heads << "/"
                 << s.kv_heads << " heads, dim " << s.dim);
    // Padded rows: token stride = heads * dim + 3.
    const index_t q_stride = s.query_heads * s.dim + 3, k_stride = s.kv_heads * s.dim + 3;
    const auto queries =
        razorkv_test::random_values<T>(static_cast<std::size_t>(s.observed * q_stride), rng, 2.0);
    const auto keys =
        razorkv_test::random_values<T>(static_cast<std::size_t>(s.tokens * k_stride), rng, 2.0);
    const auto q =
        layer_view<const T>::nhd(queries.data(), s.observed, s.query_heads, s.dim, q_stride);
    const auto k = layer_view<const T>::nhd(keys.data(), s.tokens, s.kv_heads, s.dim, k_stride);
    const razorkv::attention_mass got = razorkv::observed_attention(q, k);
    const razorkv::attention_mass want = razorkv::reference::observed_attention(q, k);
    ASSERT_EQ(got.values.size(), want.values.size());
    // Each mass is a sum of float probabilities, each within a relative 1e-4 of the double
    // reference's (the logits' float rounding), so the bound is relative to the mass itself.
    const index_t group = s.query_heads / s.kv_heads;
    for (std::size_t i = 0; i < got.values.size(); ++i) {
      EXPECT_NEAR(got.values[i], want.values[i], 1e-4 * want.values[i] + 1e-9) << "value " << i;
    }
    // The kernel's masses add up to one per (query head, observed query).
    for (index_t h = 0; h < s.kv_heads; ++h) {
      double total = 0;
      for (index_t j = 0; j < s.tokens; ++j) total += got.head(h)[j];
      EXPECT_NEAR(total, static_cast<double>(group * s.observed),
                  1e-5 * static_cast<double>(group * s.observed));
    }
  }
}

TEST(RazorkvObservedAttentionErrors, BadShapesAndValuesAreRejected) {
  std::vector<float> q(4 * 2 * 8, 0.5f), k(3 * 1 * 8, 0.5f);
  const auto queries = layer_view<const float>::nhd(q.data(), 4, 2, 8);
  const auto keys = layer_view<const float>::nhd(k.data(), 3, 1, 8);
  RAZORKV_EXPECT_ERROR(razorkv::observed_attention(queries, keys), kInvalidArgument,
                       "queries.tokens() (4) exceeds the prompt's tokens (keys.tokens() = 3)");
  const auto odd_heads = layer_view<const float>::nhd(q.data(), 1, 3, 8);
  const auto two_kv = layer_view<const float>::nhd(k.data(), 1, 2, 8);
  RAZORKV_EXPECT_ERROR(razorkv::observed_attention(odd_heads, two_kv), kShapeMismatch,
                       "num_query_heads (3) is not a multiple of num_kv_heads (2)");
  k[5] = std::numeric_limits<float>::quiet_NaN();
  RAZORKV_EXPECT_ERROR(razorkv::observed_attention(queries.middle_tokens(0, 2), keys),
                       kInvalidArgument,
                       "observed_attention: key (nan) at token 0 head 0 dim 5 is not finite");
}

}  // namespace
