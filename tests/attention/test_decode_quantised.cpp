// Tests of caches that store 8-/4-bit rows (kv_storage): the kernels' dequantiser against the
// scalar one, decode and prefill over dense and razor caches against the double reference (which
// reads the rows as the values they stand for), each stored row within half a step of the token
// it holds, rotated keys giving the logits of unrotated ones, memory counted in blocks, errors.
#include <gtest/gtest.h>

#include <razorkv/attention/decode.hpp>
#include <razorkv/attention/prefill.hpp>
#include <razorkv/attention/reference.hpp>
#include <razorkv/cache/any_cache.hpp>
#include <razorkv/cache/dense_cache.hpp>
#include <razorkv/compress/kv_memory.hpp>
#include <razorkv/compress/razor_cache.hpp>
#include <razorkv/compress/razor_state.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "support/counting_resource.hpp"
#include "support/expect_error.hpp"
#include "support/random_heads.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::kv_storage;
using razorkv::layer_view;
using razorkv::row_format;

constexpr row_format kQ8 = row_format::kQ8, kQ4 = row_format::kQ4;

// The storages every test runs: each side alone, both, and both with rotated keys.
std::vector<kv_storage> storages() {
  return {kv_storage{kQ8, kQ8, false},          kv_storage{kQ4, kQ4, false},
          kv_storage{kQ8, std::nullopt, false}, kv_storage{std::nullopt, kQ4, false},
          kv_storage{kQ4, kQ8, true},           kv_storage{std::nullopt, std::nullopt, true}};
}

template <class T>
std::vector<T> random_tokens(index_t tokens, index_t heads, index_t dim, std::mt19937_64& rng,
                             double stddev = 1.0) {
  auto values =
      razorkv_test::random_values<T>(static_cast<std::size_t>(tokens * heads * dim), rng, stddev);
  // An outlier channel in every head, as real keys have: what sets a block's scale.
  for (index_t t = 0; t < tokens; ++t)
    for (index_t h = 0; h < heads; ++h)
      values[static_cast<std::size_t>((t * heads + h) * dim + 3)] = static_cast<T>(8.0 * stddev);
  return values;
}

template <class T>
layer_view<const T> nhd(const std::vector<T>& v, index_t heads, index_t dim) {
  return layer_view<const T>::nhd(v.data(), static_cast<index_t>(v.size()) / (heads * dim), heads,
                                  dim);
}

// decode_attention_multi over layer 0 of `cache` with `tokens` random queries per query head,
// against the reference over the same spans.
template <class Cache>
void expect_decode_matches_reference(const Cache& cache, index_t query_heads, index_t tokens,
                                     std::mt19937_64& rng, index_t entries_per_task = 0) {
  using T = typename Cache::value_type;
  using Acc = razorkv::accum_t<T>;
  const index_t dim = cache.head_dim();
  const auto queries =
      razorkv_test::random_values<Acc>(static_cast<std::size_t>(tokens * query_heads * dim), rng);
  std::vector<Acc> out(queries.size());
  razorkv::attention_options options;
  options.max_entries_per_task = entries_per_task;
  const auto q = layer_view<const Acc>::nhd(queries.data(), tokens, query_heads, dim);
  razorkv::decode_attention_multi(
      cache, 0, q, layer_view<Acc>::nhd(out.data(), tokens, query_heads, dim), options);
  const auto expected = razorkv::reference::decode_attention_multi(cache, 0, q);
  EXPECT_LE(razorkv_test::max_abs_diff(out, expected),
            razorkv_test::attention_tolerance<T>(razorkv_test::max_abs(expected)));
}

template <class T>
class RazorkvQuantised : public ::testing::Test {};
TYPED_TEST_SUITE(RazorkvQuantised, razorkv_test::storage_dtypes);

