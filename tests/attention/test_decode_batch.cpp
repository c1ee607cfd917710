// Tests of decode_attention_batch: a batch of independent sequences (one razor or dense cache
// each, of different lengths) gives, bit for bit, what one decode call per sequence gives.
#include <gtest/gtest.h>

#include <razorkv/attention/decode.hpp>
#include <razorkv/compress/razor_cache.hpp>

#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;
using razorkv::matrix_view;

constexpr index_t kKvHeads = 2, kQueryHeads = 8, kDim = 64;

template <class T>
razorkv::dense_kv_cache<T> random_dense(index_t tokens, std::mt19937_64& rng) {
  razorkv::dense_kv_cache<T> cache(1, kKvHeads, kDim);
  const auto k =
      razorkv_test::random_values<T>(static_cast<std::size_t>(tokens * kKvHeads * kDim), rng);
  const auto v = razorkv_test::random_values<T>(k.size(), rng);
  cache.append(0, layer_view<const T>::nhd(k.data(), tokens, kKvHeads, kDim),
               layer_view<const T>::nhd(v.data(), tokens, kKvHeads, kDim));
  return cache;
}

template <class T>
class RazorkvDecodeBatch : public ::testing::Test {};
TYPED_TEST_SUITE(RazorkvDecodeBatch, razorkv_test::storage_dtypes);

TYPED_TEST(RazorkvDecodeBatch, EqualsOneCallPerSequence) {
  using T = TypeParam;
  std::mt19937_64 rng(31);
  razorkv::head_plan plan(razorkv::model_shape{1, kQueryHeads, kKvHeads, kDim});
  plan.set_retrieval(0, 1, true);
  razorkv::razor_config config;
  config.s0 = 40;
  std::vector<razorkv::razor_kv_cache<T>> caches;
  for (index_t tokens : {300, 45, 1, 1200, 77}) {
    config.sinks = std::min<index_t>(4, tokens);
    caches.push_back(razorkv::compress_cache(random_dense<T>(tokens, rng), plan, config));
  }
  const index_t batch = static_cast<index_t>(caches.size());
  // Queries with a padded token stride, output in place over them.
  const index_t stride = kQueryHeads * kDim + 3;
  std::vector<float> queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(batch * stride), rng);
  std::vector<float> one_by_one(static_cast<std::size_t>(batch * kQueryHeads * kDim));
  for (index_t b = 0; b < batch; ++b) {
    razorkv::decode_attention(
        caches[static_cast<std::size_t>(b)], 0,
        matrix_view<const float>(queries.data() + b * stride, kQueryHeads, kDim),
        matrix_view<float>(one_by_one.data() + b * kQueryHeads * kDim, kQueryHeads, kDim));
  }
  razorkv::decode_attention_batch(
      caches, 0, layer_view<const float>::nhd(queries.data(), batch, kQueryHeads, kDim, stride),
      layer_view<float>::nhd(queries.data(), batch, kQueryHeads, kDim, stride));
  for (index_t b = 0; b < batch; ++b) {
    for (index_t i = 0; i < kQueryHeads * kDim; ++i) {
      ASSERT_EQ(queries[static_cast<std::size_t>(b * stride + i)],
                one_by_one[static_cast<std::size_t>(b * kQueryHeads * kDim + i)])
          << "sequence " << b << " element " << i;
    }
  }
}

TEST(RazorkvDecodeBatch, DenseCachesThroughPointers) {
  std::mt19937_64 rng(32);
  const auto a = random_dense<float>(10, rng), b = random_dense<float>(5000, rng);
  const razorkv::dense_kv_cache<float>* caches[] = {&a, &b};
  const auto queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(2 * kQueryHeads * kDim), rng);
  std::vector<float> out(queries.size()), single(queries.size());
  razorkv::decode_attention_batch(
      caches, 2, 0, layer_view<const float>::nhd(queries.data(), 2, kQueryHeads, kDim),
      layer_view<float>::nhd(out.data(), 2, kQueryHeads, kDim));
  for (index_t s = 0; s < 2; ++s) {
    razorkv::decode_attention(
        *caches[s], 0,
        matrix_view<const float>(queries.data() + s * kQueryHeads * kDim, kQueryHeads, kDim),
        matrix_view<float>(single.data() + s * kQueryHeads * kDim, kQueryHeads, kDim));
  }
  EXPECT_EQ(out, single);
}

