// Tests of the attention weights decode hands back (attention_weights): equal to the double
// reference over every dtype, ragged heads, log-weighted spans, GQA, multi-token causal masks and
// split tasks; outputs unchanged bit for bit by asking for them; batch and errors.
#include <gtest/gtest.h>

#include <razorkv/attention/decode.hpp>
#include <razorkv/attention/reference.hpp>
#include <razorkv/cache/dense_cache.hpp>
#include <razorkv/compress/razor_cache.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;

// Largest |kernel - reference| over every weight, and checks the shape the weights report.
double max_weight_error(const razorkv::attention_weights& weights,
                        const std::vector<std::vector<double>>& want, index_t tokens,
                        index_t query_heads) {
  EXPECT_EQ(weights.tokens(), tokens);
  EXPECT_EQ(weights.num_query_heads(), query_heads);
  double worst = 0;
  for (index_t t = 0; t < tokens; ++t) {
    for (index_t h = 0; h < query_heads; ++h) {
      const std::vector<double>& row = want[static_cast<std::size_t>(t * query_heads + h)];
      EXPECT_EQ(weights.entries(h / weights.group()), static_cast<index_t>(row.size()));
      const float* got = weights.query(t, h);
      for (std::size_t e = 0; e < row.size(); ++e)
        worst = std::max(worst, std::abs(static_cast<double>(got[e]) - row[e]));
    }
  }
  return worst;
}

template <class T>
class DecodeWeights : public ::testing::Test {};
TYPED_TEST_SUITE(DecodeWeights, razorkv_test::storage_dtypes);

// Heads of different lengths made of padded spans, one of them a weighted single entry (a
// compensation token of 37 tokens); every head length around the kernel's 64-row block.
TYPED_TEST(DecodeWeights, EqualTheReferenceOverRaggedSpansGqaMasksAndSplits) {
  using T = TypeParam;
  for (const std::uint64_t seed : razorkv_test::test_seeds(41)) {
    std::mt19937_64 rng(seed);
    for (const index_t dim : {index_t{5}, index_t{64}, index_t{128}}) {
      for (const index_t group : {index_t{1}, index_t{3}, index_t{8}}) {
        const index_t kv_heads = 3, query_heads = kv_heads * group;
        razorkv_test::span_list_cache<T> source(kv_heads, dim);
        const index_t lengths[3][3] = {{4, 1, 60}, {63, 1, 130}, {1, 1, 1}};
        for (index_t h = 0; h < kv_heads; ++h) {
          for (index_t s = 0; s < 3; ++s) {
            const index_t rows = lengths[h][s];
            const auto n = static_cast<std::size_t>(rows * dim);
            const std::vector<T> k = razorkv_test::random_values<T>(n, rng),
                                 v = razorkv_test::random_values<T>(n, rng);
            source.add_span(h, k.data(), v.data(), rows, s == 1 ? std::log(37.0f) : 0.0f,
                            /*padding=*/s);
          }
        }
        for (const index_t tokens : {index_t{1}, index_t{3}}) {
          for (const index_t per_task : {index_t{0}, index_t{50}}) {
            const std::vector<float> queries = razorkv_test::random_values<float>(
                static_cast<std::size_t>(tokens * query_heads * dim), rng);
            const auto q = layer_view<const float>::nhd(queries.data(), tokens, query_heads, dim);
            std::vector<float> out(queries.size()), plain(queries.size());
            razorkv::attention_options options;
            options.max_entries_per_task = per_task;
            razorkv::attention_weights weights;
            razorkv::decode_attention_multi(
                source, 0, q, layer_view<float>::nhd(out.data(), tokens, query_heads, dim), weights,
                options);
            razorkv::decode_attention_multi(
                source, 0, q, layer_view<float>::nhd(plain.data(), tokens, query_heads, dim),
                options);
            const auto want = razorkv::reference::attention_weights_multi(source, 0, q);
            EXPECT_LE(max_weight_error(weights, want, tokens, query_heads), 2e-6)
                << "seed " << seed << " dim " << dim << " group " << group << " tokens " << tokens
                << " per task " << per_task;
            // Asking for the weights changes no output bit.
            EXPECT_EQ(out, plain);
            // A query's weights sum to one; the causal mask hides the newer new tokens exactly.
            for (index_t h = 0; h < query_heads; ++h) {
              const index_t entries = weights.entries(h / group);
              for (index_t t = 0; t < tokens; ++t) {
                const float* w = weights.query(t, h);
                double total = 0;
                for (index_t e = 0; e < entries; ++e) total += w[e];
                EXPECT_NEAR(total, 1.0, 1e-5);
                for (index_t e = entries - tokens + 1 + t; e < entries; ++e) EXPECT_EQ(w[e], 0.0f);
              }
            }
          }
        }
      }
    }
  }
}

TEST(DecodeWeights, ACompensationTokenWeighsAsItsCount) {
  // A bounded razor head of window 4 whose compensation token holds the 100 dropped tokens: with
  // every key equal, each of the 100 + sinks + window tokens gets the same share, so the
  // compensation entry gets 100 shares.
  const index_t dim = 8, prompt = 110;
  razorkv::head_plan plan(razorkv::model_shape{1, 2, 1, dim});
  razorkv::razor_config config;
  config.sinks = 6;
  config.fixed_window = 4;
  razorkv::razor_kv_cache<float> cache(plan, config);
  std::vector<float> kv(static_cast<std::size_t>(prompt * dim), 0.5f);
  const auto view = layer_view<const float>::nhd(kv.data(), prompt, 1, dim);
  cache.compress_layer(0, view, view);
  ASSERT_EQ(cache.compensation(0, 0).count, 100);
  const std::vector<float> queries(static_cast<std::size_t>(2 * dim), 1.0f);
  std::vector<float> out(queries.size());
  razorkv::attention_weights weights;
  razorkv::decode_attention(cache, 0, razorkv::matrix_view<const float>(queries.data(), 2, dim),
                            razorkv::matrix_view<float>(out.data(), 2, dim), weights);
  ASSERT_EQ(weights.entries(0), 6 + 1 + 4);
  for (index_t h = 0; h < 2; ++h) {
    const float* w = weights.query(0, h);
    for (index_t e = 0; e < 11; ++e)
      EXPECT_NEAR(w[e], (e == 6 ? 100.0 : 1.0) / prompt, 1e-6) << "entry " << e;
  }
}

