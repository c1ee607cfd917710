// Tests of razor_kv_cache: what each head keeps, the compensation token's exactness and
// conservation, append and bounded decode (bounded == compress-from-scratch, bit for bit),
// long-run folding accuracy, memory accounting against the calculator, and engine layouts.
#include <gtest/gtest.h>

#include <razorkv/attention/decode.hpp>
#include <razorkv/attention/reference.hpp>
#include <razorkv/compress/razor_cache.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::compensation_mode;
using razorkv::decode_mode;
using razorkv::dense_kv_cache;
using razorkv::head_plan;
using razorkv::index_t;
using razorkv::layer_view;
using razorkv::matrix_view;
using razorkv::razor_config;
using razorkv::razor_kv_cache;
using razorkv::detail::to_double;

// K and V of `tokens` tokens of one layer, [tokens, heads, dim] NHD.
template <class T>
struct layer_tokens {
  index_t tokens, heads, dim;
  std::vector<T> keys, values;
  layer_view<const T> key_view(index_t first = 0, index_t count = -1) const {
    return slice(keys, first, count);
  }
  layer_view<const T> value_view(index_t first = 0, index_t count = -1) const {
    return slice(values, first, count);
  }
  layer_view<const T> slice(const std::vector<T>& data, index_t first, index_t count) const {
    if (count < 0) count = tokens - first;
    return layer_view<const T>::nhd(data.data() + first * heads * dim, count, heads, dim);
  }
  const T* key(index_t t, index_t h) const { return keys.data() + (t * heads + h) * dim; }
  const T* value(index_t t, index_t h) const { return values.data() + (t * heads + h) * dim; }
};

template <class T>
layer_tokens<T> random_tokens(index_t tokens, index_t heads, index_t dim, std::mt19937_64& rng) {
  layer_tokens<T> out{tokens, heads, dim, {}, {}};
  out.keys = razorkv_test::random_values<T>(static_cast<std::size_t>(tokens * heads * dim), rng);
  out.values = razorkv_test::random_values<T>(static_cast<std::size_t>(tokens * heads * dim), rng);
  return out;
}

template <class T>
dense_kv_cache<T> dense_of(const std::vector<layer_tokens<T>>& layers) {
  dense_kv_cache<T> dense(static_cast<index_t>(layers.size()), layers[0].heads, layers[0].dim);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    dense.append(static_cast<index_t>(l), layers[l].key_view(), layers[l].value_view());
  }
  return dense;
}

// One entry of a head, as the generic contract shows it.
struct entry {
  std::vector<double> key, value;
  double log_weight;
};

template <class Cache>
std::vector<entry> entries_of(const Cache& cache, index_t layer, index_t h) {
  std::vector<entry> out;
  for (index_t i = 0; i < cache.num_spans(layer, h); ++i) {
    const auto span = cache.span(layer, h, i);
    for (index_t r = 0; r < span.length(); ++r) {
      entry e{{}, {}, span.log_weight};
      for (index_t c = 0; c < cache.head_dim(); ++c) {
        e.key.push_back(to_double(span.keys.typed()(r, c)));
        e.value.push_back(to_double(span.values.typed()(r, c)));
      }
      out.push_back(std::move(e));
    }
  }
  return out;
}

template <class T>
void expect_row(const entry& got, const T* key, const T* value, index_t dim, const char* what) {
  for (index_t c = 0; c < dim; ++c) {
    ASSERT_EQ(got.key[static_cast<std::size_t>(c)], to_double(key[c]))
        << what << " key column " << c;
    ASSERT_EQ(got.value[static_cast<std::size_t>(c)], to_double(value[c]))
        << what << " value column " << c;
  }
}

// x rounded to T, as the cache stores a mean (through float for the 16-bit types).
template <class T>
double rounded(double x) {
  if constexpr (std::is_same_v<T, double>) {
    return x;
  } else {
    return to_double(static_cast<T>(static_cast<float>(x)));
  }
}

head_plan plan_with(index_t layers, index_t query_heads, index_t kv_heads, index_t dim,
                    std::vector<std::pair<index_t, index_t>> retrieval) {
  head_plan plan(razorkv::model_shape{layers, query_heads, kv_heads, dim});
  for (const auto& [l, h] : retrieval) plan.set_retrieval(l, h, true);
  return plan;
}

template <class T>
class RazorkvRazorCache : public ::testing::Test {};
TYPED_TEST_SUITE(RazorkvRazorCache, razorkv_test::storage_dtypes);

