// razorkv/cache/kv_cache.hpp: the KV contracts attention, compression and evaluation read: a
// read-only source, and a cache (a source that also appends); C++17 traits and C++20 concepts.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>
#include <vector>

#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/parallel_for.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/parallel.hpp"
#include "razorkv/error.hpp"
#include "razorkv/quant/hadamard.hpp"
#include "razorkv/quant/row_blocks.hpp"
#include "razorkv/quant/storage.hpp"

RAZORKV_BEGIN_NAMESPACE

/// The rows of one side (keys or values) of a span: rows of T (a matrix_view), or rows stored
/// in 8-/4-bit blocks (quantised_rows, see quant/storage.hpp). A consumer reads typed rows in
/// place; quantised ones it dequantises (widen_rows, or a kernel of its own), or it calls
/// typed(where), which names the format in an error where it reads T rows only.
template <class T>
class kv_rows {
 public:
  kv_rows() = default;
  /// Rows of T, as every source hands out unless it stores blocks.
  kv_rows(const matrix_view<const T>& rows) noexcept  // NOLINT(google-explicit-constructor)
      : typed_(rows) {}
  explicit kv_rows(const quantised_rows& rows) noexcept : quantised_(rows), is_quantised_(true) {}

  index_t rows() const noexcept { return is_quantised_ ? quantised_.rows : typed_.rows(); }
  index_t cols() const noexcept { return is_quantised_ ? quantised_.cols : typed_.cols(); }
  bool is_quantised() const noexcept { return is_quantised_; }
  /// Bytes one row occupies (quantised: its blocks; typed: cols * sizeof(T)).
  index_t row_bytes() const {
    return is_quantised_ ? quantised_row_bytes(quantised_.format, quantised_.cols)
                         : typed_.cols() * static_cast<index_t>(sizeof(T));
  }

  /// The rows of T; for quantised rows, an error naming `where` and the format.
  const matrix_view<const T>& typed(const char* where) const {
    RAZORKV_CHECK(!is_quantised_, kInvalidArgument, where, ": rows stored as ",
                  row_format_name(quantised_.format),
                  " blocks are not read here; it reads rows of the cache's dtype only");
    return typed_;
  }
  /// The rows of T; only when is_quantised() is false (unchecked: the kernels read it).
  const matrix_view<const T>& typed() const noexcept { return typed_; }
  /// The quantised rows; only when is_quantised() is true (unchecked).
  const quantised_rows& quantised() const noexcept { return quantised_; }

  /// Rows [first, first + count).
  kv_rows middle_rows(index_t first, index_t count) const {
    return is_quantised_ ? kv_rows(quantised_.middle_rows(first, count))
                         : kv_rows(typed_.middle_rows(first, count));
  }

  /// Rows [first, first + count) as the values they stand for, into out ([count, cols], row
  /// major): the plain reader of both kinds (decode has vectorised ones of its own).
  template <class Out>
  void widen_rows(index_t first, index_t count, Out* out) const {
    const index_t dim = cols();
    for (index_t r = 0; r < count; ++r) {
      Out* dst = out + r * dim;
      if (is_quantised_) {
        const std::uint8_t* row = quantised_.row(first + r);
        for (index_t b = 0; b < dim / kQuantBlock; ++b) {
          float block[kQuantBlock];
          detail::dequantise_block(quantised_.format, row + b * block_bytes(quantised_.format),
                                   block);
          for (index_t i = 0; i < kQuantBlock; ++i)
            dst[b * kQuantBlock + i] = static_cast<Out>(block[i]);
        }
      } else {
        const T* row = typed_.row(first + r);
        for (index_t c = 0; c < dim; ++c) dst[c] = static_cast<Out>(detail::to_double(row[c]));
      }
    }
  }

 private:
  matrix_view<const T> typed_;
  quantised_rows quantised_;
  bool is_quantised_ = false;
};

