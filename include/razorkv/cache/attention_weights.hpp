// razorkv/cache/attention_weights.hpp: the per-entry attention probabilities a decode step hands
// back, and the hook through which caches that learn from decode (H2O) receive them.
#pragma once

#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// The attention probabilities of one decode step over one source: for every new token and query
/// head, the softmax weight that query gave each entry of its kv head, in entry order (the
/// concatenation of the head's spans). An entry of a span with a log-weight gets the weight of
/// all the tokens it stands for (a compensation token of n tokens: n times the weight of one
/// copy); entries a query may not read under the causal mask of multi-token decode get 0; a
/// query's weights sum to 1 up to float rounding.
///
/// decode_attention fills it when it is handed one (it reads K once either way), and
/// observe_decode passes it to a cache that learns from decode. An engine with its own attention
/// kernel may fill it itself through reset() and kv_head(). It owns its buffer and keeps the
/// capacity across reset(), so a decode loop that reuses one allocates only while its heads grow
/// beyond any earlier step.
class attention_weights {
 public:
  attention_weights() = default;

  /// Shapes the buffer for `tokens` new tokens of `num_query_heads` query heads over kv heads
  /// holding entries[h] entries each (GQA: num_query_heads is a multiple of entries.size()), and
  /// zeroes it. Throws on a bad shape before changing anything.
  void reset(index_t tokens, index_t num_query_heads, const std::vector<index_t>& entries) {
    reset(tokens, num_query_heads, entries.data(), static_cast<index_t>(entries.size()));
  }
  /// reset with the entries of the kv heads as an array: entries[0, kv_heads).
  void reset(index_t tokens, index_t num_query_heads, const index_t* entries, index_t kv_heads) {
    const index_t total = reserve(tokens, num_query_heads, entries, kv_heads);
    const index_t rows = tokens * (num_query_heads / kv_heads);  // checked by reserve
    values_.assign(static_cast<std::size_t>(total), 0.0f);
    entries_.assign(entries, entries + kv_heads);
    offsets_.assign(1, 0);
    for (index_t h = 0; h < kv_heads; ++h)
      offsets_.push_back(offsets_.back() + rows * entries[static_cast<std::size_t>(h)]);
    tokens_ = tokens;
    num_query_heads_ = num_query_heads;
  }

  /// What reset checks and allocates, without changing the weights: after it, reset with the same
  /// arguments allocates nothing and cannot throw (decode shapes a caller's weights only once
  /// nothing else can fail). Returns the number of weights.
  index_t reserve(index_t tokens, index_t num_query_heads, const index_t* entries,
                  index_t kv_heads) {
    constexpr const char* kWhere = "attention_weights::reset";
    RAZORKV_CHECK(entries != nullptr || kv_heads <= 0, kInvalidArgument, kWhere,
                  ": entries is null for ", kv_heads, " kv heads");
    RAZORKV_CHECK(tokens > 0, kInvalidArgument, kWhere, ": tokens (", tokens, ") must be > 0");
    RAZORKV_CHECK(kv_heads > 0 && num_query_heads > 0 && num_query_heads % kv_heads == 0,
                  kShapeMismatch, kWhere, ": num_query_heads (", num_query_heads,
                  ") is not a positive multiple of the number of kv heads (", kv_heads, ")");
    const index_t rows = detail::checked_mul(tokens, num_query_heads / kv_heads, kWhere);
    index_t total = 0;
    for (index_t h = 0; h < kv_heads; ++h) {
      const index_t count = entries[static_cast<std::size_t>(h)];
      RAZORKV_CHECK(count >= 0, kInvalidArgument, kWhere, ": entries[", h, "] (", count,
                    ") must be >= 0");
      total = detail::checked_add(total, detail::checked_mul(rows, count, kWhere), kWhere);
    }
    detail::checked_block_bytes(total, static_cast<index_t>(sizeof(float)), kWhere);
    // A failed allocation leaves *this as it was. By half again at least, so that weights
    // reused over a growing cache reallocate once every many steps, not every step.
    if (static_cast<std::size_t>(total) > values_.capacity())
      values_.reserve(
          std::max(static_cast<std::size_t>(total), values_.capacity() + values_.capacity() / 2));
    offsets_.reserve(static_cast<std::size_t>(kv_heads) + 1);
    entries_.reserve(static_cast<std::size_t>(kv_heads));
    return total;
  }

