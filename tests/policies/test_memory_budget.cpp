// Budgets in entries per head, bytes and fractions; StreamingLLM's and RazorAttention's sizing
// from a budget; what a cache holds, with a GQA group's K/V counted once.
#include <gtest/gtest.h>

#include <razorkv/razorkv.hpp>

#include <vector>

#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::memory_budget;
using razorkv::model_shape;

const model_shape kShape{2, 8, 2, 16};  // 4 groups of 4 query heads

TEST(RazorkvMemoryBudget, EveryUnitGivesEntriesPerHead) {
  EXPECT_EQ(razorkv::entries_per_head(memory_budget::entries_per_head(37), kShape, 100, 4), 37);
  // One entry per kv head of the model: 2 layers x 2 kv heads x (K + V) x 16 x 4 bytes = 512.
  EXPECT_EQ(razorkv::entries_per_head(memory_budget::bytes(512 * 37), kShape, 100, 4), 37);
  EXPECT_EQ(razorkv::entries_per_head(memory_budget::bytes(512 * 37 + 511), kShape, 100, 4), 37);
  EXPECT_EQ(razorkv::entries_per_head(memory_budget::bytes(256 * 37), kShape, 100, 2),
            37);  // 16-bit
  EXPECT_EQ(razorkv::entries_per_head(memory_budget::fraction_of_full(0.3), kShape, 1000, 4), 300);
  EXPECT_EQ(razorkv::entries_per_head(memory_budget::fraction_of_full(1.0), kShape, 1000, 4), 1000);
}

TEST(RazorkvMemoryBudget, BadBudgetsNameTheUnitAndTheAmount) {
  using razorkv::entries_per_head;
  RAZORKV_EXPECT_ERROR(entries_per_head(memory_budget::fraction_of_full(32), kShape, 100, 4),
                       kInvalidArgument,
                       "fraction_of_full (32) must be in (0, 1]; for a number of entries use");
  RAZORKV_EXPECT_ERROR(entries_per_head(memory_budget::bytes(511), kShape, 100, 4),
                       kInvalidArgument,
                       "bytes (511) is less than one entry per kv head (512 bytes");
  RAZORKV_EXPECT_ERROR(
      entries_per_head({razorkv::budget_unit::kEntriesPerHead, 2.5}, kShape, 100, 4),
      kInvalidArgument, "entries_per_head (2.5) must be a whole number");
  RAZORKV_EXPECT_ERROR(entries_per_head(memory_budget::entries_per_head(0), kShape, 100, 4),
                       kInvalidArgument, "entries_per_head (0) must be > 0");
  RAZORKV_EXPECT_ERROR(entries_per_head(memory_budget::fraction_of_full(0.001), kShape, 100, 4),
                       kInvalidArgument,
                       "fraction_of_full (0.001) of 100 tokens is less than one entry");
  RAZORKV_EXPECT_ERROR(
      entries_per_head({static_cast<razorkv::budget_unit>(9), 1.0}, kShape, 100, 4),
      kInvalidArgument, "unit (9) is not a budget_unit");
  RAZORKV_EXPECT_ERROR(entries_per_head(memory_budget::entries_per_head(4), kShape, 0, 4),
                       kInvalidArgument, "tokens (0) must be > 0");
}

TEST(RazorkvMemoryBudget, StreamingLlmKeepsSinksAndTheRestOfTheBudgetAsWindow) {
  const razorkv::razor_config config = razorkv::streaming_llm_config(64, 4);
  EXPECT_EQ(config.sinks, 4);
  EXPECT_EQ(config.fixed_window, 60);
  EXPECT_EQ(config.compensation, razorkv::compensation_mode::kNone);
  EXPECT_EQ(config.decode, razorkv::decode_mode::kBounded);
  RAZORKV_EXPECT_ERROR(
      razorkv::streaming_llm_config(4, 4), kInvalidArgument,
      "the budget (4 entries per head) is smaller than sinks (4) + a recent window of at least 1");
}

TEST(RazorkvMemoryBudget, RazorWindowFillsWhatTheRetrievalGroupsLeave) {
  razorkv::head_plan plan(kShape);
  plan.set_retrieval(1, 0, true);  // 1 of 4 groups keeps all 1000 tokens
  // 4 x 300 = 1200 entries: 1000 for the retrieval group, 200 / 3 = 66 for each other group =
  // 4 sinks + 1 compensation token + a window of 61.
  razorkv::razor_config config = razorkv::razor_config_for_budget(plan, 1000, 300);
  EXPECT_EQ(config.fixed_window, 61);
  razorkv::razor_config none;
  none.compensation = razorkv::compensation_mode::kNone;
  EXPECT_EQ(razorkv::razor_config_for_budget(plan, 1000, 300, none).fixed_window,
            62);  // the freed entry
  RAZORKV_EXPECT_ERROR(
      razorkv::razor_config_for_budget(plan, 1000, 251), kInvalidArgument,
      "the budget (251 entries per head) cannot hold the plan's 1 retrieval groups at 1000 tokens "
      "plus sinks (4) + 1 compensation token + a window of 1 in the other 3 groups: it needs at "
      "least 255 entries per head");
  EXPECT_EQ(razorkv::razor_config_for_budget(plan, 1000, 255).fixed_window, 1);
}

TEST(RazorkvMemoryBudget, HeldBytesCountAGroupOnceAndMatchTheCalculator) {
  // 8 query heads read 2 kv heads: the cache holds 2 heads' K/V per layer, never 8.
  std::mt19937_64 rng(3);
  const index_t tokens = 300;
  const auto keys =
      razorkv_test::random_values<float>(static_cast<std::size_t>(tokens * 2 * 16), rng);
  const auto view = razorkv::layer_view<const float>::nhd(keys.data(), tokens, 2, 16);
  razorkv::head_plan plan(kShape);
  plan.set_retrieval(0, 1, true);
  const razorkv::razor_config config = razorkv::razor_config_for_budget(plan, tokens, 100);
  razorkv::razor_kv_cache<float> razor(plan, config);
  razorkv::dense_kv_cache<float> dense(2, 2, 16);
  for (index_t l = 0; l < 2; ++l) {
    razor.compress_layer(l, view, view);
    dense.append(l, view, view);
  }
  const index_t entry_bytes = 2 * 16 * 4;
  EXPECT_EQ(razorkv::held_kv_bytes(dense), 2 * 2 * tokens * entry_bytes);
  EXPECT_EQ(razorkv::held_kv_bytes(dense), dense.kv_bytes());
  EXPECT_EQ(razorkv::held_kv_bytes(razor), razor.kv_bytes());
  // (4 x 100 - 300) / 3 = 33 entries per compressed head.
  EXPECT_EQ(razorkv::held_kv_bytes(razor), (tokens + 3 * 33) * entry_bytes);
  EXPECT_LE(razorkv::held_kv_bytes(razor), 4 * 100 * entry_bytes);
}

}  // namespace
