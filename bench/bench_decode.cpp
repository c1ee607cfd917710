// Decode-attention benchmarks: a DRAM read-bandwidth and a multiply-add baseline, a plain-Eigen
// decode baseline, razorkv's decode kernel over the dense cache (cold and in cache) and over the
// RazorAttention cache, and the compression itself, on one Llama-3-8B-like layer (8 kv heads,
// head_dim 128) read by 8, 32 or 64 query heads (MHA, GQA group 4, GQA group 8), in float, half
// and bfloat16. Every case reports the unique K/V bytes it reads per second. Threads:
// OMP_NUM_THREADS.
#include <benchmark/benchmark.h>

#include <razorkv/razorkv.hpp>
// The kernels' vector type, for the multiply-add baseline.
#include <razorkv/kernels/simd.hpp>

#include "bench_support.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <memory_resource>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace {

using razorkv::index_t;
using namespace razorkv_bench;

// Baseline: the DRAM read bandwidth, as a vectorised sum over 1 GiB (32x the last-level cache);
// `omp simd` lets the compiler reorder the float sum into vector lanes.
void BM_MemoryRead_Sum(benchmark::State& state) {
  static const std::vector<float> buffer(std::size_t{1} << 28, 1.0f);
  const index_t n = static_cast<index_t>(buffer.size());
  for (auto _ : state) {
    float total = 0.0f;
    const float* data = buffer.data();
#if defined(_OPENMP)
#pragma omp parallel for simd reduction(+ : total) schedule(static)
#endif
    for (index_t i = 0; i < n; ++i) total += data[i];
    benchmark::DoNotOptimize(total);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * static_cast<std::int64_t>(sizeof(float)));
  state.counters["threads"] = threads();
  state.SetLabel(razorkv::kernel_isa());
}

// Baseline: the multiply-add peak of the build's vectors (razorkv's simd_t, the width its
// kernels use): 12 independent chains per thread, more than the FMA latency times the FMA pipes of
// current cores, on every thread. Items are multiply-adds (vector lanes). A decode shape's
// arithmetic roof follows from it: a K and V row of head_dim columns costs 2 x group x head_dim
// multiply-adds for 2 x head_dim x sizeof(T) bytes, so at most peak x sizeof(T) / group bytes/s.
void BM_FmaPeak(benchmark::State& state) {
  using vector = razorkv::detail::simd_t<float>;
  constexpr int kChains = 12;
  constexpr index_t kSteps = index_t{1} << 20;
  for (auto _ : state) {
#if defined(_OPENMP)
#pragma omp parallel
#endif
    {
      vector chains[kChains];
      for (int c = 0; c < kChains; ++c)
        chains[c] = razorkv::detail::simd_broadcast(static_cast<float>(c));
      const vector factor = razorkv::detail::simd_broadcast(0.999999f);
      const vector term = razorkv::detail::simd_broadcast(1e-6f);
      for (index_t step = 0; step < kSteps; ++step) {
        for (int c = 0; c < kChains; ++c) chains[c] = chains[c] * factor + term;
      }
      benchmark::DoNotOptimize(chains);
    }
  }
  state.SetItemsProcessed(state.iterations() * threads() * kSteps * kChains *
                          razorkv::detail::simd_lanes<float>);
  state.counters["threads"] = threads();
  state.counters["vector_bytes"] = static_cast<double>(sizeof(vector));
}