  /// New tokens, query heads and kv heads of the step (0 before the first reset).
  index_t tokens() const noexcept { return tokens_; }
  index_t num_query_heads() const noexcept { return num_query_heads_; }
  index_t num_kv_heads() const noexcept { return static_cast<index_t>(entries_.size()); }
  /// Query heads per kv head.
  index_t group() const noexcept {
    return entries_.empty() ? 0 : num_query_heads_ / num_kv_heads();
  }
  /// Entries of kv head h the weights cover.
  index_t entries(index_t kv_head) const {
    check_kv_head(kv_head, "attention_weights::entries");
    return entries_[static_cast<std::size_t>(kv_head)];
  }

  /// The weights of kv head h: [tokens * group, entries(h)], contiguous rows; row t * group + g
  /// holds query head h * group + g of new token t.
  matrix_view<const float> kv_head(index_t kv_head) const {
    check_kv_head(kv_head, "attention_weights::kv_head");
    return head_view<const float>(values_.data(), kv_head);
  }
  matrix_view<float> kv_head(index_t kv_head) {
    check_kv_head(kv_head, "attention_weights::kv_head");
    return head_view<float>(values_.data(), kv_head);
  }
  /// The weights of one query: [entries of its kv head].
  const float* query(index_t token, index_t query_head) const {
    RAZORKV_CHECK(token >= 0 && token < tokens_ && query_head >= 0 && query_head < num_query_heads_,
                  kOutOfRange, "attention_weights::query: (token ", token, ", query head ",
                  query_head, ") outside [", tokens_, ", ", num_query_heads_, ")");
    const index_t g = group();
    return kv_head(query_head / g).row(token * g + query_head % g);
  }

 private:
  void check_kv_head(index_t kv_head, const char* where) const {
    RAZORKV_CHECK(kv_head >= 0 && kv_head < num_kv_heads(), kOutOfRange, where, ": kv head (",
                  kv_head, ") outside [0, ", num_kv_heads(), ")");
  }
  template <class F, class P>
  matrix_view<F> head_view(P data, index_t kv_head) const {
    const auto h = static_cast<std::size_t>(kv_head);
    const index_t count = entries_[h];
    return matrix_view<F>(count == 0 ? nullptr : data + offsets_[h], tokens_ * group(), count,
                          std::max<index_t>(count, 1));
  }

  std::vector<float> values_;     // kv head after kv head, each [tokens * group, entries]
  std::vector<index_t> offsets_;  // [num_kv_heads + 1]: kv head h starts at values_[offsets_[h]]
  std::vector<index_t> entries_;  // [num_kv_heads]
  index_t tokens_ = 0, num_query_heads_ = 0;
};

/// Whether `cache` learns from decode: a cache type with a member
/// `observe(layer, const attention_weights&)` does (H2O), and a type-erased cache answers for the
/// cache it holds (a member `observes_attention()`). A decode loop asks decode for the weights
/// only for such caches, since writing them costs a pass over the entries' logits.
template <class Cache>
bool observes_attention(const Cache& cache) {
  if constexpr (detail::reports_observation<Cache>::value) {
    return cache.observes_attention();
  } else {
    (void)cache;
    return detail::has_observe_hook<Cache>::value;
  }
}

/// The one hook for policies that learn from decode: hands `weights` (what decode_attention
/// returned for this layer's newest tokens, after the cache appended them) to a cache with an
/// observe hook; any other cache ignores them. A decode loop calls it after decode for every
/// cache for which observes_attention() holds, and so never names the policy it runs.
template <class Cache>
void observe_decode(Cache& cache, index_t layer, const attention_weights& weights) {
  static_assert(is_kv_cache_v<Cache>, "razorkv: type does not satisfy the KV-cache contract");
  if constexpr (detail::has_observe_hook<Cache>::value) cache.observe(layer, weights);
}

RAZORKV_END_NAMESPACE
