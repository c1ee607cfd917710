// Every KV-compression policy at one equal budget on one Llama-3-8B-like layer (32 query heads,
// 8 kv heads, dim 128) holding a 32K-token prompt: decode time over each policy's cache, and the
// time to build that cache from the prompt. The budget is 0.32 of the full cache per kv head,
// what RazorAttention holds at the paper's C = 5. Threads: OMP_NUM_THREADS.
#include <benchmark/benchmark.h>

#include <razorkv/razorkv.hpp>

#include "bench_support.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using razorkv::index_t;
using namespace razorkv_bench;

constexpr index_t kPromptTokens = 32768;
constexpr double kBudgetFraction = 0.32;
// H2O ranks the prompt by the attention of its last this many queries: observing all 32K would
// cost 32 x the 1K case (quadratic), about a minute per layer here.
constexpr index_t kH2oObservedQueries = 1024;

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names = {"full", "razor", "streaming_llm", "snapkv", "h2o"};
  return names;
}

index_t budget_entries() { return static_cast<index_t>(kBudgetFraction * kPromptTokens); }

// The prompt's last queries (what SnapKV and H2O score with), [kH2oObservedQueries, heads, dim].
template <class T>
const std::vector<T>& prompt_queries() {
  static const std::vector<T> queries = [] {
    xorshift rng{777};
    std::vector<T> q(static_cast<std::size_t>(kH2oObservedQueries * kQueryHeads * kHeadDim));
    for (auto& x : q) x = static_cast<T>(rng.next());
    return q;
  }();
  return queries;
}
template <class T>
razorkv::layer_view<const T> last_queries(index_t count) {
  const auto all = razorkv::layer_view<const T>::nhd(prompt_queries<T>().data(),
                                                     kH2oObservedQueries, kQueryHeads, kHeadDim);
  return all.middle_tokens(kH2oObservedQueries - count, count);
}

// Builds `policy`'s cache of the 32K prompt at the equal budget.
template <class T>
razorkv::any_kv_cache<T> build(const std::string& policy) {
  const auto& dense = layer_cache<T>(kPromptTokens);
  const auto keys = dense.keys(0), values = dense.values(0);
  const razorkv::model_shape shape{1, kQueryHeads, kKvHeads, kHeadDim};
  if (policy == "full") {
    razorkv::dense_kv_cache<T> cache(1, kKvHeads, kHeadDim, kPromptTokens);
    cache.append(0, keys, values);
    return cache;
  }
  if (policy == "razor") {  // 1 of the 8 groups keeps every token (12.5%), as in bench_decode
    razorkv::head_plan plan(shape);
    plan.set_retrieval(0, 3, true);
    razorkv::razor_kv_cache<T> cache(
        plan, razorkv::razor_config_for_budget(plan, kPromptTokens, budget_entries()));
    cache.compress_layer(0, keys, values);
    return cache;
  }
  if (policy == "streaming_llm") {
    razorkv::razor_kv_cache<T> cache =
        razorkv::make_streaming_llm_cache<T>(shape, budget_entries());
    cache.compress_layer(0, keys, values);
    return cache;
  }
  if (policy == "snapkv") {
    razorkv::selected_kv_cache<T> cache(1, kKvHeads, kHeadDim);
    razorkv::snapkv_compress_layer(cache, 0, last_queries<T>(32), keys, values, budget_entries());
    return cache;
  }
  razorkv::h2o_kv_cache<T> cache(1, kKvHeads, kHeadDim, budget_entries());
  cache.compress_layer(0, keys, values,
                       razorkv::observed_attention(last_queries<T>(kH2oObservedQueries), keys));
  return cache;
}

template <class T>
const razorkv::any_kv_cache<T>& cached_policy(const std::string& policy) {
  static std::map<std::string, std::unique_ptr<razorkv::any_kv_cache<T>>> caches;
  auto& slot = caches[policy];
  if (!slot) slot = std::make_unique<razorkv::any_kv_cache<T>>(build<T>(policy));
  return *slot;
}