/// A contiguous run of cache entries of one (layer, kv head), all with one additive
/// log-weight. Ordinary tokens have log_weight 0; a compensation token standing for n dropped
/// tokens is a span of length 1 with log_weight ln(n), which makes attention treat it as n
/// identical copies. A ring buffer is two spans, a paged layout one span per page. Keys and
/// values are each rows of T or quantised rows (kv_rows), with the same number of rows; keys may
/// be stored rotated (kv_storage::rotate_keys), which whoever reads them with a query must match
/// by rotating the query (decode does, per kv head; every span of a head must agree).
///
/// keys and values point into memory the cache owns, and are valid until the cache is next
/// modified (append, compress, destroy).
template <class T>
struct kv_span {
  kv_rows<T> keys;            // [length, head_dim]
  kv_rows<T> values;          // [length, head_dim]
  float log_weight = 0.0f;    // added to every logit of the span, after scaling; finite
  bool rotated_keys = false;  // keys are H k / sqrt(head_dim) (quant/hadamard.hpp), not k

  index_t length() const noexcept { return keys.rows(); }
};

// The contract, in two parts. A *source* is anything decode and compression can read; a
// *cache* is a source that can also grow. For a source type S with element type
// T = S::value_type, and s a const S&:
//   s.num_layers(), s.num_kv_heads(), s.head_dim()   -> index_t, > 0, fixed for s's lifetime
//   s.num_spans(layer, kv_head)                       -> index_t, the spans of that head
//   s.span(layer, kv_head, i)                         -> kv_span<T>, i in [0, num_spans)
// Entries of a head are the concatenation of its spans in order; the newest token is last.
// A cache type C is a source, and for a mutable C& m also has:
//   m.append(layer, keys, values)  with keys, values layer_view<const T> of shape
//       [tokens, num_kv_heads, head_dim]: appends the tokens to every kv head of the layer
//       (one decoded token is tokens == 1).
// Read-only sources (paged_kv_view over an engine's page pool, any view over memory the engine
// fills itself) are not caches: decode_attention and compress_layer read them, nothing appends.
//
// Optional members: razorkv looks for each (the traits below) and uses it where present.
//   member, what it says                   has it                   without it
//   s.max_new_tokens(layer) -> index_t     razor_kv_cache, bounded  no limit on the tokens one
//     new tokens one decode call may add   (older ones are folded)  decode call adds
//   s.num_query_heads() -> index_t         razor_kv_cache (its      the queries' head count is
//     the heads it serves, 0: not known    plan's)                  checked for GQA only
//   s.is_compressed(layer) -> bool         the compressing caches   decode reads whatever the
//     decoding an uncompressed layer                                layer holds
//     is then an error
//   m.observe(layer, weights)              h2o_kv_cache             observe_decode ignores the
//     learns from decode's probabilities                            weights, observes_attention()
//                                                                   is false
//   s.observes_attention() -> bool         any_kv_cache             the observe member's
//     answers for the cache it holds                                presence answers
//   s.entries(layer, kv_head), kv_bytes(), razorkv's caches         num_entries() and
//     allocated_bytes(): memory vocabulary                          held_kv_bytes() (any_kv_cache)
class attention_weights;

