// Tests of paged_kv_view, the read-only source over an engine's page pools: decode over shuffled
// NHD and HND pages agrees with the reference and with a dense cache of the same tokens, a razor
// cache compressed from the pages equals one compressed from the dense prefill, and bad tables
// and pools are errors naming the argument; pages of 8-/4-bit rows decode as a dense cache of
// that storage.
#include <gtest/gtest.h>

#include <razorkv/attention/decode.hpp>
#include <razorkv/attention/reference.hpp>
#include <razorkv/cache/dense_cache.hpp>
#include <razorkv/cache/paged_view.hpp>
#include <razorkv/compress/razor_cache.hpp>
#include <razorkv/quant/hadamard.hpp>
#include <razorkv/quant/row_blocks.hpp>
#include <razorkv/quant/storage.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <type_traits>
#include <vector>

#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;
using razorkv::page_pool_view;
using razorkv::paged_kv_view;

// A sequence written into the pages of per-layer pools in a shuffled order, with every page
// the sequence does not use poisoned with NaN (which decode must never read), next to the same
// tokens as contiguous NHD buffers.
template <class T>
struct paged_sequence {
  index_t layers, kv_heads, dim, page_size, tokens, pool_pages;
  bool hnd;
  std::vector<std::vector<T>> dense_keys, dense_values;  // [layer][tokens * kv_heads * dim], NHD
  std::vector<std::vector<T>> pool_keys,
      pool_values;  // [layer][pool_pages * page_size * kv_heads * dim]
  std::vector<std::int32_t> table;
  std::vector<page_pool_view<const T>> key_pools, value_pools;

  paged_sequence(index_t layers_, index_t kv_heads_, index_t dim_, index_t page_size_,
                 index_t tokens_, bool hnd_, std::mt19937_64& rng)
      : layers(layers_),
        kv_heads(kv_heads_),
        dim(dim_),
        page_size(page_size_),
        tokens(tokens_),
        hnd(hnd_) {
    const index_t used = (tokens + page_size - 1) / page_size;
    pool_pages = used + 3;
    std::vector<std::int32_t> pages(static_cast<std::size_t>(pool_pages));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    table.assign(pages.begin(), pages.begin() + used);
    const auto page_elements = static_cast<std::size_t>(page_size * kv_heads * dim);
    for (index_t l = 0; l < layers; ++l) {
      const auto n = static_cast<std::size_t>(tokens * kv_heads * dim);
      dense_keys.push_back(razorkv_test::random_values<T>(n, rng));
      dense_values.push_back(razorkv_test::random_values<T>(n, rng));
      const T poison = static_cast<T>(std::numeric_limits<float>::quiet_NaN());
      pool_keys.emplace_back(page_elements * static_cast<std::size_t>(pool_pages), poison);
      pool_values.emplace_back(page_elements * static_cast<std::size_t>(pool_pages), poison);
      key_pools.push_back(pool(pool_keys.back().data()));
      value_pools.push_back(pool(pool_values.back().data()));
      for (index_t t = 0; t < tokens; ++t) {
        const std::int32_t page = table[static_cast<std::size_t>(t / page_size)];
        for (index_t h = 0; h < kv_heads; ++h) {
          for (index_t c = 0; c < dim; ++c) {
            const auto from = static_cast<std::size_t>((t * kv_heads + h) * dim + c);
            const auto to = static_cast<std::size_t>(element(page, t % page_size, h) + c);
            pool_keys.back()[to] = dense_keys.back()[from];
            pool_values.back()[to] = dense_values.back()[from];
          }
        }
      }
    }
  }

  page_pool_view<const T> pool(const T* data) const {
    return hnd ? page_pool_view<const T>::hnd(data, pool_pages, page_size, kv_heads, dim)
               : page_pool_view<const T>::nhd(data, pool_pages, page_size, kv_heads, dim);
  }
  index_t element(index_t page, index_t t, index_t h) const {
    return page * page_size * kv_heads * dim +
           (hnd ? (h * page_size + t) * dim : (t * kv_heads + h) * dim);
  }
  paged_kv_view<T> view() const {
    return paged_kv_view<T>(key_pools.data(), value_pools.data(), layers, table.data(),
                            static_cast<index_t>(table.size()), tokens);
  }
  layer_view<const T> keys(index_t l) const {
    return layer_view<const T>::nhd(dense_keys[static_cast<std::size_t>(l)].data(), tokens,
                                    kv_heads, dim);
  }
  layer_view<const T> values(index_t l) const {
    return layer_view<const T>::nhd(dense_values[static_cast<std::size_t>(l)].data(), tokens,
                                    kv_heads, dim);
  }
  razorkv::dense_kv_cache<T> dense() const {
    razorkv::dense_kv_cache<T> cache(layers, kv_heads, dim, tokens);
    for (index_t l = 0; l < layers; ++l) cache.append(l, keys(l), values(l));
    return cache;
  }
};