TEST(RazorkvQuantisedKernels, DequantiseRowsEqualsTheScalarDequantiser) {
  std::mt19937_64 rng(20261207);
  for (const row_format f : {kQ8, kQ4}) {
    for (const index_t dim : {32, 64, 96, 128, 256}) {
      const index_t rows = 21, row_bytes = razorkv::quantised_row_bytes(f, dim);
      const index_t stride = row_bytes + 6;  // padded rows
      std::vector<std::uint8_t> stored(static_cast<std::size_t>(rows * stride));
      const auto values =
          razorkv_test::random_values<float>(static_cast<std::size_t>(rows * dim), rng, 3.0);
      for (index_t r = 0; r < rows; ++r)
        razorkv::quantise_row(f, values.data() + r * dim, dim, stored.data() + r * stride);
      const razorkv::quantised_rows view{stored.data(), rows, dim, stride, f};
      std::vector<float> got(static_cast<std::size_t>(rows * dim)), want(got.size());
      razorkv::detail::dequantise_rows(view, 2, rows - 2, got.data());
      for (index_t r = 2; r < rows; ++r)
        razorkv::dequantise_row(f, view.row(r), dim, want.data() + (r - 2) * dim);
      got.resize(static_cast<std::size_t>((rows - 2) * dim));
      want.resize(got.size());
      EXPECT_EQ(got, want) << razorkv::row_format_name(f) << " dim " << dim;
    }
  }
}

TYPED_TEST(RazorkvQuantised, DenseCacheDecodesAsTheReferenceOverItsStoredRows) {
  using T = TypeParam;
  constexpr index_t kKvHeads = 2;
  for (const kv_storage& storage : storages()) {
    for (const index_t dim : {64, 128}) {
      for (const index_t group : {1, 2, 4, 8}) {
        SCOPED_TRACE(::testing::Message()
                     << razorkv::dtype_name<T>() << " " << razorkv::describe(storage) << " dim "
                     << dim << " group " << group);
        std::mt19937_64 rng(static_cast<std::uint64_t>(dim * 31 + group));
        razorkv::dense_kv_cache<T> cache(1, kKvHeads, dim, 0, nullptr, storage);
        const index_t tokens = group == 4 ? 700 : 300;  // across decode's 256-row blocks
        const auto keys = random_tokens<T>(tokens, kKvHeads, dim, rng);
        const auto values = random_tokens<T>(tokens, kKvHeads, dim, rng);
        cache.append(0, nhd(keys, kKvHeads, dim), nhd(values, kKvHeads, dim));
        EXPECT_EQ(cache.kv_bytes(),
                  razorkv::full_kv_bytes(razorkv::model_shape{1, kKvHeads, kKvHeads, dim}, tokens,
                                         sizeof(T), storage));
        expect_decode_matches_reference(cache, kKvHeads * group, 1, rng);
        expect_decode_matches_reference(cache, kKvHeads * group, 3, rng, 128);  // split heads
      }
    }
  }
}