// Sinks, compensation token and window of every head, for every compensation mode.
TYPED_TEST(RazorkvRazorCache, KeepsSinksWindowAndOneCompensationToken) {
  using T = TypeParam;
  std::mt19937_64 rng(1);
  const index_t heads = 3, dim = 19, tokens = 1001;
  const std::vector<layer_tokens<T>> layers = {random_tokens<T>(tokens, heads, dim, rng)};
  const dense_kv_cache<T> dense = dense_of(layers);
  const head_plan plan = plan_with(1, 6, heads, dim, {{0, 1}});
  for (compensation_mode mode :
       {compensation_mode::kWeighted, compensation_mode::kUnweighted, compensation_mode::kNone}) {
    SCOPED_TRACE(razorkv::compensation_mode_name(mode));
    razor_config config;
    config.sinks = 3;
    config.s0 = 50;
    config.c = 10.0;  // window max(50, ceil(1001 / 10) = 101) = 101
    config.compensation = mode;
    const razor_kv_cache<T> cache = razorkv::compress_cache(dense, plan, config);
    ASSERT_TRUE(cache.is_compressed(0));
    EXPECT_EQ(cache.num_tokens(0), tokens);

    // Retrieval head: one span, bit-identical to the dense cache.
    const auto full = entries_of(cache, 0, 1);
    ASSERT_EQ(static_cast<index_t>(full.size()), tokens);
    for (index_t t = 0; t < tokens; ++t)
      expect_row(full[static_cast<std::size_t>(t)], layers[0].key(t, 1), layers[0].value(t, 1), dim,
                 "retrieval");
    EXPECT_EQ(cache.compensation(0, 1).count, 0);

    for (index_t h : {0, 2}) {
      const index_t window = 101, dropped = tokens - 3 - window;
      EXPECT_EQ(cache.window(0, h), window);
      const auto got = entries_of(cache, 0, h);
      const bool has_token = mode != compensation_mode::kNone;
      ASSERT_EQ(static_cast<index_t>(got.size()), 3 + window + (has_token ? 1 : 0));
      for (index_t t = 0; t < 3; ++t)
        expect_row(got[static_cast<std::size_t>(t)], layers[0].key(t, h), layers[0].value(t, h),
                   dim, "sink");
      const std::size_t first_recent = has_token ? 4 : 3;
      for (index_t r = 0; r < window; ++r) {
        expect_row(got[first_recent + static_cast<std::size_t>(r)],
                   layers[0].key(tokens - window + r, h), layers[0].value(tokens - window + r, h),
                   dim, "recent");
        EXPECT_EQ(got[first_recent + static_cast<std::size_t>(r)].log_weight, 0.0);
      }
      const auto token = cache.compensation(0, h);
      EXPECT_EQ(token.count, dropped);
      if (!has_token) {
        EXPECT_TRUE(token.key.empty());
        continue;
      }
      const entry& mean = got[3];
      EXPECT_FLOAT_EQ(mean.log_weight, mode == compensation_mode::kWeighted
                                           ? std::log(static_cast<double>(dropped))
                                           : 0.0);
      for (index_t c = 0; c < dim; ++c) {
        double key_sum = 0, value_sum = 0;
        for (index_t t = 3; t < 3 + dropped; ++t) {
          key_sum += to_double(layers[0].key(t, h)[c]);
          value_sum += to_double(layers[0].value(t, h)[c]);
        }
        EXPECT_NEAR(token.key_sum[c], key_sum, 1e-9 * dropped);
        EXPECT_NEAR(token.value_sum[c], value_sum, 1e-9 * dropped);
        // Stored mean: the exact mean rounded to T.
        EXPECT_EQ(mean.key[static_cast<std::size_t>(c)], rounded<T>(token.key_sum[c] / dropped));
        EXPECT_EQ(mean.value[static_cast<std::size_t>(c)],
                  rounded<T>(token.value_sum[c] / dropped));
      }
    }
  }
}

TEST(RazorkvRazorCacheWindow, RulesPrecedenceAndShortPrompts) {
  std::mt19937_64 rng(2);
  const index_t heads = 4, dim = 8;
  head_plan plan = plan_with(1, 4, heads, dim, {});
  plan.set_buffer_override(0, 3, 7);
  const auto window_at = [&](index_t tokens, const razor_config& config) {
    const std::vector<layer_tokens<float>> layers = {random_tokens<float>(tokens, heads, dim, rng)};
    return razorkv::compress_cache(dense_of(layers), plan, config);
  };
  razor_config config;
  config.sinks = 4;
  config.s0 = 10;
  config.c = 5.0;
  {
    const auto cache = window_at(101, config);  // ceil(101 / 5) = 21 > S0
    EXPECT_EQ(cache.window(0, 0), 21);
    EXPECT_EQ(cache.entries(0, 0), 4 + 1 + 21);
    EXPECT_EQ(cache.window(0, 3), 7);  // the plan's override wins
    EXPECT_EQ(cache.entries(0, 3), 4 + 1 + 7);
  }
  {
    const auto cache = window_at(30, config);  // S0 = 10 > ceil(30 / 5) = 6
    EXPECT_EQ(cache.window(0, 0), 10);
    EXPECT_EQ(cache.compensation(0, 0).count, 16);
    EXPECT_EQ(cache.dropped_tokens(0), 3 * 16 + (30 - 4 - 7));  // head 3: its window of 7
    EXPECT_EQ(cache.dropped_tokens(), cache.dropped_tokens(0));
  }
  {
    const auto cache = window_at(14, config);  // N = N0 + L_h: nothing dropped
    EXPECT_EQ(cache.entries(0, 0), 14);
    EXPECT_EQ(cache.num_spans(0, 0), 2);  // sinks and recent, no compensation token
    EXPECT_EQ(cache.compensation(0, 0).count, 0);
    EXPECT_EQ(cache.dropped_tokens(), 14 - 4 - 7);  // only head 3, whose window is 7
  }
  {
    const auto cache = window_at(4, config);  // N == N0
    EXPECT_EQ(cache.entries(0, 0), 4);
    EXPECT_EQ(cache.dropped_tokens(), 0);  // kept whole: what a caller checks
  }
  config.fixed_window = 5;
  {
    const auto cache = window_at(1000, config);
    EXPECT_EQ(cache.window(0, 0), 5);
    EXPECT_EQ(cache.window(0, 3), 7);  // still the override
    EXPECT_EQ(cache.entries(0, 0), 4 + 1 + 5);
  }
  const razor_config preset = razor_config::fixed_capacity();
  EXPECT_EQ(preset.sinks, 4);
  EXPECT_EQ(preset.fixed_window, 251);
  EXPECT_EQ(preset.compensation, compensation_mode::kUnweighted);
  EXPECT_EQ(preset.decode, decode_mode::kBounded);
}

