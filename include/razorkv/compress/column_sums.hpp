// razorkv/compress/column_sums.hpp: the compensation token's arithmetic: column sums of K/V rows
// in double (vectorised, and a scalar reference beside it), and the mean rounded to storage.
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/simd.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

// Rows per block, and columns per pass: 16-bit rows are widened into a float scratch of
// kWidenRowsForSum x kSumColumns (16 KB), so any head_dim works with a stack buffer.
inline constexpr index_t kSumColumns = 256;
inline constexpr index_t kWidenRowsForSum = 16;

// sums[c] += rows[r][c] for r < count, c < dim, from float or double rows with `stride` between
// rows. Every column is added in row order in double, one addition per element, so the result
// does not depend on how the rows are split into calls: folding tokens one at a time gives the
// same bits as summing them at once.
template <class R>
inline void add_rows(const R* RAZORKV_RESTRICT rows, index_t count, index_t stride, index_t dim,
                     double* RAZORKV_RESTRICT sums) noexcept {
  static_assert(std::is_same_v<R, float> || std::is_same_v<R, double>,
                "razorkv: add_rows reads float or double");
  index_t c = 0;
#if defined(__GNUC__) || defined(__clang__)
  constexpr int kLanes = simd_lanes<double>;
  typedef R narrow_t __attribute__((vector_size(kLanes * sizeof(R))));
  const auto widened = [&](index_t r, index_t column) {
    narrow_t x;
    std::memcpy(&x, rows + r * stride + column, sizeof(x));
    return __builtin_convertvector(x, simd_t<double>);
  };
  // Four column vectors at a time: four independent addition chains hide the add latency
  // (one chain runs at a quarter of the adder's rate); each column still sums in row order.
  for (; c + 4 * kLanes <= dim; c += 4 * kLanes) {
    simd_t<double> acc[4];
    for (int j = 0; j < 4; ++j) acc[j] = simd_load(sums + c + j * kLanes);
    for (index_t r = 0; r < count; ++r) {
      for (int j = 0; j < 4; ++j) acc[j] += widened(r, c + j * kLanes);
    }
    for (int j = 0; j < 4; ++j) simd_store(sums + c + j * kLanes, acc[j]);
  }
  for (; c + kLanes <= dim; c += kLanes) {
    simd_t<double> acc = simd_load(sums + c);
    for (index_t r = 0; r < count; ++r) acc += widened(r, c);
    simd_store(sums + c, acc);
  }
#endif
  for (; c < dim; ++c) {
    double acc = sums[c];
    for (index_t r = 0; r < count; ++r) acc += static_cast<double>(rows[r * stride + c]);
    sums[c] = acc;
  }
}

/// sums[0, dim) += the column sums of `rows` ([count, dim], any row stride), in double.
template <class T>
void add_rows_to_sums(const matrix_view<const T>& rows, double* RAZORKV_RESTRICT sums) noexcept {
  const index_t count = rows.rows(), dim = rows.cols();
  if (count == 0) return;
  // Blocks of rows, so that the column passes of a block hit L1: one column pass over all
  // rows at once would stream the whole span from memory once per vector of columns.
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    for (index_t r0 = 0; r0 < count; r0 += kWidenRowsForSum) {
      add_rows(rows.row(r0), std::min(kWidenRowsForSum, count - r0), rows.row_stride(), dim, sums);
    }
  } else {
    alignas(64) float scratch[kWidenRowsForSum * kSumColumns];
    for (index_t c0 = 0; c0 < dim; c0 += kSumColumns) {
      const index_t columns = std::min(kSumColumns, dim - c0);
      for (index_t r0 = 0; r0 < count; r0 += kWidenRowsForSum) {
        const index_t block = std::min(kWidenRowsForSum, count - r0);
        for (index_t r = 0; r < block; ++r)
          widen_row(rows.row(r0 + r) + c0, scratch + r * kSumColumns, columns);
        add_rows(scratch, block, kSumColumns, columns, sums + c0);
      }
    }
  }
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
