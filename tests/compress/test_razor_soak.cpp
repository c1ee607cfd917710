// Soak: one small layer decoded in bounded mode for 1,000,000 steps. Memory must stay at its
// bound (no allocation after the first step), the compensation token's count must stay exact,
// and decode must agree with a cache compressed from scratch over the same tokens.
#include <gtest/gtest.h>

#include <razorkv/razorkv.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;
using razorkv::matrix_view;

constexpr index_t kKvHeads = 1, kQueryHeads = 2, kDim = 8, kPrefill = 100, kSinks = 4, kWindow = 64;
#if RAZORKV_TEST_LEVEL >= 1
constexpr index_t kSteps = 1000000;
#else
constexpr index_t kSteps = 20000;
#endif

// Deterministic token rows of unit scale, cheap enough to make a million of.
struct token_source {
  std::uint64_t state = 0x2545f4914f6cdd1dull;
  float next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<float>(state >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
};

TEST(RazorkvRazorSoak, AMillionBoundedDecodeStepsStayBoundedExactAndFaithful) {
  const index_t total = kPrefill + kSteps;
  std::vector<float> keys(static_cast<std::size_t>(total * kKvHeads * kDim)), values(keys.size());
  token_source source;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    keys[i] = source.next();
    values[i] = source.next();
  }
  const auto key_view = layer_view<const float>::nhd(keys.data(), total, kKvHeads, kDim);
  const auto value_view = layer_view<const float>::nhd(values.data(), total, kKvHeads, kDim);
  const razorkv::head_plan plan(
      razorkv::model_shape{1, kQueryHeads, kKvHeads, kDim});  // no retrieval head
  razorkv::razor_config config;
  config.sinks = kSinks;
  config.fixed_window = kWindow;
  config.decode = razorkv::decode_mode::kBounded;

  razorkv::razor_kv_cache<float> cache(plan, config);
  cache.compress_layer(0, key_view.middle_tokens(0, kPrefill),
                       value_view.middle_tokens(0, kPrefill));
  std::vector<float> query(static_cast<std::size_t>(kQueryHeads * kDim)), out(query.size()),
      want(query.size());
  for (auto& x : query) x = 2.0f * source.next();
  const matrix_view<const float> q(query.data(), kQueryHeads, kDim);

  index_t allocated = -1;
  for (index_t t = kPrefill; t < total; ++t) {
    cache.append(0, key_view.middle_tokens(t, 1), value_view.middle_tokens(t, 1));
    razorkv::decode_attention(cache, 0, q, matrix_view<float>(out.data(), kQueryHeads, kDim));
    if (allocated < 0) allocated = cache.allocated_bytes();
    const bool checkpoint = (t + 1 - kPrefill) % 250000 == 0 || t + 1 == total;
    if (!checkpoint && (t & 1023) != 0) continue;  // the cheap checks every 1024 steps
    ASSERT_EQ(cache.allocated_bytes(), allocated) << "step " << t;
    ASSERT_EQ(cache.entries(0, 0), kSinks + 1 + kWindow) << "step " << t;
    ASSERT_EQ(cache.compensation(0, 0).count, t + 1 - kSinks - kWindow) << "step " << t;
    for (float x : out) ASSERT_TRUE(std::isfinite(x)) << "step " << t;
    if (!checkpoint) continue;
    // The same tokens compressed from scratch (one pass over all of them).
    razorkv::razor_kv_cache<float> scratch(plan, config);
    scratch.compress_layer(0, key_view.middle_tokens(0, t + 1), value_view.middle_tokens(0, t + 1));
    razorkv::decode_attention(scratch, 0, q, matrix_view<float>(want.data(), kQueryHeads, kDim));
    EXPECT_LT(razorkv_test::max_abs_diff(out, want), 1e-5) << "step " << t;
    // The running sums in double still hold the exact totals to double rounding.
    const razorkv::compensation_token<float> token = cache.compensation(0, 0);
    const razorkv::compensation_token<float> reference = scratch.compensation(0, 0);
    for (index_t c = 0; c < kDim; ++c) {
      EXPECT_NEAR(token.key_sum[c], reference.key_sum[c], 1e-9 * static_cast<double>(t))
          << "step " << t;
      EXPECT_NEAR(token.value_sum[c], reference.value_sum[c], 1e-9 * static_cast<double>(t))
          << "step " << t;
    }
  }
}

}  // namespace