// The weighted token is exactly n copies of the mean: compare with a dense cache that holds
// them, through the double reference.
TYPED_TEST(RazorkvRazorCache, WeightedTokenEqualsCopiesOfTheMean) {
  using T = TypeParam;
  std::mt19937_64 rng(3);
  const index_t heads = 2, query_heads = 6, dim = 16, tokens = 700;
  const std::vector<layer_tokens<T>> layers = {random_tokens<T>(tokens, heads, dim, rng)};
  razor_config config;
  config.sinks = 4;
  config.s0 = 100;
  const razor_kv_cache<T> cache =
      razorkv::compress_cache(dense_of(layers), plan_with(1, query_heads, heads, dim, {}), config);

  // The same head, densely: sinks, n copies of the stored mean, the window.
  dense_kv_cache<T> copies(1, heads, dim);
  const index_t dropped = cache.compensation(0, 0).count;
  ASSERT_EQ(dropped, tokens - 4 - 140);
  std::vector<T> k(static_cast<std::size_t>(heads * dim)), v(k.size());
  for (index_t t = 0; t < 4 + dropped + 140; ++t) {
    for (index_t h = 0; h < heads; ++h) {
      const bool middle = t >= 4 && t < 4 + dropped;
      const auto token = cache.compensation(0, h);
      for (index_t c = 0; c < dim; ++c) {
        k[static_cast<std::size_t>(h * dim + c)] =
            middle ? token.key(0, c) : layers[0].key(t, h)[c];
        v[static_cast<std::size_t>(h * dim + c)] =
            middle ? token.value(0, c) : layers[0].value(t, h)[c];
      }
    }
    copies.append(0, layer_view<const T>::nhd(k.data(), 1, heads, dim),
                  layer_view<const T>::nhd(v.data(), 1, heads, dim));
  }
  const std::vector<float> queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(query_heads * dim), rng, 2.0);
  const matrix_view<const float> q(queries.data(), query_heads, dim);
  const std::vector<double> want = razorkv::reference::decode_attention(copies, 0, q);
  const std::vector<double> got = razorkv::reference::decode_attention(cache, 0, q);
  // Only ln(n) rounded to float separates the two.
  EXPECT_LT(razorkv_test::max_abs_diff(got, want),
            1e-5 * std::fmax(1.0, razorkv_test::max_abs(want)));

  // And the optimised kernel agrees with the reference on the compressed cache.
  std::vector<float> fast(queries.size());
  razorkv::decode_attention(cache, 0, q, matrix_view<float>(fast.data(), query_heads, dim));
  EXPECT_LT(razorkv_test::max_abs_diff(fast, got),
            1e-5 * std::fmax(1.0, razorkv_test::max_abs(got)));
}

// kept + count = N, and the sum over entries of weight * row, the compensation token weighing
// its count, equals the sum of the original rows.
template <class T>
void expect_conserved(const razor_kv_cache<T>& cache, const layer_tokens<T>& source,
                      index_t layer) {
  const index_t tokens = cache.num_tokens(layer), dim = cache.head_dim();
  // Unit roundoff of T: the stored mean is rounded to it.
  const double eps = std::is_same_v<T, Eigen::bfloat16> ? 4e-3
                     : std::is_same_v<T, Eigen::half>   ? 5e-4
                                                        : 6e-8;
  for (index_t h = 0; h < cache.num_kv_heads(); ++h) {
    SCOPED_TRACE(testing::Message() << "head " << h);
    const auto token = cache.compensation(layer, h);
    const auto got = entries_of(cache, layer, h);
    const bool has_token = !token.key.empty();
    ASSERT_EQ(static_cast<index_t>(got.size()) - (has_token ? 1 : 0) + token.count, tokens);
    if (cache.config().compensation == compensation_mode::kNone) continue;
    for (index_t c = 0; c < dim; ++c) {
      for (const bool keys : {true, false}) {
        double want = 0, magnitude = 0;
        for (index_t t = 0; t < tokens; ++t) {
          const double x = to_double(keys ? source.key(t, h)[c] : source.value(t, h)[c]);
          want += x;
          magnitude += std::fabs(x);
        }
        double kept = 0;
        for (const entry& e : got) kept += (keys ? e.key : e.value)[static_cast<std::size_t>(c)];
        const double mean = has_token ? to_double(keys ? token.key(0, c) : token.value(0, c)) : 0.0;
        kept -= mean;  // the token's row is among the entries once
        const double count = static_cast<double>(token.count);
        EXPECT_NEAR(kept + count * mean, want,
                    1e-9 * magnitude + 2.0 * eps * count * std::fabs(mean))
            << (keys ? "key" : "value") << " column " << c;
        if (has_token) {
          // The exact double sums conserve to double rounding.
          const double sum = keys ? token.key_sum[c] : token.value_sum[c];
          EXPECT_NEAR(kept + sum, want, 1e-9 * magnitude)
              << (keys ? "key" : "value") << " column " << c;
        }
      }
    }
  }
}

TYPED_TEST(RazorkvRazorCache, ConservesTokensAndSumsAfterCompressionAndBoundedDecode) {
  using T = TypeParam;
  std::mt19937_64 rng(4);
  const index_t heads = 3, dim = 12, prefill = 400, decoded = 150;
  const layer_tokens<T> all = random_tokens<T>(prefill + decoded, heads, dim, rng);
  for (decode_mode decode : {decode_mode::kAppend, decode_mode::kBounded}) {
    for (compensation_mode mode :
         {compensation_mode::kWeighted, compensation_mode::kUnweighted, compensation_mode::kNone}) {
      SCOPED_TRACE(testing::Message() << razorkv::decode_mode_name(decode) << " "
                                      << razorkv::compensation_mode_name(mode));
      razor_config config;
      config.sinks = 2;
      config.s0 = 30;
      config.c = 8;
      config.compensation = mode;
      config.decode = decode;
      razor_kv_cache<T> cache(plan_with(1, heads, heads, dim, {{0, 2}}), config);
      cache.compress_layer(0, all.key_view(0, prefill), all.value_view(0, prefill));
      expect_conserved(cache, all, 0);
      for (index_t t = prefill; t < prefill + decoded; ++t)
        cache.append(0, all.key_view(t, 1), all.value_view(t, 1));
      expect_conserved(cache, all, 0);
    }
  }
}