TEST(DecodeWeights, BatchReportsEachSequenceAsAlone) {
  std::mt19937_64 rng(43);
  const index_t kv_heads = 2, query_heads = 4, dim = 32;
  std::vector<razorkv::dense_kv_cache<float>> caches;
  for (const index_t tokens : {index_t{70}, index_t{5}, index_t{300}}) {
    caches.emplace_back(1, kv_heads, dim);
    const auto n = static_cast<std::size_t>(tokens * kv_heads * dim);
    const std::vector<float> k = razorkv_test::random_values<float>(n, rng),
                             v = razorkv_test::random_values<float>(n, rng);
    caches.back().append(0, layer_view<const float>::nhd(k.data(), tokens, kv_heads, dim),
                         layer_view<const float>::nhd(v.data(), tokens, kv_heads, dim));
  }
  const std::vector<float> queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(3 * query_heads * dim), rng);
  const auto q = layer_view<const float>::nhd(queries.data(), 3, query_heads, dim);
  std::vector<float> out(queries.size());
  const auto o = layer_view<float>::nhd(out.data(), 3, query_heads, dim);
  const razorkv::dense_kv_cache<float>* pointers[] = {&caches[0], &caches[1], &caches[2]};
  razorkv::attention_weights first, last;
  razorkv::attention_weights* wanted[] = {&first, nullptr, &last};
  razorkv::attention_options options;
  options.max_entries_per_task = 64;  // the long sequence is split
  razorkv::decode_attention_batch(pointers, 3, 0, q, o, wanted, options);
  for (const index_t b : {index_t{0}, index_t{2}}) {
    razorkv::attention_weights alone;
    std::vector<float> alone_out(static_cast<std::size_t>(query_heads * dim));
    razorkv::decode_attention_multi(caches[static_cast<std::size_t>(b)], 0, q.middle_tokens(b, 1),
                                    layer_view<float>::nhd(alone_out.data(), 1, query_heads, dim),
                                    alone);
    const razorkv::attention_weights& got = b == 0 ? first : last;
    for (index_t h = 0; h < kv_heads; ++h) {
      const razorkv::matrix_view<const float> x = got.kv_head(h), y = alone.kv_head(h);
      ASSERT_EQ(x.rows(), y.rows());
      ASSERT_EQ(x.cols(), y.cols());
      for (index_t r = 0; r < x.rows(); ++r) {
        for (index_t e = 0; e < x.cols(); ++e) EXPECT_NEAR(x(r, e), y(r, e), 1e-6);
      }
    }
  }
  // One object for two sequences would be overwritten mid-call: an error, nothing written.
  razorkv::attention_weights* twice[] = {&first, nullptr, &first};
  const std::vector<float> before = out;
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention_batch(pointers, 3, 0, q, o, twice),
                       kInvalidArgument, "weights[2] is weights[0]; each sequence needs its own");
  EXPECT_EQ(out, before);
  EXPECT_EQ(first.entries(0), 70);
}

TEST(DecodeWeights, AFailedDecodeLeavesTheWeightsAsTheyWere) {
  std::mt19937_64 rng(44);
  const index_t dim = 16;
  razorkv::dense_kv_cache<float> cache(1, 1, dim);
  const std::vector<float> kv =
      razorkv_test::random_values<float>(static_cast<std::size_t>(9 * dim), rng);
  cache.append(0, layer_view<const float>::nhd(kv.data(), 9, 1, dim),
               layer_view<const float>::nhd(kv.data(), 9, 1, dim));
  std::vector<float> q(static_cast<std::size_t>(2 * dim), 0.0f), out(q.size());
  razorkv::attention_weights weights;
  razorkv::decode_attention(cache, 0, razorkv::matrix_view<const float>(q.data(), 2, dim),
                            razorkv::matrix_view<float>(out.data(), 2, dim), weights);
  EXPECT_FLOAT_EQ(weights.query(0, 1)[8], 1.0f / 9);
  q[3] = NAN;
  razorkv::attention_options checked;
  checked.check_finite = true;
  RAZORKV_EXPECT_ERROR(
      razorkv::decode_attention(cache, 0, razorkv::matrix_view<const float>(q.data(), 2, dim),
                                razorkv::matrix_view<float>(out.data(), 2, dim), weights, checked),
      kInvalidArgument, "query (nan) at token 0 head 0 dim 3 is not finite");
  EXPECT_EQ(weights.tokens(), 1);
  EXPECT_FLOAT_EQ(weights.query(0, 1)[8], 1.0f / 9);
  RAZORKV_EXPECT_ERROR(weights.query(1, 0), kOutOfRange, "outside [1, 2)");
  RAZORKV_EXPECT_ERROR(weights.kv_head(1), kOutOfRange, "kv head (1) outside [0, 1)");
  RAZORKV_EXPECT_ERROR(
      weights.reset(1, 3, {4, 4}), kShapeMismatch,
      "num_query_heads (3) is not a positive multiple of the number of kv heads (2)");
  RAZORKV_EXPECT_ERROR(weights.reset(0, 2, {4}), kInvalidArgument, "tokens (0) must be > 0");
}

}  // namespace
