// Decode-attention benchmarks: a DRAM read-bandwidth baseline, a plain-Eigen decode baseline,
// razorkv's decode kernel over the dense cache and over the RazorAttention cache, and the
// compression itself, on one Llama-3-8B-like layer (32 query heads, 8 kv heads, dim 128).
// Every case reports the unique K/V bytes it reads per second. Threads: OMP_NUM_THREADS.
#include <benchmark/benchmark.h>

#include <razorkv/razorkv.hpp>

#include "bench_support.hpp"

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

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
}

// Baseline: decode written the plain way with Eigen, one query head at a time
// (scores = K q, softmax, out = V^T p), parallel over kv heads like razorkv.
template <class T>
void BM_Decode_PlainEigen(benchmark::State& state) {
  const index_t tokens = state.range(0);
  const auto& cache = layer_cache<T>(tokens);
  const std::vector<float> queries = make_queries();
  std::vector<float> out(queries.size());
  const index_t group = kQueryHeads / kKvHeads;
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

// Times razorkv's decode kernel on `cache` and reports `bytes` per iteration.
template <class Cache>
void time_decode(benchmark::State& state, const Cache& cache, std::int64_t bytes) {
  const std::vector<float> queries = make_queries();
  std::vector<float> out(queries.size());
  const razorkv::matrix_view<const float> q(queries.data(), kQueryHeads, kHeadDim);
  const razorkv::matrix_view<float> o(out.data(), kQueryHeads, kHeadDim);
  for (auto _ : state) {
    razorkv::decode_attention(cache, 0, q, o);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["threads"] = threads();
}

// razorkv's decode kernel: every query head of a GQA group in one pass over the group's K/V.
template <class T>
void BM_Decode_Razorkv(benchmark::State& state) {
  const index_t tokens = state.range(0);
  time_decode(state, layer_cache<T>(tokens), unique_kv_bytes<T>(tokens));
}

// The RazorAttention plan of the layer: 1 of its 8 kv groups keeps its full cache (12.5%, the
// closest a single layer gets to the paper's 15%); the paper's defaults N0 = 4, S0 = 4000, C = 5.
razorkv::head_plan razor_plan() {
  razorkv::head_plan plan(razorkv::model_shape{1, kQueryHeads, kKvHeads, kHeadDim});
  plan.set_retrieval(0, 3, true);
  return plan;
}

template <class T>
const razorkv::razor_kv_cache<T>& razor_cache(index_t tokens) {
  static std::map<index_t, std::unique_ptr<razorkv::razor_kv_cache<T>>> caches;
  auto& slot = caches[tokens];
  if (!slot) {
    slot = std::make_unique<razorkv::razor_kv_cache<T>>(
        razorkv::compress_cache(layer_cache<T>(tokens), razor_plan(), {}));
  }
  return *slot;
}

// razorkv's decode kernel over the compressed cache of the same layer. Bytes are what the
// razor cache holds; dense_over_razor is the byte ratio the speed-up is measured against.
template <class T>
void BM_Decode_RazorCache(benchmark::State& state) {
  const auto& cache = razor_cache<T>(state.range(0));
  time_decode(state, cache, cache.kv_bytes());
  state.counters["dense_over_razor"] =
      static_cast<double>(cache.dense_kv_bytes()) / static_cast<double>(cache.kv_bytes());
}

// Compression of the prefilled layer into a razor cache, reading the dense cache in place.
// Bytes are the prefill's K/V, each read once. kReuse: the cache is cleared and refilled each
// iteration, as an engine refills the cache of a slot request after request; otherwise a new
// cache is built each time and also pays the kernel for zeroing its new pages on first touch.
template <class T, bool kReuse>
void compress_layer_case(benchmark::State& state) {
  const index_t tokens = state.range(0);
  const auto& dense = layer_cache<T>(tokens);
  const razorkv::head_plan plan = razor_plan();
  razorkv::razor_kv_cache<T> slot(plan, {});
  slot.compress_layer(0, dense.keys(0), dense.values(0));  // the slot's buffers exist before timing
  for (auto _ : state) {
    if (kReuse) {
      slot.clear(0);
      slot.compress_layer(0, dense.keys(0), dense.values(0));
      benchmark::DoNotOptimize(&slot);
    } else {
      razorkv::razor_kv_cache<T> cache(plan, {});
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
  compress_layer_case<T, true>(state);
}
template <class T>
void BM_Compress_RazorCache_FreshAllocation(benchmark::State& state) {
  compress_layer_case<T, false>(state);
}

void decode_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens"})
      ->Arg(4096)
      ->Arg(32768)
      ->Arg(131072)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
}
// Long contexts for dense-vs-razor: the paper's window (4000 tokens) is most of a 16K prompt
// and a fifth of a 64K or 256K one.
void razor_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens"})
      ->Arg(16384)
      ->Arg(65536)
      ->Arg(262144)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK(BM_MemoryRead_Sum)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_Decode_PlainEigen, float)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode_PlainEigen, Eigen::bfloat16)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Razorkv, float)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Razorkv, Eigen::bfloat16)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Razorkv, float)->Apply(razor_shapes);
BENCHMARK_TEMPLATE(BM_Decode_RazorCache, float)->Apply(razor_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Razorkv, Eigen::bfloat16)->Apply(razor_shapes);
BENCHMARK_TEMPLATE(BM_Decode_RazorCache, Eigen::bfloat16)->Apply(razor_shapes);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache, float)
    ->Apply(razor_shapes)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache, Eigen::bfloat16)
    ->Apply(razor_shapes)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache_FreshAllocation, float)
    ->Apply(razor_shapes)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_Compress_RazorCache_FreshAllocation, Eigen::bfloat16)
    ->Apply(razor_shapes)
    ->Unit(benchmark::kMillisecond);
