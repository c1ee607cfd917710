// razorkv/compress/column_sums.hpp: the compensation token's arithmetic: column sums of K/V rows
// in double (the kernel of kernels/column_sums.hpp, and a scalar reference beside it), and
// the mean rounded to storage.
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/kernels/column_sums.hpp"
#include "razorkv/kernels/dispatch.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

// This translation unit's column-sum kernel for T: razorkv::kernels' pick for the CPU where the
// build links it (which throws when RAZORKV_KERNEL_ISA names a set it cannot use), else the one
// compiled here. Callers fetch it before they change anything, and then call it freely.
inline namespace RAZORKV_DETAIL_ISA {
template <class T>
column_sums_fn<T> column_sums_kernel() {
#if defined(RAZORKV_SEPARATE_KERNELS) && RAZORKV_SEPARATE_KERNELS
  return dispatched_kernels().of<T>().column_sums;
#else
  return &column_sums<T>;
#endif
}
}  // namespace RAZORKV_DETAIL_ISA

/// sums[0, dim) += the column sums of `rows` ([count, dim], any row stride), in double, by
/// `kernel` (column_sums_kernel). Every column is added in row order, one double addition per
/// element, so the result does not depend on how the rows are split into calls.
template <class T>
void add_rows_to_sums(column_sums_fn<T> kernel, const matrix_view<const T>& rows,
                      double* RAZORKV_RESTRICT sums) noexcept {
  kernel(rows.data(), rows.rows(), rows.row_stride(), rows.cols(), sums);
}
/// The same by this translation unit's kernel (may throw: see column_sums_kernel).
template <class T>
void add_rows_to_sums(const matrix_view<const T>& rows, double* RAZORKV_RESTRICT sums) {
  add_rows_to_sums(column_sums_kernel<T>(), rows, sums);
}

/// out[c] = sums[c] / count, rounded to T (count > 0).
template <class T>
void store_mean(const double* sums, index_t count, index_t dim, T* out) noexcept {
  const double n = static_cast<double>(count);
  for (index_t c = 0; c < dim; ++c) {
    const double mean = sums[c] / n;
    if constexpr (std::is_same_v<T, double>) {
      out[c] = mean;
    } else {
      out[c] = static_cast<T>(static_cast<float>(mean));
    }
  }
}

}  // namespace detail

namespace reference {

/// The oracle for detail::add_rows_to_sums: one element at a time, rows in order.
template <class T>
void add_rows_to_sums(const matrix_view<const T>& rows, double* sums) {
  for (index_t r = 0; r < rows.rows(); ++r) {
    for (index_t c = 0; c < rows.cols(); ++c) sums[c] += detail::to_double(rows(r, c));
  }
}

}  // namespace reference
RAZORKV_END_NAMESPACE
