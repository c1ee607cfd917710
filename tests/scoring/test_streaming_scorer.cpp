// Tests of the streaming scorer against the dense scorer on the probabilities the same
// queries and keys produce: probe sizes, BOS, GQA groups, dtypes, ALiBi, row subsampling, and
// named errors for bad input.
#include <gtest/gtest.h>

#include <razorkv/scoring/dense_scorer.hpp>
#include <razorkv/scoring/streaming_scorer.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "scoring/scoring_support.hpp"
#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;

razorkv::probe make_probe(index_t p, index_t r, bool bos, std::uint64_t seed = 5) {
  razorkv::probe_config c;
  c.num_random_tokens = p;
  c.repeats = r;
  c.max_id = 100000;
  c.seed = seed;
  if (bos) c.bos_id = 0;
  return razorkv::probe(c);
}

// Keys: one random vector per probe id (so copies of a token have equal keys, as echo heads
// need), plus noise; queries: random. Rounded to T.
template <class T>
void random_qk(const razorkv::probe& probe, index_t q_heads, index_t kv_heads, index_t dim,
               std::mt19937_64& rng, std::vector<T>& q, std::vector<T>& k) {
  const index_t length = probe.length();
  std::normal_distribution<double> normal;
  q.resize(static_cast<std::size_t>(length * q_heads * dim));
  k.resize(static_cast<std::size_t>(length * kv_heads * dim));
  for (auto& x : q) x = static_cast<T>(static_cast<float>(1.5 * normal(rng)));
  std::vector<double> per_slot(
      static_cast<std::size_t>(probe.num_random_tokens() * kv_heads * dim));
  for (auto& x : per_slot) x = normal(rng);
  const index_t offset = probe.has_bos() ? 1 : 0;
  for (index_t t = 0; t < length; ++t) {
    const index_t slot = t < offset ? 0 : (t - offset) % probe.num_random_tokens();
    for (index_t i = 0; i < kv_heads * dim; ++i) {
      k[static_cast<std::size_t>(t * kv_heads * dim + i)] = static_cast<T>(static_cast<float>(
          per_slot[static_cast<std::size_t>(slot * kv_heads * dim + i)] + 0.3 * normal(rng)));
    }
  }
}

void expect_close(const razorkv::layer_scores& got, const razorkv::layer_scores& want, double rel) {
  ASSERT_EQ(got.echo.size(), want.echo.size());
  for (std::size_t h = 0; h < got.echo.size(); ++h) {
    EXPECT_NEAR(got.echo[h], want.echo[h], rel * std::fabs(want.echo[h]) + 1e-12)
        << "echo, head " << h;
    EXPECT_NEAR(got.induction[h], want.induction[h], rel * std::fabs(want.induction[h]) + 1e-12)
        << "induction, head " << h;
  }
}

template <class T>
class RazorkvStreamingScorer : public ::testing::Test {};
using qk_dtypes = ::testing::Types<float, Eigen::half, Eigen::bfloat16>;
TYPED_TEST_SUITE(RazorkvStreamingScorer, qk_dtypes);

TYPED_TEST(RazorkvStreamingScorer, AgreesWithDenseScorer) {
  using T = TypeParam;
  std::mt19937_64 rng(17);
  const index_t dim = 32;
  for (index_t period : {1, 2, 7, 64}) {
    for (index_t repeats : {2, 4}) {
      for (bool bos : {false, true}) {
        for (index_t group : {1, 4, 8}) {
          SCOPED_TRACE(::testing::Message() << "P " << period << " R " << repeats << " bos " << bos
                                            << " group " << group);
          const auto probe = make_probe(period, repeats, bos);
          const index_t kv_heads = group == 8 ? 1 : 2, q_heads = kv_heads * group,
                        length = probe.length();
          std::vector<T> q, k;
          random_qk(probe, q_heads, kv_heads, dim, rng, q, k);
          const auto qv = layer_view<const T>::nhd(q.data(), length, q_heads, dim);
          const auto kv = layer_view<const T>::nhd(k.data(), length, kv_heads, dim);
          const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
          const auto probs = razorkv_test::reference_probabilities(qv, kv, scale);
          const auto dense =
              razorkv::score_from_probabilities(probe, probs.data(), q_heads, length);
          expect_close(razorkv::score_from_queries_keys(probe, qv, kv), dense, 1e-5);
        }
      }
    }
  }
}

TEST(RazorkvStreamingScorer, DefaultSizedProbeAgreesWithDenseScorer) {
  // P = 2500 (the default), two copies and a BOS: L = 5001, several tiles in both directions.
  std::mt19937_64 rng(23);
  const auto probe = make_probe(2500, 2, true);
  const index_t dim = 8, length = probe.length();
  std::vector<float> q, k;
  random_qk(probe, 1, 1, dim, rng, q, k);
  for (auto& x : q) x *= 2.0f;  // sharper attention, larger scores
  const auto qv = layer_view<const float>::nhd(q.data(), length, 1, dim);
  const auto kv = layer_view<const float>::nhd(k.data(), length, 1, dim);
  const auto probs = razorkv_test::reference_probabilities(qv, kv, 1.0 / std::sqrt(8.0));
  const auto dense = razorkv::score_from_probabilities(probe, probs.data(), 1, length);
  expect_close(razorkv::score_from_queries_keys(probe, qv, kv), dense, 1e-5);
}

