// razorkv/cache/skeleton.hpp: what every razorkv cache shares: its shape, checked once,
// and checked access to its per-layer storage and (for caches that compress) per-head state.
#pragma once

#include <cstddef>
#include <memory_resource>
#include <utility>
#include <vector>

#include "razorkv/cache/head_rows.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

/// The base of every razorkv cache: num_layers(), num_kv_heads() and head_dim() (the contract's
/// shape, fixed for the cache's lifetime), checked at construction with errors prefixed by the
/// cache's name; the memory resource its K/V rows come from; and one Layer of storage per layer
/// behind a checked accessor.
template <class Layer>
class cache_skeleton {
 public:
  index_t num_layers() const noexcept { return num_layers_; }
  index_t num_kv_heads() const noexcept { return num_kv_heads_; }
  index_t head_dim() const noexcept { return head_dim_; }
  /// Where the cache's K/V rows come from (never null). A copy of the cache allocates from it
  /// too; the cache's bookkeeping (positions, scores, per-head state) comes from the heap.
  std::pmr::memory_resource* memory_resource() const noexcept { return resource_; }

 protected:
  // Copy assignment makes the whole copy first and then takes it over, so that an allocation
  // failing half-way leaves this cache as it was: assigned member by member, the vector of
  // layers is assigned layer by layer and a failure leaves layers of both caches. A cache built
  // on this skeleton adds only members whose copy cannot throw (a shared plan, a config).
  cache_skeleton(const cache_skeleton&) = default;
  cache_skeleton(cache_skeleton&&) noexcept = default;
  cache_skeleton& operator=(const cache_skeleton& other) {
    if (this != &other) *this = cache_skeleton(other);
    return *this;
  }
  cache_skeleton& operator=(cache_skeleton&&) noexcept = default;
  ~cache_skeleton() = default;

  /// `resource`: null means std::pmr::get_default_resource().
  cache_skeleton(const char* name, index_t num_layers, index_t num_kv_heads, index_t head_dim,
                 std::pmr::memory_resource* resource)
      : num_layers_(num_layers),
        num_kv_heads_(num_kv_heads),
        head_dim_(head_dim),
        resource_(resource_or_default(resource)) {
    RAZORKV_CHECK(num_layers > 0, kInvalidArgument, name, ": num_layers (", num_layers,
                  ") must be > 0");
    RAZORKV_CHECK(num_kv_heads > 0, kInvalidArgument, name, ": num_kv_heads (", num_kv_heads,
                  ") must be > 0");
    RAZORKV_CHECK(head_dim > 0, kInvalidArgument, name, ": head_dim (", head_dim, ") must be > 0");
    layers_.resize(static_cast<std::size_t>(num_layers));
  }

  /// Layer `layer`'s storage; throws kOutOfRange naming `where` when there is no such layer.
  const Layer& layer_at(index_t layer, const char* where) const {
    RAZORKV_CHECK(layer >= 0 && layer < num_layers_, kOutOfRange, where, ": layer (", layer,
                  ") outside [0, ", num_layers_, ")");
    return layers_[static_cast<std::size_t>(layer)];
  }
  Layer& layer_at(index_t layer, const char* where) {
    return const_cast<Layer&>(std::as_const(*this).layer_at(layer, where));
  }
  /// Throws kOutOfRange naming `where` unless kv_head is one of the cache's.
  void check_kv_head(index_t kv_head, const char* where) const {
    RAZORKV_CHECK(kv_head >= 0 && kv_head < num_kv_heads_, kOutOfRange, where, ": kv_head (",
                  kv_head, ") outside [0, ", num_kv_heads_, ")");
  }

  std::vector<Layer> layers_;  // [num_layers]

 private:
  index_t num_layers_, num_kv_heads_, head_dim_;
  std::pmr::memory_resource* resource_;
};

/// One layer of a cache that compresses its prompt layer by layer (razor, selected, H2O).
template <class Head>
struct compressed_layer {
  std::vector<Head> heads;    // [num_kv_heads] once compressed
  index_t tokens = 0;         // the prompt plus every token appended since
  index_t prompt_tokens = 0;  // the prompt alone (tokens - prompt_tokens were appended)
  bool compressed = false;
};

/// The skeleton of a compressing cache: per-head state, which reads as empty (a default Head)
/// while its layer is not compressed.
template <class Head>
class compressed_cache_skeleton : public cache_skeleton<compressed_layer<Head>> {
 protected:
  using cache_skeleton<compressed_layer<Head>>::cache_skeleton;

  const Head& head_at(index_t layer, index_t kv_head, const char* where) const {
    const compressed_layer<Head>& l = this->layer_at(layer, where);
    this->check_kv_head(kv_head, where);
    static const Head empty{};
    return l.compressed ? l.heads[static_cast<std::size_t>(kv_head)] : empty;
  }
};

}  // namespace detail
RAZORKV_END_NAMESPACE