template <class T>
class PagedViewTest : public ::testing::Test {};
TYPED_TEST_SUITE(PagedViewTest, razorkv_test::storage_dtypes);

TYPED_TEST(PagedViewTest, DecodeReadsShuffledPagesAsTheDenseSequence) {
  using T = TypeParam;
  std::mt19937_64 rng(41);
  // (kv heads, dim, page size, tokens): a partial last page, one-token pages, a single page,
  // an odd dim the kernels do not specialise.
  const index_t shapes[][4] = {{2, 64, 16, 100}, {1, 20, 1, 9}, {4, 128, 32, 32}, {2, 80, 7, 50}};
  for (const bool hnd : {false, true}) {
    for (const auto& shape : shapes) {
      const index_t kv_heads = shape[0], dim = shape[1], query_heads = kv_heads * 2;
      const paged_sequence<T> seq(2, kv_heads, dim, shape[2], shape[3], hnd, rng);
      const paged_kv_view<T> paged = seq.view();
      const razorkv::dense_kv_cache<T> dense = seq.dense();
      EXPECT_EQ(razorkv::held_kv_bytes(paged), razorkv::held_kv_bytes(dense));
      for (index_t layer = 0; layer < 2; ++layer) {
        const std::vector<float> queries =
            razorkv_test::random_values<float>(static_cast<std::size_t>(query_heads * dim), rng);
        const razorkv::matrix_view<const float> q(queries.data(), query_heads, dim);
        std::vector<float> from_pages(queries.size()), from_dense(queries.size());
        razorkv::decode_attention(paged, layer, q,
                                  razorkv::matrix_view<float>(from_pages.data(), query_heads, dim));
        razorkv::decode_attention(dense, layer, q,
                                  razorkv::matrix_view<float>(from_dense.data(), query_heads, dim));
        const std::vector<double> want = razorkv::reference::decode_attention(dense, layer, q);
        // The outputs are float whatever the storage dtype.
        const double tolerance =
            64 * razorkv_test::accum_epsilon<float>() * std::sqrt(static_cast<double>(shape[3]));
        EXPECT_LE(razorkv_test::max_abs_diff(from_pages, want), tolerance)
            << (hnd ? "HND" : "NHD") << " kv_heads " << kv_heads << " dim " << dim << " page "
            << shape[2];
        EXPECT_LE(razorkv_test::max_abs_diff(from_pages, from_dense), tolerance);
      }
    }
  }
}

TYPED_TEST(PagedViewTest, RazorCompressionFromPagesEqualsCompressionFromTheDensePrefill) {
  using T = TypeParam;
  std::mt19937_64 rng(42);
  for (const bool hnd : {false, true}) {
    const paged_sequence<T> seq(2, 2, 32, 16, 300, hnd, rng);
    razorkv::head_plan plan(razorkv::model_shape{2, 4, 2, 32});
    plan.set_retrieval(1, 0, true);
    razorkv::razor_config config;
    config.fixed_window = 40;
    razorkv::razor_kv_cache<T> from_pages(plan, config), from_dense(plan, config);
    const paged_kv_view<T> paged = seq.view();
    for (index_t l = 0; l < 2; ++l) {
      from_pages.compress_layer(l, paged);
      from_dense.compress_layer(l, seq.keys(l), seq.values(l));
    }
    for (index_t l = 0; l < 2; ++l) {
      for (index_t h = 0; h < 2; ++h) {
        ASSERT_EQ(from_pages.num_spans(l, h), from_dense.num_spans(l, h));
        for (index_t i = 0; i < from_pages.num_spans(l, h); ++i) {
          const razorkv::kv_span<T> a = from_pages.span(l, h, i), b = from_dense.span(l, h, i);
          ASSERT_EQ(a.length(), b.length());
          EXPECT_EQ(a.log_weight, b.log_weight);
          for (index_t r = 0; r < a.length(); ++r) {
            for (index_t c = 0; c < 32; ++c) {
              EXPECT_EQ(razorkv_test::to_double(a.keys.typed()(r, c)),
                        razorkv_test::to_double(b.keys.typed()(r, c)));
              EXPECT_EQ(razorkv_test::to_double(a.values.typed()(r, c)),
                        razorkv_test::to_double(b.values.typed()(r, c)));
            }
          }
        }
      }
    }
  }
}

