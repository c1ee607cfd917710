// razorkv/cache/dense_cache.hpp: dense_kv_cache<T>, the owning, growable, uncompressed cache
// (what an engine holds before compression). Each layer stores K and V as [kv_heads, capacity,
// head_dim] (HND), so every head's tokens are one contiguous span.
#pragma once

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/cache_skeleton.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

namespace detail {

// One layer of a dense_kv_cache.
template <class T>
struct dense_layer {
  std::vector<T> keys;    // [kv_heads, capacity, head_dim]
  std::vector<T> values;  // [kv_heads, capacity, head_dim]
  index_t tokens = 0;
  index_t capacity = 0;
};

}  // namespace detail

/// The full KV cache of a model: num_layers x num_kv_heads heads of head_dim, each holding the
/// same tokens of its layer. Layers grow independently (an engine appends layer by layer).
///
/// Views and spans handed out stay valid until the next append or reserve that grows the
/// layer they point into, as with std::vector.
template <class T>
class dense_kv_cache : public detail::cache_skeleton<detail::dense_layer<T>> {
  static_assert(is_storage_dtype_v<T>, "razorkv::dense_kv_cache: unsupported storage dtype");
  using skeleton = detail::cache_skeleton<detail::dense_layer<T>>;

 public:
  using value_type = T;
  using skeleton::head_dim;
  using skeleton::num_kv_heads;
  using skeleton::num_layers;

  /// \param reserve_tokens capacity allocated up front in every layer (0: grow on demand).
  dense_kv_cache(index_t num_layers, index_t num_kv_heads, index_t head_dim,
                 index_t reserve_tokens = 0)
      : skeleton("dense_kv_cache", num_layers, num_kv_heads, head_dim) {
    RAZORKV_CHECK(reserve_tokens >= 0, kInvalidArgument, "dense_kv_cache: reserve_tokens (",
                  reserve_tokens, ") must be >= 0");
    if (reserve_tokens > 0) reserve(reserve_tokens);
  }

  /// Tokens held by `layer` (every kv head of a layer holds the same tokens).
  index_t num_tokens(index_t layer) const {
    return layer_at(layer, "dense_kv_cache::num_tokens").tokens;
  }
  index_t capacity(index_t layer) const {
    return layer_at(layer, "dense_kv_cache::capacity").capacity;
  }

  // The memory vocabulary every razorkv cache shares: entries of a head, K/V bytes held, and
  // K/V bytes allocated (held plus spare capacity).
  /// Entries the head holds: the layer's tokens.
  index_t entries(index_t layer, index_t kv_head) const {
    this->check_kv_head(kv_head, "dense_kv_cache::entries");
    return num_tokens(layer);
  }
  /// Bytes of K and V held for the tokens stored (not counting spare capacity).
  index_t kv_bytes() const noexcept {
    index_t tokens = 0;
    for (const auto& l : layers_) tokens += l.tokens;
    return 2 * tokens * num_kv_heads() * head_dim() * static_cast<index_t>(sizeof(T));
  }
  /// Bytes of K and V allocated, spare capacity included.
  index_t allocated_bytes() const noexcept {
    index_t tokens = 0;
    for (const auto& l : layers_) tokens += l.capacity;
    return 2 * tokens * num_kv_heads() * head_dim() * static_cast<index_t>(sizeof(T));
  }

  /// Grows every layer's capacity to at least `tokens`.
  void reserve(index_t tokens) {
    RAZORKV_CHECK(tokens >= 0, kInvalidArgument, "dense_kv_cache::reserve: tokens (", tokens,
                  ") must be >= 0");
    for (auto& l : layers_) {
      if (l.capacity < tokens) l = grown(l, tokens);
    }
  }

  index_t num_spans(index_t layer, index_t kv_head) const {
    this->check_kv_head(kv_head, "dense_kv_cache::num_spans");
    return layer_at(layer, "dense_kv_cache::num_spans").tokens > 0 ? 1 : 0;
  }

  kv_span<T> span(index_t layer, index_t kv_head, index_t i) const {
    RAZORKV_CHECK(i >= 0 && i < num_spans(layer, kv_head), kOutOfRange,
                  "dense_kv_cache::span: span (", i, ") outside [0, ", num_spans(layer, kv_head),
                  ")");
    return kv_span<T>{keys(layer).head(kv_head), values(layer).head(kv_head), 0.0f};
  }

  /// Layer `layer`'s keys as [tokens, kv_heads, head_dim], laid out HND with the layer's capacity.
  layer_view<const T> keys(index_t layer) const {
    return storage_view(layer, &layer_storage::keys, "dense_kv_cache::keys");
  }
  layer_view<const T> values(index_t layer) const {
    return storage_view(layer, &layer_storage::values, "dense_kv_cache::values");
  }

