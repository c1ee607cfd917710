// razorkv/kernels/prefill.hpp: the prefill attention tile: a block of query vectors of one
// kv head against that head's spans, as register-tiled matrix products with an online softmax
// between, compiled per ISA like the decode kernels (so razorkv::kernels can pick it at run time).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>

#include <Eigen/Core>

#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"
#include "razorkv/kernels/dequantise.hpp"
#include "razorkv/kernels/simd.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

// Query vectors per tile and entries per block: the same for every ISA, so that the caller sizes
// a tile's scratch without knowing which kernel runs it. A block's working set at head_dim 128 in
// float (its keys read in place, the values packed: 128 KB; the scores: 80 KB; the tile's
// queries and output: 64 KB) stays in a 512 KB L2.
inline constexpr index_t kPrefillQueryRows = 64;
inline constexpr index_t kPrefillKeyRows = 256;
// Bounds on every ISA's register tile (prefill_tiling below), for the same reason.
inline constexpr index_t kPrefillMaxTileRows = 16;
inline constexpr index_t kPrefillMaxPanel = 64;
// Columns of the transposed score block: a tile's queries and the rows a register tile may run
// past its last one.
inline constexpr index_t kPrefillScoreStride = kPrefillQueryRows + kPrefillMaxTileRows;

/// Elements of accum_t<T> that prefill_tile's scratch holds for head_dim `dim`, whatever ISA's
/// kernel runs the tile.
constexpr index_t prefill_scratch_elements(index_t dim) noexcept {
  const index_t padded_dim = dim + kPrefillMaxPanel;
  return kPrefillQueryRows * dim                                          // queries, in panels
         + kPrefillKeyRows * dim                                          // keys, widened
         + kPrefillKeyRows * padded_dim                                   // values, in panels
         + (kPrefillKeyRows + kPrefillMaxTileRows) * kPrefillScoreStride  // scores, transposed
         + (kPrefillQueryRows + kPrefillMaxTileRows) * padded_dim         // the output
         + 3 * kPrefillScoreStride;  // running max, denominator, entries readable
}