namespace detail {

template <class S, class = void>
struct is_kv_source_impl : std::false_type {};

template <class S>
struct is_kv_source_impl<
    S, std::void_t<typename S::value_type, decltype(std::declval<const S&>().num_layers()),
                   decltype(std::declval<const S&>().num_kv_heads()),
                   decltype(std::declval<const S&>().head_dim()),
                   decltype(std::declval<const S&>().num_spans(index_t{}, index_t{})),
                   decltype(std::declval<const S&>().span(index_t{}, index_t{}, index_t{}))>>
    : std::bool_constant<
          is_storage_dtype_v<typename S::value_type> &&
          std::is_convertible_v<decltype(std::declval<const S&>().num_layers()), index_t> &&
          std::is_convertible_v<decltype(std::declval<const S&>().num_kv_heads()), index_t> &&
          std::is_convertible_v<decltype(std::declval<const S&>().head_dim()), index_t> &&
          std::is_convertible_v<decltype(std::declval<const S&>().num_spans(index_t{}, index_t{})),
                                index_t> &&
          std::is_convertible_v<decltype(std::declval<const S&>().span(index_t{}, index_t{},
                                                                       index_t{})),
                                kv_span<typename S::value_type>>> {};

template <class C, class = void>
struct has_append : std::false_type {};

template <class C>
struct has_append<C, std::void_t<decltype(std::declval<C&>().append(
                         index_t{}, std::declval<layer_view<const typename C::value_type>>(),
                         std::declval<layer_view<const typename C::value_type>>()))>>
    : std::true_type {};

// The optional members of the table above, each found by the detection idiom: Member<C> names
// the call's type, and detected<Member, C> is true_type where that call is well-formed.
template <class Void, template <class> class Member, class C>
struct detector : std::false_type {};
template <template <class> class Member, class C>
struct detector<std::void_t<Member<C>>, Member, C> : std::true_type {};
template <template <class> class Member, class C>
using detected = detector<void, Member, C>;

template <class S>
using max_new_tokens_member = decltype(std::declval<const S&>().max_new_tokens(index_t{}));
template <class S>
using num_query_heads_member = decltype(std::declval<const S&>().num_query_heads());
template <class S>
using is_compressed_member = decltype(std::declval<const S&>().is_compressed(index_t{}));
template <class C>
using observe_member =
    decltype(std::declval<C&>().observe(index_t{}, std::declval<const attention_weights&>()));
template <class C>
using observes_attention_member = decltype(std::declval<const C&>().observes_attention());
template <class C>
using memory_vocabulary_members =
    std::void_t<decltype(std::declval<const C&>().entries(index_t{}, index_t{})),
                decltype(std::declval<const C&>().kv_bytes()),
                decltype(std::declval<const C&>().allocated_bytes())>;

template <class S>
using has_max_new_tokens = detected<max_new_tokens_member, S>;
template <class S>
using has_num_query_heads = detected<num_query_heads_member, S>;
template <class S>
using has_is_compressed = detected<is_compressed_member, S>;
template <class C>
using has_observe_hook = detected<observe_member, C>;
template <class C>
using reports_observation = detected<observes_attention_member, C>;
template <class C>
using has_memory_vocabulary = detected<memory_vocabulary_members, C>;

}  // namespace detail

/// True when S satisfies the read-only KV-source contract above.
template <class S>
inline constexpr bool is_kv_source_v = detail::is_kv_source_impl<std::remove_cv_t<S>>::value;

/// True when C is a KV source that can also append tokens (the KV-cache contract above).
template <class C>
inline constexpr bool is_kv_cache_v =
    is_kv_source_v<C>&& detail::has_append<std::remove_cv_t<C>>::value;

#if defined(__cpp_concepts) && __cpp_concepts >= 201907L
/// The KV-source contract as a C++20 concept (same meaning as is_kv_source_v).
template <class S>
concept kv_source = is_kv_source_v<S>;

/// The KV-cache contract as a C++20 concept (same meaning as is_kv_cache_v).
template <class C>
concept kv_cache = is_kv_cache_v<C>;
#endif

/// Throws unless `layer` indexes a layer of `source`; `where` names the caller in the message.
template <class Source>
void check_layer(const Source& source, index_t layer, const char* where) {
  static_assert(is_kv_source_v<Source>, "razorkv: type does not satisfy the KV-source contract");
  RAZORKV_CHECK(layer >= 0 && layer < static_cast<index_t>(source.num_layers()), kOutOfRange, where,
                ": layer (", layer, ") outside [0, ", source.num_layers(), ")");
}