// Distinct caches from distinct threads at once (append, then decode, each thread its own
// sequence) give what the same steps give one sequence at a time.
TEST(RazorkvDecodeBatch, DistinctCachesOnDistinctThreads) {
  constexpr int kThreads = 4;
  constexpr index_t kSteps = 20;
  razorkv::head_plan plan(razorkv::model_shape{1, kQueryHeads, kKvHeads, kDim});
  plan.set_retrieval(0, 0, true);
  razorkv::razor_config config;
  config.s0 = 32;
  config.decode = razorkv::decode_mode::kBounded;
  std::mt19937_64 rng(34);
  std::vector<std::vector<float>> step_kv, step_q;
  std::vector<razorkv::dense_kv_cache<float>> prefills;
  for (int s = 0; s < kThreads; ++s) {
    prefills.push_back(random_dense<float>(200 + 50 * s, rng));
    step_kv.push_back(razorkv_test::random_values<float>(
        static_cast<std::size_t>(kSteps * kKvHeads * kDim), rng));
    step_q.push_back(razorkv_test::random_values<float>(
        static_cast<std::size_t>(kSteps * kQueryHeads * kDim), rng));
  }
  const auto run = [&](int s, std::vector<float>& out) {
    razorkv::razor_kv_cache<float> cache =
        razorkv::compress_cache(prefills[static_cast<std::size_t>(s)], plan, config);
    out.assign(static_cast<std::size_t>(kSteps * kQueryHeads * kDim), 0.0f);
    razorkv::attention_options serial;  // no OpenMP fan-out inside the caller's threads
    serial.parallel_for = [](index_t count, const std::function<void(index_t)>& body) {
      for (index_t i = 0; i < count; ++i) body(i);
    };
    for (index_t t = 0; t < kSteps; ++t) {
      const float* kv = step_kv[static_cast<std::size_t>(s)].data() + t * kKvHeads * kDim;
      cache.append(0, layer_view<const float>::nhd(kv, 1, kKvHeads, kDim),
                   layer_view<const float>::nhd(kv, 1, kKvHeads, kDim));
      razorkv::decode_attention(
          cache, 0,
          matrix_view<const float>(
              step_q[static_cast<std::size_t>(s)].data() + t * kQueryHeads * kDim, kQueryHeads,
              kDim),
          matrix_view<float>(out.data() + t * kQueryHeads * kDim, kQueryHeads, kDim), serial);
    }
  };
  std::vector<std::vector<float>> alone(kThreads), together(kThreads);
  for (int s = 0; s < kThreads; ++s) run(s, alone[static_cast<std::size_t>(s)]);
  std::vector<std::thread> threads;
  for (int s = 0; s < kThreads; ++s)
    threads.emplace_back([&, s] { run(s, together[static_cast<std::size_t>(s)]); });
  for (auto& t : threads) t.join();
  for (int s = 0; s < kThreads; ++s)
    EXPECT_EQ(alone[static_cast<std::size_t>(s)], together[static_cast<std::size_t>(s)])
        << "sequence " << s;
}

// Decode only reads a cache: several threads may decode one cache at once (no writer meanwhile).
TEST(RazorkvDecodeBatch, OneCacheDecodedByManyThreadsAtOnce) {
  constexpr int kThreads = 4;
  std::mt19937_64 rng(35);
  razorkv::head_plan plan(razorkv::model_shape{1, kQueryHeads, kKvHeads, kDim});
  plan.set_retrieval(0, 1, true);
  razorkv::razor_config config;
  config.s0 = 16;
  const razorkv::razor_kv_cache<float> cache =
      razorkv::compress_cache(random_dense<float>(300, rng), plan, config);
  const auto queries = razorkv_test::random_values<float>(
      static_cast<std::size_t>(kThreads * kQueryHeads * kDim), rng);
  razorkv::attention_options serial;
  serial.parallel_for = [](index_t count, const std::function<void(index_t)>& body) {
    for (index_t i = 0; i < count; ++i) body(i);
  };
  const auto decode = [&](int s, std::vector<float>& out) {
    out.assign(static_cast<std::size_t>(kQueryHeads * kDim), 0.0f);
    razorkv::decode_attention(
        cache, 0,
        matrix_view<const float>(queries.data() + s * kQueryHeads * kDim, kQueryHeads, kDim),
        matrix_view<float>(out.data(), kQueryHeads, kDim), serial);
  };
  std::vector<std::vector<float>> alone(kThreads), together(kThreads);
  for (int s = 0; s < kThreads; ++s) decode(s, alone[static_cast<std::size_t>(s)]);
  std::vector<std::thread> threads;
  for (int s = 0; s < kThreads; ++s)
    threads.emplace_back([&, s] { decode(s, together[static_cast<std::size_t>(s)]); });
  for (auto& t : threads) t.join();
  for (int s = 0; s < kThreads; ++s)
    EXPECT_EQ(alone[static_cast<std::size_t>(s)], together[static_cast<std::size_t>(s)]);
}

TEST(RazorkvDecodeBatch, BadBatches) {
  std::mt19937_64 rng(33);
  const auto a = random_dense<float>(10, rng);
  const razorkv::dense_kv_cache<float> other(1, 1, kDim, 4);
  std::vector<float> q(static_cast<std::size_t>(2 * kQueryHeads * kDim)), out(q.size());
  const auto qv = layer_view<const float>::nhd(q.data(), 2, kQueryHeads, kDim);
  const auto ov = layer_view<float>::nhd(out.data(), 2, kQueryHeads, kDim);
  const razorkv::dense_kv_cache<float>* with_null[] = {&a, nullptr};
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention_batch(with_null, 2, 0, qv, ov), kInvalidArgument,
                       "caches[1] is null");
  const razorkv::dense_kv_cache<float>* three[] = {&a, &a, &a};
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention_batch(three, 3, 0, qv, ov), kShapeMismatch,
                       "must equal batch (3)");
  const razorkv::dense_kv_cache<float>* mixed[] = {&a, &other};
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention_batch(mixed, 2, 0, qv, ov), kShapeMismatch,
                       "caches[1] has 1 kv heads");
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention_batch(with_null, 0, 0, qv, ov), kInvalidArgument,
                       "batch (0)");
  const std::vector<razorkv::dense_kv_cache<float>> none;
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention_batch(none, 0, qv, ov), kInvalidArgument,
                       "caches is empty");
  // Nothing was written.
  for (float x : out) ASSERT_EQ(x, 0.0f);
}

}  // namespace
