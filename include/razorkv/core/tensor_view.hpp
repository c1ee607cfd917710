// razorkv/core/tensor_view.hpp: non-owning, trivially copyable views over K/V/Q memory that
// the engine owns. A view never allocates and never outlives the memory it points into.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include "razorkv/config.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// Signed extent and stride type (as Eigen::Index), so that a negative argument is reported as
/// the negative number the caller passed, not as a huge unsigned one.
using index_t = std::ptrdiff_t;

/// The two common engine layouts of one layer's K (or V) cache.
enum class kv_layout {
  kNHD,  ///< [tokens, kv_heads, head_dim]: token stride = kv_heads * head_dim (or padded)
  kHND,  ///< [kv_heads, tokens, head_dim]: head stride = tokens * head_dim (or padded)
};

/// A [rows, cols] matrix with contiguous rows: element (r, c) is data()[r * row_stride() + c].
/// One head's keys or values are a matrix_view with rows = tokens and cols = head_dim; a
/// token's query heads are one with rows = query heads.
///
/// Shapes and strides are in elements. row_stride >= cols (padding allowed); with rows <= 1
/// any row stride is accepted. data may be null only when rows == 0.
template <class T>
class matrix_view {
 public:
  using element_type = T;

  constexpr matrix_view() noexcept = default;

  /// Checked constructor: throws razorkv::error naming the bad extent.
  matrix_view(T* data, index_t rows, index_t cols, index_t row_stride) {
    assign(data, rows, cols, row_stride);
  }
  /// Contiguous rows (row_stride = cols).
  matrix_view(T* data, index_t rows, index_t cols) { assign(data, rows, cols, cols); }

  /// A view of const elements reads the same memory.
  template <class U, class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
  constexpr matrix_view(
      const matrix_view<U>& other) noexcept  // NOLINT(google-explicit-constructor)
      : data_(other.data()),
        rows_(other.rows()),
        cols_(other.cols()),
        row_stride_(other.row_stride()) {}

  constexpr T* data() const noexcept { return data_; }
  constexpr index_t rows() const noexcept { return rows_; }
  constexpr index_t cols() const noexcept { return cols_; }
  constexpr index_t row_stride() const noexcept { return row_stride_; }
  constexpr bool empty() const noexcept { return rows_ == 0; }

  /// Pointer to row r (unchecked beyond RAZORKV_DASSERT).
  T* row(index_t r) const noexcept {
    RAZORKV_DASSERT(r >= 0 && r < rows_);
    return data_ + r * row_stride_;
  }
  T& operator()(index_t r, index_t c) const noexcept {
    RAZORKV_DASSERT(c >= 0 && c < cols_);
    return row(r)[c];
  }

  /// Rows [first, first + count): a view into the same memory.
  matrix_view middle_rows(index_t first, index_t count) const {
    RAZORKV_CHECK(first >= 0 && count >= 0 && first <= rows_ && count <= rows_ - first, kOutOfRange,
                  "matrix_view::middle_rows: rows [", first, ", ", first, " + ", count,
                  ") outside a view of ", rows_, " rows");
    matrix_view result;
    result.data_ = count == 0 ? nullptr : data_ + first * row_stride_;
    result.rows_ = count;
    result.cols_ = cols_;
    result.row_stride_ = row_stride_;
    return result;
  }

 private:
  void assign(T* data, index_t rows, index_t cols, index_t row_stride) {
    RAZORKV_CHECK(rows >= 0, kInvalidArgument, "matrix_view: rows (", rows, ") must be >= 0");
    RAZORKV_CHECK(cols > 0, kInvalidArgument, "matrix_view: cols (", cols, ") must be > 0");
    RAZORKV_CHECK(rows <= 1 || row_stride >= cols, kInvalidArgument, "matrix_view: row_stride (",
                  row_stride, ") must be >= cols (", cols, ")");
    RAZORKV_CHECK(rows == 0 || data != nullptr, kInvalidArgument,
                  "matrix_view: data is null with rows (", rows, ") > 0");
    data_ = data;
    rows_ = rows;
    cols_ = cols;
    row_stride_ = rows <= 1 ? cols : row_stride;
  }

  T* data_ = nullptr;       // [rows, cols], row r at data_ + r * row_stride_
  index_t rows_ = 0;        // number of rows (tokens, or heads)
  index_t cols_ = 0;        // elements per row (head_dim)
  index_t row_stride_ = 0;  // elements between the starts of consecutive rows
};

/// One layer's K (or V, or Q) for several tokens and heads: logical shape
/// [tokens, heads, head_dim], element (t, h, d) at data()[t * token_stride() + h * head_stride()
/// + d]. NHD and HND (and padded variants of either) are the same view with other strides, so
/// both engine layouts are read without copying.
template <class T>
class layer_view {
 public:
  using element_type = T;

  constexpr layer_view() noexcept = default;

