// Tests of what an engine does with razor_kv_cache around compression: chunked prefill (bit for
// bit what one-shot compression gives, for every chunk size), short prompts, the checked mode,
// release(), the caller's memory resource, a shared plan, save and restore, tensor-parallel
// plan slices, and decode's errors for a misused cache.
#include <gtest/gtest.h>

#include <razorkv/attention/decode.hpp>
#include <razorkv/attention/reference.hpp>
#include <razorkv/cache/any_cache.hpp>
#include <razorkv/cache/huge_page_resource.hpp>
#include <razorkv/compress/razor_cache.hpp>
#include <razorkv/compress/razor_state.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <memory_resource>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "support/counting_resource.hpp"
#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::compensation_mode;
using razorkv::decode_mode;
using razorkv::head_plan;
using razorkv::index_t;
using razorkv::layer_view;
using razorkv::matrix_view;
using razorkv::razor_config;
using razorkv::razor_kv_cache;

constexpr index_t kHeads = 4, kDim = 8, kQueryHeads = 8;

// One layer's K/V, [tokens, kHeads, kDim] NHD, and views of a range of its tokens.
template <class T>
struct prompt {
  index_t tokens;
  std::vector<T> keys, values;
  prompt(index_t n, std::mt19937_64& rng)
      : tokens(n),
        keys(razorkv_test::random_values<T>(static_cast<std::size_t>(n * kHeads * kDim), rng)),
        values(razorkv_test::random_values<T>(static_cast<std::size_t>(n * kHeads * kDim), rng)) {}
  layer_view<const T> key_view(index_t first, index_t count) const {
    return layer_view<const T>::nhd(keys.data() + first * kHeads * kDim, count, kHeads, kDim);
  }
  layer_view<const T> value_view(index_t first, index_t count) const {
    return layer_view<const T>::nhd(values.data() + first * kHeads * kDim, count, kHeads, kDim);
  }
};

// A plan with a retrieval head (1) and a per-head buffer override (head 3), so every kind of
// head is exercised.
head_plan test_plan() {
  head_plan plan(razorkv::model_shape{1, kQueryHeads, kHeads, kDim});
  plan.set_retrieval(0, 1, true);
  plan.set_buffer_override(0, 3, 6);
  return plan;
}

// Everything a head holds, as bits: its entries in order (keys, values, log-weights), its
// compensation token (count, exact sums) and its window.
template <class T>
std::vector<std::uint64_t> head_bits(const razor_kv_cache<T>& cache, index_t h, index_t layer = 0) {
  std::vector<std::uint64_t> bits;
  const auto push = [&](double x) {
    std::uint64_t b = 0;
    std::memcpy(&b, &x, sizeof b);
    bits.push_back(b);
  };
  for (index_t i = 0; i < cache.num_spans(layer, h); ++i) {
    const auto span = cache.span(layer, h, i);
    for (index_t r = 0; r < span.length(); ++r) {
      push(span.log_weight);
      for (index_t c = 0; c < kDim; ++c) {
        push(razorkv::detail::to_double(span.keys.typed()(r, c)));
        push(razorkv::detail::to_double(span.values.typed()(r, c)));
      }
    }
  }
  const auto token = cache.compensation(layer, h);
  push(static_cast<double>(token.count));
  for (index_t c = 0; token.key_sum != nullptr && c < kDim; ++c) {
    push(token.key_sum[c]);
    push(token.value_sum[c]);
  }
  push(static_cast<double>(cache.window(layer, h)));
  push(static_cast<double>(cache.entries(layer, h)));
  return bits;
}

template <class T>
void expect_same_cache(const razor_kv_cache<T>& got, const razor_kv_cache<T>& want,
                       const std::string& what) {
  ASSERT_EQ(got.num_tokens(0), want.num_tokens(0)) << what;
  ASSERT_EQ(got.kv_bytes(), want.kv_bytes()) << what;
  ASSERT_EQ(got.max_new_tokens(0), want.max_new_tokens(0)) << what;
  for (index_t h = 0; h < kHeads; ++h)
    ASSERT_EQ(head_bits(got, h), head_bits(want, h)) << what << ", kv head " << h;
}

// A window that grows while the prompt arrives, max(5, ceil(N / 1.5)) (it outgrows its rows), or
// a fixed one of 10 tokens (its ring wraps around its 64 rows).
razor_config config_for(compensation_mode compensation, decode_mode decode,
                        index_t fixed_window = 0) {
  razor_config config;
  config.sinks = 4;
  config.s0 = 5;
  config.c = 1.5;
  config.fixed_window = fixed_window;
  config.compensation = compensation;
  config.decode = decode;
  config.growth_rows = 8;
  return config;
}

// Every combination of compensation mode, decode mode and window kind.
std::vector<razor_config> every_config() {
  std::vector<razor_config> configs;
  for (const compensation_mode compensation :
       {compensation_mode::kWeighted, compensation_mode::kUnweighted, compensation_mode::kNone}) {
    for (const decode_mode decode : {decode_mode::kAppend, decode_mode::kBounded}) {
      for (const index_t fixed_window : {index_t{0}, index_t{10}})
        configs.push_back(config_for(compensation, decode, fixed_window));
    }
  }
  return configs;
}

template <class T>
class RazorkvChunkedPrefill : public ::testing::Test {};
TYPED_TEST_SUITE(RazorkvChunkedPrefill, razorkv_test::storage_dtypes);

