// razorkv/kernels/column_sums.hpp: the compensation token's kernel, column sums of K/V rows
// in double with the rows widened in registers, compiled per ISA like the decode kernels.
#pragma once

#include <cstddef>

#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/kernels/simd.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {
// Compiled per ISA (see RAZORKV_DETAIL_ISA in simd.hpp).
inline namespace RAZORKV_DETAIL_ISA {

// Rows per block for the scratch path (half without in-register widening): blocks of
// kWidenRowsForSum x kSumColumns are widened into a float scratch (16 KB), so any head_dim works
// with a stack buffer.
inline constexpr index_t kSumColumns = 256;
inline constexpr index_t kWidenRowsForSum = 16;

// Double accumulators per column tile: a whole head_dim-128 row with AVX-512's 32 registers;
// 8 with 16 registers. Narrower tiles (halving) take the rest of a row.
#if defined(__AVX512F__)
inline constexpr int kSumTileVectors = 16;
#else
inline constexpr int kSumTileVectors = 8;
#endif
// Rows are summed in blocks of about this many bytes, which stay in L1 while each column tile
// passes over them.
inline constexpr index_t kSumBlockBytes = 16384;

// sums[column, column + kVectors vectors) += those columns of `count` rows, in row order.
template <int kVectors, class S>
inline void add_tile(const S* RAZORKV_RESTRICT rows, index_t count, index_t stride, index_t column,
                     double* RAZORKV_RESTRICT sums) noexcept {
  constexpr int kLanes = simd_lanes<double>;
  simd_t<double> acc[std::size_t{kVectors}];
  RAZORKV_UNROLL
  for (int j = 0; j < kVectors; ++j) acc[j] = simd_load(sums + column + j * kLanes);
  const S* row = rows + column;
  for (index_t r = 0; r < count; ++r, row += stride) {
    RAZORKV_UNROLL
    for (int j = 0; j < kVectors; ++j) acc[j] += simd_load_as_double(row + j * kLanes);
  }
  RAZORKV_UNROLL
  for (int j = 0; j < kVectors; ++j) simd_store(sums + column + j * kLanes, acc[j]);
}

// add_tile over the columns from `column` on, in tiles of kVectors vectors and then narrower
// ones; returns the first column left (fewer than one vector's lanes remain).
template <int kVectors, class S>
inline index_t add_tiles(const S* RAZORKV_RESTRICT rows, index_t count, index_t stride,
                         index_t column, index_t dim, double* RAZORKV_RESTRICT sums) noexcept {
  constexpr index_t kColumns = index_t{kVectors} * simd_lanes<double>;
  for (; column + kColumns <= dim; column += kColumns)
    add_tile<kVectors>(rows, count, stride, column, sums);
  if constexpr (kVectors > 1) {
    return add_tiles<kVectors / 2>(rows, count, stride, column, dim, sums);
  } else {
    return column;
  }
}

// sums[c] += rows[r][c] for r < count, c < dim, rows `stride` elements apart. Every column is
// added in row order in double, one addition per element, so the result does not depend on how
// the rows are split into calls: folding tokens one at a time gives the same bits as summing
// them at once. The elements widen to double in registers (simd_load_as_double).
template <class S>
inline void add_rows(const S* RAZORKV_RESTRICT rows, index_t count, index_t stride, index_t dim,
                     double* RAZORKV_RESTRICT sums) noexcept {
  static_assert(kWidensToDoubleInRegisters<S>, "razorkv: add_rows widens S in registers");
  const index_t row_bytes = dim * static_cast<index_t>(sizeof(S));
  const index_t block = max_of<index_t>(4, kSumBlockBytes / max_of<index_t>(row_bytes, 1));
  for (index_t r0 = 0; r0 < count; r0 += block) {
    const S* first = rows + r0 * stride;
    const index_t n = min_of(block, count - r0);
    index_t c = 0;
#if defined(__GNUC__) || defined(__clang__)
    c = add_tiles<kSumTileVectors>(first, n, stride, 0, dim, sums);
#endif
    for (; c < dim; ++c) {
      double acc = sums[c];
      for (index_t r = 0; r < n; ++r) acc += to_accum<double>(first[r * stride + c]);
      sums[c] = acc;
    }
  }
}

/// sums[c] += rows[r][c] for r < count, c < dim, rows `stride` elements apart, in double (the
/// kernel razorkv's tables hold for every storage dtype; column_sums_fn).
template <class T>
void column_sums(const T* RAZORKV_RESTRICT rows, index_t count, index_t stride, index_t dim,
                 double* RAZORKV_RESTRICT sums) noexcept {
  if (count <= 0) return;
  if constexpr (kWidensToDoubleInRegisters<T>) {
    add_rows(rows, count, stride, dim, sums);
  } else {
    // Half rows without F16C in the compiled ISA: widened to float (with F16C where the CPU has
    // it, checked at run time) in blocks, then summed.
    alignas(64) float scratch[kWidenRowsForSum * kSumColumns];
    for (index_t c0 = 0; c0 < dim; c0 += kSumColumns) {
      const index_t columns = min_of(kSumColumns, dim - c0);
      for (index_t r0 = 0; r0 < count; r0 += kWidenRowsForSum) {
        const index_t block = min_of(kWidenRowsForSum, count - r0);
        for (index_t r = 0; r < block; ++r)
          widen_row(rows + (r0 + r) * stride + c0, scratch + r * kSumColumns, columns);
        add_rows(scratch, block, kSumColumns, columns, sums + c0);
      }
    }
  }
}

}  // namespace RAZORKV_DETAIL_ISA
}  // namespace detail
RAZORKV_END_NAMESPACE