// Baseline: decode written the plain way with Eigen, one query head at a time
// (scores = K q, softmax, out = V^T p), parallel over kv heads like razorkv.
template <class T>
void BM_Decode_PlainEigen(benchmark::State& state) {
  const index_t tokens = state.range(0), group = state.range(1);
  const auto& cache = layer_cache<T>(tokens);
  const std::vector<float> queries = make_queries(kKvHeads * group);
  std::vector<float> out(queries.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  for (auto _ : state) {
#if defined(_OPENMP)
#pragma omp parallel for schedule(dynamic, 1)
#endif
    for (index_t h = 0; h < kKvHeads; ++h) {
      const auto keys = razorkv::as_eigen(cache.keys(0).head(h));
      const auto values = razorkv::as_eigen(cache.values(0).head(h));
      for (index_t g = 0; g < group; ++g) {
        const index_t qh = h * group + g;
        Eigen::Map<const Eigen::VectorXf> q(queries.data() + qh * kHeadDim, kHeadDim);
        Eigen::VectorXf scores = (keys.template cast<float>() * q) * scale;
        const float max_score = scores.maxCoeff();
        scores = (scores.array() - max_score).exp().matrix();
        Eigen::Map<Eigen::VectorXf>(out.data() + qh * kHeadDim, kHeadDim) =
            (values.template cast<float>().transpose() * scores) / scores.sum();
      }
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * unique_kv_bytes<T>(tokens));
  state.counters["threads"] = threads();
}

// Times razorkv's decode kernel on `cache`, read by `group` query heads per kv head, and reports
// `bytes` per iteration; the label names the kernels' instruction set.
template <class Cache>
void time_decode(benchmark::State& state, const Cache& cache, index_t group, std::int64_t bytes) {
  const index_t query_heads = kKvHeads * group;
  const std::vector<float> queries = make_queries(query_heads);
  std::vector<float> out(queries.size());
  const razorkv::matrix_view<const float> q(queries.data(), query_heads, kHeadDim);
  const razorkv::matrix_view<float> o(out.data(), query_heads, kHeadDim);
  razorkv::decode_workspace workspace;
  razorkv::attention_options options;
  options.workspace = &workspace;
  for (auto _ : state) {
    razorkv::decode_attention(cache, 0, q, o, options);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["threads"] = threads();
  state.SetLabel(razorkv::kernel_isa());
}

// razorkv's decode kernel: every query head of a GQA group in one pass over the group's K/V.
template <class T>
void BM_Decode_Razorkv(benchmark::State& state) {
  const index_t tokens = state.range(0);
  time_decode(state, layer_cache<T>(tokens), state.range(1), unique_kv_bytes<T>(tokens));
}

// razorkv's decode kernel over 8-bit (q8) or 4-bit (q4) rows: the layer of BM_Decode_Razorkv
// with every key and value row stored in the format's blocks of 32 values and a binary16 scale,
// dequantised in registers as they are read. Bytes are the blocks' (0.53 and 0.28 of a half row).
template <razorkv::row_format F>
void BM_Decode_Razorkv_Quantised(benchmark::State& state) {
  const auto& cache = layer_cache<Eigen::half>(state.range(0), F);
  time_decode(state, cache, state.range(1), cache.kv_bytes());
}

// razorkv's decode kernel with the layer in the caches: 1K tokens (8 MiB of float K/V, a quarter
// of this class of server's last-level cache) read again every iteration. The rate of the
// kernel's arithmetic and cache traffic, to set against the cold cases: a shape whose in-cache
// rate is below the read bandwidth is bound by its arithmetic, not by the memory.
template <class T>
void BM_Decode_InCache(benchmark::State& state) {
  constexpr index_t kTokens = 1024;
  time_decode(state, layer_cache<T>(kTokens), state.range(0), unique_kv_bytes<T>(kTokens));
}

// The RazorAttention plan of the layer read by `group` query heads per kv head: 1 of its 8 kv
// groups keeps its full cache (12.5%, the closest a single layer gets to the paper's 15%); the
// paper's defaults N0 = 4, S0 = 4000, C = 5.
razorkv::head_plan razor_plan(index_t group = 1) {
  razorkv::head_plan plan(razorkv::model_shape{1, kKvHeads * group, kKvHeads, kHeadDim});
  plan.set_retrieval(0, 3, true);
  return plan;
}

template <class T>
const razorkv::razor_kv_cache<T>& razor_cache(index_t tokens, index_t group) {
  static std::map<std::pair<index_t, index_t>, std::unique_ptr<razorkv::razor_kv_cache<T>>> caches;
  auto& slot = caches[{tokens, group}];
  if (!slot) {
    slot = std::make_unique<razorkv::razor_kv_cache<T>>(
        razorkv::compress_cache(layer_cache<T>(tokens), razor_plan(group), {}));
  }
  return *slot;
}

// razorkv's decode kernel over the compressed cache of the same layer. Bytes are what the
// razor cache holds; dense_over_razor is the byte ratio the speed-up is measured against.
template <class T>
void BM_Decode_RazorCache(benchmark::State& state) {
  const auto& cache = razor_cache<T>(state.range(0), state.range(1));
  time_decode(state, cache, state.range(1), cache.kv_bytes());
  state.counters["dense_over_razor"] =
      static_cast<double>(cache.dense_kv_bytes()) / static_cast<double>(cache.kv_bytes());
}

// Compression of the prefilled layer into a razor cache, reading the dense cache in place.
// Bytes are the prefill's K/V, each read once. kReused: the cache is cleared and refilled each
// iteration, as an engine refills the cache of a slot request after request. kFresh: a new
// cache each time, which also pays the OS for the first touch of its new pages. kFreshHugePages:
// a new cache each time on a huge_page_resource (2 MiB pages where the system offers them).
// kFreshKeptPages: the same on a huge_page_resource that keeps freed blocks, as an engine's
// long-lived KV pool would: new cache objects, memory whose pages are already there.
enum class compress_into { kReused, kFresh, kFreshHugePages, kFreshKeptPages };

template <class T, compress_into kInto>
void compress_layer_case(benchmark::State& state) {
  const index_t tokens = state.range(0);
  const auto& dense = layer_cache<T>(tokens);
  const razorkv::head_plan plan = razor_plan();
  razorkv::huge_page_resource huge_pages;
  razorkv::huge_page_resource kept_pages(nullptr, razorkv::huge_page_resource::kHugePageBytes,
                                         std::size_t{16} << 30);
  std::pmr::memory_resource* resource = kInto == compress_into::kFreshHugePages ? &huge_pages
                                        : kInto == compress_into::kFreshKeptPages
                                            ? &kept_pages
                                            : std::pmr::get_default_resource();
  // Before timing: the reused slot's buffers exist; a keeping resource holds one cache's blocks,
  // as after an engine's first request.
  razorkv::razor_kv_cache<T> slot(plan, {}, resource);
  if (kInto == compress_into::kReused) {
    slot.compress_layer(0, dense.keys(0), dense.values(0));
  } else if (kInto == compress_into::kFreshKeptPages) {
    razorkv::razor_kv_cache<T> first(plan, {}, resource);
    first.compress_layer(0, dense.keys(0), dense.values(0));
  }
  for (auto _ : state) {
    if (kInto == compress_into::kReused) {
      slot.clear(0);
      slot.compress_layer(0, dense.keys(0), dense.values(0));
      benchmark::DoNotOptimize(&slot);
    } else {
      razorkv::razor_kv_cache<T> cache(plan, {}, resource);
      cache.compress_layer(0, dense.keys(0), dense.values(0));
      benchmark::DoNotOptimize(&cache);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * unique_kv_bytes<T>(tokens));
  state.counters["threads"] = threads();
}

template <class T>
void BM_Compress_RazorCache(benchmark::State& state) {
  compress_layer_case<T, compress_into::kReused>(state);
}
template <class T>
void BM_Compress_RazorCache_FreshAllocation(benchmark::State& state) {
  compress_layer_case<T, compress_into::kFresh>(state);
}
template <class T>
void BM_Compress_RazorCache_FreshHugePages(benchmark::State& state) {
  compress_layer_case<T, compress_into::kFreshHugePages>(state);
}
template <class T>
void BM_Compress_RazorCache_FreshKeptPages(benchmark::State& state) {
  compress_layer_case<T, compress_into::kFreshKeptPages>(state);
}

// BM_Compress_RazorCache<half> with the rows of windows and retrieval heads quantised as they
// are stored (q8, or q4 with rotated keys): what the quantiser adds to a compression.
template <razorkv::row_format kFormat>
void BM_Compress_RazorCache_Quantised(benchmark::State& state) {
  using T = Eigen::half;
  const index_t tokens = state.range(0);
  const auto& dense = layer_cache<T>(tokens);
  razorkv::razor_config config;
  config.storage = razorkv::kv_storage::both(kFormat, kFormat == razorkv::row_format::kQ4);
  razorkv::razor_kv_cache<T> slot(razor_plan(), config);
  slot.compress_layer(0, dense.keys(0), dense.values(0));
  for (auto _ : state) {
    slot.clear(0);
    slot.compress_layer(0, dense.keys(0), dense.values(0));
    benchmark::DoNotOptimize(&slot);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * unique_kv_bytes<T>(tokens));
  state.counters["threads"] = threads();
}

// A thread that spins on the machine's last core for as long as it lives: another process's
// work on one of the cores, as a shared machine has.
class busy_core {
 public:
  busy_core()
      : thread_([this] {
#if defined(__linux__)
          cpu_set_t cpus;
          CPU_ZERO(&cpus);
          CPU_SET(static_cast<int>(std::thread::hardware_concurrency()) - 1, &cpus);
          pthread_setaffinity_np(pthread_self(), sizeof(cpus), &cpus);
#endif
          while (!stop_.load(std::memory_order_relaxed)) {
          }
        }) {
  }
  ~busy_core() {
    stop_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Decode of the Llama-3-8B-like layer (GQA 4, float) with one core busy (contended:1) or not,
// fanned out three ways: fanout 0 runs on the calling thread alone, 1 is the default (OpenMP's
// pool of OMP_NUM_THREADS threads in this binary), 2 is a razorkv::thread_pool of one worker per
// other hardware thread plus the caller.
void BM_Decode_FanOut(benchmark::State& state) {
  const index_t tokens = state.range(0);
  const auto fanout = state.range(1);
  std::optional<busy_core> busy;
  if (state.range(2) != 0) busy.emplace();
  const index_t group = 4, query_heads = kKvHeads * group;
  const auto& cache = layer_cache<float>(tokens);
  const std::vector<float> queries = make_queries(query_heads);
  std::vector<float> out(queries.size());
  razorkv::thread_pool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) -
                            1);
  razorkv::decode_workspace workspace;
  razorkv::attention_options options;
  options.workspace = &workspace;
  if (fanout == 0) {
    options.parallel_for = [](index_t count, const std::function<void(index_t)>& body) {
      for (index_t i = 0; i < count; ++i) body(i);
    };
  } else if (fanout == 2) {
    options.parallel_for = pool.parallel_for();
  }
  const razorkv::matrix_view<const float> q(queries.data(), query_heads, kHeadDim);
  const razorkv::matrix_view<float> o(out.data(), query_heads, kHeadDim);
  for (auto _ : state) {
    razorkv::decode_attention(cache, 0, q, o, options);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * unique_kv_bytes<float>(tokens));
  state.SetLabel(fanout == 0 ? "one thread" : fanout == 1 ? "default" : "thread_pool");
}

// Long contexts for dense-vs-razor: the paper's window (4000 tokens) is most of a 16K prompt
// and a fifth of a 64K or 256K one.
void in_cache_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"group"})->Arg(1)->Arg(4)->Arg(8)->UseRealTime()->Unit(benchmark::kMicrosecond);
}
void razor_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens", "group"})
      ->ArgsProduct({{16384, 65536, 262144}, {1, 4, 8}})
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
}
void compress_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens"})
      ->Arg(16384)
      ->Arg(65536)
      ->Arg(262144)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_MemoryRead_Sum)->UseRealTime()->Unit(benchmark::kMillisecond);
