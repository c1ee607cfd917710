// razorkv/policies/selected_cache.hpp: selected_kv_cache<T>, a cache that keeps a chosen set of
// prompt positions per kv head (SnapKV's choice, or any other) plus every token decoded after.
#pragma once

#include <algorithm>
#include <memory_resource>
#include <utility>
#include <vector>

#include "razorkv/cache/head_rows.hpp"
#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/cache/skeleton.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

namespace detail {

// One kv head of a selected_kv_cache.
template <class T>
struct selected_head {
  detail::head_rows<T> rows;       // [kept, head_dim]: the kept prompt positions, in order
  std::vector<index_t> positions;  // [kept]
  detail::row_blocks<T> appended;  // the tokens appended after compression, N onwards
};

// Rows per block an appended-to head chains on (see row_blocks).
inline constexpr index_t kSelectedGrowthRows = 256;

}  // namespace detail

/// Per (layer, kv head): the K/V of the prompt positions a policy chose for that head, in
/// position order (one span), followed by every token appended after compression (in chained
/// blocks of 256 rows, a span each: growing never copies what a head holds). The positions
/// differ from head to head; a GQA group is one kv head, so its query heads share one copy of the
/// kept K/V.
///
/// Spans stay valid until the next append or compress_layer on the same layer.
template <class T>
class selected_kv_cache : public detail::compressed_cache_skeleton<detail::selected_head<T>> {
  static_assert(is_storage_dtype_v<T>, "razorkv::selected_kv_cache: unsupported storage dtype");
  using skeleton = detail::compressed_cache_skeleton<detail::selected_head<T>>;

 public:
  using value_type = T;
  using skeleton::head_dim;
  using skeleton::memory_resource;
  using skeleton::num_kv_heads;
  using skeleton::num_layers;

  /// \param resource where every K/V row of the cache comes from (64-byte aligned blocks: the
  ///        kept prompt rows and the appended blocks), as razor_kv_cache's; null means
  ///        std::pmr::get_default_resource(). It must outlive the cache and every copy of it (a
  ///        copy allocates from it too). The positions and other bookkeeping come from the heap.
  selected_kv_cache(index_t num_layers, index_t num_kv_heads, index_t head_dim,
                    std::pmr::memory_resource* resource = nullptr)
      : skeleton("selected_kv_cache", num_layers, num_kv_heads, head_dim, resource) {}

  bool is_compressed(index_t layer) const {
    return layer_at(layer, "selected_kv_cache::is_compressed").compressed;
  }
  /// Tokens the layer has seen: the prompt plus every appended token.
  index_t num_tokens(index_t layer) const {
    return layer_at(layer, "selected_kv_cache::num_tokens").tokens;
  }

  /// Sequence positions of the head's entries, in entry order (appended tokens continue from N).
  std::vector<index_t> positions(index_t layer, index_t kv_head) const {
    const head_state& head = head_at(layer, kv_head, "selected_kv_cache::positions");
    std::vector<index_t> all = head.positions;
    const index_t first_appended = num_tokens(layer) - head.appended.rows();
    for (index_t t = 0; t < head.appended.rows(); ++t) all.push_back(first_appended + t);
    return all;
  }

  /// Keeps, for every kv head h, the prompt positions `keep[h]` (strictly increasing, in
  /// [0, N)) of keys and values ([N, num_kv_heads, head_dim], any layout, read in place). The
  /// layer must not be compressed yet. On error nothing changes.
  void compress_layer(index_t layer, layer_view<const T> keys, layer_view<const T> values,
                      const std::vector<std::vector<index_t>>& keep) {
    constexpr const char* kWhere = "selected_kv_cache::compress_layer";
    layer_storage& target = layer_at(layer, kWhere);
    RAZORKV_CHECK(!target.compressed, kInvalidArgument, kWhere, ": layer (", layer,
                  ") is already compressed");
    detail::check_token_views(keys, values, num_kv_heads(), head_dim(), kWhere);
    RAZORKV_CHECK(static_cast<index_t>(keep.size()) == num_kv_heads(), kShapeMismatch, kWhere,
                  ": keep has ", keep.size(), " lists, expected num_kv_heads (", num_kv_heads(),
                  ")");
    const index_t tokens = keys.tokens();
    for (index_t h = 0; h < num_kv_heads(); ++h) {
      const std::vector<index_t>& list = keep[static_cast<std::size_t>(h)];
      for (std::size_t i = 0; i < list.size(); ++i) {
        RAZORKV_CHECK(list[i] >= 0 && list[i] < tokens, kOutOfRange, kWhere, ": keep[", h, "][", i,
                      "] (", list[i], ") outside the prompt [0, ", tokens, ")");
        RAZORKV_CHECK(i == 0 || list[i] > list[i - 1], kInvalidArgument, kWhere, ": keep[", h,
                      "] is not strictly "
                      "increasing at ",
                      i, " (", list[i - 1], " then ", list[i], ")");
      }
    }
    std::vector<head_state> heads(static_cast<std::size_t>(num_kv_heads()));
    for (index_t h = 0; h < num_kv_heads(); ++h) {
      head_state& head = heads[static_cast<std::size_t>(h)];
      head.positions = keep[static_cast<std::size_t>(h)];
      head.rows = detail::head_rows<T>(static_cast<index_t>(head.positions.size()), head_dim(),
                                       memory_resource());
    }
    for (index_t h = 0; h < num_kv_heads(); ++h) {
      head_state& head = heads[static_cast<std::size_t>(h)];
      const matrix_view<const T> k = keys.head(h), v = values.head(h);
      for (index_t i = 0; i < static_cast<index_t>(head.positions.size()); ++i) {
        const index_t p = head.positions[static_cast<std::size_t>(i)];
        head.rows.write(i, k.middle_rows(p, 1), v.middle_rows(p, 1));
      }
      head.rows.set_rows(static_cast<index_t>(head.positions.size()));
    }
    target.heads = std::move(heads);
    target.tokens = target.prompt_tokens = tokens;
    target.compressed = true;
  }