namespace detail {

// Throws unless keys and values are both [tokens, kv_heads, head_dim] with the same tokens: the
// check every cache's append and compression make on the K/V handed to them.
template <class T>
void check_token_views(const layer_view<const T>& keys, const layer_view<const T>& values,
                       index_t kv_heads, index_t head_dim, const char* where) {
  for (const layer_view<const T>* view : {&keys, &values}) {
    const char* name = view == &keys ? "keys" : "values";
    RAZORKV_CHECK(view->heads() == kv_heads, kShapeMismatch, where, ": ", name, ".heads() (",
                  view->heads(), ") != num_kv_heads (", kv_heads, ")");
    RAZORKV_CHECK(view->head_dim() == head_dim, kShapeMismatch, where, ": ", name, ".head_dim() (",
                  view->head_dim(), ") != head_dim (", head_dim, ")");
  }
  RAZORKV_CHECK(keys.tokens() == values.tokens(), kShapeMismatch, where, ": keys.tokens() (",
                keys.tokens(), ") != values.tokens() (", values.tokens(), ")");
}

// The keys of new tokens rotated by the Walsh-Hadamard transform (kv_storage::rotate_keys), as
// [tokens, heads, head_dim] NHD in `buffer`: what a cache that stores rotated keys takes in. The
// rotation runs in float (double for double rows), in tasks of kRotateTokens tokens across
// `parallel_for` (or razorkv's fan-out; a prompt's keys are tens of millions of values).
inline constexpr index_t kRotateTokens = 1024;
template <class T>
layer_view<const T> rotated_keys(const layer_view<const T>& keys, std::vector<T>& buffer,
                                 const parallel_for_fn& parallel_for = {}) {
  using R = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const index_t tokens = keys.tokens(), heads = keys.heads(), dim = keys.head_dim();
  buffer.resize(static_cast<std::size_t>(tokens * heads * dim));
  const index_t tasks = (tokens + kRotateTokens - 1) / kRotateTokens;
  run_parallel(parallel_for, tasks, [&](index_t task) {
    std::vector<R> row(std::is_same_v<T, R> ? 0 : static_cast<std::size_t>(dim));
    const index_t end = std::min(tokens, (task + 1) * kRotateTokens);
    for (index_t t = task * kRotateTokens; t < end; ++t) {
      for (index_t h = 0; h < heads; ++h) {
        const T* src = keys.data() + t * keys.token_stride() + h * keys.head_stride();
        T* dst = buffer.data() + (t * heads + h) * dim;
        if constexpr (std::is_same_v<T, R>) {  // rotated where it is stored
          std::copy(src, src + dim, dst);
          hadamard_rotate(dst, dim);
        } else {
          for (index_t c = 0; c < dim; ++c)
            row[static_cast<std::size_t>(c)] = static_cast<R>(src[c]);
          hadamard_rotate(row.data(), dim);
          for (index_t c = 0; c < dim; ++c)
            dst[c] = static_cast<T>(row[static_cast<std::size_t>(c)]);
        }
      }
    }
  });
  return layer_view<const T>::nhd(buffer.data(), tokens, heads, dim);
}

}  // namespace detail

/// Number of entries (rows, a compensation token counting as one) held for one kv head.
template <class Source>
index_t num_entries(const Source& source, index_t layer, index_t kv_head) {
  static_assert(is_kv_source_v<Source>, "razorkv: type does not satisfy the KV-source contract");
  index_t total = 0;
  const index_t spans = source.num_spans(layer, kv_head);
  for (index_t i = 0; i < spans; ++i) total += source.span(layer, kv_head, i).length();
  return total;
}

/// Bytes of K and V a source holds in `layer`: every entry's key row and value row (head_dim *
/// sizeof(value_type) each, or a quantised row's blocks) summed over its kv heads. Under GQA a
/// group's K/V is one kv head, so it is counted once however many query heads read it; a
/// compensation token is one entry (its count is metadata).
template <class Source>
index_t held_kv_bytes(const Source& source, index_t layer) {
  check_layer(source, layer, "held_kv_bytes");
  index_t total = 0;
  for (index_t h = 0; h < static_cast<index_t>(source.num_kv_heads()); ++h) {
    const index_t spans = source.num_spans(layer, h);
    for (index_t i = 0; i < spans; ++i) {
      const kv_span<typename Source::value_type> span = source.span(layer, h, i);
      total += span.length() * (span.keys.row_bytes() + span.values.row_bytes());
    }
  }
  return total;
}

/// held_kv_bytes over every layer.
template <class Source>
index_t held_kv_bytes(const Source& source) {
  index_t total = 0;
  for (index_t l = 0; l < static_cast<index_t>(source.num_layers()); ++l)
    total += held_kv_bytes(source, l);
  return total;
}

RAZORKV_END_NAMESPACE
