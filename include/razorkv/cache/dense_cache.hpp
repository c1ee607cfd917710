// razorkv/cache/dense_cache.hpp: dense_kv_cache<T>, the owning, growable, uncompressed cache
// (what an engine holds before compression). Each layer stores K and V as [kv_heads, capacity,
// head_dim] (HND), so every head's tokens are one contiguous span.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory_resource>
#include <optional>
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
#include "razorkv/quant/storage.hpp"

RAZORKV_BEGIN_NAMESPACE

namespace detail {

// One layer of a dense_kv_cache: K and V rows [kv_heads * capacity, head_dim], head h's tokens at
// rows [h * capacity, h * capacity + tokens); the rest is uninitialised. (head_rows' own row count
// stays 0: a head's rows are not one prefix of the buffer, so copies go head by head.)
template <class T>
struct dense_layer {
  head_rows<T> rows;
  index_t tokens = 0;
  index_t capacity = 0;

  dense_layer() = default;
  dense_layer(index_t kv_heads, index_t capacity_tokens, index_t head_dim,
              std::pmr::memory_resource* resource, const kv_storage& storage)
      : rows(checked_mul(kv_heads, capacity_tokens, "dense_kv_cache: capacity * kv_heads"),
             head_dim, resource, storage),
        capacity(capacity_tokens) {}
  // Copies every head's tokens into buffers of the same capacity, from the same resource.
  dense_layer(const dense_layer& other)
      : rows(other.rows), tokens(other.tokens), capacity(other.capacity) {
    copy_tokens(other, *this);
  }
  dense_layer& operator=(const dense_layer& other) {
    if (this != &other) *this = dense_layer(other);
    return *this;
  }
  dense_layer(dense_layer&&) noexcept = default;
  dense_layer& operator=(dense_layer&&) noexcept = default;

  // Copies from's tokens into to, head by head (to's capacity >= from's tokens).
  static void copy_tokens(const dense_layer& from, dense_layer& to) noexcept {
    if (from.tokens == 0 || from.capacity == 0) return;
    const index_t kv_heads = from.rows.capacity() / from.capacity;
    const auto bytes = [&](index_t row_bytes) {
      return static_cast<std::size_t>(from.tokens * row_bytes);
    };
    for (index_t h = 0; h < kv_heads; ++h) {
      std::memcpy(to.rows.key_bytes(h * to.capacity), from.rows.key_bytes(h * from.capacity),
                  bytes(from.rows.key_row_bytes()));
      std::memcpy(to.rows.value_bytes(h * to.capacity), from.rows.value_bytes(h * from.capacity),
                  bytes(from.rows.value_row_bytes()));
    }
  }
};

}  // namespace detail

