// razorkv/kernels/decode.hpp: the decode micro-kernels (scores of a key block, value
// accumulation, row widening, prefetch) and attend_head (the online softmax over one kv head).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"
#include "razorkv/kernels/dequantise.hpp"
#include "razorkv/kernels/dispatch.hpp"
#include "razorkv/kernels/simd.hpp"
#include "razorkv/quant/storage.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {
// The kernels are compiled per ISA (see RAZORKV_DETAIL_ISA in simd.hpp).
inline namespace RAZORKV_DETAIL_ISA {

// Rows of K/V per online-softmax step, counted over a head's entries whatever its spans (so the
// caches need no alignment to it). The kernel reads a block of K with the block of V before it
// (kStepRows): 256 rows (128 KB of float K at dim 128, in L2) per block amortise the accumulator
// rescale and the vectorised exp, and keep the hardware prefetchers streaming
// (docs/benchmarks.md, "The decode kernel's constants").
inline constexpr index_t kBlockRows = 256;
// 16-bit rows are widened to float this many at a time, so the scratch stays in L1.
inline constexpr index_t kWidenRows = 16;

// Split column order (bfloat16 rows only, see kSplitColumns): within each chunk of 2 * kW
// columns, the even-indexed columns come first, then the odd-indexed ones, so that one load of a
// stored chunk gives two vectors (simd_load_bf16_split) without shuffling lanes. The kernels then
// hold the queries and the output in that order; these convert a [rows, dim] row-major block.
template <class Acc>
inline void to_split_columns(const Acc* RAZORKV_RESTRICT in, index_t rows, index_t dim,
                             Acc* RAZORKV_RESTRICT out) noexcept {
  constexpr int kW = simd_lanes<Acc>;
  for (index_t r = 0; r < rows; ++r) {
    for (index_t c = 0; c < dim; c += 2 * kW) {
      for (index_t j = 0; j < kW; ++j) {
        out[r * dim + c + j] = in[r * dim + c + 2 * j];
        out[r * dim + c + kW + j] = in[r * dim + c + 2 * j + 1];
      }
    }
  }
}
template <class Acc>
inline void from_split_columns(Acc* RAZORKV_RESTRICT block, index_t rows, index_t dim) noexcept {
  constexpr int kW = simd_lanes<Acc>;
  Acc chunk[std::size_t{2 * kW}];
  for (index_t r = 0; r < rows; ++r) {
    for (index_t c = 0; c < dim; c += 2 * kW) {
      Acc* columns = block + r * dim + c;
      for (index_t j = 0; j < kW; ++j) {
        chunk[2 * j] = columns[j];
        chunk[2 * j + 1] = columns[kW + j];
      }
      for (index_t j = 0; j < 2 * kW; ++j) columns[j] = chunk[j];
    }
  }
}

// kCount vectors of a stored row's columns from `row` on, as the kernels hold columns: in order,
// or in split order (`row` then starts a chunk of 2 * kW columns, and kCount is even). kReaders
// queries read each vector.
template <class Acc, class S, int kCount, bool kSplit, int kReaders>
inline void load_row_vectors(const S* RAZORKV_RESTRICT row, simd_t<Acc>* vectors) noexcept {
  constexpr int kW = simd_lanes<Acc>;
  if constexpr (kSplit) {
    static_assert(kCount % 2 == 0, "razorkv: split rows load in pairs of vectors");
#if defined(__GNUC__) || defined(__clang__)
    RAZORKV_UNROLL
    for (int p = 0; p < kCount / 2; ++p)
      simd_load_bf16_split(row + 2 * p * kW, vectors[2 * p], vectors[2 * p + 1]);
#endif
  } else {
    RAZORKV_UNROLL
    for (int j = 0; j < kCount; ++j) vectors[j] = simd_load_as<Acc>(row + j * kW);
  }
  // A plain load that the queries of a GQA group share is pinned to a register, so that it is
  // loaded once, not once per query (see simd_in_register): GCC tuned for Zen folds a load into
  // every multiply-add that reads it and then waits on the load ports. Pinning more than these
  // measured slower, from the registers it ties up (docs/benchmarks.md, "The decode kernel's
  // constants").
  if constexpr (kReaders > 1 && std::is_same_v<S, Acc>) {
    RAZORKV_UNROLL
    for (int j = 0; j < kCount; ++j) vectors[j] = simd_in_register<Acc>(vectors[j]);
  }
}

// Asks for the cache lines of [p, p + bytes) to be brought into L1.
inline void prefetch_lines(const char* p, index_t bytes) noexcept {
  for (index_t b = 0; b < bytes; b += 64) {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
    // GCC 12 deletes __builtin_prefetch in prefetch_rows' loop (seen in its assembly); asm stays.
    asm volatile("prefetcht0 %0" : : "m"(*(p + b)));
#elif defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p + b, 0, 3);
#else
    (void)p;
#endif
  }
}

// How the micro-kernels read a block of stored rows (row r's columns from c on), one per kind of
// row, so that one dot product and one value sum serve them all:
//  - typed_rows: rows of S at a row stride, read in place, as load_row_vectors loads them;
//  - quantised_kernel_rows: 8- or 4-bit blocks, each vector widened from its bytes and multiplied
//    by its block's scale in registers (scales: the rows' block scales as floats, row_scales).
template <class Acc, class S, bool kSplit, int kReaders>
struct typed_rows {
  static constexpr int kUnit = kSplit ? 2 : 1;  // vectors loaded together
  const S* RAZORKV_RESTRICT data;
  index_t stride;

  typed_rows from_row(index_t r) const noexcept { return {data + r * stride, stride}; }
  template <int kCount>
  void load(index_t r, index_t c, simd_t<Acc>* vectors) const noexcept {
    load_row_vectors<Acc, S, kCount, kSplit, kReaders>(data + r * stride + c, vectors);
  }
  Acc at(index_t r, index_t c) const noexcept { return to_accum<Acc>(data[r * stride + c]); }
  void prefetch(index_t r, index_t c, index_t count) const noexcept {
    prefetch_lines(reinterpret_cast<const char*>(data + r * stride + c),
                   count * static_cast<index_t>(sizeof(S)));
  }
};

#if defined(__GNUC__) || defined(__clang__)
template <row_format kFormat>
struct quantised_kernel_rows {
  static constexpr int kUnit = 1;
  const std::uint8_t* RAZORKV_RESTRICT data;
  index_t stride;  // bytes
  const float* RAZORKV_RESTRICT scales;
  index_t blocks;  // per row

  quantised_kernel_rows from_row(index_t r) const noexcept {
    return {data + r * stride, stride, scales + r * blocks, blocks};
  }
  template <int kCount>
  void load(index_t r, index_t c, simd_t<float>* vectors) const noexcept {
    constexpr int kW = simd_lanes<float>;
    RAZORKV_UNROLL
    for (int j = 0; j < kCount; ++j) {
      const index_t column = c + j * kW;
      vectors[j] = quantised_vector<kFormat>(
          data + r * stride, column, simd_broadcast(scales[r * blocks + column / kQuantBlock]));
    }
  }
  float at(index_t r, index_t c) const noexcept {  // unused: head_dim is a multiple of kQuantBlock
    return quantised_vector<kFormat>(
        data + r * stride, c - c % simd_lanes<float>,
        simd_broadcast(scales[r * blocks + c / kQuantBlock]))[c % simd_lanes<float>];
  }
  void prefetch(index_t, index_t, index_t) const noexcept {}
};
#endif

// scores[r * kQ + q] = queries[q] . keys[r] for r < kRows, q < kQ (a block's weights are row by
// row, see attend_head). One load of each key vector feeds all kQ queries (the GQA group), which
// is what keeps decode memory-bound; kQ * kRows independent accumulators keep the FMA pipes busy,
// and their horizontal sums land in score order, one store (a vector at GQA 8). Rows read in
// pairs of vectors (Rows::kUnit 2: split bfloat16 rows) come with queries in split column order
// (and dim a multiple of 2 * kW): each lane then adds its products in another, equally fixed,
// order. (Array bounds from the int template parameters are spelled std::size_t{...}: the build's
// -Wsign-conversion flags an int bound, and the braces prove at compile time that it fits.)
template <class Acc, class Rows, int kQ, int kRows, int kDim>
inline void dot_rows(const Acc* RAZORKV_RESTRICT queries, const Rows& keys, index_t runtime_dim,
                     Acc* RAZORKV_RESTRICT scores) noexcept {
  constexpr int kW = simd_lanes<Acc>;
  constexpr int kUnit = Rows::kUnit;  // vectors per step
  const index_t dim = kDim > 0 ? kDim : runtime_dim;
  const index_t vector_end = (dim / kW) * kW;
  simd_t<Acc> acc[std::size_t{kRows}][std::size_t{kQ}];
  RAZORKV_UNROLL
  for (int r = 0; r < kRows; ++r) {
    RAZORKV_UNROLL
    for (int q = 0; q < kQ; ++q) acc[r][q] = simd_zero<Acc>();
  }
  RAZORKV_UNROLL_BY(8)
  for (index_t c = 0; c < vector_end; c += kUnit * kW) {
    simd_t<Acc> key[std::size_t{kRows}][std::size_t{kUnit}];
    RAZORKV_UNROLL
    for (int r = 0; r < kRows; ++r) keys.template load<kUnit>(r, c, key[r]);
    RAZORKV_UNROLL
    for (int q = 0; q < kQ; ++q) {
      RAZORKV_UNROLL
      for (int u = 0; u < kUnit; ++u) {
        simd_t<Acc> query = simd_load(queries + q * dim + c + u * kW);
        // kRows key rows read this query vector. GCC may fold its load into each row's
        // multiply-add instead, and at GQA 8 with AVX-512 (2 rows x 8 queries) that is more loads
        // than the load ports feed; at GQA 4 the pin gained nothing (docs/benchmarks.md, "The
        // decode kernel's constants").
        if constexpr (kQ >= 8 && kRows > 1) query = simd_in_register<Acc>(query);
        RAZORKV_UNROLL
        for (int r = 0; r < kRows; ++r) acc[r][q] += query * key[r][u];
      }
    }
  }
  // The kQ * kRows horizontal sums, folded together (as many shuffles as simd_sum spends on a
  // few of them; the same sums bit for bit), then the columns past the last whole vector.
#if defined(__GNUC__) || defined(__clang__)
  simd_sum_each<Acc, kQ * kRows>(&acc[0][0], scores);
#else
  for (int i = 0; i < kQ * kRows; ++i) scores[i] = simd_sum<Acc>(acc[i / kQ][i % kQ]);
#endif
  for (index_t c = vector_end; c < dim; ++c) {
    for (int r = 0; r < kRows; ++r) {
      for (int q = 0; q < kQ; ++q) scores[r * kQ + q] += queries[q * dim + c] * keys.at(r, c);
    }
  }
}

// Register budget of the target (vector registers), and the largest power of two <= n
// within [1, cap]: used to size the register blocks below so they never spill.
inline constexpr int kVectorRegisters = kVectorBytes == 64 ? 32 : 16;
constexpr int pow2_floor(int n, int cap) {
  int p = 1;
  while (p * 2 <= n && p * 2 <= cap) p *= 2;
  return p;
}

// Key rows per dot_rows call: kQ * kRows accumulators + kRows keys + 1 query in registers,
// capped at 2 rows, which measured faster than 4 (docs/benchmarks.md, "The decode kernel's
// constants").
template <int kQ>
inline constexpr int kDotRows = pow2_floor((kVectorRegisters - 2) / (kQ + 1), 2);

// Value vectors per accumulate step: kQ * kColumns accumulators + kColumns values + 1 weight.
// Capped at 8, a whole head_dim-128 float row with AVX-512, so that MHA reads each value row once
// front to back (docs/benchmarks.md, "The decode kernel's constants").
template <int kQ>
inline constexpr int kValueColumns = pow2_floor((kVectorRegisters - 2) / (kQ + 1), 8);

// out[q][c, c + kCount * kW) += sum_r weights[r * kQ + q] * values[r][same columns] for
// r < rows, q < kQ: each value vector is loaded once for all kQ queries, and kQ x kCount
// accumulators stay in registers across the rows, so each weight is broadcast once per kCount
// vectors. With kAhead > 0, reading row r also asks for the same columns of row r + kAhead, for
// r < rows_ahead (the rows whose row kAhead further on exists).
template <class Acc, class Rows, int kQ, int kCount, index_t kAhead>
inline void accumulate_columns(const Acc* RAZORKV_RESTRICT weights, const Rows& values,
                               index_t rows, index_t rows_ahead, index_t dim, index_t c,
                               Acc* RAZORKV_RESTRICT out) noexcept {
  constexpr int kW = simd_lanes<Acc>;
  simd_t<Acc> acc[std::size_t{kQ}][std::size_t{kCount}];
  RAZORKV_UNROLL
  for (int q = 0; q < kQ; ++q) {
    RAZORKV_UNROLL
    for (int j = 0; j < kCount; ++j) acc[q][j] = simd_load(out + q * dim + c + j * kW);
  }
  for (index_t r = 0; r < rows; ++r) {
    if constexpr (kAhead > 0) {
      if (r < rows_ahead) values.prefetch(r + kAhead, c, kCount * kW);
    }
    simd_t<Acc> v[std::size_t{kCount}];
    values.template load<kCount>(r, c, v);
    RAZORKV_UNROLL
    for (int q = 0; q < kQ; ++q) {
      const simd_t<Acc> w = simd_broadcast(weights[r * kQ + q]);
      RAZORKV_UNROLL
      for (int j = 0; j < kCount; ++j) acc[q][j] += w * v[j];
    }
  }
  RAZORKV_UNROLL
  for (int q = 0; q < kQ; ++q) {
    RAZORKV_UNROLL
    for (int j = 0; j < kCount; ++j) simd_store(out + q * dim + c + j * kW, acc[q][j]);
  }
}

// out[q] += sum_r weights[r * kQ + q] * values[r] for r < rows, q < kQ, in column blocks
// of kValueColumns vectors, then of Rows::kUnit vectors (a pair for split rows, where out
// is in split column order and dim a multiple of 2 * kW), then column by column. Each column's sum
// runs over the rows in order, whatever the blocks. With kAhead > 0 the vector columns of rows
// kAhead further on are prefetched as they go, for the first rows_ahead rows (see
// accumulate_columns).
template <class Acc, class Rows, int kQ, int kDim, index_t kAhead>
inline void accumulate_values(const Acc* RAZORKV_RESTRICT weights, const Rows& values, index_t rows,
                              index_t rows_ahead, index_t runtime_dim,
                              Acc* RAZORKV_RESTRICT out) noexcept {
  constexpr int kW = simd_lanes<Acc>;
  constexpr int kC = kValueColumns<kQ>;
  constexpr int kUnit = Rows::kUnit;
  const index_t dim = kDim > 0 ? kDim : runtime_dim;
  const index_t vector_end = (dim / kW) * kW;
  index_t c = 0;
  for (; c + kC * kW <= vector_end; c += kC * kW) {
    accumulate_columns<Acc, Rows, kQ, kC, kAhead>(weights, values, rows, rows_ahead, dim, c, out);
  }
  // (With split rows, dim and every block are whole pairs of vectors: this steps onto vector_end.)
  for (; c < vector_end; c += kUnit * kW) {
    accumulate_columns<Acc, Rows, kQ, kUnit, kAhead>(weights, values, rows, rows_ahead, dim, c,
                                                     out);
  }
  for (; c < dim; ++c) {
    for (int q = 0; q < kQ; ++q) {
      Acc sum = out[q * dim + c];
      for (index_t r = 0; r < rows; ++r) sum += weights[r * kQ + q] * values.at(r, c);
      out[q * dim + c] = sum;
    }
  }
}

// The element type the kernels read a block's rows as: the stored type itself where a vector
// load widens in registers (float and double need none, bfloat16 is a shift, half has an
// instruction on AVX-512F and F16C), else float rows widened into a scratch buffer. Widening
// in registers saves a store and a reload per element (docs/benchmarks.md, "The decode kernel's
// constants").
template <class T>
using kernel_row_t =
    std::conditional_t<std::is_same_v<T, Eigen::half> && !kHalfInRegisters, float, T>;

// Whether attend_head<T, kQ, kDim> holds columns in split order (see to_split_columns): for
// bfloat16 rows, whose even and odd elements widen from one load with a shift and a mask
// (simd_load_bf16_split), of a head_dim fixed at compile time and a multiple of 2 * kW. The sums
// of the values are the same bit for bit; a score adds its products in another order, which
// every span split and task split shares. GQA 8 gained nothing from it and keeps the order
// (docs/benchmarks.md, "The decode kernel's constants").
template <class T, int kQ, int kDim>
inline constexpr bool kSplitColumns =
#if (defined(__GNUC__) || defined(__clang__)) && defined(__BYTE_ORDER__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    std::is_same_v<T, Eigen::bfloat16> && (kQ < 8) && (kDim > 0) &&
    (kDim % (2 * simd_lanes<float>) == 0);
#else
    false;
#endif

// Rows [first, first + rows) of `view` as kernel rows: in place, or widened into `scratch`
// ([kWidenRows, dim]). Returns the row pointer and sets `stride`.
template <class T>
inline const kernel_row_t<T>* block_rows(const matrix_view<const T>& view, index_t first,
                                         index_t rows, accum_t<T>* scratch,
                                         index_t& stride) noexcept {
  if constexpr (std::is_same_v<T, kernel_row_t<T>>) {
    (void)rows;
    (void)scratch;
    stride = view.row_stride();
    return view.data() + first * view.row_stride();
  } else {
    const index_t dim = view.cols();
    // Row pointers by hand: matrix_view::row carries a debug assertion that a sanitizer build
    // may leave out of line, shared across ISAs (razorkv_kernels_isolated checks it).
    const T* row = view.data() + first * view.row_stride();
    for (index_t r = 0; r < rows; ++r, row += view.row_stride())
      widen_row(row, scratch + r * dim, dim);
    stride = dim;
    return scratch;
  }
}

// Rows of quantised rows as the kernels read them: dequantised into `out`, in split column order
// when kSplit (through `spare`, [rows, dim] too), as attend_head holds the queries then.
template <class Acc, bool kSplit>
inline void dequantise_kernel_rows(const quantised_rows& q, index_t first, index_t rows,
                                   Acc* RAZORKV_RESTRICT out,
                                   Acc* RAZORKV_RESTRICT spare) noexcept {
  if constexpr (kSplit) {
    dequantise_rows(q, first, rows, spare);
    to_split_columns(spare, rows, q.cols, out);
  } else {
    (void)spare;
    dequantise_rows(q, first, rows, out);
  }
}

// How attend_head feeds the memory system, by storage dtype and queries per pass, each constant
// chosen by measurement (docs/benchmarks.md, "The decode kernel's constants").
//
// kStepRows: rows of one stream (a block's keys, the previous block's values) read before
// switching to the other. Interleaving them finely keeps both streams in flight, which helps
// where the arithmetic is lightest (16-bit MHA); elsewhere whole blocks were as fast or faster.
template <class T, int kQ>
inline constexpr index_t kStepRows = sizeof(T) == 2 && kQ == 1 ? kWidenRows : kBlockRows;
// kPrefetchRows: software prefetch look-ahead of the keys, in rows; 0 leaves them to the hardware
// prefetchers. One row ahead for float, and for 16-bit rows widened in registers at GQA 4 and 8;
// MHA's 16-bit keys and rows widened through the scratch stay with the hardware.
template <class T, int kQ>
inline constexpr index_t kPrefetchRows =  // one row ahead, or none
    static_cast<index_t>(sizeof(T) >= 4 || (kQ >= 4 && std::is_same_v<kernel_row_t<T>, T>));
// kValuePrefetch: when the value rows are prefetched, so that they arrive during arithmetic rather
// than stall it. Scoring a key row can prefetch its value row (read one block later), which pays
// at 16-bit GQA 4; GQA 8 prefetches each value row kValueAheadRows rows ahead as it sums the
// values instead, which spreads the fetches over both passes (its scores fetch both streams
// otherwise); float GQA 4 and MHA prefetch no values.
enum class value_prefetch { none, with_keys, with_values };
template <class T, int kQ>
inline constexpr value_prefetch kValuePrefetch = kPrefetchRows<T, kQ> == 0 ? value_prefetch::none
                                                 : kQ >= 8 ? value_prefetch::with_values
                                                 : kQ >= 4 && sizeof(T) == 2
                                                     ? value_prefetch::with_keys
                                                     : value_prefetch::none;
inline constexpr index_t kValueAheadRows = 32;

// kValueSweepRows: rows per accumulate_values call, each block of value columns summed down all of
// them before the next block. With 32-byte vectors a GQA 4 block is 2 vectors (4 x 2 accumulators
// fill the 16 registers): 32 bytes of a 16-bit row, half a cache line, so each sweep reads a line
// of every row and the next sweep the same lines again; 8-row sweeps measured faster there, and
// the other shapes keep 16 (docs/benchmarks.md, "The decode kernel's constants"). (Half rows
// widened through the scratch are summed as they are widened, kWidenRows at a time.)
template <class T, int kQ>
inline constexpr index_t kValueSweepRows = std::is_same_v<kernel_row_t<T>, T> &&
                                                   sizeof(T) == 2 && kVectorBytes == 32 && kQ == 4
                                               ? 8
                                               : kWidenRows;

// Asks for rows [first, first + count) of `view` (those that exist) to be brought into L1.
template <class T>
inline void prefetch_rows(const matrix_view<const T>& view, index_t first, index_t count) noexcept {
  const index_t last = min_of(first + count, view.rows());
  const index_t row_bytes = view.cols() * static_cast<index_t>(sizeof(T));
  for (index_t r = first; r < last; ++r)
    prefetch_lines(reinterpret_cast<const char*>(view.data() + r * view.row_stride()), row_bytes);
}

// A block's weights are row by row, w[r * kQ + q] for r < kBlockRows and q < kQ, so that each
// vector of them holds a fixed pattern of queries: lane l of the block's vector j belongs to query
// (j * kW + l) % kQ, a pattern that repeats every kPatternVectors vectors.
template <class Acc, int kQ>
inline constexpr int kPatternVectors = kQ > simd_lanes<Acc> ? kQ / simd_lanes<Acc> : 1;

// largest[q] = the largest of query q's weights in the block, for q < kQ.
template <class Acc, int kQ>
inline void block_max_per_query(const Acc* RAZORKV_RESTRICT w,
                                Acc* RAZORKV_RESTRICT largest) noexcept {
  constexpr int kW = simd_lanes<Acc>;
  constexpr int kP = kPatternVectors<Acc, kQ>;
  static_assert(kBlockRows * kQ % (kP * kW) == 0, "razorkv: a block is whole patterns");
  simd_t<Acc> lanes[std::size_t{kP}];
  RAZORKV_UNROLL
  for (int p = 0; p < kP; ++p) lanes[p] = simd_load(w + p * kW);
  for (index_t i = kP * kW; i < kBlockRows * kQ; i += kP * kW) {
    RAZORKV_UNROLL
    for (int p = 0; p < kP; ++p) lanes[p] = simd_max<Acc>(lanes[p], simd_load(w + i + p * kW));
  }
  for (int q = 0; q < kQ; ++q) largest[q] = -std::numeric_limits<Acc>::infinity();
  for (int p = 0; p < kP; ++p) {
    for (int l = 0; l < kW; ++l) {
      Acc& m = largest[(p * kW + l) % kQ];
      m = lanes[p][l] > m ? lanes[p][l] : m;
    }
  }
}

// w[r * kQ + q] = exp(w[r * kQ + q] - shift[q]) over the block; sum[q] = the sum of query q's.
template <class Acc, int kQ>
inline void exp_block(Acc* RAZORKV_RESTRICT w, const Acc* RAZORKV_RESTRICT shift,
                      Acc* RAZORKV_RESTRICT sum) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  if constexpr (std::is_same_v<Acc, float>) {
    constexpr int kW = simd_lanes<float>;
    constexpr int kP = kPatternVectors<float, kQ>;
    simd_t<float> shifts[std::size_t{kP}], sums[std::size_t{kP}];
    RAZORKV_UNROLL
    for (int p = 0; p < kP; ++p) {
      for (int l = 0; l < kW; ++l) shifts[p][l] = shift[(p * kW + l) % kQ];
      sums[p] = simd_zero<float>();
    }
    for (index_t i = 0; i < kBlockRows * kQ; i += kP * kW) {
      RAZORKV_UNROLL
      for (int p = 0; p < kP; ++p) {
        const simd_t<float> e = simd_exp(simd_load(w + i + p * kW) - shifts[p]);
        simd_store(w + i + p * kW, e);
        sums[p] += e;
      }
    }
    for (int q = 0; q < kQ; ++q) sum[q] = 0.0f;
    for (int p = 0; p < kP; ++p) {
      for (int l = 0; l < kW; ++l) sum[(p * kW + l) % kQ] += sums[p][l];
    }
    return;
  }
#endif
  // double (and compilers without vector extensions): the C library's exp.
  for (int q = 0; q < kQ; ++q) sum[q] = Acc(0);
  for (index_t r = 0; r < kBlockRows; ++r) {
    for (int q = 0; q < kQ; ++q) {
      Acc& weight = w[r * kQ + q];
      weight = static_cast<Acc>(std::exp(weight - shift[q]));
      sum[q] += weight;
    }
  }
}