// Only where the kernels are this build's own: a build linked with razorkv::kernels
// (razorkv_bench_portable) compiles simd_t for its default flags, narrower than the vectors of
// the kernels it picks at run time.
#if !(defined(RAZORKV_SEPARATE_KERNELS) && RAZORKV_SEPARATE_KERNELS)
BENCHMARK(BM_FmaPeak)->UseRealTime()->Unit(benchmark::kMillisecond);
#endif
BENCHMARK(BM_Decode_FanOut)
    ->ArgNames({"tokens", "fanout", "contended"})
    ->ArgsProduct({{4096, 32768}, {0, 1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_Decode_PlainEigen, float)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode_PlainEigen, Eigen::bfloat16)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Razorkv, float)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Razorkv, Eigen::half)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Razorkv, Eigen::bfloat16)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Razorkv_Quantised, razorkv::row_format::kQ8)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Razorkv_Quantised, razorkv::row_format::kQ4)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode_InCache, float)->Apply(in_cache_shapes);
BENCHMARK_TEMPLATE(BM_Decode_InCache, Eigen::half)->Apply(in_cache_shapes);
BENCHMARK_TEMPLATE(BM_Decode_InCache, Eigen::bfloat16)->Apply(in_cache_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Razorkv, float)->Apply(razor_shapes);
BENCHMARK_TEMPLATE(BM_Decode_RazorCache, float)->Apply(razor_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Razorkv, Eigen::half)->Apply(razor_shapes);
BENCHMARK_TEMPLATE(BM_Decode_RazorCache, Eigen::half)->Apply(razor_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Razorkv, Eigen::bfloat16)->Apply(razor_shapes);
BENCHMARK_TEMPLATE(BM_Decode_RazorCache, Eigen::bfloat16)->Apply(razor_shapes);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache, float)->Apply(compress_shapes);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache, Eigen::half)->Apply(compress_shapes);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache, Eigen::bfloat16)->Apply(compress_shapes);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache_Quantised, razorkv::row_format::kQ8)
    ->Apply(compress_shapes);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache_Quantised, razorkv::row_format::kQ4)
    ->Apply(compress_shapes);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache_FreshAllocation, float)->Apply(compress_shapes);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache_FreshAllocation, Eigen::half)->Apply(compress_shapes);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache_FreshAllocation, Eigen::bfloat16)->Apply(compress_shapes);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache_FreshHugePages, float)->Apply(compress_shapes);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache_FreshHugePages, Eigen::half)->Apply(compress_shapes);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache_FreshHugePages, Eigen::bfloat16)->Apply(compress_shapes);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache_FreshKeptPages, float)->Apply(compress_shapes);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache_FreshKeptPages, Eigen::half)->Apply(compress_shapes);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache_FreshKeptPages, Eigen::bfloat16)->Apply(compress_shapes);