// The promise: for every chunk size, after every chunk, the cache is what compressing
// the prompt so far at once gives, and it stays so through decode appends.
TYPED_TEST(RazorkvChunkedPrefill, EveryChunkSizeEqualsOneShotBitForBit) {
  using T = TypeParam;
  constexpr index_t kTokens = 100, kDecoded = 9;
  std::mt19937_64 rng(razorkv_test::test_seeds(1201).front());
  const prompt<T> layer(kTokens + kDecoded, rng);
  const head_plan plan = test_plan();
  for (const razor_config& config : every_config()) {
    for (index_t chunk = 1; chunk <= kTokens; ++chunk) {
      const std::string what = std::string(razorkv::compensation_mode_name(config.compensation)) +
                               "/" + razorkv::decode_mode_name(config.decode) + ", window " +
                               std::to_string(config.fixed_window) + ", chunk " +
                               std::to_string(chunk);
      razor_kv_cache<T> chunked(plan, config);
      for (index_t first = 0; first < kTokens; first += chunk) {
        const index_t count = std::min(chunk, kTokens - first);
        chunked.compress_chunk(0, layer.key_view(first, count), layer.value_view(first, count));
        razor_kv_cache<T> one_shot(plan, config);
        one_shot.compress_layer(0, layer.key_view(0, first + count),
                                layer.value_view(0, first + count));
        ASSERT_NO_FATAL_FAILURE(expect_same_cache(
            chunked, one_shot, what + ", " + std::to_string(first + count) + " tokens"));
        ASSERT_EQ(chunked.prompt_tokens(0), first + count);
      }
      razor_kv_cache<T> one_shot(plan, config);
      one_shot.compress_layer(0, layer.key_view(0, kTokens), layer.value_view(0, kTokens));
      for (index_t t = kTokens; t < kTokens + kDecoded; ++t) {
        chunked.append(0, layer.key_view(t, 1), layer.value_view(t, 1));
        one_shot.append(0, layer.key_view(t, 1), layer.value_view(t, 1));
        ASSERT_NO_FATAL_FAILURE(
            expect_same_cache(chunked, one_shot, what + ", decoded " + std::to_string(t)));
      }
      ASSERT_EQ(chunked.prompt_tokens(0), kTokens);
    }
  }
}

// Decode over a chunk-built cache (a ring that wrapped, a retrieval head in blocks) agrees with
// the scalar reference over the same cache, and with decode over the one-shot cache to rounding.
TYPED_TEST(RazorkvChunkedPrefill, DecodeOverChunkedCacheMatchesTheReference) {
  using T = TypeParam;
  constexpr index_t kTokens = 200;
  std::mt19937_64 rng(razorkv_test::test_seeds(1202).front());
  const prompt<T> layer(kTokens, rng);
  const std::vector<float> queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(kQueryHeads * kDim), rng);
  const matrix_view<const float> q(queries.data(), kQueryHeads, kDim);
  for (const index_t fixed_window : {index_t{0}, index_t{10}}) {
    const razor_config config =
        config_for(compensation_mode::kWeighted, decode_mode::kAppend, fixed_window);
    razor_kv_cache<T> chunked(test_plan(), config), one_shot(test_plan(), config);
    for (index_t first = 0; first < kTokens; first += 7) {          // 7 < the window: every token
      const index_t count = std::min<index_t>(7, kTokens - first);  // passes through the ring
      chunked.compress_chunk(0, layer.key_view(first, count), layer.value_view(first, count));
    }
    one_shot.compress_layer(0, layer.key_view(0, kTokens), layer.value_view(0, kTokens));
    // The chunked cache's spans differ: a wrapped ring is two, the retrieval head is blocks.
    const index_t differing_head = fixed_window > 0 ? 0 : 1;
    EXPECT_GT(chunked.num_spans(0, differing_head), one_shot.num_spans(0, differing_head));
    std::vector<float> got(static_cast<std::size_t>(kQueryHeads * kDim)), want(got.size());
    razorkv::decode_attention(chunked, 0, q, matrix_view<float>(got.data(), kQueryHeads, kDim));
    razorkv::decode_attention(one_shot, 0, q, matrix_view<float>(want.data(), kQueryHeads, kDim));
    const std::vector<double> reference = razorkv::reference::decode_attention(chunked, 0, q);
    const double tolerance = 64 * razorkv_test::accum_epsilon<float>();  // the output is float
    EXPECT_LE(razorkv_test::max_abs_diff(got, reference), tolerance);
    EXPECT_LE(razorkv_test::max_abs_diff(got, want), tolerance);
  }
}

// A chunk's queries attend to the compressed past and the chunk through decode_attention_multi,
// which checks that the chunk still fits in every window.
TEST(RazorkvChunkedPrefill, AChunkAttendsThroughMultiTokenDecode) {
  std::mt19937_64 rng(1209);
  const prompt<float> layer(120, rng);
  razor_config config = config_for(compensation_mode::kWeighted, decode_mode::kAppend, 10);
  razor_kv_cache<float> cache(test_plan(), config);
  cache.compress_chunk(0, layer.key_view(0, 100), layer.value_view(0, 100));
  EXPECT_EQ(cache.max_new_tokens(0), 6);  // head 3's buffer override
  const std::vector<float> queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(12 * kQueryHeads * kDim), rng);
  std::vector<float> out(queries.size());
  for (const index_t chunk : {index_t{6}, index_t{12}}) {
    cache.compress_chunk(0, layer.key_view(100, chunk), layer.value_view(100, chunk));
    const auto q = layer_view<const float>::nhd(queries.data(), chunk, kQueryHeads, kDim);
    const auto o = layer_view<float>::nhd(out.data(), chunk, kQueryHeads, kDim);
    if (chunk <= 6) {
      razorkv::decode_attention_multi(cache, 0, q, o);
      const std::vector<double> want = razorkv::reference::decode_attention_multi(cache, 0, q);
      EXPECT_LE(
          razorkv_test::max_abs_diff(
              std::vector<float>(out.begin(), out.begin() + chunk * kQueryHeads * kDim), want),
          1e-5);
    } else {
      RAZORKV_EXPECT_ERROR(razorkv::decode_attention_multi(cache, 0, q, o), kInvalidArgument,
                           "queries.tokens() (12) exceeds the 6 newest tokens layer 0 keeps");
    }
  }
}

