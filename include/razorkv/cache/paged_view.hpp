// razorkv/cache/paged_view.hpp: a read-only KV source over an engine's paged K/V memory (a page
// pool per layer, of rows of T or of 8-/4-bit blocks, and a page table per sequence), which
// decode and compression read in place.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <type_traits>

#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"
#include "razorkv/quant/hadamard.hpp"
#include "razorkv/quant/row_blocks.hpp"
#include "razorkv/quant/storage.hpp"

RAZORKV_BEGIN_NAMESPACE

namespace detail {

// What every page pool shares: page p holds page_size tokens of every kv head, and the row of
// (p, t, h) starts p * page_stride + t * token_stride + h * head_stride units into the pool
// (elements of a pool of T, bytes of a pool of quantised rows, each row `row_extent` units).
// Checked on construction: counts, strides that keep rows apart, data where there are pages.
class page_pool_layout {
 public:
  constexpr index_t num_pages() const noexcept { return num_pages_; }
  constexpr index_t page_size() const noexcept { return page_size_; }
  constexpr index_t num_kv_heads() const noexcept { return num_kv_heads_; }
  constexpr index_t head_dim() const noexcept { return head_dim_; }
  constexpr index_t page_stride() const noexcept { return page_stride_; }
  constexpr index_t token_stride() const noexcept { return token_stride_; }
  constexpr index_t head_stride() const noexcept { return head_stride_; }

 protected:
  constexpr page_pool_layout() noexcept = default;
  // `row_name` names the row's extent in messages ("head_dim", "a row's bytes").
  page_pool_layout(const char* where, const void* data, index_t num_pages, index_t page_size,
                   index_t num_kv_heads, index_t head_dim, index_t row_extent, const char* row_name,
                   index_t page_stride, index_t token_stride, index_t head_stride) {
    RAZORKV_CHECK(num_pages >= 0, kInvalidArgument, where, ": num_pages (", num_pages,
                  ") must be >= 0");
    RAZORKV_CHECK(page_size > 0, kInvalidArgument, where, ": page_size (", page_size,
                  ") must be > 0");
    RAZORKV_CHECK(num_kv_heads > 0, kInvalidArgument, where, ": num_kv_heads (", num_kv_heads,
                  ") must be > 0");
    RAZORKV_CHECK(head_dim > 0, kInvalidArgument, where, ": head_dim (", head_dim, ") must be > 0");
    RAZORKV_CHECK(page_stride >= 0 && token_stride >= 0 && head_stride >= 0, kInvalidArgument,
                  where, ": strides must be >= 0, got page_stride (", page_stride,
                  "), token_stride (", token_stride, ") and head_stride (", head_stride, ")");
    // The same bounds layer_view puts on one page; a page's extent then bounds page_stride.
    RAZORKV_CHECK(page_size == 1 || token_stride >= row_extent, kInvalidArgument, where,
                  ": token_stride (", token_stride, ") must be >= ", row_name, " (", row_extent,
                  ")");
    RAZORKV_CHECK(num_kv_heads == 1 || head_stride >= row_extent, kInvalidArgument, where,
                  ": head_stride (", head_stride, ") must be >= ", row_name, " (", row_extent, ")");
    RAZORKV_CHECK(num_pages == 0 || data != nullptr, kInvalidArgument, where,
                  ": data is null with num_pages (", num_pages, ") > 0");
    num_pages_ = num_pages;
    page_size_ = page_size;
    num_kv_heads_ = num_kv_heads;
    head_dim_ = head_dim;
    page_stride_ = page_stride;
    token_stride_ = token_stride;
    head_stride_ = head_stride;
  }

  // Page, token and head strides of contiguous NHD ([num_pages, page_size, num_kv_heads] rows)
  // or HND ([num_pages, num_kv_heads, page_size] rows) pages of rows `row_extent` units long.
  struct strides {
    index_t page, token, head;
  };
  static strides contiguous(bool hnd, index_t page_size, index_t num_kv_heads, index_t row_extent,
                            const char* where) {
    const index_t page =
        checked_mul(checked_mul(page_size, num_kv_heads, where), row_extent, where);
    if (hnd) return {page, row_extent, page_size * row_extent};
    return {page, num_kv_heads * row_extent, row_extent};
  }