// Bounded decode, step by step and in chunks, holds exactly what compressing the whole final
// sequence from scratch (with the same window) holds: same entries, same bits.
TYPED_TEST(RazorkvRazorCache, BoundedDecodeEqualsCompressFromScratch) {
  using T = TypeParam;
  std::mt19937_64 rng(5);
  const index_t heads = 3, dim = 10, prefill = 120;
  const layer_tokens<T> all = random_tokens<T>(prefill + 400, heads, dim, rng);
  for (compensation_mode mode :
       {compensation_mode::kWeighted, compensation_mode::kUnweighted, compensation_mode::kNone}) {
    SCOPED_TRACE(razorkv::compensation_mode_name(mode));
    razor_config config;
    config.sinks = 3;
    config.s0 = 16;
    config.c = 4.0;  // window max(16, 30) = 30 at the prefill
    config.compensation = mode;
    config.decode = decode_mode::kBounded;
    head_plan plan = plan_with(1, heads, heads, dim, {{0, 1}});
    plan.set_buffer_override(0, 2, 9);
    razor_kv_cache<T> cache(plan, config);
    cache.compress_layer(0, all.key_view(0, prefill), all.value_view(0, prefill));
    ASSERT_EQ(cache.window(0, 0), 30);
    index_t held = prefill;
    for (index_t chunk : {1, 1, 1, 5, 29, 30, 31, 1, 77, 1, 100, 3, 120}) {  // 400 in all
      cache.append(0, all.key_view(held, chunk), all.value_view(held, chunk));
      held += chunk;
      for (index_t h : {0, 2})
        EXPECT_LE(cache.entries(0, h), config.sinks + 1 + cache.window(0, h));

      razor_config scratch_config = config;
      scratch_config.fixed_window = 30;
      const razor_kv_cache<T> scratch = [&] {
        razor_kv_cache<T> c(plan, scratch_config);
        c.compress_layer(0, all.key_view(0, held), all.value_view(0, held));
        return c;
      }();
      for (index_t h = 0; h < heads; ++h) {
        SCOPED_TRACE(testing::Message() << "after " << held << " tokens, head " << h);
        const auto got = entries_of(cache, 0, h), want = entries_of(scratch, 0, h);
        ASSERT_EQ(got.size(), want.size());
        for (std::size_t e = 0; e < got.size(); ++e) {
          ASSERT_EQ(got[e].key, want[e].key) << "entry " << e;
          ASSERT_EQ(got[e].value, want[e].value) << "entry " << e;
          ASSERT_EQ(got[e].log_weight, want[e].log_weight) << "entry " << e;
        }
        const auto a = cache.compensation(0, h), b = scratch.compensation(0, h);
        ASSERT_EQ(a.count, b.count);
        if (a.key_sum != nullptr) {
          for (index_t c = 0; c < dim; ++c) ASSERT_EQ(a.key_sum[c], b.key_sum[c]);
        }
      }
    }
  }
}

TEST(RazorkvRazorCacheBounded, FixedCapacityPresetHoldsAtMost256EntriesPerLocalHead) {
  std::mt19937_64 rng(6);
  const index_t heads = 2, dim = 8, prefill = 1000;
  const layer_tokens<float> all = random_tokens<float>(prefill + 700, heads, dim, rng);
  const razor_config config = razor_config::fixed_capacity();
  const head_plan plan = plan_with(1, 2, heads, dim, {{0, 0}});
  razor_kv_cache<float> cache(plan, config);
  cache.compress_layer(0, all.key_view(0, prefill), all.value_view(0, prefill));
  const index_t allocated = cache.allocated_bytes();
  for (index_t t = prefill; t < prefill + 700; ++t) {
    cache.append(0, all.key_view(t, 1), all.value_view(t, 1));
    ASSERT_EQ(cache.entries(0, 1), 256);
  }
  EXPECT_EQ(cache.entries(0, 0), prefill + 700);
  EXPECT_EQ(cache.compensation(0, 1).count, prefill + 700 - 255);
  // The retrieval head keeps every token, so the cache grew (that the local head allocates
  // nothing is counted by tests/alloc's replaced malloc).
  EXPECT_GT(cache.allocated_bytes(), allocated);
  razor_kv_cache<float> scratch(plan, config);
  scratch.compress_layer(0, all.key_view(), all.value_view());
  EXPECT_EQ(entries_of(scratch, 0, 1).size(), 256u);
  const auto got = entries_of(cache, 0, 1), want = entries_of(scratch, 0, 1);
  for (std::size_t e = 0; e < got.size(); ++e) {
    ASSERT_EQ(got[e].key, want[e].key) << "entry " << e;
    ASSERT_EQ(got[e].value, want[e].value) << "entry " << e;
    ASSERT_EQ(got[e].log_weight, want[e].log_weight) << "entry " << e;
  }
}