  /// Appends keys.tokens() tokens to every kv head of `layer`. keys and values are
  /// [tokens, num_kv_heads, head_dim] in any layout, and may point into this cache.
  void append(index_t layer, layer_view<const T> keys, layer_view<const T> values) {
    layer_storage& l = layer_at(layer, "dense_kv_cache::append");
    check_append_shape(keys, "keys");
    check_append_shape(values, "values");
    RAZORKV_CHECK(keys.tokens() == values.tokens(), kShapeMismatch,
                  "dense_kv_cache::append: keys.tokens() (", keys.tokens(),
                  ") != values.tokens() (", values.tokens(), ")");
    const index_t added = keys.tokens();
    if (added == 0) return;
    const index_t needed = detail::checked_add(l.tokens, added, "dense_kv_cache::append: tokens");
    if (needed <= l.capacity) {
      copy_in(l, keys, values);
      return;
    }
    // Grow into new buffers and copy the new tokens before releasing the old ones, so that
    // views into this cache are valid sources and a failed allocation changes nothing.
    layer_storage bigger = grown(l, std::max(needed, 2 * l.capacity));
    copy_in(bigger, keys, values);
    l = std::move(bigger);
  }

 private:
  using layer_storage = detail::dense_layer<T>;
  using skeleton::layer_at;
  using skeleton::layers_;

  void check_append_shape(const layer_view<const T>& v, const char* name) const {
    RAZORKV_CHECK(v.heads() == num_kv_heads(), kShapeMismatch, "dense_kv_cache::append: ", name,
                  ".heads() (", v.heads(), ") != num_kv_heads (", num_kv_heads(), ")");
    RAZORKV_CHECK(v.head_dim() == head_dim(), kShapeMismatch, "dense_kv_cache::append: ", name,
                  ".head_dim() (", v.head_dim(), ") != head_dim (", head_dim(), ")");
  }

  layer_view<const T> storage_view(index_t layer, std::vector<T> layer_storage::*member,
                                   const char* where) const {
    const layer_storage& l = layer_at(layer, where);
    const std::vector<T>& buffer = l.*member;
    return layer_view<const T>::hnd(buffer.empty() ? nullptr : buffer.data(), l.tokens,
                                    num_kv_heads(), head_dim(), l.capacity);
  }

  // A copy of `l` with capacity `capacity` (>= l.tokens).
  layer_storage grown(const layer_storage& l, index_t capacity) const {
    const index_t elements = detail::checked_mul(
        detail::checked_mul(capacity, num_kv_heads(), "dense_kv_cache: capacity * kv_heads"),
        head_dim(), "dense_kv_cache: capacity * kv_heads * head_dim");
    layer_storage result;
    result.keys.resize(static_cast<std::size_t>(elements));
    result.values.resize(static_cast<std::size_t>(elements));
    result.tokens = l.tokens;
    result.capacity = capacity;
    const std::size_t row_bytes = static_cast<std::size_t>(l.tokens * head_dim()) * sizeof(T);
    for (index_t h = 0; h < num_kv_heads() && l.tokens > 0; ++h) {
      std::memcpy(result.keys.data() + h * capacity * head_dim(),
                  l.keys.data() + h * l.capacity * head_dim(), row_bytes);
      std::memcpy(result.values.data() + h * capacity * head_dim(),
                  l.values.data() + h * l.capacity * head_dim(), row_bytes);
    }
    return result;
  }

  // Copies the tokens into l's spare capacity (the caller checked it suffices).
  void copy_in(layer_storage& l, const layer_view<const T>& keys,
               const layer_view<const T>& values) const {
    const std::size_t row_bytes = static_cast<std::size_t>(head_dim()) * sizeof(T);
    for (index_t h = 0; h < num_kv_heads(); ++h) {
      T* key_dst = l.keys.data() + (h * l.capacity + l.tokens) * head_dim();
      T* value_dst = l.values.data() + (h * l.capacity + l.tokens) * head_dim();
      const matrix_view<const T> key_src = keys.head(h);
      const matrix_view<const T> value_src = values.head(h);
      for (index_t t = 0; t < keys.tokens(); ++t) {
        std::memmove(key_dst + t * head_dim(), key_src.row(t), row_bytes);
        std::memmove(value_dst + t * head_dim(), value_src.row(t), row_bytes);
      }
    }
    l.tokens += keys.tokens();
  }
};

static_assert(is_kv_cache_v<dense_kv_cache<float>>, "dense_kv_cache must satisfy the contract");

RAZORKV_END_NAMESPACE
