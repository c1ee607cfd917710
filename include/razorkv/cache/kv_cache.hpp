// razorkv/cache/kv_cache.hpp: the generic KV-cache contract that attention, compression and
// evaluation are written against, stated once as a C++17 trait and as a C++20 concept.
#pragma once

#include <cmath>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// A contiguous run of cache entries of one (layer, kv head), all with one additive
/// log-weight. Ordinary tokens have log_weight 0; a compensation token standing for n dropped
/// tokens is a span of length 1 with log_weight ln(n), which makes attention treat it as n
/// identical copies. A ring buffer is two spans, a paged layout one span per page.
///
/// keys and values point into memory the cache owns, and are valid until the cache is next
/// modified (append, compress, destroy).
template <class T>
struct kv_span {
  matrix_view<const T> keys;    // [length, head_dim]
  matrix_view<const T> values;  // [length, head_dim]
  float log_weight = 0.0f;      // added to every logit of the span, after scaling; finite

  index_t length() const noexcept { return keys.rows(); }
};

// The contract. For a cache type C with element type T = C::value_type, and c a const C&:
//   c.num_layers(), c.num_kv_heads(), c.head_dim()   -> index_t, > 0, fixed for c's lifetime
//   c.num_spans(layer, kv_head)                       -> index_t, the spans of that head
//   c.span(layer, kv_head, i)                         -> kv_span<T>, i in [0, num_spans)
// and for a mutable C& m:
//   m.append(layer, keys, values)  with keys, values layer_view<const T> of shape
//       [tokens, num_kv_heads, head_dim]: appends the tokens to every kv head of the layer
//       (one decoded token is tokens == 1).
// Entries of a head are the concatenation of its spans in order; the newest token is last.
namespace detail {

template <class C, class = void>
struct is_kv_cache_impl : std::false_type {};

template <class C>
struct is_kv_cache_impl<
    C, std::void_t<typename C::value_type,
                   decltype(std::declval<const C&>().num_layers()),
                   decltype(std::declval<const C&>().num_kv_heads()),
                   decltype(std::declval<const C&>().head_dim()),
                   decltype(std::declval<const C&>().num_spans(index_t{}, index_t{})),
                   decltype(std::declval<const C&>().span(index_t{}, index_t{}, index_t{})),
                   decltype(std::declval<C&>().append(
                       index_t{}, std::declval<layer_view<const typename C::value_type>>(),
                       std::declval<layer_view<const typename C::value_type>>()))>>
    : std::bool_constant<
          is_storage_dtype_v<typename C::value_type> &&
          std::is_convertible_v<decltype(std::declval<const C&>().num_layers()), index_t> &&
          std::is_convertible_v<decltype(std::declval<const C&>().num_kv_heads()), index_t> &&
          std::is_convertible_v<decltype(std::declval<const C&>().head_dim()), index_t> &&
          std::is_convertible_v<decltype(std::declval<const C&>().num_spans(index_t{}, index_t{})),
                                index_t> &&
          std::is_convertible_v<
              decltype(std::declval<const C&>().span(index_t{}, index_t{}, index_t{})),
              kv_span<typename C::value_type>>> {};

}  // namespace detail

/// True when C satisfies the KV-cache contract above.
template <class C>
inline constexpr bool is_kv_cache_v = detail::is_kv_cache_impl<std::remove_cv_t<C>>::value;

#if defined(__cpp_concepts) && __cpp_concepts >= 201907L
/// The KV-cache contract as a C++20 concept (same meaning as is_kv_cache_v).
template <class C>
concept kv_cache = is_kv_cache_v<C>;
#endif

/// Throws unless `layer` indexes a layer of `cache`; `where` names the caller in the message.
template <class Cache>
void check_layer(const Cache& cache, index_t layer, const char* where) {
  static_assert(is_kv_cache_v<Cache>, "razorkv: type does not satisfy the KV-cache contract");
  RAZORKV_CHECK(layer >= 0 && layer < static_cast<index_t>(cache.num_layers()), kOutOfRange, where,
                ": layer (", layer, ") outside [0, ", cache.num_layers(), ")");
}