TYPED_TEST(RazorkvRazorCache, AppendModeKeepsEveryGeneratedToken) {
  using T = TypeParam;
  std::mt19937_64 rng(7);
  const index_t heads = 2, dim = 9, prefill = 300;
  const layer_tokens<T> all = random_tokens<T>(prefill + 90, heads, dim, rng);
  razor_config config;
  config.sinks = 4;
  config.s0 = 20;
  config.c = 10.0;
  config.decode_reserve = 16;
  // The default blocks, and blocks of 7 rows that a chunk of 40 tokens crosses several of.
  for (const index_t growth : {index_t{256}, index_t{7}}) {
    config.growth_rows = growth;
    razor_kv_cache<T> cache(plan_with(1, 2, heads, dim, {{0, 1}}), config);
    cache.compress_layer(0, all.key_view(0, prefill), all.value_view(0, prefill));
    const index_t dropped = cache.compensation(0, 0).count;
    index_t held = prefill;
    for (index_t chunk : {1, 1, 14, 1, 40, 33}) {
      cache.append(0, all.key_view(held, chunk), all.value_view(held, chunk));
      held += chunk;
      EXPECT_EQ(cache.num_tokens(0), held);
      EXPECT_EQ(cache.compensation(0, 0).count, dropped);  // nothing more is dropped
      EXPECT_EQ(cache.entries(0, 0), 4 + 1 + 30 + (held - prefill));
      EXPECT_EQ(cache.entries(0, 1), held);
      for (index_t h = 0; h < heads; ++h) {
        const auto got = entries_of(cache, 0, h);
        ASSERT_EQ(static_cast<index_t>(got.size()), cache.entries(0, h));
        for (index_t r = 0; r < held - prefill; ++r) {
          expect_row(got[got.size() - static_cast<std::size_t>(held - prefill - r)],
                     all.key(prefill + r, h), all.value(prefill + r, h), dim, "appended");
        }
      }
    }
  }
}

// What the cache will hold and allocate after k more tokens, foreseen before they come, in
// both decode modes; and a retrieval head that grew across blocks still decodes bit for bit as
// the dense cache.
TEST(RazorkvRazorCachePlanning, BytesAfterKTokensAreWhatKTokensMake) {
  std::mt19937_64 rng(8);
  const index_t heads = 3, dim = 16, prefill = 500, most = 700;
  const layer_tokens<float> all = random_tokens<float>(prefill + most, heads, dim, rng);
  for (const auto mode : {razorkv::decode_mode::kAppend, razorkv::decode_mode::kBounded}) {
    for (const auto compensation :
         {razorkv::compensation_mode::kWeighted, razorkv::compensation_mode::kNone}) {
      razor_config config;
      config.sinks = 4;
      config.fixed_window = 40;
      config.decode = mode;
      config.compensation = compensation;
      config.growth_rows = 128;
      razor_kv_cache<float> cache(plan_with(1, 6, heads, dim, {{0, 0}}), config);
      cache.compress_layer(0, all.key_view(0, prefill), all.value_view(0, prefill));
      for (const index_t k : std::vector<index_t>{0, 1, 3, 36, 37, 63, 64, 65, 300, most}) {
        razor_kv_cache<float> grown = cache;
        const index_t kv = grown.kv_bytes_after(k), allocated = grown.allocated_bytes_after(k);
        for (index_t t = prefill; t < prefill + k; ++t)
          grown.append(0, all.key_view(t, 1), all.value_view(t, 1));
        EXPECT_EQ(grown.kv_bytes(), kv) << razorkv::decode_mode_name(mode) << " k " << k;
        EXPECT_EQ(grown.allocated_bytes(), allocated)
            << razorkv::decode_mode_name(mode) << " k " << k;
      }
    }
  }
  RAZORKV_EXPECT_ERROR(
      razor_kv_cache<float>(plan_with(1, 6, heads, dim, {}), razor_config{}).kv_bytes_after(-1),
      kInvalidArgument, "tokens (-1) must be >= 0");
  // A cleared layer holds no token and grows no block (appends to it are errors), though it keeps
  // its buffers for the next compression: it adds nothing to what k more tokens make.
  {
    razor_config config;
    config.fixed_window = 40;
    config.growth_rows = 16;
    razor_kv_cache<float> cache(plan_with(2, 6, heads, dim, {{0, 0}, {1, 0}}), config);
    for (index_t l = 0; l < 2; ++l)
      cache.compress_layer(l, all.key_view(0, prefill), all.value_view(0, prefill));
    cache.clear(1);
    EXPECT_EQ(cache.kv_bytes_after(0), cache.kv_bytes());
    razor_kv_cache<float> grown = cache;
    const index_t kv = grown.kv_bytes_after(50), allocated = grown.allocated_bytes_after(50);
    grown.append(0, all.key_view(prefill, 50), all.value_view(prefill, 50));
    EXPECT_EQ(grown.kv_bytes(), kv);
    EXPECT_EQ(grown.allocated_bytes(), allocated);
  }

  // Decode reads a head's entries in blocks that ignore where its spans end, so any blocks
  // decode bit for bit as the dense cache: the default 256 rows after a 500-row room, and 7.
  razorkv::dense_kv_cache<float> dense(1, heads, dim);
  dense.append(0, all.key_view(0, prefill + most), all.value_view(0, prefill + most));
  const std::vector<float> queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(6 * dim), rng);
  std::vector<float> want(queries.size());
  razorkv::decode_attention(dense, 0, matrix_view<const float>(queries.data(), 6, dim),
                            matrix_view<float>(want.data(), 6, dim));
  for (const index_t growth : {index_t{256}, index_t{7}}) {
    razor_config config;
    config.fixed_window = 40;
    config.growth_rows = growth;
    razor_kv_cache<float> cache(plan_with(1, 6, heads, dim, {{0, 0}}), config);
    cache.compress_layer(0, all.key_view(0, prefill), all.value_view(0, prefill));
    cache.append(0, all.key_view(prefill, most), all.value_view(prefill, most));
    EXPECT_GE(cache.num_spans(0, 0), 3);  // the room compression left, then blocks
    std::vector<float> got(queries.size());
    razorkv::decode_attention(cache, 0, matrix_view<const float>(queries.data(), 6, dim),
                              matrix_view<float>(got.data(), 6, dim));
    for (index_t c = 0; c < 2 * dim; ++c) {  // query heads 0 and 1 read the retrieval head
      EXPECT_EQ(got[static_cast<std::size_t>(c)], want[static_cast<std::size_t>(c)])
          << "growth_rows " << growth << " column " << c;
    }
  }
}

