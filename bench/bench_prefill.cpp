// Prefill-attention benchmarks: a chunk of M new tokens attending, causally, to 1024 cached
// tokens and to itself on one Llama-3-8B-like layer (32 query heads, 8 kv heads, dim 128), by
// razorkv's prefill kernel, by its decode kernel (8 query vectors per pass), and the bar: Eigen
// SGEMM of the same two products without the causal mask or the softmax.
// Every case reports GFLOPS: the multiply-adds it needs (x2) per second. The kernels count the
// causal work they do; SGEMM the full rectangles it multiplies. Threads: OMP_NUM_THREADS.
#include <benchmark/benchmark.h>

#include <razorkv/razorkv.hpp>

#include "bench_support.hpp"

#include <cstdint>
#include <vector>

namespace {

using razorkv::index_t;
using namespace razorkv_bench;

constexpr index_t kPast = 1024;
constexpr index_t kGroup = kQueryHeads / kKvHeads;

// Floating-point operations of exact causal attention for `chunk` new tokens: query vector t
// reads kPast + t + 1 entries, 2 products of head_dim multiply-adds each.
double causal_flops(index_t chunk) {
  double entries = 0;
  for (index_t t = 0; t < chunk; ++t) entries += static_cast<double>(kPast + t + 1);
  return 4.0 * entries * kQueryHeads * kHeadDim;
}

std::vector<float> chunk_queries(index_t chunk) {
  xorshift rng{777};
  std::vector<float> q(static_cast<std::size_t>(chunk * kQueryHeads * kHeadDim));
  for (auto& x : q) x = rng.next();
  return q;
}

void report_flops(benchmark::State& state, double flops) {
  state.counters["GFLOPS"] = benchmark::Counter(
      flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["threads"] = threads();
}

// razorkv::prefill_attention, or decode_attention_multi with kDecodeKernel, over the cache of
// the past and the chunk.
template <class T, bool kDecodeKernel>
void attention_case(benchmark::State& state) {
  const index_t chunk = state.range(0);
  const auto& cache = layer_cache<T>(kPast + chunk);
  const std::vector<float> queries = chunk_queries(chunk);
  std::vector<float> out(queries.size());
  const auto q =
      razorkv::layer_view<const float>::nhd(queries.data(), chunk, kQueryHeads, kHeadDim);
  const auto o = razorkv::layer_view<float>::nhd(out.data(), chunk, kQueryHeads, kHeadDim);
  for (auto _ : state) {
    if (kDecodeKernel) {
      razorkv::decode_attention_multi(cache, 0, q, o);
    } else {
      razorkv::prefill_attention(cache, 0, q, o);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  report_flops(state, causal_flops(chunk));
}

template <class T>
void BM_Prefill_Razorkv(benchmark::State& state) {
  attention_case<T, false>(state);
}
template <class T>
void BM_Prefill_DecodeKernel(benchmark::State& state) {
  attention_case<T, true>(state);
}

// The bar: per kv head, scores = Q K^T ([group * chunk, dim] x [dim, entries]) and out =
// scores V, two Eigen SGEMMs over the whole rectangle, parallel over kv heads as razorkv is.
void BM_Prefill_EigenSgemm(benchmark::State& state) {
  using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const index_t chunk = state.range(0), entries = kPast + chunk, rows = kGroup * chunk;
  const auto& cache = layer_cache<float>(entries);
  const std::vector<float> queries = chunk_queries(chunk);
  std::vector<matrix> scores(kKvHeads), out(kKvHeads);
  for (auto _ : state) {
#if defined(_OPENMP)
#pragma omp parallel for schedule(dynamic, 1)
#endif
    for (index_t h = 0; h < kKvHeads; ++h) {
      const Eigen::Map<const matrix> q(queries.data() + h * rows * kHeadDim, rows, kHeadDim);
      const auto keys = razorkv::as_eigen(cache.keys(0).head(h));
      const auto values = razorkv::as_eigen(cache.values(0).head(h));
      scores[static_cast<std::size_t>(h)].noalias() = q * keys.transpose();
      out[static_cast<std::size_t>(h)].noalias() = scores[static_cast<std::size_t>(h)] * values;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  report_flops(
      state, 4.0 * static_cast<double>(rows) * static_cast<double>(entries) * kKvHeads * kHeadDim);
}

void chunk_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"chunk"})->Arg(64)->Arg(256)->Arg(1024)->Arg(2048)->UseRealTime()->Unit(
      benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_Prefill_EigenSgemm)->Apply(chunk_shapes);
BENCHMARK_TEMPLATE(BM_Prefill_Razorkv, float)->Apply(chunk_shapes);
BENCHMARK_TEMPLATE(BM_Prefill_Razorkv, Eigen::bfloat16)->Apply(chunk_shapes);
BENCHMARK_TEMPLATE(BM_Prefill_DecodeKernel, float)->Apply(chunk_shapes);
BENCHMARK_TEMPLATE(BM_Prefill_DecodeKernel, Eigen::bfloat16)->Apply(chunk_shapes);
