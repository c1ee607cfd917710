// razorkv/io/plan_files.hpp: a plan read in any format (recognised or named) and written back.
#include <gtest/gtest.h>

#include <razorkv/io/plan_files.hpp>

#include "support/expect_error.hpp"

namespace {

using razorkv::io::plan_format;

razorkv::head_plan two_groups() {
  razorkv::head_plan plan(razorkv::model_shape{3, 8, 2, 64});
  plan.set_retrieval(0, 1, true);
  plan.set_retrieval(2, 0, true);
  return plan;
}

TEST(RazorkvPlanFiles, EveryFormatIsRecognisedAndReadsBackTheSamePlan) {
  const razorkv::head_plan plan = two_groups();
  razorkv::io::plan_read_options options;
  options.shape = plan.shape();
  for (const plan_format f :
       {plan_format::kRazorkv, plan_format::kMindspore, plan_format::kDuoattention}) {
    const std::string text = razorkv::io::format_head_plan(plan, f);
    EXPECT_EQ(razorkv::io::detect_plan_format(text), f) << text;
    const razorkv::head_plan again = razorkv::io::parse_head_plan(text, options);
    for (razorkv::index_t l = 0; l < 3; ++l)
      for (razorkv::index_t h = 0; h < 2; ++h)
        EXPECT_EQ(again.is_retrieval(l, h), plan.is_retrieval(l, h)) << text;
  }
  EXPECT_EQ(razorkv::io::format_head_plan(plan, plan_format::kDuoattention), "0\t1\n0\t0\n1\t0\n");
  // A one-gate TSV is a bare number, not JSON.
  EXPECT_EQ(razorkv::io::detect_plan_format("0.7\n"), plan_format::kDuoattention);
}

TEST(RazorkvPlanFiles, BadInputIsANamedError) {
  RAZORKV_EXPECT_ERROR(razorkv::io::parse_plan_format("xml"), kInvalidArgument,
                       "plan format (\"xml\") must be auto, razorkv, mindspore or duoattention");
  for (const char* name : {"auto", "razorkv", "mindspore", "duoattention"})
    EXPECT_STREQ(razorkv::io::plan_format_name(razorkv::io::parse_plan_format(name)), name);
  RAZORKV_EXPECT_ERROR(razorkv::io::parse_head_plan("{\"0\": [1]}"), kInvalidArgument,
                       "a mindspore plan does not carry the model's shape");
  RAZORKV_EXPECT_ERROR(razorkv::io::detect_plan_format("[1, 2]"), kParseError,
                       "a JSON plan must be an object, this one is array");
  RAZORKV_EXPECT_ERROR(razorkv::io::format_head_plan(two_groups(), plan_format::kAuto),
                       kInvalidArgument, "name the format to write");
  // A razorkv plan is checked against the shape it is read for.
  razorkv::io::plan_read_options options;
  options.shape = razorkv::model_shape{3, 8, 2, 128};
  RAZORKV_EXPECT_ERROR(
      razorkv::io::parse_head_plan(
          razorkv::io::format_head_plan(two_groups(), plan_format::kRazorkv), options),
      kShapeMismatch, "the plan has head_dim 64, the model has 128");
}

}  // namespace