// Folding 10 million tokens keeps the mean within 1e-6 relative of the exact mean.
TEST(RazorkvRazorCacheBounded, TenMillionFoldsKeepTheMeanAccurate) {
  const index_t dim = 8, total = 10'000'000, chunk = 1 << 16;
  razor_config config;
  config.sinks = 0;
  config.fixed_window = 1;
  config.decode = decode_mode::kBounded;
  razor_kv_cache<float> cache(plan_with(1, 1, 1, dim, {}), config);
  // Values near 1 + 0.25 * u (u uniform in [0, 1)), from a fixed generator: a float running
  // mean of these drifts by far more than 1e-6 after 10^7 steps.
  std::uint64_t state = 0x2545F4914F6CDD1Dull;
  const auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return 1.0f + 0.25f * static_cast<float>(state >> 40) / 16777216.0f;
  };
  std::vector<float> keys(static_cast<std::size_t>(chunk * dim)), values(keys.size());
  std::vector<long double> exact(static_cast<std::size_t>(2 * dim), 0.0L);
  std::vector<float> last(static_cast<std::size_t>(2 * dim));
  const std::vector<float> first_token(static_cast<std::size_t>(dim), 0.0f);
  cache.compress_layer(0, layer_view<const float>::nhd(first_token.data(), 1, 1, dim),
                       layer_view<const float>::nhd(first_token.data(), 1, 1, dim));
  for (index_t done = 0; done < total; done += chunk) {
    const index_t n = std::min(chunk, total - done);
    for (index_t i = 0; i < n * dim; ++i) {
      keys[static_cast<std::size_t>(i)] = next();
      values[static_cast<std::size_t>(i)] = -next();
    }
    // Every token but the newest is folded: the first (zero) token, then all but the last.
    for (index_t t = 0; t < n; ++t) {
      if (done + t == total - 1) break;
      for (index_t c = 0; c < dim; ++c) {
        exact[static_cast<std::size_t>(c)] += keys[static_cast<std::size_t>(t * dim + c)];
        exact[static_cast<std::size_t>(dim + c)] += values[static_cast<std::size_t>(t * dim + c)];
      }
    }
    cache.append(0, layer_view<const float>::nhd(keys.data(), n, 1, dim),
                 layer_view<const float>::nhd(values.data(), n, 1, dim));
  }
  const auto token = cache.compensation(0, 0);
  ASSERT_EQ(token.count, total);  // the zero token and total - 1 others
  EXPECT_EQ(cache.entries(0, 0), 2);
  for (index_t c = 0; c < dim; ++c) {
    const long double key_mean = exact[static_cast<std::size_t>(c)] / total;
    const long double value_mean = exact[static_cast<std::size_t>(dim + c)] / total;
    EXPECT_LT(std::fabs(static_cast<double>((token.key(0, c) - key_mean) / key_mean)), 1e-6)
        << "column " << c;
    EXPECT_LT(std::fabs(static_cast<double>((token.value(0, c) - value_mean) / value_mean)), 1e-6)
        << "column " << c;
    EXPECT_LT(std::fabs(static_cast<double>((token.key_sum[c] / total - key_mean) / key_mean)),
              1e-9)
        << "column " << c;
  }
}

// kv_bytes agrees exactly with the memory calculator for the same shapes and plan.
TYPED_TEST(RazorkvRazorCache, MemoryAccountingMatchesTheCalculator) {
  using T = TypeParam;
  std::mt19937_64 rng(8);
  const index_t layers = 3, heads = 4, dim = 16;
  head_plan plan = plan_with(layers, 8, heads, dim, {{0, 0}, {2, 3}, {1, 1}});
  plan.set_buffer_override(1, 2, 33);
  for (compensation_mode mode :
       {compensation_mode::kWeighted, compensation_mode::kUnweighted, compensation_mode::kNone}) {
    for (index_t tokens : {8, 60, 700}) {
      SCOPED_TRACE(testing::Message() << razorkv::compensation_mode_name(mode) << " N " << tokens);
      std::vector<layer_tokens<T>> source;
      for (index_t l = 0; l < layers; ++l)
        source.push_back(random_tokens<T>(tokens, heads, dim, rng));
      razor_config config;
      config.s0 = 40;
      config.c = 5.0;
      config.compensation = mode;
      const razor_kv_cache<T> cache = razorkv::compress_cache(dense_of(source), plan, config);
      const index_t bytes = static_cast<index_t>(sizeof(T));
      EXPECT_EQ(cache.kv_bytes(),
                razorkv::compressed_kv_bytes(plan, tokens, config.budget(), bytes));
      EXPECT_EQ(cache.dense_kv_bytes(), razorkv::full_kv_bytes(plan.shape(), tokens, bytes));
      EXPECT_DOUBLE_EQ(cache.compression_ratio(), static_cast<double>(cache.kv_bytes()) /
                                                      static_cast<double>(cache.dense_kv_bytes()));
      index_t per_head = 0;
      for (index_t l = 0; l < layers; ++l) {
        for (index_t h = 0; h < heads; ++h) {
          const index_t entries = plan.is_retrieval(l, h)
                                      ? tokens
                                      : razorkv::compressed_entries(tokens, config.budget(),
                                                                    plan.buffer_override(l, h));
          EXPECT_EQ(cache.kv_bytes(l, h), razorkv::head_kv_bytes(entries, dim, bytes));
          per_head += cache.kv_bytes(l, h);
        }
      }
      EXPECT_EQ(per_head, cache.kv_bytes());
      // Without reserve, allocation is what is held, plus the double sums behind the tokens.
      EXPECT_GE(cache.allocated_bytes(), cache.kv_bytes());
    }
  }
}