TEST(RazorkvChunkedPrefill, ChunksEndWhereDecodeBegins) {
  std::mt19937_64 rng(1203);
  const prompt<float> layer(40, rng);
  razor_kv_cache<float> cache(test_plan(), razor_config{});
  cache.compress_chunk(0, layer.key_view(0, 30), layer.value_view(0, 30));
  cache.append(0, layer.key_view(30, 1), layer.value_view(30, 1));
  const auto before = head_bits(cache, 0);
  RAZORKV_EXPECT_ERROR(cache.compress_chunk(0, layer.key_view(31, 5), layer.value_view(31, 5)),
                       kInvalidArgument,
                       "razor_kv_cache::compress_chunk: layer (0) has decoded 1 token(s) since "
                       "its prompt; chunks must all come before decode");
  EXPECT_EQ(head_bits(cache, 0), before);
  // clear() starts a new prompt.
  cache.clear();
  cache.compress_chunk(0, layer.key_view(0, 5), layer.value_view(0, 5));
  EXPECT_EQ(cache.prompt_tokens(0), 5);
}

// A prompt of N <= sinks + window tokens is kept whole: N < sinks included (the calculator's
// ratio 1), and decode reads it as the dense cache would.
TYPED_TEST(RazorkvChunkedPrefill, ShortPromptsAreKeptWhole) {
  using T = TypeParam;
  std::mt19937_64 rng(razorkv_test::test_seeds(1204).front());
  const prompt<T> layer(9, rng);
  const std::vector<float> queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(kQueryHeads * kDim), rng);
  const matrix_view<const float> q(queries.data(), kQueryHeads, kDim);
  for (const decode_mode decode : {decode_mode::kAppend, decode_mode::kBounded}) {
    const razor_config config = config_for(compensation_mode::kWeighted, decode);
    for (index_t tokens = 1; tokens <= 9; ++tokens) {
      razor_kv_cache<T> cache(test_plan(), config);
      cache.compress_layer(0, layer.key_view(0, tokens), layer.value_view(0, tokens));
      razorkv::dense_kv_cache<T> dense(1, kHeads, kDim);
      dense.append(0, layer.key_view(0, tokens), layer.value_view(0, tokens));
      for (index_t h = 0; h < kHeads; ++h) {
        EXPECT_EQ(cache.entries(0, h), tokens) << "tokens " << tokens << " head " << h;
        EXPECT_EQ(cache.compensation(0, h).count, 0);
      }
      EXPECT_EQ(cache.kv_bytes(), cache.dense_kv_bytes());
      EXPECT_EQ(cache.compression_ratio(), 1.0);
      EXPECT_EQ(cache.dropped_tokens(), 0);
      std::vector<float> got(static_cast<std::size_t>(kQueryHeads * kDim)), want(got.size());
      razorkv::decode_attention(cache, 0, q, matrix_view<float>(got.data(), kQueryHeads, kDim));
      razorkv::decode_attention(dense, 0, q, matrix_view<float>(want.data(), kQueryHeads, kDim));
      EXPECT_LE(razorkv_test::max_abs_diff(got, want), 8 * razorkv_test::accum_epsilon<float>());
      // Decoding past a short prompt keeps its tokens (the sinks stay short).
      cache.append(0, layer.key_view(tokens - 1, 1), layer.value_view(tokens - 1, 1));
      EXPECT_EQ(cache.entries(0, 0), tokens + 1);
    }
  }
}

// config.check_finite names a NaN or infinity among the tokens compression and append read
// (the dropped ones included), and changes nothing; unchecked, a NaN among the dropped tokens
// reaches the compensation token and that head's output, as the README says.
TEST(RazorkvRazorCheckedMode, NonFiniteTokensAreNamed) {
  std::mt19937_64 rng(1205);
  prompt<float> layer(100, rng);
  const index_t dropped_token = 20, head = 2, dim = 5;
  layer.keys[static_cast<std::size_t>((dropped_token * kHeads + head) * kDim + dim)] =
      std::numeric_limits<float>::quiet_NaN();
  razor_config checked = config_for(compensation_mode::kWeighted, decode_mode::kAppend);
  checked.check_finite = true;
  razor_kv_cache<float> cache(test_plan(), checked);
  RAZORKV_EXPECT_ERROR(cache.compress_layer(0, layer.key_view(0, 90), layer.value_view(0, 90)),
                       kInvalidArgument,
                       "razor_kv_cache::compress_layer: key (nan) of token 20 in layer 0 kv head "
                       "2 dim 5 is not finite (config.check_finite)");
  EXPECT_FALSE(cache.is_compressed(0));
  cache.compress_chunk(0, layer.key_view(0, 10), layer.value_view(0, 10));
  const auto before = head_bits(cache, head);
  RAZORKV_EXPECT_ERROR(cache.compress_chunk(0, layer.key_view(10, 30), layer.value_view(10, 30)),
                       kInvalidArgument,
                       "compress_chunk: key (nan) of token 20 in layer 0 kv head 2");
  EXPECT_EQ(head_bits(cache, head), before);
  cache.compress_chunk(0, layer.key_view(21, 30), layer.value_view(21, 30));
  layer.values[static_cast<std::size_t>((60 * kHeads + 0) * kDim + 1)] =
      std::numeric_limits<float>::infinity();
  RAZORKV_EXPECT_ERROR(cache.append(0, layer.key_view(60, 1), layer.value_view(60, 1)),
                       kInvalidArgument,
                       "append: value (inf) of token 40 in layer 0 kv head 0 dim 1");
  EXPECT_EQ(cache.num_tokens(0), 40);

  // Unchecked (the default): no error, and head 2's output is NaN from then on.
  razor_kv_cache<float> unchecked(test_plan(),
                                  config_for(compensation_mode::kWeighted, decode_mode::kAppend));
  unchecked.compress_layer(0, layer.key_view(0, 90), layer.value_view(0, 90));
  EXPECT_TRUE(std::isnan(unchecked.compensation(0, head).key_sum[dim]));
  const std::vector<float> queries(static_cast<std::size_t>(kQueryHeads * kDim), 0.5f);
  std::vector<float> out(queries.size());
  razorkv::decode_attention(unchecked, 0,
                            matrix_view<const float>(queries.data(), kQueryHeads, kDim),
                            matrix_view<float>(out.data(), kQueryHeads, kDim));
  const index_t group = kQueryHeads / kHeads;
  EXPECT_TRUE(std::isnan(out[static_cast<std::size_t>(head * group * kDim)]));
  EXPECT_FALSE(std::isnan(out[0]));

  // Double tokens: finite ones so large that their double sums could overflow are named too; a
  // compensation token is never an infinity no token held. Unchecked, that is the caller's to
  // avoid, like NaN.
  prompt<double> wide(100, rng);
  wide.keys[static_cast<std::size_t>((30 * kHeads + head) * kDim + dim)] = 0x1p1000;
  razor_kv_cache<double> checked_double(test_plan(), checked);
  RAZORKV_EXPECT_ERROR(
      checked_double.compress_layer(0, wide.key_view(0, 90), wide.value_view(0, 90)),
      kInvalidArgument,
      "key (1.07151e+301) of token 30 in layer 0 kv head 2 dim 5 is over 2^960, where "
      "the compensation sums could overflow (config.check_finite)");
  wide.keys[static_cast<std::size_t>((30 * kHeads + head) * kDim + dim)] = 0x1p960;
  checked_double.compress_layer(0, wide.key_view(0, 90), wide.value_view(0, 90));
  EXPECT_TRUE(std::isfinite(checked_double.compensation(0, head).key_sum[dim]));
}