// Compiled per ISA (see RAZORKV_DETAIL_ISA in simd.hpp).
inline namespace RAZORKV_DETAIL_ISA {

// The register tile of both products: kRows rows of the operand read one element at a time
// (broadcast) against kVectors vectors of the operand packed in panels of kPanel columns, in
// kRows * kVectors accumulators. With 16 vector registers 6 x 2 leaves one for the broadcast and
// two for the panel's vectors; with 32 (AVX-512, NEON) 12 x 2 does the same.
template <class Acc>
struct prefill_tiling {
  static constexpr int kW = simd_lanes<Acc>;
  static constexpr std::size_t kVectors = 2;
#if defined(__AVX512F__) || defined(__aarch64__)
  static constexpr std::size_t kRows = 12;
#else
  static constexpr std::size_t kRows = 6;
#endif
  static constexpr index_t kPanel = static_cast<index_t>(kVectors) * kW;
  static_assert(kPrefillQueryRows % kPanel == 0 && kPanel <= kPrefillMaxPanel &&
                    static_cast<index_t>(kRows) <= kPrefillMaxTileRows,
                "razorkv: the prefill tiling must fit the scratch sized for every ISA");
};

// acc[r][v] += sum over k < depth of a[r][k * a_step] * panel[k * kPanel + v * kW + lane]: one
// register tile of a product whose right-hand operand is packed in a panel, k-major.
template <class Acc, std::size_t kRows, std::size_t kVectors>
inline void multiply_tile(const Acc* const (&a)[kRows], index_t a_step,
                          const Acc* RAZORKV_RESTRICT panel, index_t depth,
                          simd_t<Acc> (&acc)[kRows][kVectors]) noexcept {
  constexpr int kW = simd_lanes<Acc>;
  constexpr index_t kPanel = static_cast<index_t>(kVectors) * kW;
  for (index_t k = 0; k < depth; ++k) {
    simd_t<Acc> column[kVectors];
    RAZORKV_UNROLL
    for (std::size_t v = 0; v < kVectors; ++v)
      column[v] =
          simd_in_register<Acc>(simd_load(panel + k * kPanel + static_cast<index_t>(v) * kW));
    RAZORKV_UNROLL
    for (std::size_t r = 0; r < kRows; ++r) {
      const simd_t<Acc> x = simd_broadcast(a[r][k * a_step]);
      RAZORKV_UNROLL
      for (std::size_t v = 0; v < kVectors; ++v) acc[r][v] += x * column[v];
    }
  }
}

// The online-softmax update of one block for the tile's queries [first, padded) (a multiple of
// kW apart), on the transposed scores: scores[j * kPrefillScoreStride + i] is the logit of entry
// j for query i, of which query i may read the first readable[i] (0 for padding). The scores
// become the unnormalised weights (0 where unreadable), max and denominator the running state,
// and each query's output row, `out_stride` apart, is rescaled where its max grew.
template <class Acc>
inline void prefill_softmax(Acc* RAZORKV_RESTRICT scores, index_t count, index_t first,
                            index_t padded, const Acc* RAZORKV_RESTRICT readable, Acc log_weight,
                            Acc* RAZORKV_RESTRICT max, Acc* RAZORKV_RESTRICT denominator,
                            Acc* RAZORKV_RESTRICT out, index_t out_stride) noexcept {
  constexpr Acc kNegInf = -std::numeric_limits<Acc>::infinity();
#if defined(__GNUC__) || defined(__clang__)
  constexpr int kW = simd_lanes<Acc>;
  for (index_t i = first; i < padded; i += kW) {
    const simd_t<Acc> limit = simd_load(readable + i);
    const simd_t<Acc> neg_inf = simd_broadcast(kNegInf), weight = simd_broadcast(log_weight);
    simd_t<Acc> block_max = neg_inf;
    for (index_t j = 0; j < count; ++j) {
      Acc* row = scores + j * kPrefillScoreStride + i;
      // Entries newer than a query under the causal mask, and every entry for padding, get -inf.
      const simd_t<Acc> logit =
          simd_broadcast(static_cast<Acc>(j)) < limit ? simd_load(row) + weight : neg_inf;
      simd_store(row, logit);
      block_max = simd_max<Acc>(block_max, logit);
    }
    const simd_t<Acc> old_max = simd_load(max + i);
    const simd_t<Acc> new_max = simd_max<Acc>(old_max, block_max);
    // A query that has read nothing yet keeps max -inf; its weights are exp(-inf - 0) == 0.
    const simd_t<Acc> shift = new_max == neg_inf ? simd_zero<Acc>() : new_max;
    simd_t<Acc> rescale = old_max - shift;
    simd_t<Acc> sum = simd_zero<Acc>();
    for (index_t j = 0; j < count; ++j) {
      Acc* row = scores + j * kPrefillScoreStride + i;
      simd_t<Acc> e = simd_load(row) - shift;
      if constexpr (std::is_same_v<Acc, float>) {
        e = simd_exp(e);
      } else {
        for (int l = 0; l < kW; ++l) e[l] = std::exp(e[l]);
      }
      simd_store(row, e);
      sum += e;
    }
    for (int l = 0; l < kW; ++l) {
      // exp(-inf) == 0 clears the (still empty) state on a query's first block.
      const Acc factor = old_max[l] == new_max[l] ? Acc(1) : std::exp(rescale[l]);
      rescale[l] = factor;
      if (factor != Acc(1)) {
        Acc* row = out + (i + l) * out_stride;
        for (index_t c = 0; c < out_stride; ++c) row[c] *= factor;
      }
    }
    simd_store(denominator + i, simd_load(denominator + i) * rescale + sum);
    simd_store(max + i, new_max);
  }
#else
  for (index_t i = first; i < padded; ++i) {
    Acc block_max = kNegInf;
    for (index_t j = 0; j < count; ++j) {
      Acc& logit = scores[j * kPrefillScoreStride + i];
      logit = static_cast<Acc>(j) < readable[i] ? logit + log_weight : kNegInf;
      block_max = std::max(block_max, logit);
    }
    const Acc new_max = std::max(max[i], block_max);
    const Acc shift = new_max == kNegInf ? Acc(0) : new_max;
    Acc sum = 0;
    for (index_t j = 0; j < count; ++j) {
      Acc& weight = scores[j * kPrefillScoreStride + i];
      weight = std::exp(weight - shift);
      sum += weight;
    }
    const Acc factor = max[i] == new_max ? Acc(1) : std::exp(max[i] - shift);
    if (factor != Acc(1)) {
      for (index_t c = 0; c < out_stride; ++c) out[i * out_stride + c] *= factor;
    }
    denominator[i] = denominator[i] * factor + sum;
    max[i] = new_max;
  }
#endif
}

// dst[0, n) = Acc(src[0, n)): a row of keys or values as the products read it.
template <class T, class Acc>
inline void prefill_widen(const T* RAZORKV_RESTRICT src, Acc* RAZORKV_RESTRICT dst,
                          index_t n) noexcept {
  if constexpr (std::is_same_v<T, Acc>) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(Acc));
  } else {
    widen_row(src, dst, n);
  }
}

