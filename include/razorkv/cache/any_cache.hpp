// razorkv/cache/any_cache.hpp: any_kv_cache<T>, one type for a cache of any policy (dense,
// razor, selected, H2O, an engine's own), so that sequences under different policies batch.
#pragma once

#include <limits>
#include <memory>
#include <type_traits>
#include <utility>

#include "razorkv/cache/attention_weights.hpp"
#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// Owns a cache of any type that satisfies the KV-cache contract, and is itself a KV cache: it
/// forwards the contract (and observe, for caches that learn during decode) through one virtual
/// call each. Decode reads a span per (kv head, span) per step, so the indirection costs nothing
/// next to the attention itself. Copies are deep; a moved-from any_kv_cache is empty, and
/// every member but empty() and the assignments then throws.
template <class T>
class any_kv_cache {
  static_assert(is_storage_dtype_v<T>, "razorkv::any_kv_cache: unsupported storage dtype");

 public:
  using value_type = T;

  template <class Cache,
            class = std::enable_if_t<!std::is_same_v<std::decay_t<Cache>, any_kv_cache>>>
  any_kv_cache(Cache&& cache)  // NOLINT(google-explicit-constructor): a cache is an any_kv_cache
      : held_(std::make_unique<model<std::decay_t<Cache>>>(std::forward<Cache>(cache))) {
    static_assert(is_kv_cache_v<std::decay_t<Cache>>, "razorkv::any_kv_cache: not a KV cache");
    static_assert(std::is_same_v<typename std::decay_t<Cache>::value_type, T>,
                  "razorkv::any_kv_cache<T>: the cache stores another dtype");
  }
  any_kv_cache(const any_kv_cache& other) : held_(other.held_ ? other.held_->clone() : nullptr) {}
  any_kv_cache(any_kv_cache&&) noexcept = default;
  any_kv_cache& operator=(const any_kv_cache& other) {
    if (this != &other) held_ = other.held_ ? other.held_->clone() : nullptr;
    return *this;
  }
  any_kv_cache& operator=(any_kv_cache&&) noexcept = default;
  ~any_kv_cache() = default;

  bool empty() const noexcept { return held_ == nullptr; }

  index_t num_layers() const { return get().num_layers(); }
  index_t num_kv_heads() const { return get().num_kv_heads(); }
  index_t head_dim() const { return get().head_dim(); }
  index_t num_spans(index_t layer, index_t kv_head) const {
    return get().num_spans(layer, kv_head);
  }
  kv_span<T> span(index_t layer, index_t kv_head, index_t i) const {
    return get().span(layer, kv_head, i);
  }
  void append(index_t layer, layer_view<const T> keys, layer_view<const T> values) {
    get().append(layer, keys, values);
  }
  /// Whether the held cache learns from decode (see observes_attention), and its observe hook
  /// (observe_decode's), which does nothing for a cache without one.
  bool observes_attention() const { return get().observes_attention(); }
  void observe(index_t layer, const attention_weights& weights) { get().observe(layer, weights); }

  /// The held cache's max_new_tokens when it has one (razor_kv_cache), else no limit.
  index_t max_new_tokens(index_t layer) const { return get().max_new_tokens(layer); }
  /// The query heads the held cache serves when it knows them (razor_kv_cache), else 0.
  index_t num_query_heads() const { return get().num_query_heads(); }
  /// Whether the held cache has filled `layer` (true for caches not filled layer by layer).
  bool is_compressed(index_t layer) const { return get().is_compressed(layer); }

  // The memory vocabulary every razorkv cache shares, forwarded.
  index_t entries(index_t layer, index_t kv_head) const { return get().entries(layer, kv_head); }
  index_t kv_bytes() const { return get().kv_bytes(); }
  index_t allocated_bytes() const { return get().allocated_bytes(); }

