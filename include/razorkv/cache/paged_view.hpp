// razorkv/cache/paged_view.hpp: a read-only KV source over an engine's paged K/V memory (a page
// pool per layer and a page table per sequence), which decode and compression read in place.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// One layer's K (or V) page pool in engine memory: page p holds page_size tokens of every kv
/// head, element (p, t, h, d) at data()[p * page_stride + t * token_stride + h * head_stride + d].
/// NHD pages ([num_pages, page_size, kv_heads, head_dim], the layout of vLLM and FlashInfer's
/// default) and HND pages ([num_pages, kv_heads, page_size, head_dim]) are this view with other
/// strides (nhd(), hnd()). Strides are in elements. The view never owns the pool.
template <class T>
class page_pool_view {
 public:
  constexpr page_pool_view() noexcept = default;

  /// Fully general checked constructor; prefer nhd() and hnd().
  page_pool_view(T* data, index_t num_pages, index_t page_size, index_t num_kv_heads,
                 index_t head_dim, index_t page_stride, index_t token_stride, index_t head_stride) {
    constexpr const char* kWhere = "page_pool_view";
    RAZORKV_CHECK(num_pages >= 0, kInvalidArgument, kWhere, ": num_pages (", num_pages,
                  ") must be >= 0");
    RAZORKV_CHECK(page_size > 0, kInvalidArgument, kWhere, ": page_size (", page_size,
                  ") must be > 0");
    RAZORKV_CHECK(num_kv_heads > 0, kInvalidArgument, kWhere, ": num_kv_heads (", num_kv_heads,
                  ") must be > 0");
    RAZORKV_CHECK(head_dim > 0, kInvalidArgument, kWhere, ": head_dim (", head_dim,
                  ") must be > 0");
    RAZORKV_CHECK(page_stride >= 0 && token_stride >= 0 && head_stride >= 0, kInvalidArgument,
                  kWhere, ": strides must be >= 0, got page_stride (", page_stride,
                  "), token_stride (", token_stride, ") and head_stride (", head_stride, ")");
    // The same bounds layer_view puts on one page; a page's extent then bounds page_stride.
    RAZORKV_CHECK(page_size == 1 || token_stride >= head_dim, kInvalidArgument, kWhere,
                  ": token_stride (", token_stride, ") must be >= head_dim (", head_dim, ")");
    RAZORKV_CHECK(num_kv_heads == 1 || head_stride >= head_dim, kInvalidArgument, kWhere,
                  ": head_stride (", head_stride, ") must be >= head_dim (", head_dim, ")");
    RAZORKV_CHECK(num_pages == 0 || data != nullptr, kInvalidArgument, kWhere,
                  ": data is null with num_pages (", num_pages, ") > 0");
    data_ = data;
    num_pages_ = num_pages;
    page_size_ = page_size;
    num_kv_heads_ = num_kv_heads;
    head_dim_ = head_dim;
    page_stride_ = page_stride;
    token_stride_ = token_stride;
    head_stride_ = head_stride;
  }

  /// [num_pages, page_size, num_kv_heads, head_dim], contiguous.
  static page_pool_view nhd(T* data, index_t num_pages, index_t page_size, index_t num_kv_heads,
                            index_t head_dim) {
    const index_t page =
        detail::checked_mul(detail::checked_mul(page_size, num_kv_heads, "page_pool_view::nhd"),
                            head_dim, "page_pool_view::nhd");
    return page_pool_view(data, num_pages, page_size, num_kv_heads, head_dim, page,
                          num_kv_heads * head_dim, head_dim);
  }
  /// [num_pages, num_kv_heads, page_size, head_dim], contiguous.
  static page_pool_view hnd(T* data, index_t num_pages, index_t page_size, index_t num_kv_heads,
                            index_t head_dim) {
    const index_t page =
        detail::checked_mul(detail::checked_mul(page_size, num_kv_heads, "page_pool_view::hnd"),
                            head_dim, "page_pool_view::hnd");
    return page_pool_view(data, num_pages, page_size, num_kv_heads, head_dim, page, head_dim,
                          page_size * head_dim);
  }

  constexpr T* data() const noexcept { return data_; }
  constexpr index_t num_pages() const noexcept { return num_pages_; }
  constexpr index_t page_size() const noexcept { return page_size_; }
  constexpr index_t num_kv_heads() const noexcept { return num_kv_heads_; }
  constexpr index_t head_dim() const noexcept { return head_dim_; }
  constexpr index_t page_stride() const noexcept { return page_stride_; }
  constexpr index_t token_stride() const noexcept { return token_stride_; }
  constexpr index_t head_stride() const noexcept { return head_stride_; }