TYPED_TEST(RazorkvQuantised, StoredRowsAreWithinHalfAStepOfTheirTokens) {
  using T = TypeParam;
  constexpr index_t kKvHeads = 2, kDim = 64, kTokens = 50;
  std::mt19937_64 rng(5);
  const auto keys = random_tokens<T>(kTokens, kKvHeads, kDim, rng);
  const auto values = random_tokens<T>(kTokens, kKvHeads, kDim, rng);
  for (const kv_storage& storage : storages()) {
    if (storage.rotate_keys) continue;  // stored rotated: compared in the rotation test
    SCOPED_TRACE(razorkv::describe(storage));
    razorkv::dense_kv_cache<T> cache(1, kKvHeads, kDim, 0, nullptr, storage);
    cache.append(0, nhd(keys, kKvHeads, kDim), nhd(values, kKvHeads, kDim));
    for (index_t h = 0; h < kKvHeads; ++h) {
      const razorkv::kv_span<T> span = cache.span(0, h, 0);
      for (const bool is_key : {true, false}) {
        const razorkv::kv_rows<T>& rows = is_key ? span.keys : span.values;
        const std::vector<T>& source = is_key ? keys : values;
        const std::optional<row_format>& format = is_key ? storage.keys : storage.values;
        std::vector<double> stored(static_cast<std::size_t>(kTokens * kDim));
        rows.widen_rows(0, kTokens, stored.data());
        for (index_t t = 0; t < kTokens; ++t) {
          for (index_t b = 0; b < kDim / razorkv::kQuantBlock; ++b) {
            // A block's step: its largest magnitude / 127 (q8) or / 8 (q4); 0 for rows of T.
            // (max_element, not a running fmax: aarch64 GCC 12's vectoriser crashes on that.)
            std::vector<double> magnitudes;
            for (index_t i = 0; i < razorkv::kQuantBlock; ++i) {
              const index_t c = b * razorkv::kQuantBlock + i;
              magnitudes.push_back(std::fabs(razorkv_test::to_double(
                  source[static_cast<std::size_t>((t * kKvHeads + h) * kDim + c)])));
            }
            const double largest = *std::max_element(magnitudes.begin(), magnitudes.end());
            const double step = !format ? 0.0 : largest / (*format == kQ8 ? 127.0 : 8.0);
            for (index_t i = 0; i < razorkv::kQuantBlock; ++i) {
              const index_t c = b * razorkv::kQuantBlock + i;
              const double x = razorkv_test::to_double(
                  source[static_cast<std::size_t>((t * kKvHeads + h) * kDim + c)]);
              // q4's one clamped value may be a whole step off; the scale's rounding to binary16
              // adds a relative 2^-11 of the value.
              const double bound =
                  (format == kQ4 ? 1.0 : 0.5) * step * (1 + 1e-3) + std::fabs(x) * 1e-3;
              EXPECT_LE(std::fabs(stored[static_cast<std::size_t>(t * kDim + c)] - x), bound)
                  << (is_key ? "key" : "value") << " token " << t << " head " << h << " dim " << c;
            }
          }
        }
      }
    }
    // Memory is counted in the stored rows' bytes.
    const index_t element = static_cast<index_t>(sizeof(T));
    EXPECT_EQ(cache.kv_bytes(),
              kTokens * kKvHeads *
                  (storage.key_row_bytes(kDim, element) + storage.value_row_bytes(kDim, element)));
    EXPECT_EQ(cache.kv_bytes(), razorkv::held_kv_bytes(cache));
  }
}

TYPED_TEST(RazorkvQuantised, RotatedKeysGiveTheLogitsOfUnrotatedOnes) {
  using T = TypeParam;
  using Acc = razorkv::accum_t<T>;
  constexpr index_t kKvHeads = 2, kQueryHeads = 8, kDim = 128, kTokens = 90;
  std::mt19937_64 rng(11);
  const auto keys = random_tokens<T>(kTokens, kKvHeads, kDim, rng);
  const auto values = random_tokens<T>(kTokens, kKvHeads, kDim, rng);
  razorkv::dense_kv_cache<T> plain(1, kKvHeads, kDim);
  razorkv::dense_kv_cache<T> rotated(1, kKvHeads, kDim, 0, nullptr,
                                     kv_storage{std::nullopt, std::nullopt, true});
  plain.append(0, nhd(keys, kKvHeads, kDim), nhd(values, kKvHeads, kDim));
  rotated.append(0, nhd(keys, kKvHeads, kDim), nhd(values, kKvHeads, kDim));
  EXPECT_TRUE(rotated.span(0, 1, 0).rotated_keys);
  EXPECT_FALSE(plain.span(0, 1, 0).rotated_keys);
  // Through a wrapper that knows nothing of rotation, too: the spans say it.
  const razorkv::any_kv_cache<T> wrapped(rotated);
  const auto queries = razorkv_test::random_values<Acc>(kQueryHeads * kDim, rng);
  const auto q = razorkv::matrix_view<const Acc>(queries.data(), kQueryHeads, kDim);
  std::vector<Acc> a(queries.size()), b(queries.size());
  razorkv::decode_attention(plain, 0, q, razorkv::matrix_view<Acc>(a.data(), kQueryHeads, kDim));
  razorkv::decode_attention(wrapped, 0, q, razorkv::matrix_view<Acc>(b.data(), kQueryHeads, kDim));
  // The rotated keys are rounded to T once more: the outputs agree to T's rounding.
  const double tolerance = std::is_same_v<T, double>        ? 1e-12
                           : std::is_same_v<T, float>       ? 1e-5
                           : std::is_same_v<T, Eigen::half> ? 2e-2
                                                            : 1.5e-1;
  EXPECT_LE(razorkv_test::max_abs_diff(a, b), tolerance);
}

