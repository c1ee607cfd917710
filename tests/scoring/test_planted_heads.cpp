// The scorers on synthetic layers with planted heads: each planted echo or induction head is
// ranked first by its own score, other kinds score low, and a uniform head scores its
// analytic value.
#include <gtest/gtest.h>

#include <razorkv/scoring/dense_scorer.hpp>
#include <razorkv/scoring/streaming_scorer.hpp>
#include <razorkv/synthetic/planted_heads.hpp>

#include <algorithm>
#include <vector>

#include "scoring/scoring_support.hpp"
#include "support/expect_error.hpp"

namespace {

using razorkv::head_kind;
using razorkv::index_t;

razorkv::probe make_probe(index_t p, index_t r) {
  razorkv::probe_config c;
  c.num_random_tokens = p;
  c.repeats = r;
  c.max_id = 32000;
  c.bos_id = 1;
  c.seed = 3;
  return razorkv::probe(c);
}

razorkv::planted_layer_config suite_config() {
  razorkv::planted_layer_config config;
  config.num_kv_heads = 2;
  config.head_dim = 128;
  config.seed = 9;
  config.query_heads = {
      {{{head_kind::kEcho, 12.0}}, 0.0},
      {{{head_kind::kInduction, 12.0}}, 0.0},
      {{{head_kind::kPreviousToken, 12.0}}, 0.0},
      {{{head_kind::kLocal, 8.0}}, 0.0},
      {{{head_kind::kSink, 8.0}}, 0.0},
      {{{head_kind::kUniform, 0.0}}, 0.0},
      {{{head_kind::kEcho, 5.0}, {head_kind::kInduction, 7.0}}, 0.0},
      {{{head_kind::kInduction, 10.0}, {head_kind::kLocal, 3.0}}, 0.3},
  };
  return config;
}

TEST(RazorkvPlantedHeads, ScorersRankPlantedHeadsFirst) {
  const auto probe = make_probe(64, 4);
  const auto layer = razorkv::make_planted_layer(probe, suite_config());
  const auto scores = razorkv::score_from_queries_keys(probe, layer.query_view(), layer.key_view());
  const auto& echo = scores.echo;
  const auto& induction = scores.induction;
  // The pure echo head leads on echo; the pure induction head leads on induction.
  EXPECT_EQ(std::max_element(echo.begin(), echo.end()) - echo.begin(), 0);
  EXPECT_EQ(std::max_element(induction.begin(), induction.end()) - induction.begin(), 1);
  EXPECT_GT(echo[0], 0.5);
  EXPECT_GT(induction[1], 0.5);
  // Mixtures carry both; noisy induction stays well above the local kinds.
  EXPECT_GT(echo[6], 0.05);
  EXPECT_GT(induction[6], 0.3);
  EXPECT_GT(induction[7], 0.3);
  for (std::size_t h : {2u, 3u, 4u}) {
    EXPECT_LT(echo[h], 0.05) << razorkv::head_kind_name(
        suite_config().query_heads[h].components[0].first);
    EXPECT_LT(induction[h], 0.05) << razorkv::head_kind_name(
        suite_config().query_heads[h].components[0].first);
  }
  // A uniform head reads every earlier copy with weight 1/(i + 1).
  double expected = 0.0;
  for (index_t p = 64; p < 256; ++p)
    expected += static_cast<double>(p / 64) / static_cast<double>(p + 2);
  expected /= 192.0;
  EXPECT_NEAR(echo[5], expected, 1e-5 * expected);
  EXPECT_NEAR(induction[5], expected, 1e-5 * expected);

  // The dense scorer on the softmax of the same Q/K agrees.
  const auto probs = razorkv_test::reference_probabilities(layer.query_view(), layer.key_view(),
                                                           1.0 / std::sqrt(128.0));
  const auto dense = razorkv::score_from_probabilities(probe, probs.data(), 8, probe.length());
  for (std::size_t h = 0; h < echo.size(); ++h) {
    EXPECT_NEAR(echo[h], dense.echo[h], 1e-5 * dense.echo[h] + 1e-12);
    EXPECT_NEAR(induction[h], dense.induction[h], 1e-5 * dense.induction[h] + 1e-12);
  }
}

TEST(RazorkvPlantedHeads, BadConfigIsANamedError) {
  const auto probe = make_probe(8, 2);
  auto config = suite_config();
  config.num_kv_heads = 3;
  RAZORKV_EXPECT_ERROR(razorkv::make_planted_layer(probe, config), kShapeMismatch,
                       "query_heads.size() (8)");
  config = suite_config();
  config.head_dim = 8;
  RAZORKV_EXPECT_ERROR(razorkv::make_planted_layer(probe, config), kInvalidArgument,
                       "head_dim (8)");
}

}  // namespace