TEST(RazorkvRazorRelease, GivesTheMemoryBackAndStaysUsable) {
  std::mt19937_64 rng(1206);
  const prompt<float> layer(300, rng);
  razor_kv_cache<float> cache(test_plan(), razor_config{});
  cache.compress_layer(0, layer.key_view(0, 300), layer.value_view(0, 300));
  const razor_kv_cache<float> copy = cache;
  cache.clear();
  EXPECT_EQ(cache.allocated_bytes(), copy.allocated_bytes());  // clear keeps the buffers
  cache.release();
  EXPECT_EQ(cache.allocated_bytes(), 0);
  EXPECT_FALSE(cache.is_compressed(0));
  EXPECT_EQ(cache.prompt_tokens(0), 0);
  cache.compress_layer(0, layer.key_view(0, 300), layer.value_view(0, 300));
  for (index_t h = 0; h < kHeads; ++h) EXPECT_EQ(head_bits(cache, h), head_bits(copy, h));
  RAZORKV_EXPECT_ERROR(cache.release(1), kOutOfRange, "razor_kv_cache::release: layer (1)");
}

using razorkv_test::counting_resource;

// Every K/V row of a cache built on a resource comes from it, and so do the compensation tokens'
// sums (what the resource has out is what allocated_bytes() counts), through compression,
// chunks, decode growth, copies and restore, and goes back to it on release() and destruction;
// the cache holds what a heap cache holds.
TEST(RazorkvRazorMemory, EveryRowComesFromTheCachesResourceAndGoesBack) {
  std::mt19937_64 rng(1211);
  const prompt<float> layer(600, rng);
  counting_resource pool;
  for (const razor_config& config : every_config()) {
    SCOPED_TRACE(::testing::Message() << razorkv::decode_mode_name(config.decode));
    razor_kv_cache<float> pooled(test_plan(), config, &pool), heap(test_plan(), config);
    EXPECT_EQ(pooled.memory_resource(), &pool);
    EXPECT_EQ(heap.memory_resource(), std::pmr::get_default_resource());
    for (index_t first = 0; first < 300; first += 50) {  // chunks: windows outgrow their rows
      pooled.compress_chunk(0, layer.key_view(first, 50), layer.value_view(first, 50));
      heap.compress_chunk(0, layer.key_view(first, 50), layer.value_view(first, 50));
      EXPECT_EQ(pool.outstanding, pooled.allocated_bytes());
    }
    for (index_t t = 300; t < 600; ++t) {  // decode: blocks chained past the reserve
      pooled.append(0, layer.key_view(t, 1), layer.value_view(t, 1));
      heap.append(0, layer.key_view(t, 1), layer.value_view(t, 1));
    }
    const long bytes = pooled.allocated_bytes();
    EXPECT_EQ(pool.outstanding, bytes);
    for (index_t h = 0; h < kHeads; ++h) EXPECT_EQ(head_bits(pooled, h), head_bits(heap, h));
    {
      const razor_kv_cache<float> copy = pooled;
      EXPECT_EQ(copy.memory_resource(), &pool);
      EXPECT_EQ(pool.outstanding, 2 * bytes);
      razorkv::restore_options options;
      options.resource = &pool;
      const razor_kv_cache<float> restored =
          razorkv::restore_state<float>(razorkv::save_state(pooled), options);
      EXPECT_EQ(pool.outstanding, 2 * bytes + restored.allocated_bytes());
    }
    EXPECT_EQ(pool.outstanding, bytes);
    pooled.release();
    EXPECT_EQ(pool.outstanding, 0);
  }
  EXPECT_GT(pool.allocations, 0);
  EXPECT_EQ(pool.smallest_alignment, 64u);
}

// huge_page_resource maps the blocks it is given on 2 MiB boundaries (where it maps at all), hands
// the small ones to its upstream, and gives every byte back.
TEST(RazorkvHugePageResource, MapsLargeBlocksOnHugePageBoundariesAndPassesSmallOnesOn) {
  constexpr std::size_t kHuge = razorkv::huge_page_resource::kHugePageBytes;
  counting_resource upstream;
  {
    razorkv::huge_page_resource pages(&upstream);
    const std::size_t big_bytes = 3 * kHuge + 5;
    void* big = pages.allocate(big_bytes, 64);
    if (razorkv::huge_page_resource::maps_blocks()) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(big) % kHuge, 0u);
      EXPECT_EQ(upstream.allocations, 0);
    } else {
      EXPECT_EQ(upstream.allocations, 1);
    }
    std::memset(big, 0x5a, big_bytes);  // every byte asked for is there and writable
    void* small = pages.allocate(1000, 64);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small) % 64, 0u);
    EXPECT_EQ(
        upstream.outstanding,
        1000 + (razorkv::huge_page_resource::maps_blocks() ? 0 : static_cast<long>(big_bytes)));
    pages.deallocate(small, 1000, 64);
    pages.deallocate(big, big_bytes, 64);
    EXPECT_EQ(upstream.outstanding, 0);
    EXPECT_TRUE(pages.is_equal(pages));
    EXPECT_FALSE(pages.is_equal(upstream));
  }
  RAZORKV_EXPECT_ERROR(razorkv::huge_page_resource(nullptr, 0), kInvalidArgument,
                       "huge_page_resource: min_bytes (0) must be > 0");
}

