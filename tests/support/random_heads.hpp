// tests/support/random_heads.hpp: a synthetic layer's per-head keys and values, the same tokens
// as a span_list_cache split at random points with padded rows, and the attention tolerance.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "support/test_support.hpp"

namespace razorkv_test {

// Per-head keys and values of a synthetic layer: [kv_heads][tokens * dim], contiguous rows.
template <class T>
struct head_data {
  std::vector<std::vector<T>> keys, values;
};

template <class T>
head_data<T> random_heads(index_t kv_heads, index_t tokens, index_t dim, std::mt19937_64& rng,
                          double key_stddev = 1.0) {
  head_data<T> data;
  for (index_t h = 0; h < kv_heads; ++h) {
    data.keys.push_back(random_values<T>(static_cast<std::size_t>(tokens * dim), rng, key_stddev));
    data.values.push_back(random_values<T>(static_cast<std::size_t>(tokens * dim), rng));
  }
  return data;
}

// The same tokens as a span_list_cache split at random points, with random row padding.
template <class T>
span_list_cache<T> split_at_random(const head_data<T>& data, index_t tokens, index_t dim,
                                   std::mt19937_64& rng) {
  const index_t kv_heads = static_cast<index_t>(data.keys.size());
  span_list_cache<T> cache(kv_heads, dim);
  for (index_t h = 0; h < kv_heads; ++h) {
    index_t first = 0;
    while (first < tokens) {
      const index_t remaining = tokens - first;
      // Mostly short spans (pages), sometimes everything that is left.
      const index_t length =
          (rng() % 4 == 0)
              ? remaining
              : 1 + static_cast<index_t>(
                        rng() % static_cast<std::uint64_t>(std::min<index_t>(remaining, 40)));
      const index_t padding = static_cast<index_t>(rng() % 3) * 3;
      cache.add_span(h, data.keys[static_cast<std::size_t>(h)].data() + first * dim,
                     data.values[static_cast<std::size_t>(h)].data() + first * dim, length, 0.0f,
                     padding);
      if (rng() % 5 == 0) cache.add_span(h, nullptr, nullptr, 0);  // empty spans are legal
      first += length;
    }
  }
  return cache;
}

// What an attention kernel over storage T may differ from the double reference by, for outputs
// of the given magnitude (sums of a few thousand products in accum_t<T>).
template <class T>
double attention_tolerance(double magnitude) {
  return 640.0 * accum_epsilon<T>() * std::fmax(1.0, magnitude);
}

}  // namespace razorkv_test
