// razorkv/core/any_view.hpp: any_layer_view, a layer_view whose element type is a run-time dtype,
// for engines that hold K/V as tensors with a dtype field. Non-owning and trivially copyable.
#pragma once

#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// One layer's K (or V) as [tokens, heads, head_dim] with element strides, like
/// layer_view<const T>, but with the element type carried as a value. Turning it back into a
/// typed view (as<T>()) checks the dtype, so handing a float16 tensor to a bfloat16 cache is an
/// error that names both dtypes instead of a reinterpretation of the bits.
class any_layer_view {
 public:
  constexpr any_layer_view() noexcept = default;

  /// The same memory and shape as a typed view. Only const views convert implicitly, so that
  /// a mutable typed view prefers a typed overload over an erased one.
  template <class T>
  any_layer_view(layer_view<const T> view) noexcept  // NOLINT(google-explicit-constructor)
      : data_(view.data()),
        dtype_(dtype_of<T>()),
        tokens_(view.tokens()),
        heads_(view.heads()),
        head_dim_(view.head_dim()),
        token_stride_(view.token_stride()),
        head_stride_(view.head_stride()) {}

  /// [tokens, heads, head_dim] with each token's heads adjacent (see layer_view::nhd).
  static any_layer_view nhd(const void* data, dtype type, index_t tokens, index_t heads,
                            index_t head_dim, index_t token_stride = -1) {
    return any_layer_view(type, data, tokens, heads, head_dim,
                          token_stride < 0 ? heads * head_dim : token_stride, head_dim);
  }
  /// [heads, token_capacity, head_dim] (see layer_view::hnd).
  static any_layer_view hnd(const void* data, dtype type, index_t tokens, index_t heads,
                            index_t head_dim, index_t token_capacity = -1) {
    const index_t capacity = token_capacity < 0 ? tokens : token_capacity;
    RAZORKV_CHECK(capacity >= tokens, kInvalidArgument, "any_layer_view::hnd: token_capacity (",
                  capacity, ") must be >= tokens (", tokens, ")");
    return any_layer_view(type, data, tokens, heads, head_dim, head_dim, capacity * head_dim);
  }

  constexpr const void* data() const noexcept { return data_; }
  constexpr dtype type() const noexcept { return dtype_; }
  constexpr index_t tokens() const noexcept { return tokens_; }
  constexpr index_t heads() const noexcept { return heads_; }
  constexpr index_t head_dim() const noexcept { return head_dim_; }

  /// The typed view; throws errc::kInvalidArgument naming `where`, `name` and both dtypes when
  /// T is not the view's dtype, and the layer_view checks on shape and strides.
  template <class T>
  layer_view<const T> as(const char* where = "any_layer_view::as",
                         const char* name = "view") const {
    RAZORKV_CHECK(dtype_ == dtype_of<T>(), kInvalidArgument, where, ": ", name, " has dtype ",
                  dtype_name(dtype_), ", expected ", dtype_name(dtype_of<T>()));
    return layer_view<const T>(static_cast<const T*>(data_), tokens_, heads_, head_dim_,
                               token_stride_, head_stride_);
  }

 private:
  any_layer_view(dtype type, const void* data, index_t tokens, index_t heads, index_t head_dim,
                 index_t token_stride, index_t head_stride)
      : data_(data),
        dtype_(type),
        tokens_(tokens),
        heads_(heads),
        head_dim_(head_dim),
        token_stride_(token_stride),
        head_stride_(head_stride) {}

  const void* data_ =
      nullptr;  // element (t, h, d) at data_ + (t*token_stride_ + h*head_stride_ + d) elements
  dtype dtype_ = dtype::kFloat32;  // what data_ points to
  index_t tokens_ = 0;             // number of tokens
  index_t heads_ = 0;              // number of heads
  index_t head_dim_ = 0;           // elements per head vector (contiguous)
  index_t token_stride_ = 0;       // elements between token t and t + 1 of one head
  index_t head_stride_ = 0;        // elements between head h and h + 1 of one token
};

RAZORKV_END_NAMESPACE
