// Tests of retrieval-head selection on hand-made score tables: exact counts, global ranking,
// ties, GQA sum vs max vs mean, ratios 0 and 1, the per-layer minimum, the union of the two
// sets, plans checked against a model shape, and named errors.
#include <gtest/gtest.h>

#include <razorkv/select/head_selector.hpp>

#include <vector>

#include "support/expect_error.hpp"

namespace {

using razorkv::index_t;

// A table of `layers` x `query_heads` with the given scores (layer-major).
razorkv::head_scores table(index_t layers, index_t query_heads, index_t kv_heads,
                           const std::vector<double>& echo, const std::vector<double>& induction) {
  razorkv::head_scores scores(layers, query_heads, kv_heads);
  for (index_t l = 0; l < layers; ++l) {
    razorkv::layer_scores s;
    // Element by element: GCC 12 at -O3 reports a false -Wnonnull in vector::assign here.
    for (index_t h = 0; h < query_heads; ++h) {
      s.echo.push_back(echo[static_cast<std::size_t>(l * query_heads + h)]);
      s.induction.push_back(induction[static_cast<std::size_t>(l * query_heads + h)]);
    }
    scores.set_layer(l, s);
  }
  return scores;
}

std::vector<std::vector<index_t>> retrieval(const razorkv::head_plan& plan) {
  std::vector<std::vector<index_t>> out;
  for (index_t l = 0; l < plan.shape().num_layers; ++l) out.push_back(plan.retrieval_heads(l));
  return out;
}

using layers = std::vector<std::vector<index_t>>;

TEST(RazorkvSelect, GlobalRankingWithExactCountsAndUnion) {
  // 2 layers x 5 heads (MHA): 10 groups; induction ratio 0.3 -> 3 groups, echo 0.1 -> 1 group.
  const auto scores =
      table(2, 5, 5, {0, 0, 0, 0, 9, 0, 0, 0, 0, 0}, {1, 8, 2, 7, 0, 6, 3, 5, 4, 0.5});
  razorkv::selection_config config;
  config.induction_ratio = 0.3;
  config.echo_ratio = 0.1;
  const auto plan = razorkv::select_retrieval_heads(scores, 64, config);
  EXPECT_EQ(retrieval(plan), (layers{{1, 3, 4}, {0}}));  // induction 8, 7, 6 + echo 9
  EXPECT_EQ(plan.num_retrieval(), 4);
  EXPECT_EQ(plan.selection().method, "razorattention");
  EXPECT_EQ(plan.selection().induction_ratio, 0.3);

  // A group chosen by both scores counts once.
  const auto both = table(1, 4, 4, {0, 5, 0, 0}, {0, 5, 1, 0});
  config.induction_ratio = 0.25;
  config.echo_ratio = 0.25;
  EXPECT_EQ(retrieval(razorkv::select_retrieval_heads(both, 64, config)), (layers{{1}}));
}

TEST(RazorkvSelect, TiesGoToTheLowerLayerThenHeadAndNeverSelectExtras) {
  // Every score equal: value membership would select everything; exact counts select 2.
  const auto scores = table(3, 2, 2, std::vector<double>(6, 0.5), std::vector<double>(6, 0.5));
  razorkv::selection_config config;
  config.induction_ratio = 0.34;  // round(6 * 0.34) = 2
  config.echo_ratio = 0.0;
  EXPECT_EQ(retrieval(razorkv::select_retrieval_heads(scores, 64, config)),
            (layers{{0, 1}, {}, {}}));
}

TEST(RazorkvSelect, GqaSumMaxAndMeanDiffer) {
  // 1 layer, 4 query heads, 2 kv heads. Group 0 = {0.9, 0.0}, group 1 = {0.5, 0.5}.
  const auto scores = table(1, 4, 2, {0, 0, 0, 0}, {0.9, 0.0, 0.5, 0.5});
  razorkv::selection_config config;
  config.induction_ratio = 0.5;  // one group
  config.echo_ratio = 0.0;
  config.aggregation = razorkv::gqa_aggregation::kSum;
  EXPECT_EQ(retrieval(razorkv::select_retrieval_heads(scores, 64, config)), (layers{{1}}));
  config.aggregation = razorkv::gqa_aggregation::kMean;
  EXPECT_EQ(retrieval(razorkv::select_retrieval_heads(scores, 64, config)), (layers{{1}}));
  config.aggregation = razorkv::gqa_aggregation::kMax;
  EXPECT_EQ(retrieval(razorkv::select_retrieval_heads(scores, 64, config)), (layers{{0}}));
  const auto sums = razorkv::aggregate_groups(scores, razorkv::gqa_aggregation::kSum);
  EXPECT_DOUBLE_EQ(sums.induction[0], 0.9);
  EXPECT_DOUBLE_EQ(sums.induction[1], 1.0);
  EXPECT_DOUBLE_EQ(razorkv::aggregate_groups(scores, razorkv::gqa_aggregation::kMean).induction[1],
                   0.5);
}

TEST(RazorkvSelect, RatiosZeroAndOne) {
  const auto scores = table(2, 2, 2, {1, 2, 3, 4}, {4, 3, 2, 1});
  razorkv::selection_config config;
  config.induction_ratio = 0.0;
  config.echo_ratio = 0.0;
  EXPECT_EQ(razorkv::select_retrieval_heads(scores, 64, config).num_retrieval(), 0);
  config.induction_ratio = 1.0;
  EXPECT_EQ(razorkv::select_retrieval_heads(scores, 64, config).num_retrieval(), 4);
}

TEST(RazorkvSelect, PerLayerMinimumAddsTheBestRemainingGroups) {
  const auto scores =
      table(3, 3, 3, std::vector<double>(9, 0.0), {9, 8, 7, 0.1, 0.3, 0.2, 0.0, 0.0, 0.0});
  razorkv::selection_config config;
  config.induction_ratio = 2.0 / 9.0;  // the two best: layer 0 heads 0 and 1
  config.echo_ratio = 0.0;
  config.min_groups_per_layer = 1;
  EXPECT_EQ(retrieval(razorkv::select_retrieval_heads(scores, 64, config)),
            (layers{{0, 1}, {1}, {0}}));
}

TEST(RazorkvSelect, PlanValidatesAgainstTheModel) {
  const auto scores = table(2, 8, 2, std::vector<double>(16, 0.1), std::vector<double>(16, 0.2));
  const auto plan = razorkv::select_retrieval_heads(scores, 128);
  EXPECT_NO_THROW(plan.validate_against({2, 8, 2, 128}));
  RAZORKV_EXPECT_ERROR(plan.validate_against({3, 8, 2, 128}), kShapeMismatch,
                       "the plan has num_layers 2, the model has 3");
  RAZORKV_EXPECT_ERROR(plan.validate_against({2, 8, 4, 128}), kShapeMismatch,
                       "num_kv_heads 2, the model has 4");
  RAZORKV_EXPECT_ERROR(plan.validate_against({2, 8, 2, 64}), kShapeMismatch,
                       "head_dim 128, the model has 64");
  RAZORKV_EXPECT_ERROR(plan.is_retrieval(0, 2), kOutOfRange, "kv_head (2)");

  razorkv::head_plan manual({2, 8, 2, 128});
  manual.set_buffer_override(1, 0, 512);
  EXPECT_EQ(manual.buffer_override(1, 0), 512);
  EXPECT_FALSE(manual.buffer_override(0, 0).has_value());
  RAZORKV_EXPECT_ERROR(manual.set_buffer_override(0, 0, 0), kInvalidArgument, "tokens (0)");
  RAZORKV_EXPECT_ERROR(razorkv::head_plan({2, 6, 4, 128}), kShapeMismatch, "num_query_heads (6)");
}

TEST(RazorkvSelect, BadConfigsAreNamedErrors) {
  const auto scores = table(1, 2, 2, {0, 0}, {0, 0});
  razorkv::selection_config config;
  config.induction_ratio = 1.5;
  RAZORKV_EXPECT_ERROR(razorkv::select_retrieval_heads(scores, 64, config), kInvalidArgument,
                       "induction_ratio (1.5)");
  config.induction_ratio = 0.1;
  config.echo_ratio = std::nan("");
  RAZORKV_EXPECT_ERROR(razorkv::select_retrieval_heads(scores, 64, config), kInvalidArgument,
                       "echo_ratio (nan)");
  config.echo_ratio = 0.0;
  config.min_groups_per_layer = 3;
  RAZORKV_EXPECT_ERROR(razorkv::select_retrieval_heads(scores, 64, config), kInvalidArgument,
                       "min_groups_per_layer (3)");
  razorkv::head_scores partial(2, 2, 2);
  RAZORKV_EXPECT_ERROR(razorkv::select_retrieval_heads(partial, 64), kInvalidArgument,
                       "head_scores is incomplete");
  RAZORKV_EXPECT_ERROR(razorkv::select_retrieval_heads(scores, 0), kInvalidArgument,
                       "head_dim (0)");
}

TEST(RazorkvSelect, APlanShapeBeyondTheCellCapIsAnOverflowError) {
  // 2^32 layers x 2^32 heads wrapped to 0 cells, and set_retrieval wrote past an empty vector.
  constexpr razorkv::index_t k32 = razorkv::index_t{1} << 32;
  RAZORKV_EXPECT_ERROR(razorkv::head_plan(razorkv::model_shape{k32, k32, k32, 1}), kOverflow,
                       "head_plan: num_layers (4294967296) x num_query_heads (4294967296)");
  RAZORKV_EXPECT_ERROR(razorkv::head_scores(1 << 20, 2, 1), kOverflow, "exceeds 1048576 cells");
  EXPECT_NO_THROW(razorkv::head_plan(razorkv::model_shape{1 << 10, 1 << 10, 1, 8}));
}

}  // namespace
