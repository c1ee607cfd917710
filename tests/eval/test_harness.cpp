// The evaluation harness on the synthetic suite (a planted model whose retrieval heads are
// known, a plan found by calibration): at one equal budget, RazorAttention fetches every
// needle, StreamingLLM only those inside its window, induction-only heads miss the echo
// needles, and dropping the compensation token costs fidelity. Fixed seeds; margins, not values.
#include <gtest/gtest.h>

#include <razorkv/eval.hpp>
#include <razorkv/eval/synthetic_suite.hpp>

#include <iostream>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "support/expect_error.hpp"

namespace {

using razorkv::index_t;

constexpr index_t kLayers = 8, kQueryHeads = 16, kKvHeads = 8, kDim = 64;
constexpr index_t kInductionGroups = 9, kEchoGroups = 1;  // 14% and 1% of 64 groups

struct suite {
  std::vector<razorkv::planted_layer_config> model;
  razorkv::head_plan plan{razorkv::model_shape{kLayers, kQueryHeads, kKvHeads, kDim}};
  razorkv::head_plan induction_only = plan;
};

razorkv::probe make_probe(index_t period, std::uint64_t seed) {
  razorkv::probe_config config;
  config.num_random_tokens = period;
  config.max_id = 32000;
  config.bos_id = 1;
  config.seed = seed;
  return razorkv::probe(config);
}

const suite& synthetic_suite() {
  static const suite s = [] {
    suite out;
    out.model = razorkv::retrieval_model({kLayers, kQueryHeads, kKvHeads, kDim}, kInductionGroups,
                                         kEchoGroups, 42);
    const razorkv::probe calibration = make_probe(200, 1);
    out.plan = razorkv::calibrate_planted_model(out.model, calibration);
    razorkv::selection_config no_echo;
    no_echo.echo_ratio = 0.0;
    out.induction_only = razorkv::calibrate_planted_model(out.model, calibration, no_echo);
    return out;
  }();
  return s;
}

// The kind of retrieval head planted in each group (kUniform: none).
razorkv::head_kind planted_group_kind(const suite& s, index_t layer, index_t kv_head) {
  const index_t group = kQueryHeads / kKvHeads;
  for (index_t q = kv_head * group; q < (kv_head + 1) * group; ++q) {
    for (const auto& [kind, strength] : s.model[static_cast<std::size_t>(layer)]
                                            .query_heads[static_cast<std::size_t>(q)]
                                            .components) {
      if (kind == razorkv::head_kind::kInduction || kind == razorkv::head_kind::kEcho) return kind;
    }
  }
  return razorkv::head_kind::kUniform;
}

TEST(RazorkvHarness, CalibrationFindsThePlantedRetrievalGroups) {
  const suite& s = synthetic_suite();
  EXPECT_EQ(s.plan.num_retrieval(), kInductionGroups + kEchoGroups);
  EXPECT_EQ(s.induction_only.num_retrieval(), kInductionGroups);
  for (index_t l = 0; l < kLayers; ++l) {
    for (index_t g = 0; g < kKvHeads; ++g) {
      const razorkv::head_kind kind = planted_group_kind(s, l, g);
      EXPECT_EQ(s.plan.is_retrieval(l, g), kind != razorkv::head_kind::kUniform) << l << "/" << g;
      EXPECT_EQ(s.induction_only.is_retrieval(l, g), kind == razorkv::head_kind::kInduction)
          << l << "/" << g;
    }
  }
}

TEST(RazorkvHarness, NeedlesAtEqualBudget) {
  const suite& s = synthetic_suite();
  const razorkv::memory_budget budget = razorkv::memory_budget::fraction_of_full(0.32);
  const razorkv::policy razor = razorkv::razor_policy("razor", s.plan);
  const razorkv::policy streaming = razorkv::streaming_llm_policy();
  const razorkv::policy induction_only = razorkv::razor_policy("induction_only", s.induction_only);
  for (index_t context : {1024, 2048}) {
    for (double depth : {0.0, 0.5, 1.0}) {
      SCOPED_TRACE(::testing::Message() << "context " << context << ", depth " << depth);
      razorkv::needle_task_config config;
      config.context_tokens = context;
      config.depth = depth;
      config.seed = static_cast<std::uint64_t>(context) + static_cast<std::uint64_t>(depth * 10);
      const razorkv::needle_task task = razorkv::make_needle_task(config);
      const razorkv::planted_prompt input(s.model, task);
      const auto& prompt = input.prompt();
      const auto trials = razorkv::needle_trials(task, s.model);
      ASSERT_EQ(trials.size(),
                static_cast<std::size_t>((kInductionGroups + kEchoGroups) * config.needles));

      const razorkv::policy_run full = razorkv::run_policy(razorkv::full_policy(), prompt, budget);
      for (const auto& trial : trials) {
        // The full cache fetches every needle: a third (echo: the needle, its question and the
        // query itself) to a half (induction: the needle and the question's successor) of the
        // output.
        EXPECT_GT(razorkv::needle_coefficient(full, prompt, trial), 0.25);
      }
      const auto recovered = [&](const razorkv::policy& p) {
        return razorkv::needles_recovered(razorkv::run_policy(p, prompt, budget), full, prompt,
                                          trials);
      };
      const std::vector<bool> by_razor = recovered(razor), by_streaming = recovered(streaming),
                              by_induction_only = recovered(induction_only);
      const index_t window = razorkv::entries_per_head(budget, prompt.shape(), context, 4) - 4;
      const index_t razor_window =
          razorkv::razor_config_for_budget(s.plan, context, window + 4).fixed_window;
      for (std::size_t i = 0; i < trials.size(); ++i) {
        const razorkv::needle_trial& t = trials[i];
        SCOPED_TRACE(::testing::Message()
                     << "layer " << t.layer << " head " << t.query_head << " ("
                     << razorkv::head_kind_name(t.reader) << "), answer at " << t.answer_position);
        // At depth 0 the first needles fall among the 4 sinks, which every policy here keeps.
        const bool in_sinks = t.answer_position < 4;
        EXPECT_TRUE(by_razor[i]);
        EXPECT_EQ(by_streaming[i], in_sinks || t.answer_position >= context - window);
        if (t.reader == razorkv::head_kind::kInduction) {
          EXPECT_TRUE(by_induction_only[i]);
        } else {
          EXPECT_EQ(by_induction_only[i], in_sinks || t.answer_position >= context - razor_window);
        }
      }
    }
  }
}

TEST(RazorkvHarness, FidelityAndMemoryAtEqualBudget) {
  const suite& s = synthetic_suite();
  const razorkv::probe text = make_probe(400, 5);  // 1,601 tokens of text that repeats itself
  std::vector<index_t> slots;
  for (index_t t = 0; t < text.length(); ++t) slots.push_back(t == 0 ? 400 : (t - 1) % 400);
  const index_t decode = 16, prompt_tokens = text.length() - decode;
  const razorkv::planted_prompt input(s.model, slots, 401, prompt_tokens);
  const auto& prompt = input.prompt();
  const razorkv::memory_budget budget = razorkv::memory_budget::fraction_of_full(0.32);
  const index_t entries = razorkv::entries_per_head(budget, prompt.shape(), prompt_tokens, 4);

  razorkv::razor_config none;
  none.compensation = razorkv::compensation_mode::kNone;
  razorkv::razor_config unweighted;
  unweighted.compensation = razorkv::compensation_mode::kUnweighted;
  const std::vector<razorkv::policy> policies = {
      razorkv::razor_policy("razor", s.plan),
      razorkv::razor_policy("razor_unweighted", s.plan, unweighted),
      razorkv::razor_policy("razor_no_compensation", s.plan, none),
      razorkv::streaming_llm_policy(),
      razorkv::snapkv_policy(),
      razorkv::h2o_policy({}, 256),
      razorkv::razor_policy("random_heads",
                            razorkv::random_plan(prompt.shape(), s.plan.num_retrieval(), 3))};
  const razorkv::policy_run full = razorkv::run_policy(razorkv::full_policy(), prompt, budget);
  EXPECT_EQ(full.kv_bytes, full.full_kv_bytes);
  std::map<std::string, double> error;
  for (const razorkv::policy& p : policies) {
    const razorkv::policy_run run = razorkv::run_policy(p, prompt, budget);
    const std::vector<double> per_layer = razorkv::relative_l2_per_layer(run, full);
    error[p.name] = std::accumulate(per_layer.begin(), per_layer.end(), 0.0) /
                    static_cast<double>(per_layer.size());
    std::cout << p.name << ": mean relative L2 " << error[p.name] << ", " << run.kv_bytes << " of "
              << full.kv_bytes << " bytes\n";
    // Equal memory: every policy holds the budget to within one entry per kv head, counting a
    // GQA group's K/V once (8 kv heads, not 16 query heads, per layer).
    const index_t entry_bytes = 2 * kDim * 4, heads = kLayers * kKvHeads;
    EXPECT_LE(run.kv_bytes, entries * heads * entry_bytes) << p.name;
    EXPECT_GE(run.kv_bytes, (entries - 1) * heads * entry_bytes) << p.name;
  }
  // Measured 0.061 for razor against 0.152, 0.515 and 0.565: asserted with a margin of 20%+.
  EXPECT_LT(error["razor"] * 2, error["razor_no_compensation"]);
  EXPECT_LT(error["razor"] * 6, error["random_heads"]);
  EXPECT_LT(error["razor"] * 6, error["streaming_llm"]);
}

TEST(RazorkvHarness, BudgetsThatAPolicyCannotMeetAreErrors) {
  const suite& s = synthetic_suite();
  const razorkv::needle_task task = razorkv::make_needle_task({256, 0.5, 2, 64, 1, 4.0});
  const razorkv::planted_prompt input(s.model, task);
  const auto& prompt = input.prompt();
  RAZORKV_EXPECT_ERROR(
      razorkv::run_policy(razorkv::razor_policy("razor", s.plan), prompt,
                          razorkv::memory_budget::entries_per_head(40)),
      kInvalidArgument,
      "the budget (40 entries per head) cannot hold the plan's 10 retrieval groups");
  RAZORKV_EXPECT_ERROR(
      razorkv::run_policy(razorkv::snapkv_policy(), prompt,
                          razorkv::memory_budget::entries_per_head(20)),
      kInvalidArgument,
      "the budget (20 entries per head) is smaller than the observation window (32)");
  razorkv::snapkv_config long_window;
  long_window.window = 300;
  RAZORKV_EXPECT_ERROR(razorkv::run_policy(razorkv::snapkv_policy(long_window), prompt,
                                           razorkv::memory_budget::fraction_of_full(0.5)),
                       kInvalidArgument, "window (300) is longer than the prompt (256 tokens)");
  RAZORKV_EXPECT_ERROR(razorkv::run_policy(razorkv::streaming_llm_policy(), prompt,
                                           razorkv::memory_budget::entries_per_head(4)),
                       kInvalidArgument, "smaller than sinks (4) + a recent window of at least 1");
  RAZORKV_EXPECT_ERROR(razorkv::run_policy(razorkv::streaming_llm_policy(), prompt,
                                           razorkv::memory_budget::fraction_of_full(64)),
                       kInvalidArgument, "fraction_of_full (64) must be in (0, 1]");
  RAZORKV_EXPECT_ERROR(razorkv::run_policy(razorkv::h2o_policy({}, 300), prompt,
                                           razorkv::memory_budget::entries_per_head(64)),
                       kInvalidArgument, "observed_queries (300) must be in [0, 256]");
}

}  // namespace