TYPED_TEST(RazorkvQuantised, RazorCacheStoresWindowsAndRetrievalHeadsAsConfigured) {
  using T = TypeParam;
  constexpr index_t kKvHeads = 3, kQueryHeads = 6, kDim = 64, kPrompt = 400;
  razorkv::head_plan plan(razorkv::model_shape{1, kQueryHeads, kKvHeads, kDim});
  plan.set_retrieval(0, 1, true);
  for (const razorkv::decode_mode mode :
       {razorkv::decode_mode::kAppend, razorkv::decode_mode::kBounded}) {
    for (const kv_storage& storage : storages()) {
      SCOPED_TRACE(::testing::Message()
                   << razorkv::describe(storage) << " " << razorkv::decode_mode_name(mode));
      std::mt19937_64 rng(17);
      razorkv::razor_config config;
      config.sinks = 4;
      config.fixed_window = 100;
      config.decode = mode;
      config.storage = storage;
      razorkv::razor_kv_cache<T> cache(plan, config);
      const auto keys = random_tokens<T>(kPrompt, kKvHeads, kDim, rng);
      const auto values = random_tokens<T>(kPrompt, kKvHeads, kDim, rng);
      cache.compress_layer(0, nhd(keys, kKvHeads, kDim), nhd(values, kKvHeads, kDim));
      // The memory calculator counts what the cache holds: sinks and mean as T, blocks as stored.
      EXPECT_EQ(cache.kv_bytes(),
                razorkv::compressed_kv_bytes(plan, kPrompt, config.budget(), sizeof(T)));
      expect_decode_matches_reference(cache, kQueryHeads, 1, rng);
      // Decode 150 tokens: windows slide (bounded: folding stored rows), heads grow in blocks.
      for (index_t step = 0; step < 150; ++step) {
        const auto k = random_tokens<T>(1, kKvHeads, kDim, rng);
        const auto v = random_tokens<T>(1, kKvHeads, kDim, rng);
        cache.append(0, nhd(k, kKvHeads, kDim), nhd(v, kKvHeads, kDim));
      }
      expect_decode_matches_reference(cache, kQueryHeads, 1, rng);
      expect_decode_matches_reference(cache, kQueryHeads, 4, rng, 64);
      // Sinks and compensation tokens stay T; the rest is stored as configured.
      const razorkv::kv_span<T> sinks = cache.span(0, 0, 0), mean = cache.span(0, 0, 1);
      EXPECT_FALSE(sinks.keys.is_quantised() || sinks.values.is_quantised());
      EXPECT_NE(mean.log_weight, 0.0f);
      EXPECT_FALSE(mean.keys.is_quantised() || mean.values.is_quantised());
      for (const index_t h : {0, 1}) {
        const razorkv::kv_span<T> last = cache.span(0, h, cache.num_spans(0, h) - 1);
        EXPECT_EQ(last.keys.is_quantised(), storage.keys.has_value()) << "kv head " << h;
        EXPECT_EQ(last.values.is_quantised(), storage.values.has_value()) << "kv head " << h;
      }
      EXPECT_EQ(cache.kv_bytes(), razorkv::held_kv_bytes(cache));
      EXPECT_EQ(cache.kv_bytes_after(0), cache.kv_bytes());
    }
  }
  // Retrieval heads in a storage of their own: 8-bit beside 4-bit windows.
  razorkv::razor_config split;
  split.fixed_window = 100;
  split.storage = kv_storage::both(kQ4, true);
  split.retrieval_storage = kv_storage::both(kQ8, true);
  razorkv::razor_kv_cache<T> cache(plan, split);
  std::mt19937_64 rng(19);
  const auto keys = random_tokens<T>(kPrompt, kKvHeads, kDim, rng);
  cache.compress_layer(0, nhd(keys, kKvHeads, kDim), nhd(keys, kKvHeads, kDim));
  expect_decode_matches_reference(cache, kQueryHeads, 1, rng);
  EXPECT_EQ(cache.span(0, 0, 2).keys.quantised().format, kQ4);  // [sinks | mean | window]
  EXPECT_EQ(cache.span(0, 1, 0).keys.quantised().format, kQ8);  // the retrieval head
  EXPECT_EQ(cache.kv_bytes(), razorkv::held_kv_bytes(cache));
  EXPECT_EQ(cache.kv_bytes(),
            razorkv::compressed_kv_bytes(plan, kPrompt, split.budget(), sizeof(T)));
  // A prompt shorter than sinks and window: the sinks stay T, the rest is stored as configured.
  cache.clear();
  cache.compress_layer(0, nhd(keys, kKvHeads, kDim).middle_tokens(0, 50),
                       nhd(keys, kKvHeads, kDim).middle_tokens(0, 50));
  EXPECT_EQ(cache.kv_bytes(), razorkv::compressed_kv_bytes(plan, 50, split.budget(), sizeof(T)));
  split.retrieval_storage->rotate_keys = false;
  RAZORKV_EXPECT_ERROR(razorkv::razor_kv_cache<T>(plan, split), kInvalidArgument,
                       "a cache rotates all its keys or none");
}