 private:
  index_t num_pages_ = 0, page_size_ = 0, num_kv_heads_ = 0, head_dim_ = 0;
  index_t page_stride_ = 0, token_stride_ = 0, head_stride_ = 0;
};

}  // namespace detail

/// One layer's K (or V) page pool in engine memory: page p holds page_size tokens of every kv
/// head, element (p, t, h, d) at data()[p * page_stride + t * token_stride + h * head_stride + d].
/// NHD pages ([num_pages, page_size, kv_heads, head_dim], the layout of vLLM and FlashInfer's
/// default) and HND pages ([num_pages, kv_heads, page_size, head_dim]) are this view with other
/// strides (nhd(), hnd()). Strides are in elements. The view never owns the pool.
template <class T>
class page_pool_view : public detail::page_pool_layout {
 public:
  constexpr page_pool_view() noexcept = default;

  /// Fully general checked constructor; prefer nhd() and hnd().
  page_pool_view(T* data, index_t num_pages, index_t page_size, index_t num_kv_heads,
                 index_t head_dim, index_t page_stride, index_t token_stride, index_t head_stride)
      : page_pool_layout("page_pool_view", data, num_pages, page_size, num_kv_heads, head_dim,
                         head_dim, "head_dim", page_stride, token_stride, head_stride),
        data_(data) {}

  /// [num_pages, page_size, num_kv_heads, head_dim], contiguous.
  static page_pool_view nhd(T* data, index_t num_pages, index_t page_size, index_t num_kv_heads,
                            index_t head_dim) {
    const strides s = contiguous(false, page_size, num_kv_heads, head_dim, "page_pool_view::nhd");
    return page_pool_view(data, num_pages, page_size, num_kv_heads, head_dim, s.page, s.token,
                          s.head);
  }
  /// [num_pages, num_kv_heads, page_size, head_dim], contiguous.
  static page_pool_view hnd(T* data, index_t num_pages, index_t page_size, index_t num_kv_heads,
                            index_t head_dim) {
    const strides s = contiguous(true, page_size, num_kv_heads, head_dim, "page_pool_view::hnd");
    return page_pool_view(data, num_pages, page_size, num_kv_heads, head_dim, s.page, s.token,
                          s.head);
  }

  constexpr T* data() const noexcept { return data_; }

  /// The first `tokens` tokens of page `page` ([tokens, num_kv_heads, head_dim]).
  layer_view<T> page(index_t page, index_t tokens) const {
    RAZORKV_CHECK(page >= 0 && page < num_pages(), kOutOfRange, "page_pool_view::page: page (",
                  page, ") outside [0, ", num_pages(), ")");
    RAZORKV_CHECK(tokens >= 0 && tokens <= page_size(), kOutOfRange,
                  "page_pool_view::page: tokens (", tokens, ") outside [0, ", page_size(), "]");
    return layer_view<T>(tokens == 0 ? nullptr : data_ + page * page_stride(), tokens,
                         num_kv_heads(), head_dim(), token_stride(), head_stride());
  }

 private:
  T* data_ = nullptr;
};

/// One layer's K (or V) page pool of quantised rows (8-/4-bit blocks, quant/storage.hpp) in engine
/// memory, as page_pool_view with strides in bytes: the row of (page p, token t, kv head h) starts
/// at byte data() + p * page_stride + t * token_stride + h * head_stride and holds
/// quantised_row_bytes(format, head_dim) bytes (llama.cpp's q8_0 / q4_0 rows). Never owns the pool.
class quantised_page_pool_view : public detail::page_pool_layout {
 public:
  constexpr quantised_page_pool_view() noexcept = default;

  /// Fully general checked constructor; prefer nhd() and hnd().
  quantised_page_pool_view(const std::uint8_t* data, row_format format, index_t num_pages,
                           index_t page_size, index_t num_kv_heads, index_t head_dim,
                           index_t page_stride, index_t token_stride, index_t head_stride)
      : page_pool_layout("quantised_page_pool_view", data, num_pages, page_size, num_kv_heads,
                         head_dim, row_bytes(format, head_dim, "quantised_page_pool_view"),
                         "a row's bytes", page_stride, token_stride, head_stride),
        data_(data),
        format_(format) {}