TEST(PagedView, BadPoolsAndTablesAreErrorsNamingTheArgument) {
  std::vector<float> memory(4 * 8 * 2 * 16, 0.0f);
  const auto pool = page_pool_view<const float>::nhd(memory.data(), 4, 8, 2, 16);
  const page_pool_view<const float> pools[] = {pool, pool};
  const auto small = page_pool_view<const float>::nhd(memory.data(), 2, 8, 2, 16);
  const page_pool_view<const float> mixed[] = {pool, small};
  const auto other_dim = page_pool_view<const float>::nhd(memory.data(), 4, 8, 2, 8);
  const page_pool_view<const float> mismatched[] = {pool, other_dim};
  std::vector<std::int32_t> table = {3, 0, 1};

  // 17 tokens fill 3 pages of 8.
  EXPECT_NO_THROW((paged_kv_view<float>(pools, pools, 2, table.data(), 3, 17)));
  RAZORKV_EXPECT_ERROR((paged_kv_view<float>(pools, pools, 2, table.data(), 3, 25)), kShapeMismatch,
                       "table_pages (3)");
  RAZORKV_EXPECT_ERROR((paged_kv_view<float>(pools, pools, 2, table.data(), 2, 17)), kShapeMismatch,
                       "table_pages (2)");
  table[1] = 4;
  RAZORKV_EXPECT_ERROR((paged_kv_view<float>(pools, pools, 2, table.data(), 3, 17)), kOutOfRange,
                       "page_table[1] (4)");
  table[1] = -1;
  RAZORKV_EXPECT_ERROR((paged_kv_view<float>(pools, pools, 2, table.data(), 3, 17)), kOutOfRange,
                       "page_table[1] (-1)");
  table[1] = 3;  // in range for layer 0's pools, not for layer 1's 2-page value pool
  RAZORKV_EXPECT_ERROR((paged_kv_view<float>(pools, mixed, 2, table.data(), 3, 17)), kOutOfRange,
                       "page_table[0] (3)");
  RAZORKV_EXPECT_ERROR((paged_kv_view<float>(pools, mismatched, 2, table.data(), 3, 17)),
                       kShapeMismatch, "value_pools[1]");
  RAZORKV_EXPECT_ERROR((paged_kv_view<float>(pools, pools, 0, table.data(), 3, 17)),
                       kInvalidArgument, "num_layers (0)");
  RAZORKV_EXPECT_ERROR((paged_kv_view<float>(nullptr, pools, 2, table.data(), 3, 17)),
                       kInvalidArgument, "key_pools");
  RAZORKV_EXPECT_ERROR((paged_kv_view<float>(pools, pools, 2, nullptr, 3, 17)), kInvalidArgument,
                       "page_table");
  RAZORKV_EXPECT_ERROR((page_pool_view<const float>::nhd(memory.data(), 4, 0, 2, 16)),
                       kInvalidArgument, "page_size (0)");
  RAZORKV_EXPECT_ERROR((page_pool_view<const float>(memory.data(), 4, 8, 2, 16, 256, 8, 16)),
                       kInvalidArgument, "token_stride (8)");

  table = {3, 0, 1};
  const paged_kv_view<float> view(pools, pools, 2, table.data(), 3, 17);
  EXPECT_EQ(view.span(1, 1, 2).length(), 1);
  RAZORKV_EXPECT_ERROR(view.span(2, 0, 0), kOutOfRange, "layer (2)");
  RAZORKV_EXPECT_ERROR(view.span(0, 2, 0), kOutOfRange, "kv_head (2)");
  RAZORKV_EXPECT_ERROR(view.span(0, 0, 3), kOutOfRange, "span (3)");
  // Decode rejects what it cannot read, before writing anything.
  std::vector<float> q(4 * 16, 1.0f), out(4 * 16, 7.0f);
  RAZORKV_EXPECT_ERROR(
      razorkv::decode_attention(view, 2, razorkv::matrix_view<const float>(q.data(), 4, 16),
                                razorkv::matrix_view<float>(out.data(), 4, 16)),
      kOutOfRange, "layer (2)");
  EXPECT_EQ(out[0], 7.0f);
}

static_assert(razorkv::is_kv_source_v<paged_kv_view<Eigen::half>>);
static_assert(!razorkv::is_kv_cache_v<paged_kv_view<Eigen::half>>);

}  // namespace

