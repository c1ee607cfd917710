// Decode, compression and H2O's observe with their tasks on several threads at once: long heads
// split into runs of entries (flash-decoding partial states merged afterwards) and whole heads,
// on a pool of worker threads and, in the OpenMP build (razorkv_openmp_tests), on OpenMP's, the
// default fan-out; each must equal the serial result bit for bit. ThreadSanitizer runs these.
#include <gtest/gtest.h>

#include <razorkv/attention/decode.hpp>
#include <razorkv/cache/dense_cache.hpp>
#include <razorkv/compress/razor_cache.hpp>
#include <razorkv/core/thread_pool.hpp>
#include <razorkv/policies/h2o.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "support/expect_error.hpp"
#include "support/random_heads.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;

constexpr index_t kKvHeads = 3, kQueryHeads = 12, kDim = 64, kPrompt = 3000;

// `workers` threads taking task indices from one shared counter, as an engine's pool would.
razorkv::parallel_for_fn worker_pool(int workers) {
  return [workers](index_t count, const std::function<void(index_t)>& body) {
    std::atomic<index_t> next{0};
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&] {
        for (index_t i = next++; i < count; i = next++) body(i);
      });
    }
    for (std::thread& t : threads) t.join();
  };
}

razorkv::parallel_for_fn serial() {
  return [](index_t count, const std::function<void(index_t)>& body) {
    for (index_t i = 0; i < count; ++i) body(i);
  };
}

// A razor cache whose first kv head is a retrieval head of kPrompt entries (split into many
// tasks below) beside two short compressed heads.
razorkv::razor_kv_cache<float> mixed_cache(std::mt19937_64& rng,
                                           const razorkv::parallel_for_fn& fan_out) {
  razorkv::head_plan plan(razorkv::model_shape{1, kQueryHeads, kKvHeads, kDim});
  plan.set_retrieval(0, 0, true);
  razorkv::razor_config config;
  config.fixed_window = 100;
  razorkv::razor_kv_cache<float> cache(plan, config);
  const auto n = static_cast<std::size_t>(kPrompt * kKvHeads * kDim);
  const std::vector<float> k = razorkv_test::random_values<float>(n, rng),
                           v = razorkv_test::random_values<float>(n, rng);
  cache.compress_layer(0, layer_view<const float>::nhd(k.data(), kPrompt, kKvHeads, kDim),
                       layer_view<const float>::nhd(v.data(), kPrompt, kKvHeads, kDim), fan_out);
  return cache;
}

struct decoded {
  std::vector<float> out;
  razorkv::attention_weights weights;
};

decoded decode(const razorkv::razor_kv_cache<float>& cache, const std::vector<float>& queries,
               index_t tokens, const razorkv::attention_options& options) {
  decoded result;
  result.out.assign(queries.size(), 0.0f);
  razorkv::decode_attention_multi(
      cache, 0, layer_view<const float>::nhd(queries.data(), tokens, kQueryHeads, kDim),
      layer_view<float>::nhd(result.out.data(), tokens, kQueryHeads, kDim), result.weights,
      options);
  return result;
}

void expect_same_weights(const razorkv::attention_weights& a, const razorkv::attention_weights& b) {
  ASSERT_EQ(a.num_kv_heads(), b.num_kv_heads());
  for (index_t h = 0; h < a.num_kv_heads(); ++h) {
    const razorkv::matrix_view<const float> x = a.kv_head(h), y = b.kv_head(h);
    ASSERT_EQ(x.rows(), y.rows());
    ASSERT_EQ(x.cols(), y.cols());
    for (index_t r = 0; r < x.rows(); ++r) {
      for (index_t e = 0; e < x.cols(); ++e)
        ASSERT_EQ(x(r, e), y(r, e)) << "kv head " << h << " row " << r << " entry " << e;
    }
  }
}

TEST(ThreadedDecode, ThisBinaryFansOutAsBuilt) {
#if defined(RAZORKV_EXPECT_OPENMP)
#if defined(_OPENMP)
  omp_set_num_threads(4);
  EXPECT_GE(omp_get_max_threads(), 2);
#else
  FAIL() << "razorkv_openmp_tests was compiled without OpenMP";
#endif
#else
  SUCCEED() << "serial build: the default fan-out is a plain loop";
#endif
}