  /// [num_pages, page_size, num_kv_heads] rows, contiguous.
  static quantised_page_pool_view nhd(const std::uint8_t* data, row_format format,
                                      index_t num_pages, index_t page_size, index_t num_kv_heads,
                                      index_t head_dim) {
    constexpr const char* kWhere = "quantised_page_pool_view::nhd";
    const strides s =
        contiguous(false, page_size, num_kv_heads, row_bytes(format, head_dim, kWhere), kWhere);
    return quantised_page_pool_view(data, format, num_pages, page_size, num_kv_heads, head_dim,
                                    s.page, s.token, s.head);
  }
  /// [num_pages, num_kv_heads, page_size] rows, contiguous.
  static quantised_page_pool_view hnd(const std::uint8_t* data, row_format format,
                                      index_t num_pages, index_t page_size, index_t num_kv_heads,
                                      index_t head_dim) {
    constexpr const char* kWhere = "quantised_page_pool_view::hnd";
    const strides s =
        contiguous(true, page_size, num_kv_heads, row_bytes(format, head_dim, kWhere), kWhere);
    return quantised_page_pool_view(data, format, num_pages, page_size, num_kv_heads, head_dim,
                                    s.page, s.token, s.head);
  }

  constexpr const std::uint8_t* data() const noexcept { return data_; }
  constexpr row_format format() const noexcept { return format_; }

  /// Kv head `kv_head`'s rows of the first `tokens` tokens of page `page`.
  quantised_rows rows(index_t page, index_t tokens, index_t kv_head) const {
    constexpr const char* kWhere = "quantised_page_pool_view::rows";
    RAZORKV_CHECK(page >= 0 && page < num_pages(), kOutOfRange, kWhere, ": page (", page,
                  ") outside [0, ", num_pages(), ")");
    RAZORKV_CHECK(tokens >= 0 && tokens <= page_size(), kOutOfRange, kWhere, ": tokens (", tokens,
                  ") outside [0, ", page_size(), "]");
    RAZORKV_CHECK(kv_head >= 0 && kv_head < num_kv_heads(), kOutOfRange, kWhere, ": kv_head (",
                  kv_head, ") outside [0, ", num_kv_heads(), ")");
    // A row stride of a whole row when the page holds one token (token_stride may be anything).
    const index_t stride = tokens <= 1 ? quantised_row_bytes(format_, head_dim()) : token_stride();
    return quantised_rows{
        tokens == 0 ? nullptr : data_ + page * page_stride() + kv_head * head_stride(), tokens,
        head_dim(), stride, format_};
  }

 private:
  // The bytes of one row, after the checks that make them defined (a format, a head_dim).
  static index_t row_bytes(row_format format, index_t head_dim, const char* where) {
    check_storage(kv_storage{format, std::nullopt, false}, head_dim, where);
    return quantised_row_bytes(format, head_dim);
  }

  const std::uint8_t* data_ = nullptr;
  row_format format_ = row_format::kQ8;
};

/// One sequence's K/V in an engine's paged memory, as a read-only KV source: the sequence's
/// tokens fill the pages its page table lists, in order, every page full except the last.
/// decode_attention reads it (one span per page), and razor_kv_cache::compress_layer compresses
/// a prefill from it, both in place; nothing is copied and nothing appends (the engine writes its
/// pages itself, and makes a new view when the sequence grows).
///
/// Non-owning: the pool descriptors, the page table and the pages must outlive the view and its
/// spans. The constructor checks every page index against every layer's pool, so a span never
/// points outside a pool.
///
/// Either side's pools may hold quantised rows (quantised_page_pool_view: an engine's q8_0 or
/// q4_0 pages); its spans then hand out quantised_rows, which decode reads in place, and
/// `rotated_keys` says whether the engine stored its keys Walsh-Hadamard-rotated (see
/// kv_span::rotated_keys).
template <class T>
class paged_kv_view {
  static_assert(is_storage_dtype_v<T>, "razorkv::paged_kv_view: unsupported storage dtype");

 public:
  using value_type = T;

