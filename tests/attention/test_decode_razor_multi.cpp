// Tests of multi-token decode (decode_attention_multi) over razor caches, in append and bounded
// mode, against the double-precision reference on the same cache; and the bounded limit: more
// new tokens than the smallest window is an error, not a silently wrong attention.
#include <gtest/gtest.h>

#include <razorkv/attention/decode.hpp>
#include <razorkv/attention/reference.hpp>
#include <razorkv/cache/any_cache.hpp>
#include <razorkv/compress/razor_cache.hpp>

#include <limits>
#include <random>
#include <vector>

#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;

constexpr index_t kKvHeads = 2, kQueryHeads = 8, kDim = 64, kPrompt = 200, kWindow = 8;

template <class T>
razorkv::razor_kv_cache<T> compressed(razorkv::decode_mode mode, std::mt19937_64& rng) {
  razorkv::head_plan plan(razorkv::model_shape{1, kQueryHeads, kKvHeads, kDim});
  plan.set_retrieval(0, 1, true);
  razorkv::razor_config config;
  config.fixed_window = kWindow;
  config.decode = mode;
  razorkv::razor_kv_cache<T> cache(plan, config);
  const auto n = static_cast<std::size_t>(kPrompt * kKvHeads * kDim);
  const std::vector<T> k = razorkv_test::random_values<T>(n, rng),
                       v = razorkv_test::random_values<T>(n, rng);
  cache.compress_layer(0, layer_view<const T>::nhd(k.data(), kPrompt, kKvHeads, kDim),
                       layer_view<const T>::nhd(v.data(), kPrompt, kKvHeads, kDim));
  return cache;
}

template <class T>
class RazorMultiTokenDecode : public ::testing::Test {};
TYPED_TEST_SUITE(RazorMultiTokenDecode, razorkv_test::storage_dtypes);

TYPED_TEST(RazorMultiTokenDecode, MatchesTheReferenceUpToTheWindowInBothModes) {
  using T = TypeParam;
  std::mt19937_64 rng(17);
  for (const auto mode : {razorkv::decode_mode::kAppend, razorkv::decode_mode::kBounded}) {
    for (const index_t tokens : {index_t{1}, index_t{3}, kWindow}) {
      razorkv::razor_kv_cache<T> cache = compressed<T>(mode, rng);
      // A few single steps first, so that a bounded window has slid before the multi step.
      for (index_t step = 0; step < 2 + tokens; ++step) {
        const auto one =
            razorkv_test::random_values<T>(static_cast<std::size_t>(kKvHeads * kDim), rng);
        const auto kv = layer_view<const T>::nhd(one.data(), 1, kKvHeads, kDim);
        cache.append(0, kv, kv);
      }
      const auto n = static_cast<std::size_t>(tokens * kKvHeads * kDim);
      const std::vector<T> k = razorkv_test::random_values<T>(n, rng),
                           v = razorkv_test::random_values<T>(n, rng);
      cache.append(0, layer_view<const T>::nhd(k.data(), tokens, kKvHeads, kDim),
                   layer_view<const T>::nhd(v.data(), tokens, kKvHeads, kDim));
      const std::vector<float> queries = razorkv_test::random_values<float>(
          static_cast<std::size_t>(tokens * kQueryHeads * kDim), rng);
      const auto q = layer_view<const float>::nhd(queries.data(), tokens, kQueryHeads, kDim);
      std::vector<float> out(queries.size());
      razorkv::decode_attention_multi(
          cache, 0, q, layer_view<float>::nhd(out.data(), tokens, kQueryHeads, kDim));
      const std::vector<double> want = razorkv::reference::decode_attention_multi(cache, 0, q);
      EXPECT_LE(razorkv_test::max_abs_diff(out, want), 1e-5)
          << razorkv::decode_mode_name(mode) << ", " << tokens << " tokens";
      // A bounded head holds its window; an appending one its window and what it appended.
      EXPECT_EQ(cache.max_new_tokens(0),
                mode == razorkv::decode_mode::kBounded ? kWindow : kWindow + 2 + 2 * tokens);
    }
  }
}

TEST(RazorMultiTokenDecode, MoreNewTokensThanABoundedWindowIsAnError) {
  std::mt19937_64 rng(18);
  razorkv::razor_kv_cache<float> cache = compressed<float>(razorkv::decode_mode::kBounded, rng);
  constexpr index_t kTokens = kWindow + 1;
  const std::vector<float> kv =
      razorkv_test::random_values<float>(static_cast<std::size_t>(kTokens * kKvHeads * kDim), rng);
  cache.append(0, layer_view<const float>::nhd(kv.data(), kTokens, kKvHeads, kDim),
               layer_view<const float>::nhd(kv.data(), kTokens, kKvHeads, kDim));
  const std::vector<float> queries(static_cast<std::size_t>(kTokens * kQueryHeads * kDim), 0.5f);
  std::vector<float> out(queries.size(), 7.0f);
  const auto q = layer_view<const float>::nhd(queries.data(), kTokens, kQueryHeads, kDim);
  const auto o = layer_view<float>::nhd(out.data(), kTokens, kQueryHeads, kDim);
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention_multi(cache, 0, q, o), kInvalidArgument,
                       "queries.tokens() (9) exceeds the 8 newest tokens layer 0 keeps");
  EXPECT_EQ(out[0], 7.0f);  // nothing written
  // The same through any_kv_cache.
  const razorkv::any_kv_cache<float> any = cache;
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention_multi(any, 0, q, o), kInvalidArgument,
                       "exceeds the 8 newest tokens");
  // The window's tokens decode fine.
  EXPECT_NO_THROW(razorkv::decode_attention_multi(cache, 0, q.middle_tokens(1, kWindow),
                                                  o.middle_tokens(1, kWindow)));
}

}  // namespace
