// SnapKV: pooling and top-k on hand-worked votes, a GQA group voting for its one kv head, the
// kept rows bit-identical to the prompt's, and the budget and window errors.
#include <gtest/gtest.h>

#include <razorkv/razorkv.hpp>

#include <vector>

#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;
using razorkv::snapkv_config;
using razorkv::snapkv_pooling;

snapkv_config config(index_t window, index_t kernel, snapkv_pooling pooling) {
  snapkv_config c;
  c.window = window;
  c.kernel = kernel;
  c.pooling = pooling;
  return c;
}

TEST(RazorkvSnapkv, PoolingDecidesWhichPrefixPositionWins) {
  // 10 tokens, window 2 (positions 8, 9 always kept), budget 3: one prefix position is chosen.
  const std::vector<double> votes = {0, 0, 0.5, 0, 0, 0, 0.3, 0.3, 7, 7};
  using V = std::vector<index_t>;
  // No pooling: the largest vote, position 2.
  EXPECT_EQ(razorkv::snapkv_positions(votes.data(), 10, 3, config(2, 1, snapkv_pooling::kMax)),
            (V{2, 8, 9}));
  // Max pooling over 3: positions 1, 2, 3 all see 0.5; ties go to the earliest.
  EXPECT_EQ(razorkv::snapkv_positions(votes.data(), 10, 3, config(2, 3, snapkv_pooling::kMax)),
            (V{1, 8, 9}));
  // Average pooling over 3 (zero padded, / 3): 0.5 / 3 at 1..3 loses to (0.3 + 0.3) / 3 at 6
  // (7's neighbourhood is cut at the window, as in SnapKV, which pools the prefix only).
  EXPECT_EQ(razorkv::snapkv_positions(votes.data(), 10, 3, config(2, 3, snapkv_pooling::kAverage)),
            (V{6, 8, 9}));
  // Budget 5: the three best under max pooling, in position order.
  EXPECT_EQ(razorkv::snapkv_positions(votes.data(), 10, 5, config(2, 3, snapkv_pooling::kMax)),
            (V{1, 2, 3, 8, 9}));
  // A budget that holds the prompt keeps all of it.
  EXPECT_EQ(
      razorkv::snapkv_positions(votes.data(), 10, 10, config(2, 3, snapkv_pooling::kMax)).size(),
      10u);
}

TEST(RazorkvSnapkv, AGroupVotesTogetherAndItsKvHeadIsStoredOnce) {
  // 2 kv heads, 2 query heads each, dim 8, 40 tokens, window 4. In kv head 0, query head 0
  // looks for position 3 and query head 1 for position 5; kv head 1's queries look for 20.
  const index_t tokens = 40, dim = 8, window = 4;
  std::mt19937_64 rng(5);
  auto keys =
      razorkv_test::random_values<float>(static_cast<std::size_t>(tokens * 2 * dim), rng, 0.01);
  const auto values = razorkv_test::random_values<float>(keys.size(), rng);
  const auto key = [&](index_t t, index_t h) { return keys.data() + (t * 2 + h) * dim; };
  key(3, 0)[0] = 30.0f;
  key(5, 0)[1] = 30.0f;
  key(20, 1)[2] = 30.0f;
  std::vector<float> queries(static_cast<std::size_t>(window * 4 * dim), 0.0f);
  for (index_t r = 0; r < window; ++r) {
    queries[static_cast<std::size_t>((r * 4 + 0) * dim + 0)] = 1.0f;
    queries[static_cast<std::size_t>((r * 4 + 1) * dim + 1)] = 1.0f;
    queries[static_cast<std::size_t>((r * 4 + 2) * dim + 2)] = 1.0f;
    queries[static_cast<std::size_t>((r * 4 + 3) * dim + 2)] = 1.0f;
  }
  const auto k = layer_view<const float>::nhd(keys.data(), tokens, 2, dim);
  const auto v = layer_view<const float>::nhd(values.data(), tokens, 2, dim);
  const auto q = layer_view<const float>::nhd(queries.data(), window, 4, dim);
  razorkv::selected_kv_cache<float> cache(1, 2, dim);
  razorkv::snapkv_compress_layer(cache, 0, q, k, v, window + 2,
                                 config(window, 1, snapkv_pooling::kMax));
  EXPECT_EQ(cache.positions(0, 0), (std::vector<index_t>{3, 5, 36, 37, 38, 39}));
  const std::vector<index_t> kv1 = cache.positions(0, 1);
  ASSERT_EQ(kv1.size(), 6u);
  EXPECT_EQ(kv1[0] == 20 || kv1[1] == 20, true);
  // One copy per kv head: 2 heads x 6 entries x (K + V) x 8 floats.
  EXPECT_EQ(razorkv::held_kv_bytes(cache), 2 * 6 * 2 * dim * 4);
  for (index_t h = 0; h < 2; ++h) {
    const razorkv::kv_span<float> span = cache.span(0, h, 0);
    for (index_t e = 0; e < span.length(); ++e) {
      const index_t p = cache.positions(0, h)[static_cast<std::size_t>(e)];
      for (index_t c = 0; c < dim; ++c) {
        EXPECT_EQ(span.keys.typed()(e, c), k.token(p)(h, c));
        EXPECT_EQ(span.values.typed()(e, c), v.token(p)(h, c));
      }
    }
  }
  // Decode appends to every head, positions continue from the prompt.
  cache.append(0, k.middle_tokens(0, 1), v.middle_tokens(0, 1));
  EXPECT_EQ(cache.positions(0, 0).back(), tokens);
  EXPECT_EQ(cache.entries(0, 1), 7);
}

TEST(RazorkvSnapkv, BudgetsAndWindowsThatCannotWorkAreRejected) {
  const std::vector<double> votes(20, 1.0);
  RAZORKV_EXPECT_ERROR(
      razorkv::snapkv_positions(votes.data(), 20, 16, config(32, 5, snapkv_pooling::kMax)),
      kInvalidArgument, "window (32) is longer than the prompt (20 tokens)");
  RAZORKV_EXPECT_ERROR(
      razorkv::snapkv_positions(votes.data(), 20, 3, config(4, 5, snapkv_pooling::kMax)),
      kInvalidArgument,
      "the budget (3 entries per head) is smaller than the observation window (4)");
  RAZORKV_EXPECT_ERROR(
      razorkv::snapkv_positions(votes.data(), 20, 8, config(4, 4, snapkv_pooling::kMax)),
      kInvalidArgument, "kernel (4) must be odd and >= 1");
  RAZORKV_EXPECT_ERROR(
      razorkv::snapkv_positions(votes.data(), 20, 8, config(4, 5, static_cast<snapkv_pooling>(7))),
      kInvalidArgument, "pooling (7) is not a snapkv_pooling");
  std::vector<float> kv(20 * 8, 0.0f);
  const auto view = layer_view<const float>::nhd(kv.data(), 20, 1, 8);
  razorkv::selected_kv_cache<float> cache(1, 1, 8);
  RAZORKV_EXPECT_ERROR(cache.compress_layer(0, view, view, {{3, 3}}), kInvalidArgument,
                       "keep[0] is not strictly increasing at 1 (3 then 3)");
  RAZORKV_EXPECT_ERROR(cache.compress_layer(0, view, view, {{20}}), kOutOfRange,
                       "keep[0][0] (20) outside the prompt [0, 20)");
  RAZORKV_EXPECT_ERROR(cache.append(0, view, view), kInvalidArgument,
                       "has not been compressed yet");
  EXPECT_FALSE(cache.is_compressed(0));
}

}  // namespace