// NHD, padded NHD, HND with spare capacity, and the dtype-erased view give the same cache.
TYPED_TEST(RazorkvRazorCache, ReadsEngineLayoutsInPlace) {
  using T = TypeParam;
  std::mt19937_64 rng(9);
  const index_t heads = 3, dim = 7, tokens = 90, capacity = 101, padded = heads * dim + 5;
  const layer_tokens<T> source = random_tokens<T>(tokens, heads, dim, rng);
  std::vector<T> hnd_keys(static_cast<std::size_t>(heads * capacity * dim)),
      hnd_values(hnd_keys.size());
  std::vector<T> pad_keys(static_cast<std::size_t>(tokens * padded)), pad_values(pad_keys.size());
  for (index_t t = 0; t < tokens; ++t)
    for (index_t h = 0; h < heads; ++h)
      for (index_t c = 0; c < dim; ++c) {
        hnd_keys[static_cast<std::size_t>((h * capacity + t) * dim + c)] = source.key(t, h)[c];
        hnd_values[static_cast<std::size_t>((h * capacity + t) * dim + c)] = source.value(t, h)[c];
        pad_keys[static_cast<std::size_t>(t * padded + h * dim + c)] = source.key(t, h)[c];
        pad_values[static_cast<std::size_t>(t * padded + h * dim + c)] = source.value(t, h)[c];
      }
  razor_config config;
  config.sinks = 2;
  config.s0 = 20;
  const head_plan plan = plan_with(1, heads, heads, dim, {{0, 0}});
  razor_kv_cache<T> nhd(plan, config), hnd(plan, config), pad(plan, config), erased(plan, config);
  nhd.compress_layer(0, source.key_view(), source.value_view());
  hnd.compress_layer(0, layer_view<const T>::hnd(hnd_keys.data(), tokens, heads, dim, capacity),
                     layer_view<const T>::hnd(hnd_values.data(), tokens, heads, dim, capacity));
  pad.compress_layer(0, layer_view<const T>::nhd(pad_keys.data(), tokens, heads, dim, padded),
                     layer_view<const T>::nhd(pad_values.data(), tokens, heads, dim, padded));
  erased.compress_layer(0,
                        razorkv::any_layer_view::hnd(hnd_keys.data(), razorkv::dtype_of<T>(),
                                                     tokens, heads, dim, capacity),
                        razorkv::any_layer_view::hnd(hnd_values.data(), razorkv::dtype_of<T>(),
                                                     tokens, heads, dim, capacity));
  for (index_t h = 0; h < heads; ++h) {
    const auto want = entries_of(nhd, 0, h);
    for (const razor_kv_cache<T>* other : {&hnd, &pad, &erased}) {
      const auto got = entries_of(*other, 0, h);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t e = 0; e < got.size(); ++e) {
        ASSERT_EQ(got[e].key, want[e].key);
        ASSERT_EQ(got[e].value, want[e].value);
      }
    }
  }
}