/// The prefill kernel for `rows` query vectors that read the same kv head. Per block of
/// kPrefillKeyRows entries: the scores of every query that reads the block as one register-tiled
/// product (the keys broadcast from their rows, the queries packed in panels), transposed so that
/// the online softmax runs across queries in vectors, then the values as a second product (the
/// weights broadcast, the values packed in panels). Query i reads the first visible[i] entries of
/// the head (the concatenation of its spans); visible is non-decreasing, so the queries that see
/// nothing of a block are a prefix of the tile and are left out of its products (the causal half
/// of a chunk costs nothing). Padding (queries past `rows`, columns past `dim`, entries past the
/// block's last in a register tile) is computed and never read.
///
/// \param spans   [num_spans] the head's spans, validated by the caller
/// \param queries [rows, dim] queries already multiplied by the softmax scale, rows <= 64
/// \param visible [rows] entries each query reads, each in [1, the head's entries], non-decreasing
/// \param scratch prefill_scratch_elements(dim) elements, any contents
/// \param out     [rows, dim] the normalised output
template <class T>
void prefill_tile(const kv_span<T>* spans, index_t num_spans, index_t dim,
                  const accum_t<T>* queries, index_t rows, const index_t* visible,
                  accum_t<T>* scratch, accum_t<T>* out) noexcept {
  using Acc = accum_t<T>;
  using tiling = prefill_tiling<Acc>;
  constexpr std::size_t kRows = tiling::kRows, kVectors = tiling::kVectors;
  constexpr index_t kTileRows = static_cast<index_t>(kRows);
  constexpr index_t kPanel = tiling::kPanel, kS = kPrefillScoreStride;
  constexpr Acc kNegInf = -std::numeric_limits<Acc>::infinity();
  const index_t padded_rows = (rows + kPanel - 1) / kPanel * kPanel;
  const index_t out_stride = (dim + kPanel - 1) / kPanel * kPanel;

  // The scratch, in the order prefill_scratch_elements counts it (checked below in debug builds).
  Acc* const query_panels = scratch;  // [padded_rows / kPanel][dim][kPanel]
  Acc* const widened_keys = query_panels + kPrefillQueryRows * dim;  // [count][dim]
  Acc* const value_panels =
      widened_keys + kPrefillKeyRows * dim;  // [out_stride / kPanel][count][kPanel]
  Acc* const scores = value_panels + kPrefillKeyRows * (dim + kPrefillMaxPanel);  // [entry][kS]
  Acc* const tile_out = scores + (kPrefillKeyRows + kPrefillMaxTileRows) * kS;  // [row][out_stride]
  Acc* const max = tile_out + (kPrefillQueryRows + kPrefillMaxTileRows) * (dim + kPrefillMaxPanel);
  Acc* const denominator = max + kS;
  Acc* const readable = denominator + kS;
  RAZORKV_DASSERT(readable + kS == scratch + prefill_scratch_elements(dim));

  for (index_t p = 0; p < padded_rows / kPanel; ++p) {
    for (index_t k = 0; k < dim; ++k) {
      for (index_t l = 0; l < kPanel; ++l) {
        const index_t row = p * kPanel + l;
        query_panels[(p * dim + k) * kPanel + l] = row < rows ? queries[row * dim + k] : Acc(0);
      }
    }
  }
  // Columns past the queries' stay 0: the value product's last register tile may read them.
  std::fill(scores, scores + (kPrefillKeyRows + kPrefillMaxTileRows) * kS, Acc(0));
  std::fill(tile_out, tile_out + (rows + kTileRows) * out_stride, Acc(0));
  std::fill(max, max + kS, kNegInf);
  std::fill(denominator, denominator + kS, Acc(0));

  const index_t last_visible = visible[rows - 1];
  index_t first_row = 0;  // the first query that reads the current block
  index_t span_first_entry = 0;
  for (index_t s = 0; s < num_spans && span_first_entry < last_visible; ++s) {
    const kv_span<T>& span = spans[s];
    const index_t length = span.length();
    for (index_t first = 0; first < length && span_first_entry + first < last_visible;
         first += kPrefillKeyRows) {
      const index_t block_entry = span_first_entry + first;
      const index_t count = std::min({kPrefillKeyRows, length - first, last_visible - block_entry});
      while (visible[first_row] <= block_entry) ++first_row;
      const index_t first_panel = first_row / kPanel;
      for (index_t i = 0; i < padded_rows; ++i) {
        const index_t entries = i < rows ? std::min(visible[i] - block_entry, count) : 0;
        readable[i] = static_cast<Acc>(std::max(entries, index_t{0}));
      }

      // Scores, transposed: scores[j][i] = k_j . q_i, kRows entries at a time (the last tile
      // repeats the block's last entry into rows no one reads). Float and double keys are read
      // in place, 16-bit ones widened first.
      const Acc* keys = widened_keys;
      index_t key_stride = dim;
      if (span.keys.is_quantised()) {
        dequantise_rows(span.keys.quantised(), first, count, widened_keys);
      } else if constexpr (std::is_same_v<T, Acc>) {
        keys = span.keys.typed().data() + first * span.keys.typed().row_stride();
        key_stride = span.keys.typed().row_stride();
      } else {
        const matrix_view<const T>& typed_keys = span.keys.typed();
        for (index_t e = 0; e < count; ++e)
          prefill_widen(typed_keys.data() + (first + e) * typed_keys.row_stride(),
                        widened_keys + e * dim, dim);
      }
      for (index_t j = 0; j < count; j += kTileRows) {
        const Acc* key[kRows];
        for (std::size_t r = 0; r < kRows; ++r)
          key[r] = keys + std::min(j + static_cast<index_t>(r), count - 1) * key_stride;
        for (index_t p = first_panel; p < padded_rows / kPanel; ++p) {
          simd_t<Acc> acc[kRows][kVectors];
          RAZORKV_UNROLL
          for (std::size_t r = 0; r < kRows; ++r) {
            RAZORKV_UNROLL
            for (std::size_t v = 0; v < kVectors; ++v) acc[r][v] = simd_zero<Acc>();
          }
          multiply_tile<Acc, kRows, kVectors>(key, 1, query_panels + p * dim * kPanel, dim, acc);
          RAZORKV_UNROLL
          for (std::size_t r = 0; r < kRows; ++r) {
            RAZORKV_UNROLL
            for (std::size_t v = 0; v < kVectors; ++v)
              simd_store(scores + (j + static_cast<index_t>(r)) * kS + p * kPanel +
                             static_cast<index_t>(v) * tiling::kW,
                         acc[r][v]);
          }
        }
      }

      prefill_softmax<Acc>(scores, count, first_panel * kPanel, padded_rows, readable,
                           static_cast<Acc>(span.log_weight), max, denominator, tile_out,
                           out_stride);

      // Values: tile_out[i] += sum over j of weight[j][i] * v_j, per panel of kPanel columns.
      // Quantised values are dequantised once into the keys' rows, which are read by now.
      if (span.values.is_quantised())
        dequantise_rows(span.values.quantised(), first, count, widened_keys);
      for (index_t p = 0; p < out_stride / kPanel; ++p) {
        Acc* const panel = value_panels + p * count * kPanel;
        const index_t columns = std::min(kPanel, dim - p * kPanel);
        for (index_t e = 0; e < count; ++e) {
          Acc* dst = panel + e * kPanel;
          if (span.values.is_quantised()) {
            std::memcpy(dst, widened_keys + e * dim + p * kPanel,
                        static_cast<std::size_t>(columns) * sizeof(Acc));
          } else {
            const matrix_view<const T>& typed_values = span.values.typed();
            prefill_widen(
                typed_values.data() + (first + e) * typed_values.row_stride() + p * kPanel, dst,
                columns);
          }
          std::fill(dst + columns, dst + kPanel, Acc(0));
        }
        for (index_t i = first_row; i < rows; i += kTileRows) {
          const Acc* weights[kRows];
          for (std::size_t r = 0; r < kRows; ++r) weights[r] = scores + i + static_cast<index_t>(r);
          simd_t<Acc> acc[kRows][kVectors];
          Acc* const tile = tile_out + i * out_stride + p * kPanel;
          RAZORKV_UNROLL
          for (std::size_t r = 0; r < kRows; ++r) {
            RAZORKV_UNROLL
            for (std::size_t v = 0; v < kVectors; ++v)
              acc[r][v] = simd_load(tile + static_cast<index_t>(r) * out_stride +
                                    static_cast<index_t>(v) * tiling::kW);
          }
          multiply_tile<Acc, kRows, kVectors>(weights, kS, panel, count, acc);
          RAZORKV_UNROLL
          for (std::size_t r = 0; r < kRows; ++r) {
            RAZORKV_UNROLL
            for (std::size_t v = 0; v < kVectors; ++v)
              simd_store(tile + static_cast<index_t>(r) * out_stride +
                             static_cast<index_t>(v) * tiling::kW,
                         acc[r][v]);
          }
        }
      }
    }
    span_first_entry += length;
  }
  for (index_t i = 0; i < rows; ++i) {
    for (index_t c = 0; c < dim; ++c)
      out[i * dim + c] = tile_out[i * out_stride + c] / denominator[i];
  }
}

}  // namespace RAZORKV_DETAIL_ISA
}  // namespace detail
RAZORKV_END_NAMESPACE