// An engine's q8 / q4 pages: rows quantised as razorkv quantises them (keys rotated first when
// the engine rotates them), written into shuffled NHD and HND pages poisoned elsewhere with NaN
// scales. Decode over the pages equals decode over a dense cache of that storage bit for bit (the
// same blocks, split into other spans), and a razor cache cannot compress from them (it reads
// rows of T), which is an error naming the format.
TYPED_TEST(PagedViewTest, QuantisedPagesDecodeAsADenseCacheOfTheirStorage) {
  using T = TypeParam;
  using razorkv::quantised_page_pool_view;
  using razorkv::row_format;
  constexpr index_t kLayers = 2, kKvHeads = 2, kDim = 64, kQueryHeads = 8;
  const razorkv::kv_storage storages[] = {razorkv::kv_storage::both(row_format::kQ8),
                                          razorkv::kv_storage::both(row_format::kQ4, true),
                                          {row_format::kQ8, std::nullopt, false}};
  for (const razorkv::kv_storage& storage : storages) {
    for (const bool hnd : {false, true}) {
      SCOPED_TRACE(::testing::Message() << razorkv::describe(storage) << (hnd ? " HND" : " NHD"));
      std::mt19937_64 rng(43);
      const paged_sequence<T> seq(kLayers, kKvHeads, kDim, 16, 100, hnd, rng);
      // The storage's rows of each layer, in pages laid out as seq's.
      const auto quantised_pool = [&](const std::vector<T>& dense, row_format format, bool rotate) {
        const index_t row = razorkv::quantised_row_bytes(format, kDim);
        std::vector<std::uint8_t> bytes(
            static_cast<std::size_t>(seq.pool_pages * seq.page_size * kKvHeads * row), 0xff);
        // Rotated as razorkv rotates (in float, double for double rows), stored as T, quantised.
        using R = std::conditional_t<std::is_same_v<T, double>, double, float>;
        std::vector<R> rotated(static_cast<std::size_t>(kDim));
        std::vector<float> values(static_cast<std::size_t>(kDim));
        for (index_t t = 0; t < seq.tokens; ++t) {
          const std::int32_t page = seq.table[static_cast<std::size_t>(t / seq.page_size)];
          for (index_t h = 0; h < kKvHeads; ++h) {
            for (index_t c = 0; c < kDim; ++c) {
              rotated[static_cast<std::size_t>(c)] =
                  static_cast<R>(dense[static_cast<std::size_t>((t * kKvHeads + h) * kDim + c)]);
            }
            if (rotate) razorkv::hadamard_rotate(rotated.data(), kDim);
            for (index_t c = 0; c < kDim; ++c) {
              values[static_cast<std::size_t>(c)] =
                  static_cast<float>(static_cast<T>(rotated[static_cast<std::size_t>(c)]));
            }
            razorkv::quantise_row(
                format, values.data(), kDim,
                bytes.data() + seq.element(page, t % seq.page_size, h) / kDim * row);
          }
        }
        return bytes;
      };
      std::vector<std::vector<std::uint8_t>> key_bytes, value_bytes;
      std::vector<quantised_page_pool_view> key_pools, value_pools;
      const auto view_of = [&](const std::vector<std::uint8_t>& bytes, row_format format) {
        return hnd ? quantised_page_pool_view::hnd(bytes.data(), format, seq.pool_pages,
                                                   seq.page_size, kKvHeads, kDim)
                   : quantised_page_pool_view::nhd(bytes.data(), format, seq.pool_pages,
                                                   seq.page_size, kKvHeads, kDim);
      };
      for (index_t l = 0; l < kLayers; ++l) {
        key_bytes.push_back(quantised_pool(seq.dense_keys[static_cast<std::size_t>(l)],
                                           *storage.keys, storage.rotate_keys));
        if (storage.values) {
          value_bytes.push_back(quantised_pool(seq.dense_values[static_cast<std::size_t>(l)],
                                               *storage.values, false));
        }
      }
      for (index_t l = 0; l < kLayers; ++l) {
        key_pools.push_back(view_of(key_bytes[static_cast<std::size_t>(l)], *storage.keys));
        if (storage.values)
          value_pools.push_back(view_of(value_bytes[static_cast<std::size_t>(l)], *storage.values));
      }
      const auto table_pages = static_cast<index_t>(seq.table.size());
      const paged_kv_view<T> paged =
          storage.values
              ? paged_kv_view<T>(key_pools.data(), value_pools.data(), kLayers, seq.table.data(),
                                 table_pages, seq.tokens, storage.rotate_keys)
              : paged_kv_view<T>(key_pools.data(), seq.value_pools.data(), kLayers,
                                 seq.table.data(), table_pages, seq.tokens, storage.rotate_keys);
      razorkv::dense_kv_cache<T> dense(kLayers, kKvHeads, kDim, seq.tokens, nullptr, storage);
      for (index_t l = 0; l < kLayers; ++l) dense.append(l, seq.keys(l), seq.values(l));
      EXPECT_EQ(razorkv::held_kv_bytes(paged), razorkv::held_kv_bytes(dense));
      for (index_t layer = 0; layer < kLayers; ++layer) {
        const std::vector<float> queries =
            razorkv_test::random_values<float>(static_cast<std::size_t>(kQueryHeads * kDim), rng);
        const razorkv::matrix_view<const float> q(queries.data(), kQueryHeads, kDim);
        std::vector<float> from_pages(queries.size()), from_dense(queries.size());
        razorkv::decode_attention(
            paged, layer, q, razorkv::matrix_view<float>(from_pages.data(), kQueryHeads, kDim));
        razorkv::decode_attention(
            dense, layer, q, razorkv::matrix_view<float>(from_dense.data(), kQueryHeads, kDim));
        EXPECT_EQ(from_pages, from_dense) << "layer " << layer;
      }
      razorkv::head_plan plan(razorkv::model_shape{kLayers, kQueryHeads, kKvHeads, kDim});
      razorkv::razor_kv_cache<T> razor(plan, razorkv::razor_config{});
      RAZORKV_EXPECT_ERROR(razor.compress_layer(0, paged), kInvalidArgument, "rows stored as q");
    }
  }
}