TYPED_TEST(RazorkvQuantised, ChunkedPrefillReadsQuantisedWindows) {
  using T = TypeParam;
  using Acc = razorkv::accum_t<T>;
  constexpr index_t kKvHeads = 2, kQueryHeads = 4, kDim = 64, kChunk = 40;
  razorkv::head_plan plan(razorkv::model_shape{1, kQueryHeads, kKvHeads, kDim});
  plan.set_retrieval(0, 0, true);
  razorkv::razor_config config;
  config.sinks = 4;
  config.fixed_window = 64;
  config.storage = kv_storage{kQ4, kQ8, true};
  razorkv::razor_kv_cache<T> cache(plan, config);
  std::mt19937_64 rng(23);
  for (int chunk = 0; chunk < 5; ++chunk) {
    const auto k = random_tokens<T>(kChunk, kKvHeads, kDim, rng);
    const auto v = random_tokens<T>(kChunk, kKvHeads, kDim, rng);
    cache.compress_chunk(0, nhd(k, kKvHeads, kDim), nhd(v, kKvHeads, kDim));
    const auto queries = razorkv_test::random_values<Acc>(
        static_cast<std::size_t>(kChunk * kQueryHeads * kDim), rng);
    std::vector<Acc> out(queries.size());
    const auto q = layer_view<const Acc>::nhd(queries.data(), kChunk, kQueryHeads, kDim);
    razorkv::prefill_attention(cache, 0, q,
                               layer_view<Acc>::nhd(out.data(), kChunk, kQueryHeads, kDim));
    const auto expected = razorkv::reference::decode_attention_multi(cache, 0, q);
    EXPECT_LE(razorkv_test::max_abs_diff(out, expected),
              razorkv_test::attention_tolerance<T>(razorkv_test::max_abs(expected)))
        << "chunk " << chunk;
  }
}

TEST(RazorkvQuantisedKernels, ANanReadsBackAsNanAndAnInfinityClamps) {
  constexpr index_t kDim = 64;
  for (const row_format f : {kQ8, kQ4}) {
    razorkv::dense_kv_cache<float> cache(1, 1, kDim, 0, nullptr, kv_storage::both(f));
    std::vector<float> keys(kDim, 1.0f), values(kDim, 1.0f);
    keys[5] = std::numeric_limits<float>::quiet_NaN();
    values[40] = std::numeric_limits<float>::infinity();
    cache.append(0, nhd(keys, 1, kDim), nhd(values, 1, kDim));
    std::vector<float> k(kDim), v(kDim);
    cache.span(0, 0, 0).keys.widen_rows(0, 1, k.data());
    cache.span(0, 0, 0).values.widen_rows(0, 1, v.data());
    for (index_t c = 0; c < kDim; ++c) {
      // The NaN's block is NaN; the other block reads back its ones.
      EXPECT_EQ(std::isnan(k[static_cast<std::size_t>(c)]), c < razorkv::kQuantBlock) << c;
    }
    // The infinity's block saturates at binary16's largest scale: finite, the rest rounds to 0.
    EXPECT_TRUE(std::isfinite(v[40]));
    EXPECT_GE(v[40], 60000.0f);
    EXPECT_NEAR(v[0], 1.0f, 1e-3f);
  }
}