  /// \param key_pools, value_pools [num_layers] each: layer l's K and V pools, all with the
  ///        same page_size, num_kv_heads and head_dim, K and V of a layer with the same num_pages
  /// \param page_table [table_pages]: the sequence's pages, oldest first, each in [0, num_pages)
  /// \param num_tokens the sequence length: table_pages == ceil(num_tokens / page_size)
  paged_kv_view(const page_pool_view<const T>* key_pools,
                const page_pool_view<const T>* value_pools, index_t num_layers,
                const std::int32_t* page_table, index_t table_pages, index_t num_tokens)
      : paged_kv_view(pools{key_pools, nullptr}, pools{value_pools, nullptr}, num_layers,
                      page_table, table_pages, num_tokens, false) {}
  /// The same with quantised rows on one side or both; rotated_keys (no default, so that a null
  /// pool argument still picks the constructor above) as the engine stored its keys.
  paged_kv_view(const quantised_page_pool_view* key_pools,
                const page_pool_view<const T>* value_pools, index_t num_layers,
                const std::int32_t* page_table, index_t table_pages, index_t num_tokens,
                bool rotated_keys)
      : paged_kv_view(pools{nullptr, key_pools}, pools{value_pools, nullptr}, num_layers,
                      page_table, table_pages, num_tokens, rotated_keys) {}
  paged_kv_view(const quantised_page_pool_view* key_pools,
                const quantised_page_pool_view* value_pools, index_t num_layers,
                const std::int32_t* page_table, index_t table_pages, index_t num_tokens,
                bool rotated_keys)
      : paged_kv_view(pools{nullptr, key_pools}, pools{nullptr, value_pools}, num_layers,
                      page_table, table_pages, num_tokens, rotated_keys) {}
  paged_kv_view(const page_pool_view<const T>* key_pools,
                const quantised_page_pool_view* value_pools, index_t num_layers,
                const std::int32_t* page_table, index_t table_pages, index_t num_tokens,
                bool rotated_keys)
      : paged_kv_view(pools{key_pools, nullptr}, pools{nullptr, value_pools}, num_layers,
                      page_table, table_pages, num_tokens, rotated_keys) {}

  index_t num_layers() const noexcept { return num_layers_; }
  index_t num_kv_heads() const noexcept { return num_kv_heads_; }
  index_t head_dim() const noexcept { return head_dim_; }
  index_t page_size() const noexcept { return page_size_; }
  index_t num_tokens() const noexcept { return num_tokens_; }

  /// The contract: one span per page of the table.
  index_t num_spans(index_t layer, index_t kv_head) const {
    check(layer, kv_head, "paged_kv_view::num_spans");
    return table_pages_;
  }
  kv_span<T> span(index_t layer, index_t kv_head, index_t i) const {
    constexpr const char* kWhere = "paged_kv_view::span";
    check(layer, kv_head, kWhere);
    RAZORKV_CHECK(i >= 0 && i < table_pages_, kOutOfRange, kWhere, ": span (", i, ") outside [0, ",
                  table_pages_, ")");
    const index_t tokens = i + 1 < table_pages_ ? page_size() : num_tokens_ - i * page_size();
    return {keys_.rows(layer, page_table_[i], tokens, kv_head),
            values_.rows(layer, page_table_[i], tokens, kv_head), 0.0f, rotated_keys_};
  }

 private:
  // One side's pools: rows of T, or quantised rows (exactly one is set).
  struct pools {
    const page_pool_view<const T>* typed;
    const quantised_page_pool_view* quantised;

    bool is_null() const noexcept { return typed == nullptr && quantised == nullptr; }
    template <class F>
    void for_layer(index_t l, F&& f) const {
      if (typed != nullptr) {
        f(typed[l]);
      } else {
        f(quantised[l]);
      }
    }
    kv_rows<T> rows(index_t layer, index_t page, index_t tokens, index_t kv_head) const {
      if (typed != nullptr) return typed[layer].page(page, tokens).head(kv_head);
      return kv_rows<T>(quantised[layer].rows(page, tokens, kv_head));
    }
  };