TEST(PagedView, BadQuantisedPoolsAreErrorsNamingTheArgument) {
  using razorkv::quantised_page_pool_view;
  using razorkv::row_format;
  std::vector<std::uint8_t> memory(4 * 8 * 2 * 68);
  RAZORKV_EXPECT_ERROR(quantised_page_pool_view::nhd(memory.data(), row_format::kQ8, 4, 8, 2, 48),
                       kInvalidArgument, "which needs head_dim (48) a multiple of 32");
  RAZORKV_EXPECT_ERROR(
      quantised_page_pool_view::nhd(memory.data(), static_cast<row_format>(3), 4, 8, 2, 64),
      kInvalidArgument, "storage.keys (3) is not q8 or q4");
  RAZORKV_EXPECT_ERROR(
      quantised_page_pool_view(memory.data(), row_format::kQ8, 4, 8, 2, 64, 1088, 60, 544),
      kInvalidArgument, "token_stride (60) must be >= a row's bytes (68)");
  RAZORKV_EXPECT_ERROR(quantised_page_pool_view::hnd(nullptr, row_format::kQ4, 4, 8, 2, 64),
                       kInvalidArgument, "data is null");
  const auto pool = quantised_page_pool_view::nhd(memory.data(), row_format::kQ8, 4, 8, 2, 64);
  const quantised_page_pool_view pools[] = {pool};
  const std::vector<std::int32_t> table = {2, 1};
  const paged_kv_view<float> view(pools, pools, 1, table.data(), 2, 9, false);
  EXPECT_TRUE(view.span(0, 1, 1).keys.is_quantised());
  EXPECT_EQ(view.span(0, 1, 1).keys.quantised().data, memory.data() + 1 * 8 * 2 * 68 + 68);
  RAZORKV_EXPECT_ERROR(pool.rows(4, 1, 0), kOutOfRange, "page (4)");
  // Another shape than the key pools', and rotation a head_dim of 96 cannot have.
  const auto other = quantised_page_pool_view::nhd(memory.data(), row_format::kQ8, 4, 4, 2, 64);
  const quantised_page_pool_view others[] = {other};
  RAZORKV_EXPECT_ERROR((paged_kv_view<float>(pools, others, 1, table.data(), 2, 9, false)),
                       kShapeMismatch, "value_pools[0] has pages of 4 tokens");
  const auto wide = quantised_page_pool_view::nhd(memory.data(), row_format::kQ8, 1, 8, 2, 96);
  const quantised_page_pool_view wides[] = {wide};
  const std::vector<std::int32_t> one = {0};
  RAZORKV_EXPECT_ERROR((paged_kv_view<float>(wides, wides, 1, one.data(), 1, 8, true)),
                       kInvalidArgument, "rotated_keys needs a power-of-two head_dim, not 96");
}