TEST(RazorkvQuantisedKernels, ACompressionAfterClearReusesTheQuantisedBuffers) {
  constexpr index_t kKvHeads = 2, kDim = 64, kPrompt = 300;
  razorkv::head_plan plan(razorkv::model_shape{1, 4, kKvHeads, kDim});
  plan.set_retrieval(0, 1, true);
  razorkv::razor_config config;
  config.fixed_window = 64;
  config.storage = kv_storage::both(kQ4, true);
  config.retrieval_storage = kv_storage::both(kQ8, true);
  razorkv_test::counting_resource memory;
  razorkv::razor_kv_cache<float> cache(plan, config, &memory);
  std::mt19937_64 rng(29);
  const auto keys = random_tokens<float>(kPrompt, kKvHeads, kDim, rng);
  cache.compress_layer(0, nhd(keys, kKvHeads, kDim), nhd(keys, kKvHeads, kDim));
  const long allocations = memory.allocations;
  cache.clear();
  cache.compress_layer(0, nhd(keys, kKvHeads, kDim), nhd(keys, kKvHeads, kDim));
  EXPECT_EQ(memory.allocations, allocations);
}

TEST(RazorkvQuantisedErrors, StorageTheCacheCannotHoldIsANamedError) {
  RAZORKV_EXPECT_ERROR(razorkv::dense_kv_cache<float>(1, 1, 48, 0, nullptr, kv_storage::both(kQ8)),
                       kInvalidArgument, "head_dim (48) a multiple of 32");
  RAZORKV_EXPECT_ERROR(
      razorkv::dense_kv_cache<float>(1, 1, 96, 0, nullptr, kv_storage::both(kQ4, true)),
      kInvalidArgument, "rotate_keys needs a power-of-two head_dim, not 96");
  RAZORKV_EXPECT_ERROR(
      razorkv::dense_kv_cache<float>(1, 1, 64, 0, nullptr,
                                     kv_storage{static_cast<row_format>(7), std::nullopt, false}),
      kInvalidArgument, "storage.keys (7) is not q8 or q4");
  razorkv::head_plan plan(razorkv::model_shape{1, 2, 1, 80});
  razorkv::razor_config config;
  config.storage.values = kQ4;
  RAZORKV_EXPECT_ERROR(razorkv::razor_kv_cache<float>(plan, config), kInvalidArgument,
                       "storage.values is q4, which needs head_dim (80)");
}

// A source of the caller's whose one span holds quantised rows as given.
struct one_quantised_span {
  using value_type = float;
  razorkv::kv_span<float> held;
  index_t num_layers() const { return 1; }
  index_t num_kv_heads() const { return 1; }
  index_t head_dim() const { return held.keys.cols(); }
  index_t num_spans(index_t, index_t) const { return 1; }
  razorkv::kv_span<float> span(index_t, index_t, index_t) const { return held; }
};

