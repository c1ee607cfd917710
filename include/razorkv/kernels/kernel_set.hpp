// razorkv/kernels/kernel_set.hpp: every kernel of the ISA this translation unit is compiled for,
// as one table (decode's, prefill's tile, compression's column sums), and the table decode,
// prefill and compression call: razorkv::kernels' pick, or this unit's own.
#pragma once

#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/kernels/column_sums.hpp"
#include "razorkv/kernels/decode.hpp"
#include "razorkv/kernels/dispatch.hpp"
#include "razorkv/kernels/prefill.hpp"
#include "razorkv/kernels/simd.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {
inline namespace RAZORKV_DETAIL_ISA {

// Every attend_head of this translation unit's ISA, as the scheduler finds them.
template <class T, int kQ, std::size_t... kDimIndex>
constexpr void fill_kernel_row(attend_head_fn<T> (&row)[kNumKernelDims],
                               std::index_sequence<kDimIndex...>) noexcept {
  ((row[kDimIndex] = &attend_head<T, kQ, kKernelDims[kDimIndex]>), ...);
}

template <class T>
constexpr attend_head_table<T> make_attend_head_table() noexcept {
  attend_head_table<T> table{};
  const auto dims = std::make_index_sequence<kNumKernelDims>{};
  fill_kernel_row<T, kKernelWidths[0]>(table.kernel[0], dims);
  fill_kernel_row<T, kKernelWidths[1]>(table.kernel[1], dims);
  fill_kernel_row<T, kKernelWidths[2]>(table.kernel[2], dims);
  fill_kernel_row<T, kKernelWidths[3]>(table.kernel[3], dims);
  return table;
}

// Every kernel of this translation unit's ISA for storage dtype T.
template <class T>
constexpr dtype_kernels<T> make_dtype_kernels() noexcept {
  return {make_attend_head_table<T>(), &column_sums<T>, &prefill_tile<T>,
          !std::is_same_v<kernel_row_t<T>, T>};
}

// Every kernel of this translation unit's ISA, as razorkv::kernels holds them
// (src/kernels_isa.cpp). A template, so that a translation unit that does not call it does not
// instantiate every kernel by naming them.
template <class Unused = void>
const kernel_set& compiled_kernels() noexcept {
  static constexpr kernel_set kernels = {
      RAZORKV_DETAIL_ISA_NAME, make_dtype_kernels<float>(), make_dtype_kernels<double>(),
      make_dtype_kernels<Eigen::half>(), make_dtype_kernels<Eigen::bfloat16>()};
  return kernels;
}

/// The kernels for storage dtype T that decode and prefill call in this translation unit:
/// razorkv::kernels' pick where the build links it (RAZORKV_SEPARATE_KERNELS, dispatch.hpp), else
/// T's kernels compiled here. Header-only, a unit compiles the kernels of the dtypes it decodes
/// and no others: 96 kernels for all four, a quarter of them for one (most of a unit's compile
/// time, see scripts/compile_time.sh).
template <class T>
const dtype_kernels<T>& kernels_for() {
#if defined(RAZORKV_SEPARATE_KERNELS) && RAZORKV_SEPARATE_KERNELS
  return dispatched_kernels().of<T>();
#else
  static constexpr dtype_kernels<T> kernels = make_dtype_kernels<T>();
  return kernels;
#endif
}

/// The name of the ISA whose kernels kernels_for() returns.
inline const char* kernels_isa_name() {
#if defined(RAZORKV_SEPARATE_KERNELS) && RAZORKV_SEPARATE_KERNELS
  return dispatched_kernels().isa;
#else
  return RAZORKV_DETAIL_ISA_NAME;
#endif
}

}  // namespace RAZORKV_DETAIL_ISA
}  // namespace detail
RAZORKV_END_NAMESPACE
