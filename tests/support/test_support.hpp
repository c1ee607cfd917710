// tests/support/test_support.hpp: shared helpers for razorkv's tests: typed-test dtype lists,
// seeded random buffers, tolerance checks, and span_list_cache, a cache of explicit spans.
#pragma once

#include <gtest/gtest.h>

#include <razorkv/eval.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#ifndef RAZORKV_TEST_LEVEL
#define RAZORKV_TEST_LEVEL 1
#endif

namespace razorkv_test {

using razorkv::index_t;

using storage_dtypes = ::testing::Types<float, double, Eigen::half, Eigen::bfloat16>;

/// Unit roundoff of the accumulation type a kernel uses for T.
template <class T>
constexpr double accum_epsilon() {
  return std::is_same_v<T, double> ? 1.1e-16 : 6.0e-8;
}

/// Seeds of a randomised test: `first` alone, and at the exhaustive level (RAZORKV_TEST_LEVEL
/// >= 2, which CI's sanitizer build uses) four more, so that a sweep meets other draws too.
inline std::vector<std::uint64_t> test_seeds(std::uint64_t first) {
  std::vector<std::uint64_t> seeds{first};
  if (RAZORKV_TEST_LEVEL >= 2) {
    for (std::uint64_t i = 1; i <= 4; ++i) seeds.push_back(first + 7919 * i);
  }
  return seeds;
}

/// n values ~ N(0, stddev^2), rounded to T.
template <class T>
std::vector<T> random_values(std::size_t n, std::mt19937_64& rng, double stddev = 1.0) {
  std::normal_distribution<double> normal(0.0, stddev);
  std::vector<T> out(n);
  for (auto& x : out) {
    if constexpr (std::is_same_v<T, double>) {
      x = normal(rng);
    } else {
      x = static_cast<T>(static_cast<float>(normal(rng)));
    }
  }
  return out;
}

using razorkv::detail::to_double;

/// Max |a - b| over both arrays, after checking that every value is finite.
template <class A, class B>
double max_abs_diff(const std::vector<A>& a, const std::vector<B>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double x = to_double(a[i]), y = to_double(b[i]);
    EXPECT_TRUE(std::isfinite(x) && std::isfinite(y))
        << "non-finite value at " << i << ": " << x << " vs " << y;
    worst = std::fmax(worst, std::fabs(x - y));
  }
  return worst;
}

template <class A>
double max_abs(const std::vector<A>& a) {
  double m = 0.0;
  for (const auto& x : a) m = std::fmax(m, std::fabs(to_double(x)));
  return m;
}

/// A single-layer read-only source whose heads are explicit lists of spans, each with its own
/// storage, row padding and log-weight: the awkward layouts a paged or compressed cache produces.
template <class T>
class span_list_cache {
 public:
  using value_type = T;

  span_list_cache(index_t num_kv_heads, index_t head_dim)
      : head_dim_(head_dim), heads_(static_cast<std::size_t>(num_kv_heads)) {}

  index_t num_layers() const { return 1; }
  index_t num_kv_heads() const { return static_cast<index_t>(heads_.size()); }
  index_t head_dim() const { return head_dim_; }
  index_t num_spans(index_t, index_t kv_head) const {
    return static_cast<index_t>(heads_.at(static_cast<std::size_t>(kv_head)).size());
  }
  razorkv::kv_span<T> span(index_t, index_t kv_head, index_t i) const {
    const stored& s = *heads_.at(static_cast<std::size_t>(kv_head)).at(static_cast<std::size_t>(i));
    if (s.rows == 0)
      return {razorkv::matrix_view<const T>(nullptr, 0, head_dim_),
              razorkv::matrix_view<const T>(nullptr, 0, head_dim_), s.log_weight};
    return {razorkv::matrix_view<const T>(s.keys.data(), s.rows, head_dim_, s.stride),
            razorkv::matrix_view<const T>(s.values.data(), s.rows, head_dim_, s.stride),
            s.log_weight};
  }

  /// Appends a span of `rows` rows to head `kv_head`, copied from contiguous [rows, head_dim]
  /// arrays into storage with `padding` extra elements per row (filled with NaN, which the
  /// kernels must never read).
  void add_span(index_t kv_head, const T* keys, const T* values, index_t rows,
                float log_weight = 0.0f, index_t padding = 0) {
    auto s = std::make_unique<stored>();
    s->rows = rows;
    s->stride = head_dim_ + padding;
    s->log_weight = log_weight;
    const T poison = static_cast<T>(std::numeric_limits<float>::quiet_NaN());
    s->keys.assign(static_cast<std::size_t>(rows * s->stride), poison);
    s->values.assign(static_cast<std::size_t>(rows * s->stride), poison);
    for (index_t r = 0; r < rows; ++r) {
      for (index_t c = 0; c < head_dim_; ++c) {
        s->keys[static_cast<std::size_t>(r * s->stride + c)] = keys[r * head_dim_ + c];
        s->values[static_cast<std::size_t>(r * s->stride + c)] = values[r * head_dim_ + c];
      }
    }
    heads_.at(static_cast<std::size_t>(kv_head)).push_back(std::move(s));
  }

 private:
  struct stored {
    std::vector<T> keys, values;  // [rows, stride]
    index_t rows = 0, stride = 0;
    float log_weight = 0.0f;
  };
  index_t head_dim_;
  std::vector<std::vector<std::unique_ptr<stored>>> heads_;  // [kv_heads][spans]
};

static_assert(razorkv::is_kv_source_v<span_list_cache<float>>);

/// Everything a KV source shows through the contract, as bytes: per layer and kv head, its spans'
/// lengths and log-weights and every key and value bit. Two sources with equal snapshots decode
/// alike; a cache whose snapshot is unchanged after a failed call was left as it was.
template <class S>
std::vector<unsigned char> source_snapshot(const S& source) {
  using T = typename S::value_type;
  std::vector<unsigned char> bytes;
  const auto put = [&bytes](const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    bytes.insert(bytes.end(), b, b + n);
  };
  for (index_t l = 0; l < source.num_layers(); ++l) {
    for (index_t h = 0; h < source.num_kv_heads(); ++h) {
      const index_t spans = source.num_spans(l, h);
      put(&spans, sizeof spans);
      for (index_t i = 0; i < spans; ++i) {
        const razorkv::kv_span<T> span = source.span(l, h, i);
        const index_t rows = span.length();
        put(&rows, sizeof rows);
        put(&span.log_weight, sizeof span.log_weight);
        for (index_t r = 0; r < rows; ++r) {
          put(&span.keys.typed()(r, 0), sizeof(T) * static_cast<std::size_t>(source.head_dim()));
          put(&span.values.typed()(r, 0), sizeof(T) * static_cast<std::size_t>(source.head_dim()));
        }
      }
    }
  }
  return bytes;
}

}  // namespace razorkv_test