// The caller's parallel_for, on two threads of its own taking tasks from both ends: each task
// runs exactly once, and the result is the plain loop's bit for bit.
TEST(ThreadedDecode, CallersParallelForRunsEveryTaskOnce) {
  std::mt19937_64 rng(5);
  const index_t kv_heads = 8, group = 4, dim = 64, tokens = 500, query_heads = kv_heads * group;
  const auto data = razorkv_test::random_heads<float>(kv_heads, tokens, dim, rng);
  const auto cache = razorkv_test::split_at_random(data, tokens, dim, rng);
  const auto queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(query_heads * dim), rng);
  const auto run = [&](const razorkv::parallel_for_fn& fan_out) {
    std::vector<float> out(queries.size(), std::numeric_limits<float>::quiet_NaN());
    razorkv::attention_options options;
    options.parallel_for = fan_out;
    razorkv::decode_attention(cache, 0,
                              razorkv::matrix_view<const float>(queries.data(), query_heads, dim),
                              razorkv::matrix_view<float>(out.data(), query_heads, dim), options);
    return out;
  };
  const std::vector<float> alone = run(serial());

  int calls = 0;
  const std::vector<float> threaded =
      run([&](index_t count, const std::function<void(index_t)>& body) {
        std::vector<std::atomic<int>> seen(static_cast<std::size_t>(count));
        const auto every_other_from = [&](index_t start) {
          for (index_t i = start; i < count; i += 2) {
            body(i);
            ++seen[static_cast<std::size_t>(i)];
          }
        };
        std::thread low(every_other_from, 0), high(every_other_from, 1);
        low.join();
        high.join();
        for (const std::atomic<int>& s : seen) EXPECT_EQ(s.load(), 1);
        ++calls;
      });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(threaded, alone) << "the result must not depend on scheduling";
}

TEST(ThreadedDecode, SplitAndWholeHeadsOnAPoolEqualSerialBitForBit) {
  std::mt19937_64 rng(91);
  const razorkv::razor_kv_cache<float> cache = mixed_cache(rng, serial());
  for (const index_t tokens : {index_t{1}, index_t{3}}) {
    const std::vector<float> queries = razorkv_test::random_values<float>(
        static_cast<std::size_t>(tokens * kQueryHeads * kDim), rng);
    razorkv::attention_options options;
    options.max_entries_per_task = 256;  // the retrieval head: 12 runs of entries, merged
    options.parallel_for = serial();
    const decoded alone = decode(cache, queries, tokens, options);
    for (const int workers : {2, 4}) {
      options.parallel_for = worker_pool(workers);
      const decoded pooled = decode(cache, queries, tokens, options);
      EXPECT_EQ(pooled.out, alone.out) << workers << " workers, " << tokens << " tokens";
      expect_same_weights(pooled.weights, alone.weights);
    }
    // razorkv's own thread_pool, as an engine without a pool would use it: the caller and three
    // workers, step after step (a worker may wake after its step is done, and must not touch it).
    razorkv::thread_pool pool(3);
    options.parallel_for = pool.parallel_for();
    for (int step = 0; step < 20; ++step) {
      const decoded pooled = decode(cache, queries, tokens, options);
      ASSERT_EQ(pooled.out, alone.out)
          << "thread_pool, step " << step << ", " << tokens << " tokens";
      expect_same_weights(pooled.weights, alone.weights);
    }
    // The default fan-out: OpenMP's pool in the OpenMP build, else the plain loop.
    options.parallel_for = {};
    const decoded by_default = decode(cache, queries, tokens, options);
    EXPECT_EQ(by_default.out, alone.out) << tokens << " tokens";
    expect_same_weights(by_default.weights, alone.weights);
  }
}