// With keep_bytes, a freed block stays mapped and serves the next block of its mapped size, while
// the blocks kept total at most keep_bytes; the rest go back to the OS.
TEST(RazorkvHugePageResource, KeepsFreedBlocksUpToKeepBytesForReuse) {
  if (!razorkv::huge_page_resource::maps_blocks()) GTEST_SKIP() << "no mmap on this system";
  constexpr std::size_t kHuge = razorkv::huge_page_resource::kHugePageBytes;
  razorkv::huge_page_resource pages(nullptr, kHuge, 4 * kHuge);
  const std::size_t bytes = 3 * kHuge + 5;  // mapped as 4 huge pages
  void* first = pages.allocate(bytes, 64);
  std::memset(first, 1, bytes);
  pages.deallocate(first, bytes, 64);
  EXPECT_EQ(pages.kept_bytes(), 4 * kHuge);
  void* again = pages.allocate(bytes, 64);
  EXPECT_EQ(again, first);
  EXPECT_EQ(pages.kept_bytes(), 0u);
  void* other = pages.allocate(bytes, 64);  // nothing kept: a new mapping
  EXPECT_NE(other, first);
  void* smaller = pages.allocate(kHuge, 64);  // another size is never served from a kept block
  pages.deallocate(again, bytes, 64);
  pages.deallocate(other, bytes, 64);  // over keep_bytes: unmapped
  pages.deallocate(smaller, kHuge, 64);
  EXPECT_EQ(pages.kept_bytes(), 4 * kHuge);
}

// A cache on mapped blocks (a low threshold, so that this small test's rows are mapped) holds and
// decodes what a heap cache does, through compression, decode growth and copies.
TEST(RazorkvHugePageResource, ACacheOnItHoldsWhatAHeapCacheHolds) {
  std::mt19937_64 rng(1214);
  const prompt<float> layer(600, rng);
  razorkv::huge_page_resource pages(nullptr, 1024);
  for (const razor_config& config : every_config()) {
    SCOPED_TRACE(::testing::Message() << razorkv::decode_mode_name(config.decode));
    razor_kv_cache<float> mapped(test_plan(), config, &pages), heap(test_plan(), config);
    mapped.compress_layer(0, layer.key_view(0, 500), layer.value_view(0, 500));
    heap.compress_layer(0, layer.key_view(0, 500), layer.value_view(0, 500));
    for (index_t t = 500; t < 600; ++t) {
      mapped.append(0, layer.key_view(t, 1), layer.value_view(t, 1));
      heap.append(0, layer.key_view(t, 1), layer.value_view(t, 1));
    }
    const razor_kv_cache<float> copy = mapped;
    for (index_t h = 0; h < kHeads; ++h) {
      EXPECT_EQ(head_bits(mapped, h), head_bits(heap, h));
      EXPECT_EQ(head_bits(copy, h), head_bits(heap, h));
    }
  }
}

// A pool that runs out at any allocation of a compression, a chunk or a decode step: the call
// throws, the resource gets back everything the cache does not hold, and the cache lets go of
// the rest when it goes.
TEST(RazorkvRazorMemory, APoolThatRunsOutLeavesNothingBehind) {
  std::mt19937_64 rng(1213);
  const prompt<float> layer(400, rng);
  razor_config config = config_for(compensation_mode::kWeighted, decode_mode::kAppend);
  bool completed = false;
  for (long limit = 0; !completed; ++limit) {
    SCOPED_TRACE(::testing::Message() << "allocation " << limit << " fails");
    counting_resource pool;
    pool.limit = limit;
    {
      razor_kv_cache<float> cache(test_plan(), config, &pool);
      try {
        for (index_t first = 0; first < 200; first += 40)
          cache.compress_chunk(0, layer.key_view(first, 40), layer.value_view(first, 40));
        for (index_t t = 200; t < 400; ++t)
          cache.append(0, layer.key_view(t, 1), layer.value_view(t, 1));
        completed = true;
      } catch (const std::bad_alloc&) {
      }
      EXPECT_EQ(pool.outstanding, cache.allocated_bytes());
    }
    EXPECT_EQ(pool.outstanding, 0);
    ASSERT_LT(limit, 10000);
  }
}

// One plan for many sequences: caches, their copies and restored caches share the pointer
// they were given; a restored state must agree with the plan it is asked to share.
TEST(RazorkvRazorMemory, CachesShareOnePlan) {
  std::mt19937_64 rng(1212);
  const prompt<float> layer(100, rng);
  const auto plan = std::make_shared<const head_plan>(test_plan());
  razor_kv_cache<float> first(plan, razor_config{}), second(plan, razor_config{});
  const razor_kv_cache<float> copy = first;
  EXPECT_EQ(first.shared_plan().get(), plan.get());
  EXPECT_EQ(copy.shared_plan().get(), plan.get());
  EXPECT_EQ(plan.use_count(), 4);
  EXPECT_TRUE(second.plan().is_retrieval(0, 1));
  first.compress_layer(0, layer.key_view(0, 100), layer.value_view(0, 100));
  const std::vector<std::uint8_t> state = razorkv::save_state(first);

  razorkv::restore_options options;
  options.plan = plan;
  const razor_kv_cache<float> restored = razorkv::restore_state<float>(state, options);
  EXPECT_EQ(restored.shared_plan().get(), plan.get());
  for (index_t h = 0; h < kHeads; ++h) EXPECT_EQ(head_bits(restored, h), head_bits(first, h));

  head_plan other = test_plan();
  other.set_retrieval(0, 2, true);
  options.plan = std::make_shared<const head_plan>(other);
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(state, options), kInvalidArgument,
                       "options.plan differs from the saved plan at layer 0 kv head 2");
  options.plan =
      std::make_shared<const head_plan>(razorkv::model_shape{2, kQueryHeads, kHeads, kDim});
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(state, options), kInvalidArgument,
                       "options.plan is for [2 layers");
  RAZORKV_EXPECT_ERROR(razor_kv_cache<float>(std::shared_ptr<const head_plan>(), razor_config{}),
                       kInvalidArgument, "razor_kv_cache: plan is null");
}