  /// The first `tokens` tokens of page `page` ([tokens, num_kv_heads, head_dim]).
  layer_view<T> page(index_t page, index_t tokens) const {
    RAZORKV_CHECK(page >= 0 && page < num_pages_, kOutOfRange, "page_pool_view::page: page (", page,
                  ") outside [0, ", num_pages_, ")");
    RAZORKV_CHECK(tokens >= 0 && tokens <= page_size_, kOutOfRange,
                  "page_pool_view::page: tokens (", tokens, ") outside [0, ", page_size_, "]");
    return layer_view<T>(tokens == 0 ? nullptr : data_ + page * page_stride_, tokens, num_kv_heads_,
                         head_dim_, token_stride_, head_stride_);
  }

 private:
  T* data_ = nullptr;
  index_t num_pages_ = 0, page_size_ = 0, num_kv_heads_ = 0, head_dim_ = 0;
  index_t page_stride_ = 0, token_stride_ = 0, head_stride_ = 0;
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
      : key_pools_(key_pools),
        value_pools_(value_pools),
        num_layers_(num_layers),
        page_table_(page_table),
        table_pages_(table_pages),
        num_tokens_(num_tokens) {
    constexpr const char* kWhere = "paged_kv_view";
    RAZORKV_CHECK(num_layers > 0, kInvalidArgument, kWhere, ": num_layers (", num_layers,
                  ") must be > 0");
    RAZORKV_CHECK(key_pools != nullptr && value_pools != nullptr, kInvalidArgument, kWhere,
                  ": key_pools and value_pools must not be null");
    const page_pool_view<const T>& first = key_pools[0];
    RAZORKV_CHECK(first.page_size() > 0, kInvalidArgument, kWhere,
                  ": key_pools[0] is empty (a default-constructed page_pool_view)");
    index_t usable_pages = first.num_pages();
    for (index_t l = 0; l < num_layers; ++l) {
      for (const page_pool_view<const T>* pool : {&key_pools[l], &value_pools[l]}) {
        const char* name = pool == &key_pools[l] ? "key_pools" : "value_pools";
        RAZORKV_CHECK(pool->page_size() == first.page_size() &&
                          pool->num_kv_heads() == first.num_kv_heads() &&
                          pool->head_dim() == first.head_dim(),
                      kShapeMismatch, kWhere, ": ", name, "[", l, "] has pages of ",
                      pool->page_size(), " tokens x ", pool->num_kv_heads(), " kv heads x ",
                      pool->head_dim(), ", key_pools[0] of ", first.page_size(), " x ",
                      first.num_kv_heads(), " x ", first.head_dim());
        usable_pages = pool->num_pages() < usable_pages ? pool->num_pages() : usable_pages;
      }
    }
    RAZORKV_CHECK(num_tokens >= 0, kInvalidArgument, kWhere, ": num_tokens (", num_tokens,
                  ") must be >= 0");
    const index_t needed = (num_tokens + first.page_size() - 1) / first.page_size();
    RAZORKV_CHECK(table_pages == needed, kShapeMismatch, kWhere, ": table_pages (", table_pages,
                  ") != the ", needed, " pages of ", first.page_size(), " tokens that num_tokens (",
                  num_tokens, ") fills");
    RAZORKV_CHECK(table_pages == 0 || page_table != nullptr, kInvalidArgument, kWhere,
                  ": page_table is null with table_pages (", table_pages, ") > 0");
    for (index_t i = 0; i < table_pages; ++i) {
      RAZORKV_CHECK(page_table[i] >= 0 && page_table[i] < usable_pages, kOutOfRange, kWhere,
                    ": page_table[", i, "] (", page_table[i], ") outside [0, ", usable_pages,
                    "), the pages every layer's pools hold");
    }
  }

  index_t num_layers() const noexcept { return num_layers_; }
  index_t num_kv_heads() const noexcept { return key_pools_[0].num_kv_heads(); }
  index_t head_dim() const noexcept { return key_pools_[0].head_dim(); }
  index_t page_size() const noexcept { return key_pools_[0].page_size(); }
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
    return {key_pools_[layer].page(page_table_[i], tokens).head(kv_head),
            value_pools_[layer].page(page_table_[i], tokens).head(kv_head), 0.0f};
  }

 private:
  void check(index_t layer, index_t kv_head, const char* where) const {
    RAZORKV_CHECK(layer >= 0 && layer < num_layers_, kOutOfRange, where, ": layer (", layer,
                  ") outside [0, ", num_layers_, ")");
    RAZORKV_CHECK(kv_head >= 0 && kv_head < num_kv_heads(), kOutOfRange, where, ": kv_head (",
                  kv_head, ") outside [0, ", num_kv_heads(), ")");
  }

  const page_pool_view<const T>* key_pools_;    // [num_layers]
  const page_pool_view<const T>* value_pools_;  // [num_layers]
  index_t num_layers_;
  const std::int32_t* page_table_;  // [table_pages]
  index_t table_pages_;
  index_t num_tokens_;
};

static_assert(is_kv_source_v<paged_kv_view<float>> && !is_kv_cache_v<paged_kv_view<float>>,
              "paged_kv_view must be a read-only KV source");

RAZORKV_END_NAMESPACE