namespace detail {

// Throws unless keys and values are both [tokens, kv_heads, head_dim] with the same tokens: the
// check every cache's append and compression make on the K/V handed to them.
template <class T>
void check_token_views(const layer_view<const T>& keys, const layer_view<const T>& values, index_t kv_heads,
                       index_t head_dim, const char* where) {
  for (const layer_view<const T>* view : {&keys, &values}) {
    const char* name = view == &keys ? "keys" : "values";
    RAZORKV_CHECK(view->heads() == kv_heads, kShapeMismatch, where, ": ", name, ".heads() (", view->heads(),
                  ") != num_kv_heads (", kv_heads, ")");
    RAZORKV_CHECK(view->head_dim() == head_dim, kShapeMismatch, where, ": ", name, ".head_dim() (", view->head_dim(),
                  ") != head_dim (", head_dim, ")");
  }
  RAZORKV_CHECK(keys.tokens() == values.tokens(), kShapeMismatch, where, ": keys.tokens() (", keys.tokens(),
                ") != values.tokens() (", values.tokens(), ")");
}

}  // namespace detail

namespace detail {

template <class C, class Q, class = void>
struct observes_queries : std::false_type {};

template <class C, class Q>
struct observes_queries<
    C, Q, std::void_t<decltype(std::declval<C&>().observe(index_t{}, std::declval<Q>()))>>
    : std::true_type {};

}  // namespace detail

/// The one hook for policies that learn from decode: a cache with a member
/// `observe(layer, queries)` (H2O, which accumulates the attention each token receives) is handed
/// the queries decode just attended with; any other cache ignores them. A decode loop calls this
/// after decode_attention for every cache, and so never names the policy it runs.
///
/// \param queries [tokens, num_query_heads, head_dim]: the newest tokens' queries, any strides
template <class Cache, class TQ>
void observe_decode(Cache& cache, index_t layer, layer_view<TQ> queries) {
  static_assert(is_kv_cache_v<Cache>, "razorkv: type does not satisfy the KV-cache contract");
  if constexpr (detail::observes_queries<Cache, layer_view<TQ>>::value) {
    cache.observe(layer, queries);
  }
}

/// Number of entries (rows, a compensation token counting as one) held for one kv head.
template <class Cache>
index_t num_entries(const Cache& cache, index_t layer, index_t kv_head) {
  static_assert(is_kv_cache_v<Cache>, "razorkv: type does not satisfy the KV-cache contract");
  index_t total = 0;
  const index_t spans = cache.num_spans(layer, kv_head);
  for (index_t i = 0; i < spans; ++i) total += cache.span(layer, kv_head, i).length();
  return total;
}

/// Bytes of K and V a cache holds in `layer`: 2 * entries * head_dim * sizeof(value_type) summed
/// over its kv heads. Under GQA a group's K/V is one kv head, so it is counted once however many
/// query heads read it; a compensation token is one entry (its count is metadata).
template <class Cache>
index_t held_kv_bytes(const Cache& cache, index_t layer) {
  check_layer(cache, layer, "held_kv_bytes");
  const index_t entry_bytes = 2 * static_cast<index_t>(cache.head_dim()) *
                              static_cast<index_t>(sizeof(typename Cache::value_type));
  index_t total = 0;
  for (index_t h = 0; h < static_cast<index_t>(cache.num_kv_heads()); ++h) total += num_entries(cache, layer, h);
  return total * entry_bytes;
}

/// held_kv_bytes over every layer.
template <class Cache>
index_t held_kv_bytes(const Cache& cache) {
  index_t total = 0;
  for (index_t l = 0; l < static_cast<index_t>(cache.num_layers()); ++l) total += held_kv_bytes(cache, l);
  return total;
}

RAZORKV_END_NAMESPACE
