// razorkv/kernels/softmax.hpp: the attention-probability core that the head scorer,
// observed_attention and H2O share: the scale, rows widened for a GEMM, and the softmax steps.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"
#include "razorkv/kernels/simd.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

/// The softmax scale of every razorkv entry point: the caller's, else 1 / sqrt(head_dim).
/// Throws kInvalidArgument naming `where` when it is not finite.
inline double softmax_scale(const std::optional<double>& scale, index_t head_dim,
                            const char* where) {
  const double value = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  RAZORKV_CHECK(std::isfinite(value), kInvalidArgument, where, ": scale (", value,
                ") must be finite");
  return value;
}

/// Float rows for Eigen's GEMM: [rows, head_dim], row-major.
using score_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// One head's rows of `view` ([tokens, heads, head_dim]) widened to float into `out`, optionally
/// only the listed sequence indices, each multiplied by `factor` (the softmax scale, for queries).
template <class T>
void widen_head(const layer_view<const T>& view, index_t head, const std::vector<index_t>* rows,
                float factor, score_matrix& out) {
  const matrix_view<const T> h = view.head(head);
  const index_t count = rows ? static_cast<index_t>(rows->size()) : h.rows();
  out.resize(count, h.cols());
  for (index_t r = 0; r < count; ++r) {
    const T* src = h.row(rows ? (*rows)[static_cast<std::size_t>(r)] : r);
    float* dst = out.data() + r * h.cols();
    if constexpr (std::is_same_v<T, float>) {
      std::copy(src, src + h.cols(), dst);
    } else if constexpr (std::is_same_v<T, double>) {
      for (index_t c = 0; c < h.cols(); ++c) dst[c] = static_cast<float>(src[c]);
    } else {
      widen_row(src, dst, h.cols());
    }
    if (factor != 1.0f) {
      for (index_t c = 0; c < h.cols(); ++c) dst[c] *= factor;
    }
  }
}

/// Whether `rows` holds a NaN or an infinity; if so, (row, col) is the first, in row-major order.
template <class T>
bool find_non_finite(const matrix_view<const T>& rows, index_t& row, index_t& col) noexcept {
  for (index_t r = 0; r < rows.rows(); ++r) {
    for (index_t c = 0; c < rows.cols(); ++c) {
      if (!std::isfinite(to_double(rows(r, c)))) {
        row = r;
        col = c;
        return true;
      }
    }
  }
  return false;
}

/// Throws kInvalidArgument naming the first non-finite element of `view` (`name`: "query", "key").
template <class T>
void check_finite(const layer_view<const T>& view, const char* where, const char* name) {
  for (index_t t = 0; t < view.tokens(); ++t) {
    for (index_t h = 0; h < view.heads(); ++h) {
      const matrix_view<const T> row = view.token(t).middle_rows(h, 1);
      index_t r = 0, c = 0;
      const bool finite = !find_non_finite(row, r, c);
      RAZORKV_CHECK(finite, kInvalidArgument, where, ": ", name, " (",
                    finite ? 0.0 : to_double(row(0, c)), ") at token ", t, " head ", h, " dim ", c,
                    " is not finite");
    }
  }
}

/// Turns a row of logits into its softmax probabilities, in place: exp(x - max) / sum.
template <class Row>
void softmax_in_place(Row&& logits) {
  logits = (logits - logits.maxCoeff()).exp();
  logits /= logits.sum();
}

/// One tile of a row's logits into a running softmax (max and normaliser carried across tiles):
/// the tile becomes exp(logit - running max) and is added to the normaliser. Returns the factor
/// by which everything accumulated before under the old max must be multiplied (1 when the max
/// did not grow), so the caller rescales its own sums the same way.
template <class Tile>
float online_softmax_step(Tile&& logits, float& running_max, float& normaliser) {
  const float tile_max = logits.maxCoeff();
  float rescale = 1.0f;
  if (tile_max > running_max) {
    rescale = std::exp(running_max - tile_max);
    normaliser *= rescale;
    running_max = tile_max;
  }
  logits = (logits - running_max).exp();
  normaliser += logits.sum();
  return rescale;
}

}  // namespace detail
RAZORKV_END_NAMESPACE