  /// The contract's append: every kv head of a compressed layer keeps the new tokens
  /// ([tokens, num_kv_heads, head_dim], any layout, not pointing into this cache). Allocates
  /// only a new block every 256 tokens. On error (including a failed allocation) nothing
  /// changes.
  void append(index_t layer, layer_view<const T> keys, layer_view<const T> values) {
    constexpr const char* kWhere = "selected_kv_cache::append";
    layer_storage& l = layer_at(layer, kWhere);
    RAZORKV_CHECK(l.compressed, kInvalidArgument, kWhere, ": layer (", layer,
                  ") has not been compressed yet (call compress_layer with its prompt first)");
    detail::check_token_views(keys, values, num_kv_heads(), head_dim(), kWhere);
    const index_t added = keys.tokens();
    if (added == 0) return;
    const index_t total = detail::checked_add(l.tokens, added, "selected_kv_cache::append: tokens");
    for (head_state& head : l.heads)  // may throw; changes nothing visible
      head.appended.reserve_more(added, detail::kSelectedGrowthRows, head_dim(), memory_resource());
    // No allocation and nothing that throws from here on.
    for (std::size_t h = 0; h < l.heads.size(); ++h) {
      l.heads[h].appended.append(keys.head(static_cast<index_t>(h)),
                                 values.head(static_cast<index_t>(h)));
    }
    l.tokens = total;
  }

  index_t num_spans(index_t layer, index_t kv_head) const {
    const head_state& head = head_at(layer, kv_head, "selected_kv_cache::num_spans");
    return (head.rows.rows() > 0 ? 1 : 0) + head.appended.blocks_in_use();
  }
  // The kept prompt positions (when any), then one span per appended block.
  kv_span<T> span(index_t layer, index_t kv_head, index_t i) const {
    const head_state& head = head_at(layer, kv_head, "selected_kv_cache::span");
    const index_t prompt_spans = head.rows.rows() > 0 ? 1 : 0;
    const index_t count = prompt_spans + head.appended.blocks_in_use();
    RAZORKV_CHECK(i >= 0 && i < count, kOutOfRange, "selected_kv_cache::span: span (", i,
                  ") outside [0, ", count, ")");
    if (i < prompt_spans)
      return {head.rows.keys(0, head.rows.rows()), head.rows.values(0, head.rows.rows()), 0.0f};
    return head.appended.span(i - prompt_spans);
  }

  // The memory vocabulary every razorkv cache shares.
  /// Entries the head holds.
  index_t entries(index_t layer, index_t kv_head) const {
    const head_state& head = head_at(layer, kv_head, "selected_kv_cache::entries");
    return head.rows.rows() + head.appended.rows();
  }
  /// K/V bytes held.
  index_t kv_bytes() const { return held_kv_bytes(*this); }
  /// K/V bytes allocated (room for decode tokens included).
  index_t allocated_bytes() const noexcept {
    index_t total = 0;
    for (const layer_storage& l : layers_) {
      for (const head_state& head : l.heads)
        total += head.rows.allocated_bytes() + head.appended.allocated_bytes();
    }
    return total;
  }

 private:
  using head_state = detail::selected_head<T>;
  using layer_storage = detail::compressed_layer<head_state>;
  using skeleton::head_at;
  using skeleton::layer_at;
  using skeleton::layers_;
};

static_assert(is_kv_cache_v<selected_kv_cache<float>>,
              "selected_kv_cache must satisfy the KV-cache contract");

RAZORKV_END_NAMESPACE
