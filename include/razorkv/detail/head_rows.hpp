// razorkv/detail/head_rows.hpp: head_rows<T>, the owning K/V row storage of one cache head
// (64-byte aligned, not zero-filled), shared by the compressed caches.
#pragma once

#include <cstring>
#include <memory>
#include <new>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

// Owning K and V rows of one head, [capacity, dim] each, 64-byte aligned; rows past rows() are
// uninitialised (the cache writes every row before it exposes it, and allocating without
// zero-filling keeps compression at one pass over memory).
template <class T>
class head_rows {
 public:
  head_rows() = default;
  head_rows(index_t capacity, index_t dim) : capacity_(capacity), dim_(dim) {
    const index_t elements = checked_mul(capacity, dim, "head_rows: rows * head_dim");
    checked_mul(elements, static_cast<index_t>(sizeof(T)), "head_rows: bytes of one head");
    if (elements > 0) {
      keys_.reset(allocate(elements));
      values_.reset(allocate(elements));
    }
  }
  head_rows(const head_rows& other) : head_rows(other.capacity_, other.dim_) { copy_prefix(other); }
  head_rows& operator=(const head_rows& other) {
    if (this != &other) *this = head_rows(other);
    return *this;
  }
  head_rows(head_rows&&) noexcept = default;
  head_rows& operator=(head_rows&&) noexcept = default;

  index_t rows() const noexcept { return rows_; }
  index_t capacity() const noexcept { return capacity_; }
  void set_rows(index_t rows) noexcept {
    RAZORKV_DASSERT(rows >= 0 && rows <= capacity_);
    rows_ = rows;
  }
  T* key_row(index_t r) const noexcept { return keys_.get() + r * dim_; }
  T* value_row(index_t r) const noexcept { return values_.get() + r * dim_; }

  /// Rows [first, first + count) as views (count may be 0).
  matrix_view<const T> keys(index_t first, index_t count) const {
    return view(keys_.get(), first, count);
  }
  matrix_view<const T> values(index_t first, index_t count) const {
    return view(values_.get(), first, count);
  }

  /// Writes the rows of src_keys/src_values ([count, dim], any stride) at row `first`.
  void write(index_t first, const matrix_view<const T>& src_keys,
             const matrix_view<const T>& src_values) noexcept {
    RAZORKV_DASSERT(first >= 0 && first + src_keys.rows() <= capacity_);
    copy_rows(src_keys, key_row(first));
    copy_rows(src_values, value_row(first));
  }

  /// A copy with capacity `capacity` (>= rows()).
  head_rows grown(index_t capacity) const {
    head_rows bigger(capacity, dim_);
    bigger.copy_prefix(*this);
    return bigger;
  }

  index_t allocated_bytes() const noexcept {
    return 2 * capacity_ * dim_ * static_cast<index_t>(sizeof(T));
  }

 private:
  struct aligned_delete {
    void operator()(T* p) const noexcept {
      ::operator delete (static_cast<void*>(p), std::align_val_t{64});
    }
  };
  static T* allocate(index_t elements) {
    return static_cast<T*>(
        ::operator new (static_cast<std::size_t>(elements) * sizeof(T), std::align_val_t{64}));
  }
  matrix_view<const T> view(const T* base, index_t first, index_t count) const {
    RAZORKV_DASSERT(first >= 0 && count >= 0 && first + count <= rows_);
    return count == 0 ? matrix_view<const T>(nullptr, 0, dim_)
                      : matrix_view<const T>(base + first * dim_, count, dim_);
  }
  void copy_rows(const matrix_view<const T>& src, T* dst) const noexcept {
    const std::size_t row_bytes = static_cast<std::size_t>(dim_) * sizeof(T);
    if (src.rows() == 0) return;
    if (src.row_stride() == dim_) {
      std::memcpy(dst, src.data(), row_bytes * static_cast<std::size_t>(src.rows()));
      return;
    }
    for (index_t r = 0; r < src.rows(); ++r) std::memcpy(dst + r * dim_, src.row(r), row_bytes);
  }
  void copy_prefix(const head_rows& other) noexcept {
    if (other.rows_ == 0) return;
    copy_rows(other.keys(0, other.rows_), keys_.get());
    copy_rows(other.values(0, other.rows_), values_.get());
    rows_ = other.rows_;
  }

  std::unique_ptr<T, aligned_delete> keys_;    // [capacity, dim]
  std::unique_ptr<T, aligned_delete> values_;  // [capacity, dim]
  index_t rows_ = 0;                           // rows written, from row 0
  index_t capacity_ = 0;
  index_t dim_ = 0;
};

}  // namespace detail

RAZORKV_END_NAMESPACE
