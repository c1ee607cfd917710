// H2O: heavy hitters chosen from the prompt's attention mass, the window pushing tokens into
// (or past) them during decode, exact accumulated attention, a bound that never moves.
#include <gtest/gtest.h>

#include <razorkv/razorkv.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;

razorkv::attention_mass mass_of(const std::vector<double>& values) {
  razorkv::attention_mass mass;
  mass.num_kv_heads = 1;
  mass.tokens = static_cast<index_t>(values.size());
  mass.values = values;
  return mass;
}

TEST(RazorkvH2o, HandWorkedPromptAndDecode) {
  // 6 prompt tokens, budget 4 = 2 heavy hitters + 2 recent; 1 kv head of dim 2 read by 2 query
  // heads.
  const index_t dim = 2;
  std::vector<float> kv(static_cast<std::size_t>(10 * dim));
  for (std::size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<float>(i);
  const auto tokens = layer_view<const float>::nhd(kv.data(), 10, 1, dim);
  razorkv::h2o_config config;
  config.recent = 2;
  razorkv::h2o_kv_cache<float> cache(1, 1, dim, 4, config);
  EXPECT_EQ(cache.heavy_slots(), 2);
  cache.compress_layer(0, tokens.middle_tokens(0, 6), tokens.middle_tokens(0, 6),
                       mass_of({0.5, 0.1, 0.4, 0.05, 0.45, 0.01}));
  // Heavy hitters: the two largest of positions 0..3 (0 and 2); window: 4 and 5.
  EXPECT_EQ(cache.positions(0, 0), (std::vector<index_t>{0, 2, 4, 5}));
  EXPECT_EQ(cache.scores(0, 0), (std::vector<double>{0.5, 0.4, 0.45, 0.01}));

  // Token 6 pushes 4 (0.45) out of the window; it beats the weakest heavy hitter, 2 (0.4).
  cache.append(0, tokens.middle_tokens(6, 1), tokens.middle_tokens(6, 1));
  EXPECT_EQ(cache.positions(0, 0), (std::vector<index_t>{0, 4, 5, 6}));
  // Two zero queries attend uniformly: + 2 x 1/4 to every entry.
  const std::vector<float> zero_queries(static_cast<std::size_t>(2 * dim), 0.0f);
  cache.observe(0, layer_view<const float>::nhd(zero_queries.data(), 1, 2, dim));
  const std::vector<double> scores = cache.scores(0, 0), want = {1.0, 0.95, 0.51, 0.5};
  ASSERT_EQ(scores.size(), want.size());
  for (std::size_t e = 0; e < want.size(); ++e)
    EXPECT_NEAR(scores[e], want[e], 1e-15) << "entry " << e;
  // Token 7 pushes 5 (0.51) out; the weakest heavy hitter has 0.95, so 5 is dropped.
  cache.append(0, tokens.middle_tokens(7, 1), tokens.middle_tokens(7, 1));
  EXPECT_EQ(cache.positions(0, 0), (std::vector<index_t>{0, 4, 6, 7}));
  // The K/V rows are those of the positions, newest last.
  std::vector<index_t> seen;
  for (index_t s = 0; s < cache.num_spans(0, 0); ++s) {
    const razorkv::kv_span<float> span = cache.span(0, 0, s);
    for (index_t r = 0; r < span.length(); ++r)
      seen.push_back(static_cast<index_t>(span.keys.typed()(r, 0)) / dim);
  }
  EXPECT_EQ(seen, (std::vector<index_t>{0, 4, 6, 7}));
  EXPECT_EQ(cache.num_tokens(0), 8);
}

TEST(RazorkvH2o, ObserveAddsExactlyTheDecodeSoftmax) {
  const index_t dim = 16, kv_heads = 2, query_heads = 6, prompt = 50;
  std::mt19937_64 rng(9);
  const auto keys =
      razorkv_test::random_values<float>(static_cast<std::size_t>(60 * kv_heads * dim), rng);
  const auto queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(60 * query_heads * dim), rng);
  const auto k = layer_view<const float>::nhd(keys.data(), 60, kv_heads, dim);
  const auto q = layer_view<const float>::nhd(queries.data(), 60, query_heads, dim);
  razorkv::h2o_kv_cache<float> cache(1, kv_heads, dim, 20);
  cache.compress_layer(
      0, k.middle_tokens(0, prompt), k.middle_tokens(0, prompt),
      razorkv::observed_attention(q.middle_tokens(0, prompt), k.middle_tokens(0, prompt)));
  for (index_t t = prompt; t < 60; ++t) {
    cache.append(0, k.middle_tokens(t, 1), k.middle_tokens(t, 1));
    std::vector<std::vector<double>> before;
    for (index_t h = 0; h < kv_heads; ++h) before.push_back(cache.scores(0, h));
    cache.observe(0, q.middle_tokens(t, 1));
    for (index_t h = 0; h < kv_heads; ++h) {
      // What the group's three query heads pay each entry, computed here from the spans.
      std::vector<double> added(before[static_cast<std::size_t>(h)].size(), 0.0);
      for (index_t qh = h * 3; qh < h * 3 + 3; ++qh) {
        std::vector<double> logits;
        for (index_t s = 0; s < cache.num_spans(0, h); ++s) {
          const razorkv::kv_span<float> span = cache.span(0, h, s);
          for (index_t r = 0; r < span.length(); ++r) {
            double dot = 0;
            for (index_t c = 0; c < dim; ++c)
              dot += static_cast<double>(q.token(t)(qh, c)) * span.keys.typed()(r, c);
            logits.push_back(dot / 4.0);
          }
        }
        double total = 0;
        for (double x : logits) total += std::exp(x);
        for (std::size_t e = 0; e < logits.size(); ++e) added[e] += std::exp(logits[e]) / total;
      }
      const std::vector<double> after = cache.scores(0, h);
      ASSERT_EQ(after.size(), added.size());
      for (std::size_t e = 0; e < after.size(); ++e) {
        EXPECT_NEAR(after[e] - before[static_cast<std::size_t>(h)][e], added[e],
                    1e-6);  // float logits
      }
      EXPECT_EQ(razorkv::num_entries(cache, 0, h), 20);
    }
  }
  EXPECT_EQ(razorkv::held_kv_bytes(cache), kv_heads * 20 * 2 * dim * 4);
}

