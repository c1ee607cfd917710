// Tests of razorkv/io/json.hpp: round trips of head plans, head scores and mindspore_gs files,
// and clear errors for malformed documents.
#include <gtest/gtest.h>

#include <razorkv/io/json.hpp>
#include <razorkv/select/head_selector.hpp>

#include <optional>
#include <string>

#include "support/expect_error.hpp"

namespace {

using razorkv::index_t;

razorkv::head_plan sample_plan() {
  razorkv::head_plan plan({3, 8, 4, 128});
  plan.set_retrieval(0, 1, true);
  plan.set_retrieval(0, 3, true);
  plan.set_retrieval(2, 0, true);
  plan.set_buffer_override(1, 2, 777);
  plan.selection().method = "razorattention";
  plan.selection().induction_ratio = 0.14;
  plan.selection().echo_ratio = 0.01;
  plan.selection().aggregation = razorkv::gqa_aggregation::kMax;
  return plan;
}

void expect_same(const razorkv::head_plan& a, const razorkv::head_plan& b) {
  ASSERT_NO_THROW(b.validate_against(a.shape()));
  for (index_t l = 0; l < a.shape().num_layers; ++l) {
    EXPECT_EQ(a.retrieval_heads(l), b.retrieval_heads(l)) << "layer " << l;
    for (index_t h = 0; h < a.shape().num_kv_heads; ++h)
      EXPECT_EQ(a.buffer_override(l, h), b.buffer_override(l, h));
  }
}

TEST(RazorkvIo, HeadPlanRoundTrip) {
  const auto plan = sample_plan();
  const std::string text = razorkv::io::head_plan_to_json(plan);
  EXPECT_NE(text.find("\"format\": \"razorkv.head_plan\""), std::string::npos);
  const auto back = razorkv::io::head_plan_from_json(text);
  expect_same(plan, back);
  EXPECT_EQ(back.selection().method, "razorattention");
  EXPECT_EQ(back.selection().aggregation, razorkv::gqa_aggregation::kMax);
  EXPECT_EQ(back.selection().induction_ratio, 0.14);

  // A selected plan carries the group scores it was made from.
  razorkv::head_scores scores(1, 4, 2);
  scores.set_layer(0, {{0.1, 0.2, 0.3, 0.4}, {0.5, 0.25, 0.125, 0.0625}});
  const auto selected = razorkv::select_retrieval_heads(scores, 64);
  const auto reread = razorkv::io::head_plan_from_json(razorkv::io::head_plan_to_json(selected));
  EXPECT_EQ(reread.selection().group_induction, (std::vector<double>{0.75, 0.1875}));
  EXPECT_EQ(reread.selection().group_echo, selected.selection().group_echo);
}

TEST(RazorkvIo, HeadScoresRoundTripExactly) {
  razorkv::head_scores scores(2, 4, 2);
  scores.set_layer(0, {{0.1, 0.2, 1.0 / 3.0, 0.0}, {0.5, 0.25, 0.125, 1e-300}});
  scores.set_layer(1, {{1, 2, 3, 4}, {4, 3, 2, 1}});
  const auto back = razorkv::io::head_scores_from_json(razorkv::io::head_scores_to_json(scores));
  for (index_t l = 0; l < 2; ++l)
    for (index_t h = 0; h < 4; ++h) {
      EXPECT_EQ(back.echo(l, h), scores.echo(l, h));
      EXPECT_EQ(back.induction(l, h), scores.induction(l, h));
    }
  EXPECT_EQ(back.num_kv_heads(), 2);
}

TEST(RazorkvIo, MindsporeRoundTripOmitsEmptyLayers) {
  const auto plan = sample_plan();
  const std::string text = razorkv::io::head_plan_to_mindspore(plan);
  EXPECT_EQ(text, "{\"0\":[1,3],\"2\":[0]}");
  const auto back = razorkv::io::head_plan_from_mindspore(text, plan.shape());
  for (index_t l = 0; l < 3; ++l) EXPECT_EQ(back.retrieval_heads(l), plan.retrieval_heads(l));
}

// Every aggregation's name reads back as that aggregation, by gqa_aggregation_from_name and
// from a plan file; any other name is none of them, and a named error in a file.
TEST(RazorkvIo, EveryAggregationNameReadsBack) {
  for (const razorkv::gqa_aggregation a : razorkv::kGqaAggregations) {
    EXPECT_EQ(razorkv::gqa_aggregation_from_name(razorkv::gqa_aggregation_name(a)), a);
    auto plan = sample_plan();
    plan.selection().aggregation = a;
    const auto back = razorkv::io::head_plan_from_json(razorkv::io::head_plan_to_json(plan));
    EXPECT_EQ(back.selection().aggregation, a) << razorkv::gqa_aggregation_name(a);
  }
  for (const char* other : {"median", "", "Sum", "unknown"})
    EXPECT_EQ(razorkv::gqa_aggregation_from_name(other), std::nullopt) << "'" << other << "'";
  std::string text = razorkv::io::head_plan_to_json(sample_plan());
  const std::string max_field = "\"aggregation\": \"max\"";
  const std::size_t at = text.find(max_field);
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, max_field.size(), "\"aggregation\": \"median\"");
  RAZORKV_EXPECT_ERROR(razorkv::io::head_plan_from_json(text), kParseError,
                       "unknown selection aggregation \"median\"");
}