TEST(RazorkvQuantisedErrors, MalformedQuantisedRowsOfASourceAreNamedErrors) {
  constexpr index_t kDim = 64;
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(4 * 68));
  std::vector<float> q(2 * kDim, 0.5f), out(q.size());
  const auto decode = [&](const razorkv::quantised_rows& keys) {
    const razorkv::quantised_rows values{bytes.data(), 4, kDim, 68, kQ8};
    const one_quantised_span source{
        {razorkv::kv_rows<float>(keys), razorkv::kv_rows<float>(values), 0.0f, false}};
    razorkv::decode_attention(source, 0, razorkv::matrix_view<const float>(q.data(), 2, kDim),
                              razorkv::matrix_view<float>(out.data(), 2, kDim));
  };
  EXPECT_NO_THROW(decode({bytes.data(), 4, kDim, 68, kQ8}));
  std::fill(out.begin(), out.end(), 7.0f);  // what a failed call must leave as it is
  RAZORKV_EXPECT_ERROR(decode({bytes.data(), 4, kDim, 60, kQ8}), kInvalidArgument,
                       "quantised keys has a stride of 60 bytes, less than a row's 68");
  RAZORKV_EXPECT_ERROR(decode({nullptr, 4, kDim, 68, kQ8}), kInvalidArgument,
                       "quantised keys has 4 rows and no data");
  RAZORKV_EXPECT_ERROR(decode({bytes.data(), 4, kDim, 68, static_cast<row_format>(9)}),
                       kInvalidArgument, "has row format 9, not q8 or q4");
  EXPECT_EQ(out, std::vector<float>(q.size(), 7.0f));
}

TEST(RazorkvQuantisedErrors, ReadersOfRowsOfTOnlyNameTheFormat) {
  constexpr index_t kDim = 64;
  std::mt19937_64 rng(3);
  razorkv::dense_kv_cache<float> dense(1, 1, kDim, 0, nullptr, kv_storage{kQ8, std::nullopt});
  const auto k = random_tokens<float>(10, 1, kDim, rng);
  dense.append(0, nhd(k, 1, kDim), nhd(k, 1, kDim));
  RAZORKV_EXPECT_ERROR(dense.keys(0), kInvalidArgument, "stored as q8 blocks");
  EXPECT_NO_THROW(dense.values(0));
  // A razor cache compresses from a source's rows of T only.
  razorkv::head_plan plan(razorkv::model_shape{1, 1, 1, kDim});
  razorkv::razor_kv_cache<float> razor(plan, razorkv::razor_config{});
  RAZORKV_EXPECT_ERROR(razor.compress_layer(0, dense), kInvalidArgument,
                       "razor_kv_cache::compress_layer: rows stored as q8 blocks");
}

// A saved quantised cache comes back byte for byte (its blocks are copied, never quantised
// again): the same state, the same spans, the same decode bit for bit, then the same appends.
TYPED_TEST(RazorkvQuantised, SaveAndRestoreKeepTheStoredBlocks) {
  using T = TypeParam;
  using Acc = razorkv::accum_t<T>;
  constexpr index_t kKvHeads = 3, kQueryHeads = 6, kDim = 64;
  razorkv::head_plan plan(razorkv::model_shape{2, kQueryHeads, kKvHeads, kDim});
  plan.set_retrieval(0, 1, true);
  plan.set_retrieval(1, 2, true);
  std::vector<kv_storage> configs = storages();
  configs.push_back(kv_storage::both(kQ4, true));  // with 8-bit retrieval heads, below
  for (const razorkv::decode_mode mode :
       {razorkv::decode_mode::kAppend, razorkv::decode_mode::kBounded}) {
    for (std::size_t i = 0; i < configs.size(); ++i) {
      SCOPED_TRACE(::testing::Message()
                   << razorkv::describe(configs[i]) << " " << razorkv::decode_mode_name(mode));
      razorkv::razor_config config;
      config.sinks = 4;
      config.fixed_window = 40;
      config.decode = mode;
      config.growth_rows = 16;
      config.storage = configs[i];
      if (i + 1 == configs.size()) config.retrieval_storage = kv_storage::both(kQ8, true);
      razorkv::razor_kv_cache<T> original(plan, config);
      std::mt19937_64 rng(31);
      const auto k = random_tokens<T>(120, kKvHeads, kDim, rng);
      const auto v = random_tokens<T>(120, kKvHeads, kDim, rng);
      for (index_t first = 0; first < 100; first += 25) {  // layer 0 in chunks: a wrapped ring
        original.compress_chunk(0, nhd(k, kKvHeads, kDim).middle_tokens(first, 25),
                                nhd(v, kKvHeads, kDim).middle_tokens(first, 25));
      }
      original.compress_layer(1, nhd(k, kKvHeads, kDim).middle_tokens(0, 100),
                              nhd(v, kKvHeads, kDim).middle_tokens(0, 100));
      for (index_t t = 100; t < 120; ++t) {  // blocks chained, windows slid
        for (index_t l = 0; l < 2; ++l) {
          original.append(l, nhd(k, kKvHeads, kDim).middle_tokens(t, 1),
                          nhd(v, kKvHeads, kDim).middle_tokens(t, 1));
        }
      }
      const std::vector<std::uint8_t> bytes = razorkv::save_state(original);
      razorkv::razor_kv_cache<T> restored = razorkv::restore_state<T>(bytes);
      EXPECT_EQ(razorkv::save_state(restored), bytes);
      EXPECT_EQ(restored.kv_bytes(), original.kv_bytes());
      EXPECT_EQ(restored.allocated_bytes(), original.allocated_bytes());
      const auto queries =
          razorkv_test::random_values<Acc>(static_cast<std::size_t>(kQueryHeads * kDim), rng);
      const razorkv::matrix_view<const Acc> q(queries.data(), kQueryHeads, kDim);
      for (index_t step = 0; step < 2; ++step) {
        for (index_t l = 0; l < 2; ++l) {
          std::vector<Acc> got(queries.size()), want(queries.size());
          razorkv::decode_attention(restored, l, q,
                                    razorkv::matrix_view<Acc>(got.data(), kQueryHeads, kDim));
          razorkv::decode_attention(original, l, q,
                                    razorkv::matrix_view<Acc>(want.data(), kQueryHeads, kDim));
          ASSERT_EQ(got, want) << "layer " << l << " step " << step;
          const auto next = random_tokens<T>(1, kKvHeads, kDim, rng);
          restored.append(l, nhd(next, kKvHeads, kDim), nhd(next, kKvHeads, kDim));
          original.append(l, nhd(next, kKvHeads, kDim), nhd(next, kKvHeads, kDim));
        }
      }
      EXPECT_EQ(razorkv::save_state(restored), razorkv::save_state(original));
    }
  }
}