TEST(RazorkvH2o, ObservingSeveralTokensAddsTheirCausallyMaskedWeights) {
  const index_t dim = 16, kv_heads = 2, query_heads = 6, prompt = 40, step = 3, total = 43;
  std::mt19937_64 rng(12);
  const auto keys =
      razorkv_test::random_values<float>(static_cast<std::size_t>(total * kv_heads * dim), rng);
  const auto queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(total * query_heads * dim), rng);
  const auto k = layer_view<const float>::nhd(keys.data(), total, kv_heads, dim);
  const auto q = layer_view<const float>::nhd(queries.data(), total, query_heads, dim);
  razorkv::h2o_kv_cache<float> cache(1, kv_heads, dim, 20);
  cache.compress_layer(
      0, k.middle_tokens(0, prompt), k.middle_tokens(0, prompt),
      razorkv::observed_attention(q.middle_tokens(prompt - 8, 8), k.middle_tokens(0, prompt)));
  cache.append(0, k.middle_tokens(prompt, step), k.middle_tokens(prompt, step));
  std::vector<std::vector<double>> before;
  for (index_t h = 0; h < kv_heads; ++h) before.push_back(cache.scores(0, h));
  std::vector<float> out(static_cast<std::size_t>(step * query_heads * dim));
  razorkv::attention_weights weights;
  const auto new_queries = q.middle_tokens(prompt, step);
  razorkv::decode_attention_multi(
      cache, 0, new_queries, layer_view<float>::nhd(out.data(), step, query_heads, dim), weights);
  razorkv::observe_decode(cache, 0, weights);
  const auto want = razorkv::reference::attention_weights_multi(cache, 0, new_queries);
  const index_t group = query_heads / kv_heads;
  for (index_t h = 0; h < kv_heads; ++h) {
    const std::vector<double> after = cache.scores(0, h);
    const auto entries = static_cast<index_t>(after.size());
    for (index_t e = 0; e < entries; ++e) {
      double added = 0;
      for (index_t t = 0; t < step; ++t) {
        for (index_t g = 0; g < group; ++g)
          added += want[static_cast<std::size_t>(t * query_heads + h * group + g)]
                       [static_cast<std::size_t>(e)];
      }
      EXPECT_NEAR(after[static_cast<std::size_t>(e)] -
                      before[static_cast<std::size_t>(h)][static_cast<std::size_t>(e)],
                  added, 1e-6)
          << "kv head " << h << " entry " << e;
    }
    // The first new token reads neither of the two after it, the second not the last.
    for (index_t g = 0; g < group; ++g) {
      EXPECT_EQ(weights.query(0, h * group + g)[entries - 1], 0.0f);
      EXPECT_EQ(weights.query(0, h * group + g)[entries - 2], 0.0f);
      EXPECT_EQ(weights.query(1, h * group + g)[entries - 1], 0.0f);
      EXPECT_GT(weights.query(2, h * group + g)[entries - 1], 0.0f);
    }
  }
}