TEST(RazorkvStreamingScorer, AlibiScaleAndSubsamplingAgreeWithDenseScorer) {
  std::mt19937_64 rng(29);
  const auto probe = make_probe(40, 4, true);
  const index_t dim = 16, q_heads = 4, kv_heads = 2, length = probe.length();
  std::vector<float> q, k;
  random_qk(probe, q_heads, kv_heads, dim, rng, q, k);
  const auto qv = layer_view<const float>::nhd(q.data(), length, q_heads, dim);
  const auto kv = layer_view<const float>::nhd(k.data(), length, kv_heads, dim);
  razorkv::qk_scoring_options options;
  options.scale = 0.4;
  options.alibi_slopes = {0.5, 0.125, 0.03125, 0.0};
  options.row_step = 3;
  const auto probs = razorkv_test::reference_probabilities(qv, kv, 0.4, options.alibi_slopes);
  razorkv::scoring_options dense_options;
  dense_options.row_step = 3;
  const auto dense =
      razorkv::score_from_probabilities(probe, probs.data(), q_heads, length, dense_options);
  expect_close(razorkv::score_from_queries_keys(probe, qv, kv, options), dense, 1e-5);
}

// Everything at once, in every dtype: several tiles in both directions (L = 601 > 512 columns
// and > 128 rows), GQA groups of 2, ALiBi, an explicit scale and query-row subsampling.
TYPED_TEST(RazorkvStreamingScorer, MultiTileGqaAlibiAndSubsamplingTogether) {
  using T = TypeParam;
  std::mt19937_64 rng(31);
  const auto probe = make_probe(300, 2, false);
  const index_t dim = 16, q_heads = 4, kv_heads = 2, length = probe.length();
  ASSERT_GT(length, 512);
  std::vector<T> q, k;
  random_qk(probe, q_heads, kv_heads, dim, rng, q, k);
  const auto qv = layer_view<const T>::nhd(q.data(), length, q_heads, dim);
  const auto kv = layer_view<const T>::nhd(k.data(), length, kv_heads, dim);
  razorkv::qk_scoring_options options;
  options.scale = 0.3;
  options.alibi_slopes = {0.25, 0.0625, 0.015625, 0.0};
  options.row_step = 2;
  const auto probs = razorkv_test::reference_probabilities(qv, kv, 0.3, options.alibi_slopes);
  razorkv::scoring_options dense_options;
  dense_options.row_step = 2;
  const auto dense =
      razorkv::score_from_probabilities(probe, probs.data(), q_heads, length, dense_options);
  expect_close(razorkv::score_from_queries_keys(probe, qv, kv, options), dense, 1e-5);
}

TEST(RazorkvStreamingScorer, BadInputIsANamedError) {
  const auto probe = make_probe(5, 2, false);
  const index_t length = probe.length(), dim = 4;
  std::vector<float> q(static_cast<std::size_t>(length * 4 * dim), 0.1f),
      k(static_cast<std::size_t>(length * 2 * dim), 0.2f);
  const auto qv = layer_view<const float>::nhd(q.data(), length, 4, dim);
  const auto kv = layer_view<const float>::nhd(k.data(), length, 2, dim);
  RAZORKV_EXPECT_ERROR(
      razorkv::score_from_queries_keys(
          probe, layer_view<const float>::nhd(q.data(), length - 1, 4, dim), kv),
      kShapeMismatch,
      "queries.tokens() (9) and keys.tokens() (10) must equal the probe length (10)");
  RAZORKV_EXPECT_ERROR(razorkv::score_from_queries_keys(
                           probe, layer_view<const float>::nhd(q.data(), length, 3, dim), kv),
                       kShapeMismatch, "num_query_heads (3) is not a multiple of num_kv_heads (2)");
  RAZORKV_EXPECT_ERROR(razorkv::score_from_queries_keys(
                           probe, layer_view<const float>::nhd(q.data(), length, 2, 8), kv),
                       kShapeMismatch, "queries.head_dim() (8) != keys.head_dim() (4)");
  razorkv::qk_scoring_options options;
  options.alibi_slopes = {1.0};
  RAZORKV_EXPECT_ERROR(razorkv::score_from_queries_keys(probe, qv, kv, options), kShapeMismatch,
                       "alibi_slopes has 1 entries");
  options.alibi_slopes.clear();
  options.scale = std::numeric_limits<double>::infinity();
  RAZORKV_EXPECT_ERROR(razorkv::score_from_queries_keys(probe, qv, kv, options), kInvalidArgument,
                       "scale (inf)");
  options.scale = -1.0;  // scores of the keys a head attends to least
  RAZORKV_EXPECT_ERROR(razorkv::score_from_queries_keys(probe, qv, kv, options), kInvalidArgument,
                       "score_from_queries_keys: scale (-1) must be > 0: no model attends with it");
  options.scale = 0.0;
  RAZORKV_EXPECT_ERROR(razorkv::score_from_queries_keys(probe, qv, kv, options), kInvalidArgument,
                       "scale (0) must be > 0");
  // Finite but so large that scale * q.k overflows float: an error, not NaN scores.
  const std::vector<float> huge_q(q.size(), 1e20f), huge_k(k.size(), 1e20f);
  RAZORKV_EXPECT_ERROR(razorkv::score_from_queries_keys(
                           probe, layer_view<const float>::nhd(huge_q.data(), length, 4, dim),
                           layer_view<const float>::nhd(huge_k.data(), length, 2, dim)),
                       kInvalidArgument, "its logits overflow float (scale * q.k beyond 3.4e38)");
  k[17] = std::numeric_limits<float>::quiet_NaN();
  RAZORKV_EXPECT_ERROR(razorkv::score_from_queries_keys(probe, qv, kv), kInvalidArgument,
                       "key (nan) at token 2 head 0 dim 1");
}

}  // namespace
