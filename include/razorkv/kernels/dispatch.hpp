// razorkv/kernels/dispatch.hpp: the kernels of one ISA as a table (decode's, by pass width and
// head dim, compression's column sums and prefill's tile), through which razorkv calls a kernel
// whether it was compiled here or picked at run time.
#pragma once

#include <type_traits>

#include <Eigen/Core>

#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

/// One call of a decode kernel (attend_head, kernels/decode.hpp): kQ query vectors that read the
/// same kv head, the kQ the kernel was compiled for. The optional members are null by default.
template <class T>
struct attend_head_params {
  const kv_span<T>* spans = nullptr;  ///< [num_spans] the head's spans, validated by the caller
  index_t num_spans = 0;
  index_t head_dim = 0;                    ///< read by the kernel that serves every head dim
  const accum_t<T>* queries = nullptr;     ///< [kQ, head_dim] queries, multiplied by the scale
  const index_t* visible = nullptr;        ///< [kQ] entries each query reads, in [1, entries]
  accum_t<T>* out = nullptr;               ///< [kQ, head_dim] the attention output
  accum_t<T>* scratch = nullptr;           ///< [2 * kWidenRows, head_dim] widened rows (see
                                           ///< dtype_kernels::needs_widening_scratch)
  index_t range_begin = 0, range_end = 0;  ///< the entries [begin, end) this call reads
  /// Optional, [kQ] each: when set, out is left unnormalised and the running max and
  /// denominator are stored here, for a merge of the runs a long head was split into.
  accum_t<T>* partial_max = nullptr;
  accum_t<T>* partial_denominator = nullptr;
  /// Optional, [kQ, logits_stride]: when set, query q's logit (scaled score plus log-weight) of
  /// every entry e it reads in the range goes to logits[q * logits_stride + e].
  float* logits = nullptr;
  index_t logits_stride = 0;
};

/// attend_head's signature, the same for every ISA.
template <class T>
using attend_head_fn = void (*)(const attend_head_params<T>&);

// The pass widths (query vectors per kernel call) and head dims the kernels are specialised for;
// dim 0 reads the head dim at run time and serves every other dim.
inline constexpr int kKernelWidths[] = {1, 2, 4, 8};
inline constexpr int kKernelDims[] = {0, 64, 80, 96, 128, 256};
inline constexpr int kNumKernelWidths = 4;
inline constexpr int kNumKernelDims = 6;

/// Index in kKernelWidths of a pass width (1, 2, 4 or 8: the scheduler makes no other).
constexpr int kernel_width_index(index_t width) noexcept {
  for (int i = kNumKernelWidths - 1; i > 0; --i) {
    if (kKernelWidths[i] <= width) return i;
  }
  return 0;
}

/// Index in kKernelDims of the kernel that serves head_dim: its own, or the run-time one.
constexpr int kernel_dim_index(index_t head_dim) noexcept {
  for (int i = 1; i < kNumKernelDims; ++i) {
    if (kKernelDims[i] == head_dim) return i;
  }
  return 0;
}

/// Every attend_head of one storage dtype, [width index][dim index].
template <class T>
struct attend_head_table {
  attend_head_fn<T> kernel[kNumKernelWidths][kNumKernelDims];

  constexpr attend_head_fn<T> find(index_t width, index_t head_dim) const noexcept {
    return kernel[kernel_width_index(width)][kernel_dim_index(head_dim)];
  }
};

/// column_sums' signature (kernels/column_sums.hpp): sums[c] += rows[r][c] for r < count,
/// c < dim, rows `stride` elements apart, in double.
template <class T>
using column_sums_fn = void (*)(const T* rows, index_t count, index_t stride, index_t dim,
                                double* sums) noexcept;

/// prefill_tile's signature (kernels/prefill.hpp): `rows` query vectors of one kv head over its
/// spans, in a scratch of prefill_scratch_elements(dim) elements, the output normalised in `out`.
template <class T>
using prefill_tile_fn = void (*)(const kv_span<T>* spans, index_t num_spans, index_t dim,
                                 const accum_t<T>* queries, index_t rows, const index_t* visible,
                                 accum_t<T>* scratch, accum_t<T>* out) noexcept;

/// The kernels of one storage dtype.
template <class T>
struct dtype_kernels {
  attend_head_table<T> attend_head;  // decode
  column_sums_fn<T> column_sums;     // the compensation token of compression
  prefill_tile_fn<T> prefill_tile;   // prefill attention, a tile of queries at a time
  // Whether attend_head widens its rows into a scratch buffer (half where the ISA has no
  // conversion instruction) rather than reading them where they are: the scheduler then hands
  // each pass a scratch of 2 * kWidenRows rows.
  bool needs_widening_scratch;
};

/// Every kernel compiled for one ISA, and the ISA's name ("avx512", "avx2", "sse2", ...).
struct kernel_set {
  const char* isa;
  dtype_kernels<float> f32;
  dtype_kernels<double> f64;
  dtype_kernels<Eigen::half> f16;
  dtype_kernels<Eigen::bfloat16> bf16;

  template <class T>
  constexpr const dtype_kernels<T>& of() const noexcept {
    if constexpr (std::is_same_v<T, float>)
      return f32;
    else if constexpr (std::is_same_v<T, double>)
      return f64;
    else if constexpr (std::is_same_v<T, Eigen::half>)
      return f16;
    else
      return bf16;
  }
};

// With RAZORKV_SEPARATE_KERNELS (defined by razorkv::kernels for itself and whoever links it),
// the kernels are not compiled where they are called: razorkv::kernels compiles them once per ISA
// the compiler can target (on x86-64: SSE2, AVX2 and AVX-512) and picks the best the CPU runs,
// once, at the first call (src/kernels.cpp). Otherwise they are compiled in every translation
// unit that calls them, for the ISA it is compiled for, as header-only code is.
#if defined(RAZORKV_SEPARATE_KERNELS) && RAZORKV_SEPARATE_KERNELS
/// The kernel set razorkv::kernels picked for this CPU. Throws when RAZORKV_KERNEL_ISA names a
/// set that this build lacks or the CPU cannot run.
const kernel_set& dispatched_kernels();
#endif

}  // namespace detail
RAZORKV_END_NAMESPACE