TEST(RazorkvH2o, ObserveRejectsWeightsOfAnotherStep) {
  const index_t dim = 8;
  std::vector<float> kv(12 * dim, 0.5f);
  const auto view = layer_view<const float>::nhd(kv.data(), 12, 1, dim);
  razorkv::h2o_kv_cache<float> cache(1, 1, dim, 6);
  cache.compress_layer(0, view.middle_tokens(0, 10), view.middle_tokens(0, 10),
                       mass_of(std::vector<double>(10, 0.1)));
  const std::vector<float> query(static_cast<std::size_t>(dim), 1.0f);
  std::vector<float> out(query.size());
  razorkv::attention_weights weights;
  razorkv::decode_attention(cache, 0, razorkv::matrix_view<const float>(query.data(), 1, dim),
                            razorkv::matrix_view<float>(out.data(), 1, dim), weights);
  const std::vector<double> scores = cache.scores(0, 0);
  // Another kv head count, a bad value, more tokens than the window: errors, scores unchanged.
  razorkv::attention_weights other;
  other.reset(1, 2, {6, 6});
  RAZORKV_EXPECT_ERROR(cache.observe(0, other), kShapeMismatch,
                       "weights cover 2 kv heads, the cache has 1");
  razorkv::attention_weights bad = weights;
  bad.kv_head(0)(0, 2) = NAN;
  RAZORKV_EXPECT_ERROR(cache.observe(0, bad), kInvalidArgument,
                       "weight (nan) of kv head 0 row 0 entry 2 is not a finite probability");
  razorkv::attention_weights long_step;
  long_step.reset(4, 1, {6});
  RAZORKV_EXPECT_ERROR(cache.observe(0, long_step), kInvalidArgument,
                       "weights.tokens() (4) exceeds the recent window (3)");
  EXPECT_EQ(cache.scores(0, 0), scores);
  // After another append the head is the same size but holds other tokens: the same shape
  // passes the check, so the contract (observe before the next append) is the caller's. A
  // step that changed the head's size is caught.
  razorkv::h2o_kv_cache<float> growing(1, 1, dim, 12);
  growing.compress_layer(0, view.middle_tokens(0, 4), view.middle_tokens(0, 4),
                         mass_of(std::vector<double>(4, 0.1)));
  razorkv::attention_weights stale;
  razorkv::decode_attention(growing, 0, razorkv::matrix_view<const float>(query.data(), 1, dim),
                            razorkv::matrix_view<float>(out.data(), 1, dim), stale);
  growing.append(0, view.middle_tokens(4, 1), view.middle_tokens(4, 1));
  RAZORKV_EXPECT_ERROR(growing.observe(0, stale), kShapeMismatch,
                       "weights of kv head 0 cover 4 entries, the head holds 5");
  cache.observe(0, weights);
  EXPECT_NE(cache.scores(0, 0), scores);
}

TEST(RazorkvH2o, StaysWithinItsBudgetForAnyPromptLength) {
  const index_t dim = 8;
  std::mt19937_64 rng(2);
  const auto kv = razorkv_test::random_values<float>(static_cast<std::size_t>(200 * dim), rng);
  const auto view = layer_view<const float>::nhd(kv.data(), 200, 1, dim);
  for (index_t prompt : {1, 3, 7, 12, 40}) {
    razorkv::h2o_kv_cache<float> cache(1, 1, dim, 10);
    cache.compress_layer(0, view.middle_tokens(0, prompt), view.middle_tokens(0, prompt),
                         mass_of(std::vector<double>(static_cast<std::size_t>(prompt), 1.0)));
    EXPECT_EQ(razorkv::num_entries(cache, 0, 0), std::min<index_t>(prompt, 10));
    for (index_t t = prompt; t < prompt + 100; ++t) {
      cache.append(0, view.middle_tokens(t, 1), view.middle_tokens(t, 1));
      ASSERT_EQ(razorkv::num_entries(cache, 0, 0), std::min<index_t>(t + 1, 10));
      const std::vector<index_t> positions = cache.positions(0, 0);
      EXPECT_EQ(positions.back(), t) << "the newest token is the last entry";
    }
  }
}

TEST(RazorkvH2o, BadInputIsRejected) {
  razorkv::h2o_config config;
  config.recent = 12;
  RAZORKV_EXPECT_ERROR(razorkv::h2o_kv_cache<float>(1, 1, 8, 10, config), kInvalidArgument,
                       "recent (12) exceeds the budget (10 entries per head)");
  RAZORKV_EXPECT_ERROR(razorkv::h2o_kv_cache<float>(1, 1, 8, 0), kInvalidArgument,
                       "the budget (0 entries per head) must be >= 1");
  std::vector<float> kv(5 * 8, 1.0f);
  const auto view = layer_view<const float>::nhd(kv.data(), 5, 1, 8);
  razorkv::h2o_kv_cache<float> cache(1, 1, 8, 4);
  RAZORKV_EXPECT_ERROR(cache.compress_layer(0, view, view, mass_of({1, 2, 3})), kShapeMismatch,
                       "prompt_mass is [1 kv heads, 3 tokens], the prompt [1, 5]");
  RAZORKV_EXPECT_ERROR(cache.compress_layer(0, view, view, mass_of({1, 2, NAN, 4, 5})),
                       kInvalidArgument, "prompt_mass value 2 (nan) is not finite");
  RAZORKV_EXPECT_ERROR(cache.observe(0, view), kInvalidArgument, "has not been compressed yet");
  cache.compress_layer(0, view, view, mass_of({1, 2, 3, 4, 5}));
  RAZORKV_EXPECT_ERROR(cache.observe(0, view.middle_tokens(0, 3)), kInvalidArgument,
                       "queries.tokens() (3) exceeds the recent window (2)");
}

}  // namespace