// The span lengths of every head of every layer, and the room a growing head has left: what
// makes two caches decode, now and after more tokens, bit for bit alike.
template <class T>
std::vector<index_t> layout_of(const razor_kv_cache<T>& cache) {
  std::vector<index_t> layout;
  for (index_t l = 0; l < cache.num_layers(); ++l) {
    layout.push_back(cache.is_compressed(l) ? 1 : 0);
    layout.push_back(cache.prompt_tokens(l));
    for (index_t h = 0; h < cache.num_kv_heads(); ++h) {
      for (index_t i = 0; i < cache.num_spans(l, h); ++i)
        layout.push_back(cache.span(l, h, i).length());
      layout.push_back(-1);
    }
  }
  layout.push_back(cache.allocated_bytes_after(300) - cache.allocated_bytes());
  return layout;
}

// Caches in the states an engine saves: several layers (one never compressed), chunked and
// one-shot, wrapped rings, chained blocks, decoded tokens, short prompts, every mode.
template <class T>
std::vector<razor_kv_cache<T>> caches_to_save(std::mt19937_64& rng) {
  head_plan plan(razorkv::model_shape{3, kQueryHeads, kHeads, kDim});
  plan.set_retrieval(0, 1, true);
  plan.set_retrieval(1, 3, true);
  plan.set_buffer_override(1, 2, 6);
  const prompt<T> layer(220, rng);
  std::vector<razor_kv_cache<T>> caches;
  for (const razor_config& config : every_config()) {
    razor_kv_cache<T> cache(plan, config);
    for (index_t first = 0; first < 150; first += 7)  // layer 0 in chunks: a wrapped ring
      cache.compress_chunk(0, layer.key_view(first, 7), layer.value_view(first, 7));
    cache.compress_layer(1, layer.key_view(0, 3), layer.value_view(0, 3));  // a short prompt
    for (index_t t = 150; t < 220; ++t) {  // decode: blocks chained, windows slide
      cache.append(0, layer.key_view(t, 1), layer.value_view(t, 1));
      cache.append(1, layer.key_view(t, 1), layer.value_view(t, 1));
    }
    caches.push_back(std::move(cache));  // layer 2 stays uncompressed
  }
  return caches;
}

TYPED_TEST(RazorkvChunkedPrefill, SaveAndRestoreRoundTripBitForBit) {
  using T = TypeParam;
  std::mt19937_64 rng(razorkv_test::test_seeds(1210).front());
  const prompt<T> next(2, rng);
  const std::vector<float> queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(kQueryHeads * kDim), rng);
  const matrix_view<const float> q(queries.data(), kQueryHeads, kDim);
  for (razor_kv_cache<T>& original : caches_to_save<T>(rng)) {
    const std::vector<std::uint8_t> bytes = razorkv::save_state(original);
    razor_kv_cache<T> restored = razorkv::restore_state<T>(bytes);
    EXPECT_EQ(razorkv::save_state(restored), bytes);
    ASSERT_EQ(layout_of(restored), layout_of(original));
    EXPECT_EQ(restored.kv_bytes(), original.kv_bytes());
    for (index_t step = 0; step < 2; ++step) {
      for (index_t l = 0; l < 2; ++l) {
        EXPECT_EQ(restored.num_tokens(l), original.num_tokens(l));
        for (index_t h = 0; h < kHeads; ++h)
          ASSERT_EQ(head_bits(restored, h, l), head_bits(original, h, l)) << l << "/" << h;
        std::vector<float> got(static_cast<std::size_t>(kQueryHeads * kDim)), want(got.size());
        razorkv::decode_attention(restored, l, q,
                                  matrix_view<float>(got.data(), kQueryHeads, kDim));
        razorkv::decode_attention(original, l, q,
                                  matrix_view<float>(want.data(), kQueryHeads, kDim));
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
        // Both go on alike: the restored cache kept the room and windows the original had.
        restored.append(l, next.key_view(step, 1), next.value_view(step, 1));
        original.append(l, next.key_view(step, 1), next.value_view(step, 1));
      }
    }
    EXPECT_FALSE(restored.is_compressed(2));
  }
}