  /// The held cache when it is a Cache, else null (as std::function::target).
  template <class Cache>
  const Cache* target() const noexcept {
    const auto* typed = dynamic_cast<const model<Cache>*>(held_.get());
    return typed ? &typed->cache : nullptr;
  }
  template <class Cache>
  Cache* target() noexcept {
    auto* typed = dynamic_cast<model<Cache>*>(held_.get());
    return typed ? &typed->cache : nullptr;
  }

 private:
  struct interface {
    virtual ~interface() = default;
    virtual std::unique_ptr<interface> clone() const = 0;
    virtual index_t num_layers() const = 0;
    virtual index_t num_kv_heads() const = 0;
    virtual index_t head_dim() const = 0;
    virtual index_t num_spans(index_t layer, index_t kv_head) const = 0;
    virtual kv_span<T> span(index_t layer, index_t kv_head, index_t i) const = 0;
    virtual void append(index_t layer, layer_view<const T> keys, layer_view<const T> values) = 0;
    virtual bool observes_attention() const = 0;
    virtual void observe(index_t layer, const attention_weights& weights) = 0;
    virtual index_t max_new_tokens(index_t layer) const = 0;
    virtual index_t num_query_heads() const = 0;
    virtual bool is_compressed(index_t layer) const = 0;
    virtual index_t entries(index_t layer, index_t kv_head) const = 0;
    virtual index_t kv_bytes() const = 0;
    virtual index_t allocated_bytes() const = 0;
  };

  template <class Cache>
  struct model final : interface {
    template <class C>
    explicit model(C&& c) : cache(std::forward<C>(c)) {}
    std::unique_ptr<interface> clone() const override { return std::make_unique<model>(cache); }
    index_t num_layers() const override { return cache.num_layers(); }
    index_t num_kv_heads() const override { return cache.num_kv_heads(); }
    index_t head_dim() const override { return cache.head_dim(); }
    index_t num_spans(index_t layer, index_t kv_head) const override {
      return cache.num_spans(layer, kv_head);
    }
    kv_span<T> span(index_t layer, index_t kv_head, index_t i) const override {
      return cache.span(layer, kv_head, i);
    }
    void append(index_t layer, layer_view<const T> keys, layer_view<const T> values) override {
      cache.append(layer, keys, values);
    }
    bool observes_attention() const override { return razorkv::observes_attention(cache); }
    void observe(index_t layer, const attention_weights& weights) override {
      observe_decode(cache, layer, weights);
    }
    // A cache of the user's without the memory vocabulary is counted from its spans, and its
    // allocation as what it holds.
    index_t entries(index_t layer, index_t kv_head) const override {
      if constexpr (detail::has_memory_vocabulary<Cache>::value) {
        return cache.entries(layer, kv_head);
      } else {
        return num_entries(cache, layer, kv_head);
      }
    }
    index_t max_new_tokens(index_t layer) const override {
      if constexpr (detail::has_max_new_tokens<Cache>::value) {
        return cache.max_new_tokens(layer);
      } else {
        return std::numeric_limits<index_t>::max();
      }
    }
    index_t num_query_heads() const override {
      if constexpr (detail::has_num_query_heads<Cache>::value) {
        return cache.num_query_heads();
      } else {
        return 0;
      }
    }
    bool is_compressed(index_t layer) const override {
      if constexpr (detail::has_is_compressed<Cache>::value) {
        return cache.is_compressed(layer);
      } else {
        return true;
      }
    }
    index_t kv_bytes() const override { return held_kv_bytes(cache); }
    index_t allocated_bytes() const override {
      if constexpr (detail::has_memory_vocabulary<Cache>::value) {
        return cache.allocated_bytes();
      } else {
        return held_kv_bytes(cache);
      }
    }
    Cache cache;
  };

  interface& get() const {
    RAZORKV_CHECK(held_ != nullptr, kInvalidArgument,
                  "any_kv_cache: the cache is empty (moved from)");
    return *held_;
  }

  std::unique_ptr<interface> held_;
};

static_assert(is_kv_cache_v<any_kv_cache<float>>,
              "any_kv_cache must satisfy the KV-cache contract");

RAZORKV_END_NAMESPACE