  /// Fully general checked constructor; prefer nhd() and hnd().
  layer_view(T* data, index_t tokens, index_t heads, index_t head_dim, index_t token_stride,
             index_t head_stride) {
    RAZORKV_CHECK(tokens >= 0, kInvalidArgument, "layer_view: tokens (", tokens, ") must be >= 0");
    RAZORKV_CHECK(heads > 0, kInvalidArgument, "layer_view: heads (", heads, ") must be > 0");
    RAZORKV_CHECK(head_dim > 0, kInvalidArgument, "layer_view: head_dim (", head_dim,
                  ") must be > 0");
    RAZORKV_CHECK(token_stride >= 0 && head_stride >= 0, kInvalidArgument,
                  "layer_view: strides must be >= 0, got token_stride (", token_stride,
                  ") and head_stride (", head_stride, ")");
    RAZORKV_CHECK(heads == 1 || head_stride >= head_dim, kInvalidArgument,
                  "layer_view: head_stride (", head_stride, ") must be >= head_dim (", head_dim,
                  ")");
    RAZORKV_CHECK(tokens <= 1 || token_stride >= head_dim, kInvalidArgument,
                  "layer_view: token_stride (", token_stride, ") must be >= head_dim (", head_dim,
                  ")");
    RAZORKV_CHECK(tokens == 0 || data != nullptr, kInvalidArgument,
                  "layer_view: data is null with tokens (", tokens, ") > 0");
    // The offset of the last element must fit index_t, or indexing the view wraps around.
    if (tokens > 0) {
      add(add(product(tokens - 1, token_stride, "layer_view: (tokens - 1) * token_stride"),
              product(heads - 1, head_stride, "layer_view: (heads - 1) * head_stride"),
              "layer_view: the last element's offset"),
          head_dim, "layer_view: the last element's offset");
    }
    data_ = data;
    tokens_ = tokens;
    heads_ = heads;
    head_dim_ = head_dim;
    token_stride_ = token_stride;
    head_stride_ = head_stride;
  }

  /// [tokens, heads, head_dim] with each token's heads adjacent. token_stride defaults to
  /// heads * head_dim; pass a larger one for a padded row.
  static layer_view nhd(T* data, index_t tokens, index_t heads, index_t head_dim,
                        index_t token_stride = -1) {
    return layer_view(data, tokens, heads, head_dim,
                      token_stride < 0
                          ? product(heads, head_dim, "layer_view::nhd: heads * head_dim")
                          : token_stride,
                      head_dim);
  }
  /// [heads, token_capacity, head_dim]: each head's tokens adjacent, heads token_capacity rows
  /// apart (token_capacity >= tokens; defaults to tokens).
  static layer_view hnd(T* data, index_t tokens, index_t heads, index_t head_dim,
                        index_t token_capacity = -1) {
    const index_t capacity = token_capacity < 0 ? tokens : token_capacity;
    RAZORKV_CHECK(capacity >= tokens, kInvalidArgument, "layer_view::hnd: token_capacity (",
                  capacity, ") must be >= tokens (", tokens, ")");
    return layer_view(data, tokens, heads, head_dim, head_dim,
                      product(capacity, head_dim, "layer_view::hnd: token_capacity * head_dim"));
  }

  template <class U, class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
  constexpr layer_view(const layer_view<U>& other) noexcept  // NOLINT(google-explicit-constructor)
      : data_(other.data()),
        tokens_(other.tokens()),
        heads_(other.heads()),
        head_dim_(other.head_dim()),
        token_stride_(other.token_stride()),
        head_stride_(other.head_stride()) {}

  constexpr T* data() const noexcept { return data_; }
  constexpr index_t tokens() const noexcept { return tokens_; }
  constexpr index_t heads() const noexcept { return heads_; }
  constexpr index_t head_dim() const noexcept { return head_dim_; }
  constexpr index_t token_stride() const noexcept { return token_stride_; }
  constexpr index_t head_stride() const noexcept { return head_stride_; }

  /// Head h over all tokens: [tokens, head_dim], row stride token_stride.
  matrix_view<T> head(index_t h) const {
    RAZORKV_CHECK(h >= 0 && h < heads_, kOutOfRange, "layer_view::head: head (", h,
                  ") outside [0, ", heads_, ")");
    if (tokens_ == 0) return matrix_view<T>(nullptr, 0, head_dim_);
    return matrix_view<T>(data_ + h * head_stride_, tokens_, head_dim_, token_stride_);
  }
  /// Tokens [first, first + count): [count, heads, head_dim], same strides.
  layer_view middle_tokens(index_t first, index_t count) const {
    RAZORKV_CHECK(first >= 0 && count >= 0 && first <= tokens_ - count, kOutOfRange,
                  "layer_view::middle_tokens: tokens [", first, ", ", first, " + ", count,
                  ") outside [0, ", tokens_, ")");
    return layer_view(count == 0 ? nullptr : data_ + first * token_stride_, count, heads_,
                      head_dim_, token_stride_, head_stride_);
  }
  /// Token t over all heads: [heads, head_dim], row stride head_stride.
  matrix_view<T> token(index_t t) const {
    RAZORKV_CHECK(t >= 0 && t < tokens_, kOutOfRange, "layer_view::token: token (", t,
                  ") outside [0, ", tokens_, ")");
    return matrix_view<T>(data_ + t * token_stride_, heads_, head_dim_, head_stride_);
  }

 private:
  // a * b and a + b for the view's extents, kOverflow naming `what` when they do not fit; a
  // negative operand is left to the constructor's checks, which name it.
  static index_t product(index_t a, index_t b, const char* what) {
    RAZORKV_CHECK(a <= 0 || b <= 0 || a <= std::numeric_limits<index_t>::max() / b, kOverflow, what,
                  ": ", a, " * ", b, " overflows");
    return a * b;
  }
  static index_t add(index_t a, index_t b, const char* what) {
    RAZORKV_CHECK(a < 0 || b < 0 || a <= std::numeric_limits<index_t>::max() - b, kOverflow, what,
                  ": ", a, " + ", b, " overflows");
    return a + b;
  }

  T* data_ = nullptr;         // element (t, h, d) at data_ + t*token_stride_ + h*head_stride_ + d
  index_t tokens_ = 0;        // number of tokens
  index_t heads_ = 0;         // number of heads
  index_t head_dim_ = 0;      // elements per head vector (contiguous)
  index_t token_stride_ = 0;  // elements between token t and t + 1 of one head
  index_t head_stride_ = 0;   // elements between head h and h + 1 of one token
};

RAZORKV_END_NAMESPACE