  paged_kv_view(pools keys, pools values, index_t num_layers, const std::int32_t* page_table,
                index_t table_pages, index_t num_tokens, bool rotated_keys)
      : keys_(keys),
        values_(values),
        num_layers_(num_layers),
        page_table_(page_table),
        table_pages_(table_pages),
        num_tokens_(num_tokens),
        rotated_keys_(rotated_keys) {
    constexpr const char* kWhere = "paged_kv_view";
    RAZORKV_CHECK(num_layers > 0, kInvalidArgument, kWhere, ": num_layers (", num_layers,
                  ") must be > 0");
    RAZORKV_CHECK(!keys.is_null() && !values.is_null(), kInvalidArgument, kWhere,
                  ": key_pools and value_pools must not be null");
    keys.for_layer(0, [&](const auto& first) {
      page_size_ = first.page_size();
      num_kv_heads_ = first.num_kv_heads();
      head_dim_ = first.head_dim();
    });
    RAZORKV_CHECK(page_size_ > 0, kInvalidArgument, kWhere,
                  ": key_pools[0] is empty (a default-constructed page_pool_view)");
    RAZORKV_CHECK(!rotated_keys || is_power_of_two(head_dim_), kInvalidArgument, kWhere,
                  ": rotated_keys needs a power-of-two head_dim, not ", head_dim_);
    index_t usable_pages = std::numeric_limits<index_t>::max();
    for (index_t l = 0; l < num_layers; ++l) {
      for (const pools* side : {&keys, &values}) {
        const char* name = side == &keys ? "key_pools" : "value_pools";
        side->for_layer(l, [&](const auto& pool) {
          RAZORKV_CHECK(pool.page_size() == page_size_ && pool.num_kv_heads() == num_kv_heads_ &&
                            pool.head_dim() == head_dim_,
                        kShapeMismatch, kWhere, ": ", name, "[", l, "] has pages of ",
                        pool.page_size(), " tokens x ", pool.num_kv_heads(), " kv heads x ",
                        pool.head_dim(), ", key_pools[0] of ", page_size_, " x ", num_kv_heads_,
                        " x ", head_dim_);
          usable_pages = pool.num_pages() < usable_pages ? pool.num_pages() : usable_pages;
        });
      }
    }
    check_table(usable_pages);
  }
  void check_table(index_t usable_pages) const {
    constexpr const char* kWhere = "paged_kv_view";
    const index_t num_tokens = num_tokens_, table_pages = table_pages_;
    const std::int32_t* page_table = page_table_;
    RAZORKV_CHECK(num_tokens >= 0, kInvalidArgument, kWhere, ": num_tokens (", num_tokens,
                  ") must be >= 0");
    const index_t needed = (num_tokens + page_size_ - 1) / page_size_;
    RAZORKV_CHECK(table_pages == needed, kShapeMismatch, kWhere, ": table_pages (", table_pages,
                  ") != the ", needed, " pages of ", page_size_, " tokens that num_tokens (",
                  num_tokens, ") fills");
    RAZORKV_CHECK(table_pages == 0 || page_table != nullptr, kInvalidArgument, kWhere,
                  ": page_table is null with table_pages (", table_pages, ") > 0");
    for (index_t i = 0; i < table_pages; ++i) {
      RAZORKV_CHECK(page_table[i] >= 0 && page_table[i] < usable_pages, kOutOfRange, kWhere,
                    ": page_table[", i, "] (", page_table[i], ") outside [0, ", usable_pages,
                    "), the pages every layer's pools hold");
    }
  }

  void check(index_t layer, index_t kv_head, const char* where) const {
    RAZORKV_CHECK(layer >= 0 && layer < num_layers_, kOutOfRange, where, ": layer (", layer,
                  ") outside [0, ", num_layers_, ")");
    RAZORKV_CHECK(kv_head >= 0 && kv_head < num_kv_heads(), kOutOfRange, where, ": kv_head (",
                  kv_head, ") outside [0, ", num_kv_heads(), ")");
  }

  pools keys_, values_;  // [num_layers] pools each
  index_t num_layers_;
  const std::int32_t* page_table_;  // [table_pages]
  index_t table_pages_;
  index_t num_tokens_;
  bool rotated_keys_;
  index_t page_size_ = 0, num_kv_heads_ = 0, head_dim_ = 0;  // of every pool
};

static_assert(is_kv_source_v<paged_kv_view<float>> && !is_kv_cache_v<paged_kv_view<float>>,
              "paged_kv_view must be a read-only KV source");

RAZORKV_END_NAMESPACE