// The storage fields of a state are checked like the rest of it.
TEST(RazorkvQuantisedErrors, AStateWithStorageItCannotHoldIsANamedError) {
  constexpr index_t kDim = 64;
  razorkv::head_plan plan(razorkv::model_shape{1, 2, 1, kDim});
  razorkv::razor_config config;
  config.storage = kv_storage{kQ8, kQ4, false};
  razorkv::razor_kv_cache<float> cache(plan, config);
  std::mt19937_64 rng(37);
  const auto k = random_tokens<float>(20, 1, kDim, rng);
  cache.compress_layer(0, nhd(k, 1, kDim), nhd(k, 1, kDim));
  const std::vector<std::uint8_t> bytes = razorkv::save_state(cache);
  // After magic 8, version 4, dtype 4 and the shape's four i64: the key and value formats, the
  // rotation, whether retrieval heads have a storage of their own.
  constexpr std::size_t kStorageAt = 8 + 4 + 4 + 32;
  ASSERT_EQ(bytes.at(kStorageAt), 1);
  ASSERT_EQ(bytes.at(kStorageAt + 1), 2);
  const auto changed = [&](std::size_t at, std::uint8_t value) {
    std::vector<std::uint8_t> copy = bytes;
    copy.at(at) = value;
    return copy;
  };
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(changed(kStorageAt, 5)), kInvalidArgument,
                       "restore_state: config.storage.keys (5) is not 0 (rows of the dtype), 1 "
                       "(q8) or 2 (q4)");
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(changed(kStorageAt + 2, 2)), kInvalidArgument,
                       "config.storage.rotate_keys (2)");
  // Rows of another size than the saved ones: the data no longer ends where the state does.
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(changed(kStorageAt + 1, 1)), kInvalidArgument,
                       "restore_state: ");
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(changed(kStorageAt, 0)), kInvalidArgument,
                       "restore_state: ");
  for (std::size_t size = 0; size < bytes.size(); size += 7) {
    RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(bytes.data(), size), kInvalidArgument,
                         "restore_state: ");
  }
}

}  // namespace