// An engine's paged prefill behind the generic contract (pages of random length with padded
// rows) compresses to exactly what the contiguous prefill gives.
TYPED_TEST(RazorkvRazorCache, CompressesAPagedPrefillThroughTheContract) {
  using T = TypeParam;
  std::mt19937_64 rng(15);
  const index_t heads = 3, dim = 9, tokens = 257;
  const layer_tokens<T> source = random_tokens<T>(tokens, heads, dim, rng);
  razorkv_test::span_list_cache<T> paged(heads, dim);
  for (index_t h = 0; h < heads; ++h) {
    std::vector<T> k, v;
    for (index_t first = 0; first < tokens;) {
      const index_t page = std::min<index_t>(tokens - first, 1 + static_cast<index_t>(rng() % 40));
      k.clear();
      v.clear();
      for (index_t t = first; t < first + page; ++t) {
        k.insert(k.end(), source.key(t, h), source.key(t, h) + dim);
        v.insert(v.end(), source.value(t, h), source.value(t, h) + dim);
      }
      paged.add_span(h, k.data(), v.data(), page, 0.0f, static_cast<index_t>(rng() % 3));
      if (rng() % 4 == 0) paged.add_span(h, nullptr, nullptr, 0);
      first += page;
    }
  }
  for (decode_mode decode : {decode_mode::kAppend, decode_mode::kBounded}) {
    razor_config config;
    config.sinks = 5;
    config.s0 = 30;
    config.decode = decode;
    const head_plan plan = plan_with(1, heads, heads, dim, {{0, 2}});
    razor_kv_cache<T> from_pages(plan, config), from_view(plan, config);
    from_pages.compress_layer(0, paged);
    from_view.compress_layer(0, source.key_view(), source.value_view());
    for (index_t h = 0; h < heads; ++h) {
      const auto a = entries_of(from_pages, 0, h), b = entries_of(from_view, 0, h);
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t e = 0; e < a.size(); ++e) {
        ASSERT_EQ(a[e].key, b[e].key) << "head " << h << " entry " << e;
        ASSERT_EQ(a[e].value, b[e].value) << "head " << h << " entry " << e;
        ASSERT_EQ(a[e].log_weight, b[e].log_weight);
      }
    }
  }
  // A compressed cache is not a prefill.
  razorkv_test::span_list_cache<T> weighted(heads, dim);
  for (index_t h = 0; h < heads; ++h)
    weighted.add_span(h, source.key(0, h), source.value(0, h), 1, 2.0f);
  razor_config config;
  config.sinks = 0;
  razor_kv_cache<T> cache(plan_with(1, heads, heads, dim, {}), config);
  try {
    cache.compress_layer(0, weighted);
    ADD_FAILURE() << "expected an error";
  } catch (const razorkv::error& e) {
    EXPECT_NE(std::string(e.what()).find("has log_weight (2)"), std::string::npos) << e.what();
  }
  // Heads holding different numbers of tokens.
  razorkv_test::span_list_cache<T> ragged(heads, dim);
  for (index_t h = 0; h < heads; ++h)
    ragged.add_span(h, source.keys.data(), source.values.data(), 1 + h);
  try {
    cache.compress_layer(0, ragged);
    ADD_FAILURE() << "expected an error";
  } catch (const razorkv::error& e) {
    EXPECT_NE(
        std::string(e.what()).find("kv head 1 of the prefill holds 2 tokens, kv head 0 holds 1"),
        std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(cache.is_compressed(0));
}

// A caller's parallel-for hook runs the per-head work; the result does not depend on it.
TEST(RazorkvRazorCacheParallel, HookRunsEveryHeadOnce) {
  std::mt19937_64 rng(10);
  const index_t heads = 5, dim = 8, tokens = 200;
  const layer_tokens<float> source = random_tokens<float>(tokens, heads, dim, rng);
  razor_config config;
  config.s0 = 20;
  const head_plan plan = plan_with(1, heads, heads, dim, {{0, 4}});
  index_t calls = 0;
  razor_kv_cache<float> hooked(plan, config), plain(plan, config);
  hooked.compress_layer(0, source.key_view(), source.value_view(),
                        [&](index_t count, const std::function<void(index_t)>& body) {
                          ++calls;
                          for (index_t i = count - 1; i >= 0; --i) body(i);  // any order
                        });
  plain.compress_layer(0, source.key_view(), source.value_view());
  EXPECT_EQ(calls, 1);
  for (index_t h = 0; h < heads; ++h) {
    const auto a = entries_of(hooked, 0, h), b = entries_of(plain, 0, h);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t e = 0; e < a.size(); ++e) {
      ASSERT_EQ(a[e].key, b[e].key) << "entry " << e;
      ASSERT_EQ(a[e].value, b[e].value) << "entry " << e;
      ASSERT_EQ(a[e].log_weight, b[e].log_weight) << "entry " << e;
    }
  }
}

// clear() keeps the buffers: compressing another sequence of no more tokens allocates nothing
// and gives exactly what a new cache gives, whatever state (wrapped rings, grown windows) the
// previous sequence left.
TEST(RazorkvRazorCacheValue, ClearReusesBuffersAndRecompressesExactly) {
  std::mt19937_64 rng(14);
  const index_t heads = 3, dim = 8;
  const layer_tokens<float> first = random_tokens<float>(500, heads, dim, rng);
  const layer_tokens<float> second = random_tokens<float>(300, heads, dim, rng);
  for (decode_mode decode : {decode_mode::kAppend, decode_mode::kBounded}) {
    SCOPED_TRACE(razorkv::decode_mode_name(decode));
    razor_config config;
    config.s0 = 20;
    config.decode = decode;
    const head_plan plan = plan_with(1, heads, heads, dim, {{0, 1}});
    razor_kv_cache<float> reused(plan, config);
    reused.compress_layer(0, first.key_view(0, 400), first.value_view(0, 400));
    reused.append(0, first.key_view(400, 100), first.value_view(400, 100));
    const index_t allocated = reused.allocated_bytes();
    reused.clear();
    EXPECT_FALSE(reused.is_compressed(0));
    EXPECT_EQ(reused.num_spans(0, 0), 0);
    EXPECT_EQ(reused.kv_bytes(), 0);
    reused.compress_layer(0, second.key_view(), second.value_view());
    EXPECT_EQ(reused.allocated_bytes(), allocated);
    razor_kv_cache<float> fresh(plan, config);
    fresh.compress_layer(0, second.key_view(), second.value_view());
    for (index_t h = 0; h < heads; ++h) {
      const auto a = entries_of(reused, 0, h), b = entries_of(fresh, 0, h);
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t e = 0; e < a.size(); ++e) {
        ASSERT_EQ(a[e].key, b[e].key);
        ASSERT_EQ(a[e].value, b[e].value);
        ASSERT_EQ(a[e].log_weight, b[e].log_weight);
      }
      EXPECT_EQ(reused.compensation(0, h).count, fresh.compensation(0, h).count);
    }
  }
}

// Copies are deep: appending to one leaves the other as it was.
TEST(RazorkvRazorCacheValue, CopiesAreIndependent) {
  std::mt19937_64 rng(13);
  const layer_tokens<float> source = random_tokens<float>(64, 2, 4, rng);
  razor_config config;
  config.s0 = 8;
  config.decode = decode_mode::kBounded;
  razor_kv_cache<float> a(plan_with(1, 2, 2, 4, {}), config);
  a.compress_layer(0, source.key_view(0, 40), source.value_view(0, 40));
  const razor_kv_cache<float> b = a;
  a.append(0, source.key_view(40, 24), source.value_view(40, 24));
  EXPECT_EQ(b.num_tokens(0), 40);
  EXPECT_EQ(a.num_tokens(0), 64);
  EXPECT_EQ(b.compensation(0, 0).count, 40 - 4 - 8);
  EXPECT_EQ(a.compensation(0, 0).count, 64 - 4 - 8);
}

}  // namespace
