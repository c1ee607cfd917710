// Tests of the KV memory calculator: the window rule, nothing dropped for short prompts, the
// paper's 0.15 + 0.85 / C at long context, plans vs fractions, presets and errors.
#include <gtest/gtest.h>

#include <razorkv/compress/kv_memory.hpp>

#include "support/expect_error.hpp"

namespace {

using razorkv::index_t;

TEST(RazorkvBudget, WindowRuleAndShortPrompts) {
  const razorkv::razor_budget b;                          // N0 = 4, S0 = 4000, C = 5
  EXPECT_EQ(razorkv::compressed_entries(4004, b), 4004);  // N <= N0 + L_h: nothing dropped
  EXPECT_EQ(razorkv::compressed_entries(4005, b), 4 + 1 + 4000);
  EXPECT_EQ(razorkv::compressed_entries(100000, b), 4 + 1 + 20000);  // ceil(N / C)
  EXPECT_EQ(razorkv::compressed_entries(100001, b), 4 + 1 + 20001);
  EXPECT_EQ(razorkv::compressed_entries(100000, b, 256), 4 + 1 + 256);  // per-head override
  EXPECT_EQ(razorkv::compressed_entries(0, b), 0);
}

TEST(RazorkvBudget, LongContextRatioApproachesThePapersFigure) {
  const auto llama = razorkv::model_preset_shape("llama-3-8b");
  const index_t n = 1 << 20;
  const double full = static_cast<double>(razorkv::full_kv_bytes(llama, n, 2));
  EXPECT_EQ(full, 2.0 * 32 * 8 * n * 128 * 2);
  const double razor = static_cast<double>(razorkv::compressed_kv_bytes(llama, 0.15, n, {}, 2));
  // 15% of 256 groups rounds to 38 groups: 38/256 + (218/256) * (N/5 + 5) / N.
  const double expected = (38.0 + 218.0 * (std::ceil(n / 5.0) + 5.0) / n) / 256.0;
  EXPECT_NEAR(razor / full, expected, 1e-12);
  EXPECT_NEAR(razor / full, 0.15 + 0.85 / 5, 0.01);

  // A plan with the same groups gives the same bytes.
  razorkv::head_plan plan(llama);
  for (index_t g = 0; g < 38; ++g) plan.set_retrieval(g / 8, g % 8, true);
  EXPECT_EQ(razorkv::compressed_kv_bytes(plan, n, {}, 2),
            razorkv::compressed_kv_bytes(llama, 0.15, n, {}, 2));
}

TEST(RazorkvBudget, BadInputIsANamedError) {
  razorkv::razor_budget b;
  b.c = 0.5;
  RAZORKV_EXPECT_ERROR(razorkv::compressed_entries(10, b), kInvalidArgument,
                       "c (0.5) must be >= 1");
  b = {};
  b.sinks = -1;
  RAZORKV_EXPECT_ERROR(razorkv::compressed_entries(10, b), kInvalidArgument, "sinks (-1)");
  RAZORKV_EXPECT_ERROR(razorkv::compressed_entries(10, {}, 0), kInvalidArgument,
                       "buffer_override (0)");
  RAZORKV_EXPECT_ERROR(
      razorkv::compressed_kv_bytes(razorkv::model_preset_shape("qwen2-7b"), 1.5, 10, {}, 2),
      kInvalidArgument, "retrieval_fraction (1.5)");
  RAZORKV_EXPECT_ERROR(razorkv::model_preset_shape("gpt-5"), kInvalidArgument,
                       "unknown model \"gpt-5\" (known: llama-2-7b");
  RAZORKV_EXPECT_ERROR(
      razorkv::full_kv_bytes(razorkv::model_preset_shape("llama-2-7b"), index_t{1} << 60, 2),
      kOverflow, "overflows");
}

}  // namespace

#include <razorkv/select/memory_selector.hpp>

namespace {

TEST(RazorkvBudget, SelectionByMemoryKeepsTheMostGroupsThatFit) {
  // 2 layers x 4 groups (MHA), induction scores 8..1: the best groups come first.
  razorkv::head_scores scores(2, 4, 4);
  scores.set_layer(0, {{0, 0, 0, 0}, {8, 7, 6, 5}});
  scores.set_layer(1, {{0, 0, 0, 0}, {4, 3, 2, 1}});
  razorkv::memory_target target;
  target.seq_len = 100000;
  target.dtype_bytes = 2;
  const index_t full_head = razorkv::head_kv_bytes(100000, 64, 2);
  const index_t small_head = razorkv::head_kv_bytes(razorkv::compressed_entries(100000, {}), 64, 2);
  target.budget_bytes = 3 * full_head + 5 * small_head;  // exactly three full groups
  razorkv::selection_config config;
  config.echo_ratio = 0.0;
  const auto plan = razorkv::select_for_budget(scores, 64, target, config);
  EXPECT_EQ(plan.num_retrieval(), 3);
  EXPECT_EQ(plan.retrieval_heads(0), (std::vector<index_t>{0, 1, 2}));
  EXPECT_DOUBLE_EQ(plan.selection().induction_ratio, 3.0 / 8.0);
  EXPECT_LE(razorkv::compressed_kv_bytes(plan, 100000, {}, 2), target.budget_bytes);
  target.budget_bytes -= 1;  // one byte less: two groups
  EXPECT_EQ(razorkv::select_for_budget(scores, 64, target, config).num_retrieval(), 2);
  target.budget_bytes = 8 * small_head - 1;
  RAZORKV_EXPECT_ERROR(razorkv::select_for_budget(scores, 64, target, config), kInvalidArgument,
                       "is below the smallest RazorAttention cache");
}

}  // namespace
