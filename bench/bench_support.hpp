// bench/bench_support.hpp: what razorkv's benchmarks share: the Llama-3-8B-like layer shape, a
// fast deterministic fill, one prefilled layer per (dtype, tokens, storage), the decode shapes and
// the thread count.
#pragma once

#include <benchmark/benchmark.h>

#include <razorkv/razorkv.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace razorkv_bench {

using razorkv::index_t;

inline constexpr index_t kQueryHeads = 32;
inline constexpr index_t kKvHeads = 8;
inline constexpr index_t kHeadDim = 128;

// Fast deterministic fill (the values only need to be ordinary numbers of unit scale).
struct xorshift {
  std::uint64_t state;
  float next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<float>(state >> 40) * (1.0f / 16777216.0f) - 0.5f;
  }
};

// One layer holding `tokens` tokens, built once per (dtype, tokens, storage) and shared by all
// cases: rows of T, or (with a row format) every key and value row in that format's blocks.
template <class T>
inline const razorkv::dense_kv_cache<T>& layer_cache(
    index_t tokens, std::optional<razorkv::row_format> format = std::nullopt) {
  static std::map<std::pair<index_t, int>, std::unique_ptr<razorkv::dense_kv_cache<T>>> caches;
  auto& slot = caches[{tokens, format ? static_cast<int>(*format) : 0}];
  if (!slot) {
    const razorkv::kv_storage storage{format, format, false};
    slot = std::make_unique<razorkv::dense_kv_cache<T>>(1, kKvHeads, kHeadDim, tokens, nullptr,
                                                        storage);
    xorshift rng{0x9e3779b97f4a7c15ull ^ static_cast<std::uint64_t>(tokens)};
    const index_t chunk = 4096;
    std::vector<T> keys(static_cast<std::size_t>(chunk * kKvHeads * kHeadDim)), values(keys.size());
    for (index_t first = 0; first < tokens; first += chunk) {
      const index_t n = std::min(chunk, tokens - first);
      for (std::size_t i = 0; i < static_cast<std::size_t>(n * kKvHeads * kHeadDim); ++i) {
        keys[i] = static_cast<T>(4.0f * rng.next());
        values[i] = static_cast<T>(rng.next());
      }
      slot->append(0, razorkv::layer_view<const T>::nhd(keys.data(), n, kKvHeads, kHeadDim),
                   razorkv::layer_view<const T>::nhd(values.data(), n, kKvHeads, kHeadDim));
    }
  }
  return *slot;
}

inline std::vector<float> make_queries(index_t query_heads = kQueryHeads) {
  xorshift rng{12345};
  std::vector<float> q(static_cast<std::size_t>(query_heads * kHeadDim));
  for (auto& x : q) x = rng.next();
  return q;
}

template <class T>
inline std::int64_t unique_kv_bytes(index_t tokens) {
  return 2 * tokens * kKvHeads * kHeadDim * static_cast<std::int64_t>(sizeof(T));
}

// Dense decode: 4K tokens (32 MiB of float K/V, partly in cache) and 32K and 128K (cold), each
// read by groups of 1 (MHA), 4 and 8 query heads per kv head.
inline void decode_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens", "group"})
      ->ArgsProduct({{4096, 32768, 131072}, {1, 4, 8}})
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
}

inline int threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace razorkv_bench
