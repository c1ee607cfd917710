// razorkv/detail/prefill_kernels.hpp: the prefill attention tile: a block of query vectors of one
// kv head against that head's spans, scores and values as GEMMs with an online softmax between.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include <Eigen/Core>

#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/simd.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

// Query vectors per tile and key rows per block. A tile's working set at head_dim 128 (queries,
// output and one block of scores: 128 KB in float; 16-bit storage adds 256 KB of keys and values
// widened to float) stays in L2 while the GEMMs stream it. Measured on this project's 2-core
// AVX-512 machine (float, GQA 4, chunks of 64, 256 and 2048 tokens over 2048): every size of
// the 32..128 x 128..512 grid but 32 x 128 ran at 100-126 GFLOPS, within the run-to-run noise; 64 x
// 256 keeps more tiles for short chunks than 128-row tiles.
inline constexpr index_t kPrefillQueryRows = 64;
inline constexpr index_t kPrefillKeyRows = 256;

// A tile's working memory, allocated once per tile and reused across its blocks.
template <class T>
struct prefill_scratch {
  using Acc = accum_t<T>;
  using matrix = Eigen::Matrix<Acc, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  matrix scores;  // [kPrefillQueryRows, kPrefillKeyRows]: logits, then unnormalised weights
  matrix keys;    // [kPrefillKeyRows, dim]: a block's keys widened to Acc (16-bit storage only)
  matrix values;  // [kPrefillKeyRows, dim]: likewise its values
  matrix out;     // [rows, dim]: the tile's output, unnormalised until the end
  Eigen::Array<Acc, Eigen::Dynamic, 1> max, denominator;  // [rows] running softmax state
};

// Rows [first, first + count) of a span's keys or values as an Acc matrix: in place for float
// and double storage, widened into `widened` for 16-bit storage.
template <class T>
Eigen::Map<const typename prefill_scratch<T>::matrix, 0, Eigen::OuterStride<>> prefill_block(
    const matrix_view<const T>& view, index_t first, index_t count,
    typename prefill_scratch<T>::matrix& widened) {
  using Acc = accum_t<T>;
  using block_map = Eigen::Map<const typename prefill_scratch<T>::matrix, 0, Eigen::OuterStride<>>;
  const index_t dim = view.cols();
  if constexpr (std::is_same_v<T, Acc>) {
    (void)widened;
    return block_map(view.row(first), count, dim, Eigen::OuterStride<>(view.row_stride()));
  } else {
    for (index_t r = 0; r < count; ++r) widen_row(view.row(first + r), widened.row(r).data(), dim);
    return block_map(widened.data(), count, dim, Eigen::OuterStride<>(dim));
  }
}

/// The prefill kernel for `rows` query vectors that read the same kv head: scores of a block of
/// kPrefillKeyRows entries for all of them in one GEMM, the block's online-softmax update row by
/// row, then its values in a second GEMM. Query i reads the first visible[i] entries of the head
/// (the concatenation of its spans); visible is non-decreasing, so the rows that see nothing of
/// a block are a prefix of the tile and are left out of its GEMMs (the causal half of a chunk
/// costs nothing). Leaves the normalised output in scratch.out.
///
/// \param spans   [num_spans] the head's spans, validated by the caller
/// \param queries [rows, dim] queries already multiplied by the softmax scale
/// \param visible [rows] entries each query reads, each in [1, the head's entries], non-decreasing
template <class T>
void prefill_tile(const kv_span<T>* spans, index_t num_spans, index_t dim,
                  const accum_t<T>* queries, index_t rows, const index_t* visible,
                  prefill_scratch<T>& scratch) {
  using Acc = accum_t<T>;
  using matrix = typename prefill_scratch<T>::matrix;
  constexpr Acc kNegInf = -std::numeric_limits<Acc>::infinity();
  const Eigen::Map<const matrix> tile_queries(queries, rows, dim);
  scratch.scores.resize(kPrefillQueryRows, kPrefillKeyRows);
  if constexpr (!std::is_same_v<T, Acc>) {
    scratch.keys.resize(kPrefillKeyRows, dim);
    scratch.values.resize(kPrefillKeyRows, dim);
  }
  scratch.out.setZero(rows, dim);
  scratch.max.setConstant(rows, kNegInf);
  scratch.denominator.setZero(rows);

  const index_t last_visible = visible[rows - 1];
  index_t first_row = 0;  // the first query that reads the current block
  index_t span_first_entry = 0;
  for (index_t s = 0; s < num_spans && span_first_entry < last_visible; ++s) {
    const kv_span<T>& span = spans[s];
    const Acc log_weight = static_cast<Acc>(span.log_weight);
    const index_t length = span.length();
    for (index_t first = 0; first < length && span_first_entry + first < last_visible;
         first += kPrefillKeyRows) {
      const index_t block_entry = span_first_entry + first;
      const index_t count = std::min({kPrefillKeyRows, length - first, last_visible - block_entry});
      while (visible[first_row] <= block_entry) ++first_row;
      const index_t readers = rows - first_row;

      const auto keys = prefill_block<T>(span.keys, first, count, scratch.keys);
      auto scores = scratch.scores.topLeftCorner(readers, count);
      scores.noalias() = tile_queries.middleRows(first_row, readers) * keys.transpose();

      for (index_t i = 0; i < readers; ++i) {
        const index_t row = first_row + i;
        // Entries this query may read in the block; the newer ones get weight exactly 0.
        const index_t readable = std::min(visible[row] - block_entry, count);
        auto logits = scores.row(i).head(readable).array();
        logits += log_weight;
        const Acc block_max = std::max(scratch.max(row), logits.maxCoeff());
        // exp(-inf) == 0 clears the (still empty) state on the first block.
        const Acc rescale = std::exp(scratch.max(row) - block_max);
        logits = (logits - block_max).exp();
        scores.row(i).tail(count - readable).setZero();
        if (rescale != Acc(1)) {
          scratch.denominator(row) *= rescale;
          scratch.out.row(row) *= rescale;
        }
        scratch.denominator(row) += logits.sum();
        scratch.max(row) = block_max;
      }

      const auto values = prefill_block<T>(span.values, first, count, scratch.values);
      scratch.out.middleRows(first_row, readers).noalias() += scores * values;
    }
    span_first_entry += length;
  }
  for (index_t i = 0; i < rows; ++i) scratch.out.row(i) /= scratch.denominator(i);
}

}  // namespace detail
RAZORKV_END_NAMESPACE