// thread_pool runs every task exactly once, on the caller and its workers, over many calls in a
// row (each call's tasks are claimed under its own generation; a worker that slept through a call
// claims nothing of it), for any number of tasks and of workers.
TEST(ThreadPool, RunsEveryTaskOnceCallAfterCall) {
  for (const int workers : {0, 1, 3}) {
    razorkv::thread_pool pool(workers);
    EXPECT_EQ(pool.workers(), workers);
    std::vector<std::atomic<int>> runs(300);
    for (int call = 0; call < 400; ++call) {
      const index_t count = call % 7 == 0 ? 0 : (call * 37) % 300 + 1;
      for (auto& r : runs) r.store(0);
      pool.run(count, [&](index_t i) { runs[static_cast<std::size_t>(i)].fetch_add(1); });
      for (index_t i = 0; i < 300; ++i) {
        ASSERT_EQ(runs[static_cast<std::size_t>(i)].load(), i < count ? 1 : 0)
            << workers << " workers, call " << call << ", task " << i << " of " << count;
      }
    }
  }
  RAZORKV_EXPECT_ERROR(razorkv::thread_pool(-1), kInvalidArgument,
                       "thread_pool: workers (-1) must be >= 0");
}

// run() returns only once every task has finished, those the workers run included: the caller's
// first task waits until a worker has started one, whose task then outlasts all of the caller's.
// Without the wait for the workers this fails every time, not only when the timing happens to.
TEST(ThreadPool, RunReturnsOnlyWhenTheWorkersTasksHaveFinished) {
  razorkv::thread_pool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  for (int call = 0; call < 5; ++call) {
    std::atomic<bool> worker_started{false};
    std::vector<std::atomic<int>> finished(16);
    pool.run(16, [&](index_t i) {
      if (std::this_thread::get_id() == caller) {
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (!worker_started.load() && std::chrono::steady_clock::now() < give_up)
          std::this_thread::yield();
      } else if (!worker_started.exchange(true)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      finished[static_cast<std::size_t>(i)].store(1);
    });
    ASSERT_TRUE(worker_started.load()) << "no worker ran a task in 5 s";
    for (index_t i = 0; i < 16; ++i)
      ASSERT_EQ(finished[static_cast<std::size_t>(i)].load(), 1)
          << "call " << call << " task " << i;
  }
}

// A call made while the pool is busy with another thread's call does not wait for it: it runs its
// tasks on its own thread. (The busy call's tasks block until the second call has returned, so a
// second call that waited for the pool would never return.)
TEST(ThreadPool, ACallWhileThePoolIsBusyRunsOnItsCaller) {
  razorkv::thread_pool pool(2);
  std::atomic<bool> second_done{false};
  std::atomic<int> blocked{0};
  std::thread busy([&] {
    pool.run(3, [&](index_t) {
      blocked.fetch_add(1);
      while (!second_done.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
  });
  while (blocked.load() == 0) std::this_thread::yield();  // the busy call has started
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> on_caller{0};
  pool.run(50, [&](index_t) { on_caller.fetch_add(std::this_thread::get_id() == caller ? 1 : 0); });
  EXPECT_EQ(on_caller.load(), 50);
  second_done.store(true);
  busy.join();
  EXPECT_EQ(blocked.load(), 3);
}

TEST(ThreadedDecode, ABatchOfSplitSequencesWithWeightsOnAPool) {
  std::mt19937_64 rng(92);
  std::vector<razorkv::razor_kv_cache<float>> caches;
  for (int s = 0; s < 3; ++s) caches.push_back(mixed_cache(rng, serial()));
  const std::vector<float> queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(3 * kQueryHeads * kDim), rng);
  const auto q = layer_view<const float>::nhd(queries.data(), 3, kQueryHeads, kDim);
  const razorkv::razor_kv_cache<float>* pointers[] = {&caches[0], &caches[1], &caches[2]};
  const auto run = [&](const razorkv::parallel_for_fn& fan_out, std::vector<float>& out,
                       std::vector<razorkv::attention_weights>& weights) {
    out.assign(queries.size(), 0.0f);
    weights.assign(3, {});
    razorkv::attention_weights* wanted[] = {&weights[0], &weights[1], &weights[2]};
    razorkv::attention_options options;
    options.max_entries_per_task = 500;
    options.parallel_for = fan_out;
    razorkv::decode_attention_batch(pointers, 3, 0, q,
                                    layer_view<float>::nhd(out.data(), 3, kQueryHeads, kDim),
                                    wanted, options);
  };
  std::vector<float> alone, pooled, by_default;
  std::vector<razorkv::attention_weights> alone_weights, pooled_weights, default_weights;
  run(serial(), alone, alone_weights);
  run(worker_pool(3), pooled, pooled_weights);
  run({}, by_default, default_weights);
  EXPECT_EQ(pooled, alone);
  EXPECT_EQ(by_default, alone);
  for (std::size_t b = 0; b < 3; ++b) {
    expect_same_weights(pooled_weights[b], alone_weights[b]);
    expect_same_weights(default_weights[b], alone_weights[b]);
  }
}

TEST(ThreadedCompress, CompressionOnAPoolEqualsSerialBitForBit) {
  std::mt19937_64 serial_rng(93), pooled_rng(93), default_rng(93);
  const razorkv::razor_kv_cache<float> a = mixed_cache(serial_rng, serial());
  const razorkv::razor_kv_cache<float> b = mixed_cache(pooled_rng, worker_pool(3));
  const razorkv::razor_kv_cache<float> c = mixed_cache(default_rng, {});
  for (index_t h = 0; h < kKvHeads; ++h) {
    ASSERT_EQ(a.num_spans(0, h), b.num_spans(0, h));
    for (index_t s = 0; s < a.num_spans(0, h); ++s) {
      const razorkv::kv_span<float> x = a.span(0, h, s);
      for (const razorkv::razor_kv_cache<float>* other : {&b, &c}) {
        const razorkv::kv_span<float> y = other->span(0, h, s);
        ASSERT_EQ(x.length(), y.length());
        EXPECT_EQ(x.log_weight, y.log_weight);
        for (index_t r = 0; r < x.length(); ++r) {
          for (index_t d = 0; d < kDim; ++d) {
            ASSERT_EQ(x.keys.typed()(r, d), y.keys.typed()(r, d));
            ASSERT_EQ(x.values.typed()(r, d), y.values.typed()(r, d));
          }
        }
      }
    }
  }
}

TEST(ThreadedH2o, ObservingOnAPoolEqualsSerial) {
  // H2O's observe from queries decodes for its weights: with the pool and with split heads.
  std::mt19937_64 rng(94);
  const index_t tokens = 400;
  const auto kv = razorkv_test::random_values<float>(
      static_cast<std::size_t>((tokens + 8) * kKvHeads * kDim), rng);
  const auto queries = razorkv_test::random_values<float>(
      static_cast<std::size_t>((tokens + 8) * kQueryHeads * kDim), rng);
  const auto k = layer_view<const float>::nhd(kv.data(), tokens + 8, kKvHeads, kDim);
  const auto q = layer_view<const float>::nhd(queries.data(), tokens + 8, kQueryHeads, kDim);
  const razorkv::attention_mass mass =
      razorkv::observed_attention(q.middle_tokens(0, tokens), k.middle_tokens(0, tokens));
  const auto run = [&](const razorkv::parallel_for_fn& fan_out) {
    razorkv::h2o_kv_cache<float> cache(1, kKvHeads, kDim, 300);
    cache.compress_layer(0, k.middle_tokens(0, tokens), k.middle_tokens(0, tokens), mass);
    razorkv::attention_options options;
    options.max_entries_per_task = 64;
    options.parallel_for = fan_out;
    for (index_t t = tokens; t < tokens + 8; ++t) {
      cache.append(0, k.middle_tokens(t, 1), k.middle_tokens(t, 1));
      cache.observe(0, q.middle_tokens(t, 1), options);
    }
    std::vector<std::vector<double>> scores;
    for (index_t h = 0; h < kKvHeads; ++h) scores.push_back(cache.scores(0, h));
    return scores;
  };
  const auto alone = run(serial());
  EXPECT_EQ(run(worker_pool(2)), alone);
  EXPECT_EQ(run({}), alone);
}

}  // namespace