/// The decode kernel for kQ query vectors that read the same kv head (attend_head_params says
/// what each member holds). Query q reads the first visible[q] entries of the head (the
/// concatenation of its spans) within [range_begin, range_end), and its normalised attention
/// output goes to out (unnormalised, with its softmax state, when partial_max is set).
template <class T, int kQ, int kDim>
void attend_head(const attend_head_params<T>& call) {
  const kv_span<T>* spans = call.spans;
  const index_t num_spans = call.num_spans;
  const accum_t<T>* RAZORKV_RESTRICT queries = call.queries;
  const index_t* visible = call.visible;
  accum_t<T>* RAZORKV_RESTRICT out = call.out;
  accum_t<T>* RAZORKV_RESTRICT scratch = call.scratch;
  const index_t range_begin = call.range_begin, range_end = call.range_end;
  accum_t<T>* maybe_partial_max = call.partial_max;
  accum_t<T>* partial_denominator = call.partial_denominator;
  float* RAZORKV_RESTRICT maybe_logits = call.logits;
  const index_t logits_stride = call.logits_stride;
  const index_t runtime_dim = call.head_dim;
  using Acc = accum_t<T>;
  constexpr Acc kNegInf = -std::numeric_limits<Acc>::infinity();
  const index_t dim = kDim > 0 ? kDim : runtime_dim;

  Acc running_max[std::size_t{kQ}];
  Acc denominator[std::size_t{kQ}];
  index_t max_visible = 0;
  for (int q = 0; q < kQ; ++q) {
    running_max[q] = kNegInf;
    denominator[q] = Acc(0);
    max_visible = max_of(max_visible, visible[q]);
  }
  max_visible = min_of(max_visible, range_end);
  for (index_t i = 0; i < kQ * dim; ++i) out[i] = Acc(0);

  // In split column order, the kernels read the queries from a copy and keep `out` in that order
  // until the end.
  constexpr bool kSplit = kSplitColumns<T, kQ, kDim>;
  // Quantised rows are read where they are stored, widened and scaled in registers, where the
  // kernels hold float columns in order; else (double accumulators, split columns) they are
  // dequantised into the scratch first.
  constexpr bool kFusedQuantised =
#if defined(__GNUC__) || defined(__clang__)
      std::is_same_v<Acc, float> && !kSplit;
#else
      false;
#endif
  alignas(64) Acc split_queries[std::size_t{kSplit ? kQ * kDim : 1}];
  const Acc* kernel_queries = queries;
  if constexpr (kSplit) {
    to_split_columns(queries, kQ, dim, split_queries);
    kernel_queries = split_queries;
  }

  // Two blocks' weights: the scores of the block being read, the softmax weights of the one
  // before it, whose values are read alongside (see below). Each is [kBlockRows, kQ], row by row
  // (w[r * kQ + q]): a key row's kQ scores leave dot_rows' horizontal sums as one store, and a
  // value row's kQ weights share a line, where query by query they were a store per query and
  // row (docs/benchmarks.md, "The decode kernel's constants").
  alignas(64) Acc weights[2][std::size_t{kBlockRows * kQ}];
  Acc* block_weights = weights[0];
  Acc* previous_weights = weights[1];
  Acc* key_scratch = scratch;
  Acc* value_scratch = scratch == nullptr ? nullptr : scratch + kWidenRows * dim;

  // The range's entries are read in blocks of kBlockRows counted from range_begin across the
  // spans' boundaries, so that a block may gather rows of several spans: each row's score and
  // each column's row-ordered value sum do not depend on where a span ends, and so a head split
  // into spans anywhere decodes bit for bit as the one contiguous head.
  index_t total_entries = 0;
  for (index_t s = 0; s < num_spans; ++s) total_entries += spans[s].length();
  const index_t end = min_of(range_end, total_entries);

  // A walk over entries [entry, end) of one block (whose first entry is block_first), in pieces
  // of at most kStepRows rows of one span; `span` holds `entry`, and span_first is its first entry.
  struct cursor {
    index_t span, span_first, entry, end, block_first;
  };
  // Calls f(span, first row in the span, rows, first row in the block) for the cursor's next
  // piece and moves past it. The cursor must not be done.
  const auto step = [&](cursor& c, const auto& f) {
    while (c.span_first + spans[c.span].length() <= c.entry) {  // also skips empty spans
      c.span_first += spans[c.span].length();
      ++c.span;
    }
    const kv_span<T>& span = spans[c.span];
    const index_t offset = c.entry - c.span_first;
    const index_t rows = min_of(kStepRows<T, kQ>, min_of(c.end - c.entry, span.length() - offset));
    f(span, offset, rows, c.entry - c.block_first);
    c.entry += rows;
  };
  // The scores of a piece's rows, plus its span's log-weight, into block_weights at row `at`,
  // widening at most kWidenRows rows at a time.
  const auto score_piece = [&](const kv_span<T>& span, index_t first, index_t count, index_t at) {
    constexpr int kRows = kDotRows<kQ>;
    for (index_t sub = 0; sub < count; sub += kWidenRows) {
      const index_t sub_rows = min_of(kWidenRows, count - sub);
      Acc* scores = block_weights + (at + sub) * kQ;
      // The scores of sub_rows rows read through `keys` (see typed_rows); prefetch(r) may ask
      // for rows ahead of row r.
      const auto score_rows = [&](const auto& keys, const auto& prefetch) {
        using Rows = std::decay_t<decltype(keys)>;
        index_t r = 0;
        for (; r + kRows <= sub_rows; r += kRows) {
          prefetch(r);
          dot_rows<Acc, Rows, kQ, kRows, kDim>(kernel_queries, keys.from_row(r), dim,
                                               scores + r * kQ);
        }
        for (; r < sub_rows; ++r) {
          dot_rows<Acc, Rows, kQ, 1, kDim>(kernel_queries, keys.from_row(r), dim, scores + r * kQ);
        }
      };
      const auto no_prefetch = [](index_t) {};
      if (span.keys.is_quantised()) {
        const quantised_rows& q = span.keys.quantised();
        if constexpr (kFusedQuantised) {
          // The scratch holds the rows' scales; the integers are read where they are stored.
          row_scales(q, first + sub, sub_rows, key_scratch);
          const std::uint8_t* rows = q.data + (first + sub) * q.stride;
          const index_t blocks = dim / kQuantBlock;
          if (q.format == row_format::kQ8) {
            score_rows(quantised_kernel_rows<row_format::kQ8>{rows, q.stride, key_scratch, blocks},
                       no_prefetch);
          } else {
            score_rows(quantised_kernel_rows<row_format::kQ4>{rows, q.stride, key_scratch, blocks},
                       no_prefetch);
          }
        } else {
          // Dequantised rows are Acc in the scratch (in split order with the queries), read as
          // they lie; the value scratch is free while a piece of keys is scored.
          dequantise_kernel_rows<Acc, kSplit>(q, first + sub, sub_rows, key_scratch, value_scratch);
          score_rows(typed_rows<Acc, Acc, false, kQ>{key_scratch, dim}, no_prefetch);
        }
        continue;
      }
      const matrix_view<const T>& typed_keys = span.keys.typed();
      index_t key_stride = 0;
      const kernel_row_t<T>* keys =
          block_rows(typed_keys, first + sub, sub_rows, key_scratch, key_stride);
      score_rows(typed_rows<Acc, kernel_row_t<T>, kSplit, kQ>{keys, key_stride}, [&](index_t r) {
        constexpr index_t kAhead = kPrefetchRows<T, kQ>;
        if constexpr (kAhead > 0) prefetch_rows(typed_keys, first + sub + r + kAhead, kRows);
        if constexpr (kValuePrefetch<T, kQ> == value_prefetch::with_keys) {
          if (!span.values.is_quantised())
            prefetch_rows(span.values.typed(), first + sub + r + kAhead, kRows);
        }
      });
    }
    // Skipped for a dense span's weight 0, which would change no bit.
    const Acc log_weight = static_cast<Acc>(span.log_weight);
    if (log_weight != Acc(0)) {
      for (index_t i = at * kQ; i < (at + count) * kQ; ++i) block_weights[i] += log_weight;
    }
  };
  // out += the piece's values weighted by previous_weights from row `at`.
  const auto accumulate_piece = [&](const kv_span<T>& span, index_t first, index_t count,
                                    index_t at) {
    constexpr index_t kSweepRows = kValueSweepRows<T, kQ>;
    constexpr index_t kAhead =
        kValuePrefetch<T, kQ> == value_prefetch::with_values ? kValueAheadRows : 0;
    static_assert(kAhead == 0 || std::is_same_v<kernel_row_t<T>, T>,
                  "razorkv: prefetched rows are read where they are stored");
    if (span.values.is_quantised()) {
      const quantised_rows& q = span.values.quantised();
      for (index_t sub = 0; sub < count; sub += kWidenRows) {
        const index_t sub_rows = min_of(kWidenRows, count - sub);
        const Acc* weights = previous_weights + (at + sub) * kQ;
        if constexpr (kFusedQuantised) {
          row_scales(q, first + sub, sub_rows, value_scratch);
          const std::uint8_t* rows = q.data + (first + sub) * q.stride;
          const index_t blocks = dim / kQuantBlock;
          if (q.format == row_format::kQ8) {
            accumulate_values<Acc, quantised_kernel_rows<row_format::kQ8>, kQ, kDim, 0>(
                weights, {rows, q.stride, value_scratch, blocks}, sub_rows, 0, dim, out);
          } else {
            accumulate_values<Acc, quantised_kernel_rows<row_format::kQ4>, kQ, kDim, 0>(
                weights, {rows, q.stride, value_scratch, blocks}, sub_rows, 0, dim, out);
          }
        } else {
          dequantise_kernel_rows<Acc, kSplit>(q, first + sub, sub_rows, value_scratch, key_scratch);
          accumulate_values<Acc, typed_rows<Acc, Acc, false, kQ>, kQ, kDim, 0>(
              weights, {value_scratch, dim}, sub_rows, 0, dim, out);
        }
      }
      return;
    }
    const matrix_view<const T>& typed_values = span.values.typed();
    for (index_t sub = 0; sub < count; sub += kSweepRows) {
      const index_t sub_rows = min_of(kSweepRows, count - sub);
      index_t value_stride = 0;
      const kernel_row_t<T>* values =
          block_rows(typed_values, first + sub, sub_rows, value_scratch, value_stride);
      // The rows of this sweep whose row kAhead further on is in the span.
      const index_t rows_ahead =
          kAhead > 0
              ? max_of<index_t>(0, min_of(sub_rows, typed_values.rows() - (first + sub) - kAhead))
              : 0;
      accumulate_values<Acc, typed_rows<Acc, kernel_row_t<T>, kSplit, kQ>, kQ, kDim, kAhead>(
          previous_weights + (at + sub) * kQ, {values, value_stride}, sub_rows, rows_ahead, dim,
          out);
    }
  };

  // A block's values are read with the next block's keys, the two streams alternating every
  // kStepRows rows, so that the memory system has the values to fetch while the keys are scored.
  // The arithmetic is that of reading each block's keys, then its values: a block's weights are
  // final before its values are read, and its values are all in `out` before the next block's
  // softmax rescales it.
  cursor values_to_read{0, 0, 0, 0, 0};  // the previous block's values (none at first)
  index_t block_span = 0, block_span_first = 0;
  for (index_t block_entry = range_begin; block_entry < max_visible; block_entry += kBlockRows) {
    const index_t rows = min_of(kBlockRows, end - block_entry);
    cursor keys_to_read{block_span, block_span_first, block_entry, block_entry + rows, block_entry};
    while (keys_to_read.entry < keys_to_read.end || values_to_read.entry < values_to_read.end) {
      if (keys_to_read.entry < keys_to_read.end) step(keys_to_read, score_piece);
      if (values_to_read.entry < values_to_read.end) step(values_to_read, accumulate_piece);
    }

    // Entries each query may read in this block; the rest (padding past `rows`, and entries
    // newer than the query under the causal mask) get -inf, whose exp is exactly 0.
    index_t readable[std::size_t{kQ}];
    bool any_weight = false;
    for (int q = 0; q < kQ; ++q) {
      readable[q] = max_of<index_t>(0, min_of(min_of(visible[q], range_end) - block_entry, rows));
      for (index_t r = readable[q]; r < kBlockRows; ++r) block_weights[r * kQ + q] = kNegInf;
      any_weight = any_weight || readable[q] > 0;
    }
    Acc block_max[std::size_t{kQ}], shift[std::size_t{kQ}], block_sum[std::size_t{kQ}];
    block_max_per_query<Acc, kQ>(block_weights, block_max);
    for (int q = 0; q < kQ; ++q) {
      // A query that reads none of the block keeps its state; any finite shift turns its -inf
      // weights into 0.
      shift[q] = Acc(0);
      if (readable[q] == 0) continue;
      if (maybe_logits != nullptr) {
        float* logits = maybe_logits + q * logits_stride + block_entry;
        for (index_t r = 0; r < readable[q]; ++r)
          logits[r] = static_cast<float>(block_weights[r * kQ + q]);
      }
      if (block_max[q] > running_max[q]) {
        // exp(-inf) == 0 clears the (still empty) accumulators on the first block.
        const Acc rescale = std::exp(running_max[q] - block_max[q]);
        if (rescale != Acc(1)) {
          denominator[q] *= rescale;
          for (index_t c = 0; c < dim; ++c) out[q * dim + c] *= rescale;
        }
        running_max[q] = block_max[q];
      }
      shift[q] = running_max[q];
    }
    exp_block<Acc, kQ>(block_weights, shift, block_sum);
    for (int q = 0; q < kQ; ++q) {
      if (readable[q] > 0) denominator[q] += block_sum[q];
    }
    // This block's values are read with the next block's keys (none when no query reads it).
    values_to_read = cursor{block_span, block_span_first, block_entry,
                            any_weight ? block_entry + rows : block_entry, block_entry};
    block_span = keys_to_read.span;
    block_span_first = keys_to_read.span_first;
    std::swap(block_weights, previous_weights);
  }
  while (values_to_read.entry < values_to_read.end) step(values_to_read, accumulate_piece);
  if constexpr (kSplit) from_split_columns(out, kQ, dim);

  if (maybe_partial_max != nullptr) {
    for (int q = 0; q < kQ; ++q) {
      maybe_partial_max[q] = running_max[q];
      partial_denominator[q] = denominator[q];
    }
    return;
  }
  for (int q = 0; q < kQ; ++q) {
    RAZORKV_DASSERT(denominator[q] > Acc(0) || std::isnan(denominator[q]));
    const Acc inverse = Acc(1) / denominator[q];
    for (index_t c = 0; c < dim; ++c) out[q * dim + c] *= inverse;
  }
}

}  // namespace RAZORKV_DETAIL_ISA
}  // namespace detail
RAZORKV_END_NAMESPACE