// The loader is strict: every prefix of a state, a byte after it, and each field the method
// could not have produced are errors naming the field; max_bytes bounds what it allocates.
TEST(RazorkvRazorState, TheLoaderRejectsWhatSaveDidNotWrite) {
  std::mt19937_64 rng(1211);
  head_plan plan(razorkv::model_shape{1, kQueryHeads, kHeads, kDim});
  plan.set_retrieval(0, 1, true);
  const prompt<float> layer(40, rng);
  razor_config config = config_for(compensation_mode::kWeighted, decode_mode::kAppend);
  razor_kv_cache<float> cache(plan, config);
  cache.compress_layer(0, layer.key_view(0, 30), layer.value_view(0, 30));
  cache.append(0, layer.key_view(30, 1), layer.value_view(30, 1));
  const std::vector<std::uint8_t> bytes = razorkv::save_state(cache);
  for (std::size_t size = 0; size < bytes.size(); ++size) {
    RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(bytes.data(), size), kInvalidArgument,
                         "restore_state: ");
  }
  std::vector<std::uint8_t> longer = bytes;
  longer.push_back(0);
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(longer), kInvalidArgument,
                       "restore_state: 1 bytes follow the state's end");
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<Eigen::bfloat16>(bytes), kInvalidArgument,
                       "restore_state: the state holds dtype 0 (float), the cache stores bfloat16");
  const auto corrupt = [&](std::size_t at, std::uint8_t value) {
    std::vector<std::uint8_t> changed = bytes;
    changed.at(at) = value;
    return changed;
  };
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(corrupt(0, 'X')), kInvalidArgument,
                       "it is not a razorkv state");
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(corrupt(8, 3)), kInvalidArgument,
                       "restore_state: version (3) is not a version this razorkv reads (1 to 2)");
  // The header: magic 8, version 4, dtype 4, shape 32, storage 4, config 5 * 8 + 8 + 4 + 4 + 1;
  // the plan 4 * 9; the layer: flag 1, tokens 8, prompt 8; then head 0's window.
  const std::size_t header = 8 + 4 + 4 + 32 + 4 + 57, plan_bytes = 4 * 9;
  const std::size_t window_at = header + plan_bytes + 17;
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(corrupt(window_at, 3)), kInvalidArgument,
                       "restore_state: a head's window (3) outside [20, 20]");
  // The layer's tokens, 31, made 32: a token invented.
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(corrupt(header + plan_bytes + 1, 32)),
                       kInvalidArgument,
                       "restore_state: layer 0 kv head 0 accounts for 31 tokens (sinks, ring, "
                       "blocks, dropped), the layer has 32");
  // Head 0's mean key, after its 6 fields, mean flag, and 4 sinks + 21 ring rows (the window of
  // ceil(30 / 1.5) = 20 and the appended token) of K and of V.
  const std::size_t mean_at = window_at + 6 * 8 + 1 + 2 * (4 + 21) * kDim * sizeof(float);
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(corrupt(mean_at + 3, bytes[mean_at + 3] ^ 1)),
                       kInvalidArgument, "the mean token is not the mean of its sums");
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(bytes, 1000), kInvalidArgument,
                       "over max_bytes (1000)");
  EXPECT_NO_THROW(razorkv::restore_state<float>(bytes, cache.allocated_bytes()));
  // 8-bit rows need a head_dim that is a multiple of 32; this cache's is 8.
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(corrupt(8 + 4 + 4 + 32, 1)), kInvalidArgument,
                       "restore_state: config.storage");
  // A state of version 1 (the format before storage: no storage bytes) is read as rows of T.
  std::vector<std::uint8_t> version_1 = bytes;
  version_1.at(8) = 1;
  version_1.erase(version_1.begin() + 8 + 4 + 4 + 32, version_1.begin() + 8 + 4 + 4 + 32 + 4);
  EXPECT_EQ(razorkv::save_state(razorkv::restore_state<float>(version_1)), bytes);
  // config.growth_rows (after magic, version, dtype, shape, storage and four i64 fields) raised by
  // 2^30: one block of it would not fit in max_bytes, so the next append could not be served.
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(corrupt(8 + 4 + 4 + 32 + 4 + 4 * 8 + 3, 0x40),
                                                     cache.allocated_bytes()),
                       kInvalidArgument, "config.growth_rows (");
}

// restore_state checks what save_state guarantees, not only what it can parse: what a head dropped
// follows from its window and the decode mode, sums of a head that dropped nothing are zero, and
// with no max_bytes given a small state cannot make the loader allocate more than
// default_max_bytes of its size.
TEST(RazorkvRazorState, TheLoaderChecksTheInvariantsSaveGuarantees) {
  std::mt19937_64 rng(1215);
  head_plan plan(razorkv::model_shape{1, kQueryHeads, kHeads, kDim});
  const prompt<float> layer(40, rng);
  // The header: magic 8, version 4, dtype 4, shape 32, storage 4; then the config's five i64, c,
  // the compensation and the decode mode (u32 each), check_finite; the plan 4 * 9; the layer's
  // flag, tokens and prompt tokens; then head 0's fields.
  const std::size_t decode_at = 8 + 4 + 4 + 32 + 4 + 5 * 8 + 8 + 4;
  const std::size_t head_at = decode_at + 4 + 1 + 4 * 9 + 17;
  const auto changed = [](std::vector<std::uint8_t> bytes, std::size_t at, std::uint8_t value) {
    bytes.at(at) = value;
    return bytes;
  };

  // A bounded cache whose windows slid (4 tokens appended) comes back as a growing one.
  razor_kv_cache<float> bounded(plan,
                                config_for(compensation_mode::kWeighted, decode_mode::kBounded));
  bounded.compress_layer(0, layer.key_view(0, 30), layer.value_view(0, 30));
  bounded.append(0, layer.key_view(30, 4), layer.value_view(30, 4));
  const std::vector<std::uint8_t> slid = razorkv::save_state(bounded);
  ASSERT_EQ(slid.at(decode_at), static_cast<std::uint8_t>(decode_mode::kBounded));
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(changed(slid, decode_at, 0)), kInvalidArgument,
                       "restore_state: a head's dropped tokens (10) outside [6, 6]");
  // Its first head's dropped count, 10, made 9: the sums would fold one token too few.
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(changed(slid, head_at + 8, 9)),
                       kInvalidArgument,
                       "restore_state: a head's dropped tokens (9) outside [10, 10]");

  // A prompt the window holds whole drops nothing: its sums must be zero.
  razor_kv_cache<float> whole(plan, config_for(compensation_mode::kWeighted, decode_mode::kAppend));
  whole.compress_layer(0, layer.key_view(0, 8), layer.value_view(0, 8));
  ASSERT_EQ(whole.compensation(0, 0).count, 0);
  const std::vector<std::uint8_t> kept = razorkv::save_state(whole);
  // Head 0's sums follow its 6 fields, mean flag, 4 sinks and 4 ring rows of K and of V.
  const std::size_t sums_at = head_at + 6 * 8 + 1 + 2 * (4 + 4) * kDim * sizeof(float);
  for (std::size_t at = sums_at; at < sums_at + 2 * kDim * sizeof(double); ++at)
    ASSERT_EQ(kept.at(at), 0);
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(changed(kept, sums_at + 7, 0x3f)),
                       kInvalidArgument,
                       "restore_state: layer 0 kv head 0 dropped no token but its compensation "
                       "sums are not zero");

  // Head 0's ring capacity raised by 2^28 rows (gigabytes of K/V): with no max_bytes, the loader
  // refuses before allocating; given the bytes, it allocates them.
  const std::size_t capacity_at = head_at + 3 * 8;
  const std::vector<std::uint8_t> roomy = changed(kept, capacity_at + 3, 0x10);
  RAZORKV_EXPECT_ERROR(
      razorkv::restore_state<float>(roomy), kInvalidArgument,
      "over max_bytes (" + std::to_string(razorkv::default_max_bytes(roomy.size())) + ")");
  EXPECT_EQ(razorkv::default_max_bytes(1000), (razorkv::index_t{64} << 20) + 8000);
  RAZORKV_EXPECT_ERROR(razorkv::restore_state<float>(kept, -1), kInvalidArgument,
                       "restore_state: max_bytes (-1) must be >= 0");
  // config.decode_reserve (the config's fourth i64) must fit in max_bytes too: a compression
  // after restore reserves that many rows per head.
  RAZORKV_EXPECT_ERROR(
      razorkv::restore_state<float>(changed(kept, 8 + 4 + 4 + 32 + 4 + 3 * 8 + 3, 0x10)),
      kInvalidArgument, "restore_state: config.decode_reserve (");
}