TEST(RazorkvIo, MalformedDocumentsAreNamedErrors) {
  using razorkv::io::head_plan_from_json;
  const std::string good = razorkv::io::head_plan_to_json(sample_plan());
  RAZORKV_EXPECT_ERROR(head_plan_from_json(good.substr(0, good.size() / 2)), kParseError,
                       "not valid JSON");
  RAZORKV_EXPECT_ERROR(head_plan_from_json("[1, 2]"), kParseError, "must be a JSON object");
  RAZORKV_EXPECT_ERROR(head_plan_from_json(R"({"format": "razorkv.head_scores", "version": 1})"),
                       kParseError, "\"format\" must be \"razorkv.head_plan\"");
  RAZORKV_EXPECT_ERROR(head_plan_from_json(R"({"format": "razorkv.head_plan", "version": 2})"),
                       kParseError, "unsupported \"version\" 2");
  const std::string header =
      R"({"format": "razorkv.head_plan", "version": 1, "num_query_heads": 8, "num_kv_heads": 4, "head_dim": 128, )";
  RAZORKV_EXPECT_ERROR(head_plan_from_json(header + R"("num_layers": "3", "retrieval": []})"),
                       kParseError, "\"num_layers\" must be an integer, got \"3\"");
  RAZORKV_EXPECT_ERROR(head_plan_from_json(header + R"("num_layers": -1, "retrieval": []})"),
                       kParseError, "\"num_layers\" (-1) outside");
  RAZORKV_EXPECT_ERROR(head_plan_from_json(header + R"("num_layers": 2, "retrieval": [[0]]})"),
                       kParseError, "\"retrieval\" has 1 layers, num_layers is 2");
  RAZORKV_EXPECT_ERROR(head_plan_from_json(header + R"("num_layers": 1, "retrieval": [[4]]})"),
                       kParseError, "kv head 4 outside [0, 4)");
  RAZORKV_EXPECT_ERROR(head_plan_from_json(header + R"("num_layers": 1, "retrieval": [[-1]]})"),
                       kParseError, "kv head -1 outside");
  RAZORKV_EXPECT_ERROR(head_plan_from_json(header + R"("num_layers": 1, "retrieval": [[1, 1]]})"),
                       kParseError, "kv head 1 listed twice");
  RAZORKV_EXPECT_ERROR(head_plan_from_json(header + R"("num_layers": 1, "retrieval": [["1"]]})"),
                       kParseError, "is not an integer");
  // A shape of 2^48 cells in a few bytes is an error before anything the size of the shape is
  // allocated (it used to cost gigabytes, or end in std::bad_alloc).
  RAZORKV_EXPECT_ERROR(
      head_plan_from_json(
          R"({"format": "razorkv.head_plan", "version": 1, "num_query_heads": 16777216, )"
          R"("num_kv_heads": 16777216, "head_dim": 1, "num_layers": 16777216, "retrieval": []})"),
      kOverflow, "head_plan: num_layers (16777216) x num_query_heads (16777216) exceeds 1048576");
  RAZORKV_EXPECT_ERROR(
      razorkv::io::head_scores_from_json(
          R"({"format": "razorkv.head_scores", "version": 1, "num_query_heads": 16777216, )"
          R"("num_kv_heads": 1, "num_layers": 4096, "echo": [], "induction": []})"),
      kParseError, "\"echo\" must be a list of num_layers (4096) lists");
  RAZORKV_EXPECT_ERROR(
      head_plan_from_json(
          header + R"("num_layers": 1, "retrieval": [[]], "buffer_override": {"0": {"9": 5}}})"),
      kParseError, "buffer_override kv head 9");

  // A plan with the wrong layer count does not load into a model.
  RAZORKV_EXPECT_ERROR(head_plan_from_json(good).validate_against({4, 8, 4, 128}), kShapeMismatch,
                       "the plan has num_layers 3, the model has 4");

  using razorkv::io::head_scores_from_json;
  const std::string scores =
      R"({"format": "razorkv.head_scores", "version": 1, "num_layers": 1, "num_query_heads": 2, "num_kv_heads": 1, )";
  RAZORKV_EXPECT_ERROR(
      head_scores_from_json(scores + R"("echo": [[0.1]], "induction": [[0.1, 0.2]]})"), kParseError,
      "\"echo\" layer 0 must list num_query_heads (2) scores");
  RAZORKV_EXPECT_ERROR(
      head_scores_from_json(scores + R"("echo": [[0.1, null]], "induction": [[0.1, 0.2]]})"),
      kParseError, "holds null, not a number");
  RAZORKV_EXPECT_ERROR(head_scores_from_json(scores + R"("echo": [[0.1, 0.2]]})"), kParseError,
                       "\"induction\" must be a list");

  const razorkv::model_shape shape{2, 4, 2, 64};
  RAZORKV_EXPECT_ERROR(razorkv::io::head_plan_from_mindspore(R"({"x": [0]})", shape), kParseError,
                       "layer key \"x\"");
  RAZORKV_EXPECT_ERROR(razorkv::io::head_plan_from_mindspore(R"({"2": [0]})", shape), kParseError,
                       "layer 2 outside [0, 2)");
  RAZORKV_EXPECT_ERROR(razorkv::io::head_plan_from_mindspore(R"({"1": [2]})", shape), kParseError,
                       "kv head 2 outside [0, 2)");
  RAZORKV_EXPECT_ERROR(razorkv::io::read_text_file("/nonexistent/plan.json"), kInvalidArgument,
                       "cannot open \"/nonexistent/plan.json\"");
}

}  // namespace