/// The full KV cache of a model: num_layers x num_kv_heads heads of head_dim, each holding the
/// same tokens of its layer. Layers grow independently (an engine appends layer by layer).
///
/// Rows are stored as T or, as the kv_storage it is built with says, in 8-/4-bit blocks with keys
/// optionally rotated (quant/storage.hpp): append takes T and quantises. A quantised side is read
/// through spans only (keys() and values() are views of T rows).
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
  using skeleton::memory_resource;
  using skeleton::num_kv_heads;
  using skeleton::num_layers;

  /// \param reserve_tokens capacity allocated up front in every layer (0: grow on demand).
  /// \param resource where every K/V buffer comes from (each layer's, as it grows), as for the
  ///        compressed caches; null means std::pmr::get_default_resource(). It must outlive the
  ///        cache and every copy of it (a copy allocates from the same resource).
  /// \param storage how rows are stored (default: T); checked against head_dim (check_storage).
  dense_kv_cache(index_t num_layers, index_t num_kv_heads, index_t head_dim,
                 index_t reserve_tokens = 0, std::pmr::memory_resource* resource = nullptr,
                 const kv_storage& storage = {})
      : skeleton("dense_kv_cache", num_layers, num_kv_heads, head_dim, resource),
        storage_(storage) {
    RAZORKV_CHECK(reserve_tokens >= 0, kInvalidArgument, "dense_kv_cache: reserve_tokens (",
                  reserve_tokens, ") must be >= 0");
    check_storage(storage_, head_dim, "dense_kv_cache");
    if (reserve_tokens > 0) reserve(reserve_tokens);
  }

  /// How the cache stores its rows.
  const kv_storage& storage() const noexcept { return storage_; }

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
    return tokens * num_kv_heads() * entry_bytes();
  }
  /// Bytes of K and V allocated, spare capacity included.
  index_t allocated_bytes() const noexcept {
    index_t tokens = 0;
    for (const auto& l : layers_) tokens += l.capacity;
    return tokens * num_kv_heads() * entry_bytes();
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
    const layer_storage& l = layer_at(layer, "dense_kv_cache::span");
    const index_t first = kv_head * l.capacity;
    const auto side = [&](std::uint8_t* base, const std::optional<row_format>& format,
                          index_t row_bytes) -> kv_rows<T> {
      if (format) return kv_rows<T>(quantised_rows{base, l.tokens, head_dim(), row_bytes, *format});
      return matrix_view<const T>(reinterpret_cast<const T*>(base), l.tokens, head_dim());
    };
    return kv_span<T>{side(l.rows.key_bytes(first), storage_.keys, l.rows.key_row_bytes()),
                      side(l.rows.value_bytes(first), storage_.values, l.rows.value_row_bytes()),
                      0.0f, storage_.rotate_keys};
  }

  /// Layer `layer`'s keys as [tokens, kv_heads, head_dim], laid out HND with the layer's capacity
  /// (rotated when storage().rotate_keys). A side stored in blocks is an error: read it by spans.
  layer_view<const T> keys(index_t layer) const {
    const layer_storage& l = layer_at(layer, "dense_kv_cache::keys");
    check_typed(storage_.keys, "dense_kv_cache::keys");
    return storage_view(l, l.rows.capacity() > 0 ? l.rows.key_row(0) : nullptr);
  }
  layer_view<const T> values(index_t layer) const {
    const layer_storage& l = layer_at(layer, "dense_kv_cache::values");
    check_typed(storage_.values, "dense_kv_cache::values");
    return storage_view(l, l.rows.capacity() > 0 ? l.rows.value_row(0) : nullptr);
  }

  /// Appends keys.tokens() tokens to every kv head of `layer`. keys and values are
  /// [tokens, num_kv_heads, head_dim] in any layout, and may point into this cache. A side stored
  /// in blocks quantises them (a NaN reads back as NaN, an infinity clamps to its block's scale).
  void append(index_t layer, layer_view<const T> keys, layer_view<const T> values) {
    layer_storage& l = layer_at(layer, "dense_kv_cache::append");
    check_append_shape(keys, "keys");
    check_append_shape(values, "values");
    RAZORKV_CHECK(keys.tokens() == values.tokens(), kShapeMismatch,
                  "dense_kv_cache::append: keys.tokens() (", keys.tokens(),
                  ") != values.tokens() (", values.tokens(), ")");
    const index_t added = keys.tokens();
    if (added == 0) return;
    std::vector<T> rotated;
    if (storage_.rotate_keys) keys = detail::rotated_keys(keys, rotated);
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

  index_t entry_bytes() const noexcept {
    const auto element = static_cast<index_t>(sizeof(T));
    return storage_.key_row_bytes(head_dim(), element) +
           storage_.value_row_bytes(head_dim(), element);
  }
  static void check_typed(const std::optional<row_format>& format, const char* where) {
    RAZORKV_CHECK(!format, kInvalidArgument, where, ": this side is stored as ",
                  format ? row_format_name(*format) : "", " blocks; read it through span()");
  }

  void check_append_shape(const layer_view<const T>& v, const char* name) const {
    RAZORKV_CHECK(v.heads() == num_kv_heads(), kShapeMismatch, "dense_kv_cache::append: ", name,
                  ".heads() (", v.heads(), ") != num_kv_heads (", num_kv_heads(), ")");
    RAZORKV_CHECK(v.head_dim() == head_dim(), kShapeMismatch, "dense_kv_cache::append: ", name,
                  ".head_dim() (", v.head_dim(), ") != head_dim (", head_dim(), ")");
  }

  layer_view<const T> storage_view(const layer_storage& l, const T* base) const {
    return layer_view<const T>::hnd(base, l.tokens, num_kv_heads(), head_dim(), l.capacity);
  }

  // A copy of `l` with capacity `capacity` (>= l.tokens), from the cache's resource.
  layer_storage grown(const layer_storage& l, index_t capacity) const {
    layer_storage result(num_kv_heads(), capacity, head_dim(), memory_resource(), storage_);
    result.tokens = l.tokens;
    layer_storage::copy_tokens(l, result);
    return result;
  }

  // Copies the tokens into l's spare capacity (the caller checked it suffices).
  void copy_in(layer_storage& l, const layer_view<const T>& keys,
               const layer_view<const T>& values) const {
    for (index_t h = 0; h < num_kv_heads(); ++h)
      l.rows.write(h * l.capacity + l.tokens, keys.head(h), values.head(h));
    l.tokens += keys.tokens();
  }

  kv_storage storage_;
};

static_assert(is_kv_cache_v<dense_kv_cache<float>>, "dense_kv_cache must satisfy the contract");

RAZORKV_END_NAMESPACE
