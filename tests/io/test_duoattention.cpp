// Tests of the DuoAttention full_attention_heads.tsv import: threshold and sparsity modes,
// and errors for malformed rows or a table that does not match the model.
#include <gtest/gtest.h>

#include <razorkv/io/duoattention.hpp>

#include "support/expect_error.hpp"

namespace {

const razorkv::model_shape kShape{2, 6, 3, 64};

TEST(RazorkvDuoAttention, ThresholdAndSparsity) {
  const std::string tsv = "0.9\t0.1\t0.5\n0.2\t0.7\t0.51\n";
  const auto plan = razorkv::io::head_plan_from_duoattention(tsv, kShape);
  EXPECT_EQ(plan.retrieval_heads(0), (std::vector<razorkv::index_t>{0}));  // 0.5 is not > 0.5
  EXPECT_EQ(plan.retrieval_heads(1), (std::vector<razorkv::index_t>{1, 2}));
  razorkv::io::duoattention_import options;
  options.sparsity = 0.5;  // keep 3 of 6
  const auto sparse = razorkv::io::head_plan_from_duoattention(tsv, kShape, options);
  EXPECT_EQ(sparse.retrieval_heads(0), (std::vector<razorkv::index_t>{0}));
  EXPECT_EQ(sparse.retrieval_heads(1), (std::vector<razorkv::index_t>{1, 2}));
  options.sparsity = 1.0;
  EXPECT_EQ(razorkv::io::head_plan_from_duoattention(tsv, kShape, options).num_retrieval(), 0);
  // Windows line ends and a trailing blank line are accepted.
  EXPECT_EQ(
      razorkv::io::head_plan_from_duoattention("1\t0\t0\r\n0\t0\t1\r\n\n", kShape).num_retrieval(),
      2);
}

TEST(RazorkvDuoAttention, MalformedTablesAreNamedErrors) {
  using razorkv::io::head_plan_from_duoattention;
  RAZORKV_EXPECT_ERROR(head_plan_from_duoattention("0.9\t0.1\n0.2\t0.7\t0.5\n", kShape),
                       kParseError, "row 0 has 2 values, the model has 3 kv heads");
  RAZORKV_EXPECT_ERROR(head_plan_from_duoattention("0.9\t0.1\t0.5\n", kShape), kParseError,
                       "1 rows, the model has 2 layers");
  RAZORKV_EXPECT_ERROR(head_plan_from_duoattention("0.9\tx\t0.5\n1\t1\t1\n", kShape), kParseError,
                       "row 0 column 1: \"x\" is not a finite number");
  RAZORKV_EXPECT_ERROR(head_plan_from_duoattention("0.9\tnan\t0.5\n1\t1\t1\n", kShape), kParseError,
                       "\"nan\"");
  RAZORKV_EXPECT_ERROR(head_plan_from_duoattention("0.9\t0.5x\t0.5\n1\t1\t1\n", kShape),
                       kParseError, "\"0.5x\"");
  razorkv::io::duoattention_import options;
  options.sparsity = 2.0;
  RAZORKV_EXPECT_ERROR(head_plan_from_duoattention("1\t1\t1\n1\t1\t1\n", kShape, options),
                       kInvalidArgument, "sparsity (2)");
}

}  // namespace