// A tensor-parallel rank holds kv heads [first, first + count): its cache, built from the
// sliced plan and its heads' K/V, holds bit for bit what the whole model's cache holds for them.
TEST(RazorkvPlanSlice, RankCachesEqualTheirHeadsOfTheWholeCache) {
  std::mt19937_64 rng(1207);
  const prompt<float> layer(120, rng);
  head_plan plan = test_plan();
  plan.selection().group_echo = {0.1, 0.2, 0.3, 0.4};
  plan.selection().group_induction = {1.0, 2.0, 3.0, 4.0};
  razor_config config;
  config.s0 = 10;
  razor_kv_cache<float> whole(plan, config);
  whole.compress_layer(0, layer.key_view(0, 120), layer.value_view(0, 120));
  for (const auto& range : {std::pair<index_t, index_t>{0, 2}, {2, 2}, {1, 3}, {0, 4}}) {
    const index_t first = range.first, count = range.second;  // lambdas below capture them
    const head_plan slice = plan.slice_kv_heads(first, count);
    EXPECT_EQ(slice.shape().num_kv_heads, count);
    EXPECT_EQ(slice.shape().num_query_heads, count * kQueryHeads / kHeads);
    EXPECT_EQ(slice.selection().group_induction.front(), 1.0 + static_cast<double>(first));
    ASSERT_EQ(slice.selection().group_echo.size(), static_cast<std::size_t>(count));
    razor_kv_cache<float> rank(slice, config);
    const auto rank_view = [&](const std::vector<float>& data) {
      return layer_view<const float>(data.data() + first * kDim, 120, count, kDim, kHeads * kDim,
                                     kDim);
    };
    rank.compress_layer(0, rank_view(layer.keys), rank_view(layer.values));
    for (index_t h = 0; h < count; ++h) {
      EXPECT_EQ(rank.is_retrieval(0, h), plan.is_retrieval(0, first + h));
      EXPECT_EQ(slice.buffer_override(0, h), plan.buffer_override(0, first + h));
      EXPECT_EQ(head_bits(rank, h), head_bits(whole, first + h)) << first << "+" << h;
    }
  }
  RAZORKV_EXPECT_ERROR(plan.slice_kv_heads(3, 2), kOutOfRange,
                       "head_plan::slice_kv_heads: kv heads [3, 3 + 2) are not a non-empty range "
                       "of [0, 4)");
  RAZORKV_EXPECT_ERROR(plan.slice_kv_heads(0, 0), kOutOfRange, "slice_kv_heads");
  RAZORKV_EXPECT_ERROR(plan.slice_kv_heads(-1, 2), kOutOfRange, "slice_kv_heads");
}

// Decode names what is wrong with a misused cache: a layer never compressed, and queries for
// another model's head count (also through any_kv_cache).
TEST(RazorkvRazorDecodeErrors, UncompressedLayerAndForeignQueryHeads) {
  std::mt19937_64 rng(1208);
  const prompt<float> layer(50, rng);
  razor_kv_cache<float> cache(test_plan(), razor_config{});
  std::vector<float> queries(static_cast<std::size_t>(2 * kQueryHeads * kDim), 0.25f);
  std::vector<float> out(queries.size());
  const matrix_view<const float> q(queries.data(), kQueryHeads, kDim);
  const matrix_view<float> o(out.data(), kQueryHeads, kDim);
  RAZORKV_EXPECT_ERROR(razorkv::decode_attention(cache, 0, q, o), kInvalidArgument,
                       "decode_attention: layer 0 has not been compressed yet (compress_layer its "
                       "prefill before decoding it)");
  cache.compress_layer(0, layer.key_view(0, 50), layer.value_view(0, 50));
  for (const index_t heads : {index_t{4}, index_t{16}}) {
    const matrix_view<const float> wrong_q(queries.data(), heads, kDim);
    const matrix_view<float> wrong_o(out.data(), heads, kDim);
    RAZORKV_EXPECT_ERROR(razorkv::decode_attention(cache, 0, wrong_q, wrong_o), kShapeMismatch,
                         "decode_attention: queries have " + std::to_string(heads) +
                             " heads, the cache was planned for 8 query heads");
  }
  const razorkv::any_kv_cache<float> erased(cache);
  EXPECT_EQ(erased.num_query_heads(), kQueryHeads);
  RAZORKV_EXPECT_ERROR(
      razorkv::decode_attention(erased, 0, matrix_view<const float>(queries.data(), 16, kDim),
                                matrix_view<float>(out.data(), 16, kDim)),
      kShapeMismatch, "the cache was planned for 8 query heads");
  EXPECT_NO_THROW(razorkv::decode_attention(erased, 0, q, o));
}

}  // namespace