// One decode step's attention over the policy's cache; bytes are the K/V the cache holds.
template <class T>
void BM_PolicyDecode(benchmark::State& state, const std::string& policy) {
  const razorkv::any_kv_cache<T>& cache = cached_policy<T>(policy);
  const std::vector<float> queries = make_queries();
  std::vector<float> out(queries.size());
  const razorkv::matrix_view<const float> q(queries.data(), kQueryHeads, kHeadDim);
  const razorkv::matrix_view<float> o(out.data(), kQueryHeads, kHeadDim);
  const index_t bytes = cache.kv_bytes();
  for (auto _ : state) {
    razorkv::decode_attention(cache, 0, q, o);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["kv_MiB"] = static_cast<double>(bytes) / (1 << 20);
  state.counters["threads"] = threads();
}

// Building the policy's cache from the prefilled layer (read in place), scoring included:
// SnapKV's window attention (32 queries), H2O's observed attention (kH2oObservedQueries).
template <class T>
void BM_PolicyCompress(benchmark::State& state, const std::string& policy) {
  layer_cache<T>(kPromptTokens);  // the prompt exists before timing
  prompt_queries<T>();
  for (auto _ : state) {
    razorkv::any_kv_cache<T> cache = build<T>(policy);
    benchmark::DoNotOptimize(&cache);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * unique_kv_bytes<T>(kPromptTokens));
  state.counters["threads"] = threads();
}

// H2O's whole decode step: append the token, attend with the attention weights handed back, and
// add them to every entry's score (observe).
template <class T>
void BM_H2oDecodeStepWithObserve(benchmark::State& state) {
  razorkv::h2o_kv_cache<T> cache = *build<T>("h2o").template target<razorkv::h2o_kv_cache<T>>();
  const std::vector<float> queries = make_queries();
  std::vector<T> token(static_cast<std::size_t>(kKvHeads * kHeadDim), static_cast<T>(0.25f));
  std::vector<float> out(queries.size());
  const auto q = razorkv::layer_view<const float>::nhd(queries.data(), 1, kQueryHeads, kHeadDim);
  const auto kv = razorkv::layer_view<const T>::nhd(token.data(), 1, kKvHeads, kHeadDim);
  const razorkv::matrix_view<float> o(out.data(), kQueryHeads, kHeadDim);
  razorkv::attention_weights weights;
  for (auto _ : state) {
    cache.append(0, kv, kv);
    razorkv::decode_attention(cache, 0, q.token(0), o, weights);
    razorkv::observe_decode(cache, 0, weights);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * cache.kv_bytes());
}

// The first decode step after compression (append the token, attend) on a fresh copy of the
// razor cache: with growth by reallocation it copied every head; chained blocks make it cost
// what any step costs (compare BM_PolicyDecode/razor).
template <class T>
void BM_RazorFirstStepAfterCompression(benchmark::State& state) {
  const razorkv::any_kv_cache<T>& compressed = cached_policy<T>("razor");
  const std::vector<float> queries = make_queries();
  std::vector<T> token(static_cast<std::size_t>(kKvHeads * kHeadDim), static_cast<T>(0.25f));
  std::vector<float> out(queries.size());
  const auto kv = razorkv::layer_view<const T>::nhd(token.data(), 1, kKvHeads, kHeadDim);
  const razorkv::matrix_view<const float> q(queries.data(), kQueryHeads, kHeadDim);
  const razorkv::matrix_view<float> o(out.data(), kQueryHeads, kHeadDim);
  double grown_mib = 0;
  for (auto _ : state) {
    state.PauseTiming();
    razorkv::any_kv_cache<T> cache = compressed;
    state.ResumeTiming();
    cache.append(0, kv, kv);
    razorkv::decode_attention(cache, 0, q, o);
    benchmark::ClobberMemory();
    state.PauseTiming();
    grown_mib =
        static_cast<double>(cache.allocated_bytes() - compressed.allocated_bytes()) / (1 << 20);
    state.ResumeTiming();
  }
  state.counters["grown_MiB"] = grown_mib;
}

template <class T>
void register_policies(const char* dtype) {
  for (const std::string& policy : policy_names()) {
    benchmark::RegisterBenchmark(
        ("BM_PolicyDecode<" + std::string(dtype) + ">/tokens:32768/" + policy).c_str(),
        BM_PolicyDecode<T>, policy)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(
        ("BM_PolicyCompress<" + std::string(dtype) + ">/tokens:32768/" + policy).c_str(),
        BM_PolicyCompress<T>, policy)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark(
      ("BM_H2oDecodeStepWithObserve<" + std::string(dtype) + ">/tokens:32768").c_str(),
      BM_H2oDecodeStepWithObserve<T>)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark(
      ("BM_RazorFirstStepAfterCompression<" + std::string(dtype) + ">/tokens:32768").c_str(),
      BM_RazorFirstStepAfterCompression<T>)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
}

const bool registered = [] {
  register_policies<float>("float");
  register_policies<Eigen::bfloat16>("bfloat16");
  return true;
}();

}  // namespace
