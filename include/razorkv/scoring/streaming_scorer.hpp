// razorkv/scoring/streaming_scorer.hpp: echo and induction scores computed from one layer's
// post-RoPE queries and keys, with a tiled causal softmax that never holds an L x L matrix.
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
#include "razorkv/detail/math.hpp"
#include "razorkv/detail/parallel.hpp"
#include "razorkv/error.hpp"
#include "razorkv/kernels/softmax.hpp"
#include "razorkv/scoring/head_scores.hpp"
#include "razorkv/scoring/probe.hpp"

RAZORKV_BEGIN_NAMESPACE

/// Options of score_from_queries_keys.
struct qk_scoring_options {
  /// Multiplies q.k before the softmax; empty means 1/sqrt(head_dim). Must be finite.
  std::optional<double> scale;
  /// Empty, or one ALiBi slope per query head: logit(i, j) += -slope * (i - j).
  std::vector<double> alibi_slopes;
  /// Score every row_step-th row of copies 2..R (1: all rows).
  index_t row_step = 1;
  /// Fan-out over query heads; empty means the program's (fans_out_over_openmp()).
  parallel_for_fn parallel_for;
};

namespace detail {

// Query rows per GEMM tile and key columns per tile: the score tile is 128 x 512 floats
// (256 KB), big enough for Eigen's GEMM to run near its peak, small enough for L2.
inline constexpr index_t kScoreTileRows = 128;
inline constexpr index_t kScoreTileCols = 512;
}  // namespace detail

/// The scores of score_from_probabilities, computed from the queries and keys that produce
/// those probabilities (softmax of scale * q.k, causal, plus ALiBi when given), tile by tile
/// with a running max and normaliser per row. Memory: O(L * head_dim + tile) per thread.
///
/// \param queries [L, num_query_heads, head_dim] post-RoPE, any strides
/// \param keys    [L, num_kv_heads, head_dim] post-RoPE, any strides; query head h reads kv
///                head h / (num_query_heads / num_kv_heads)
template <class TQ, class TK>
layer_scores score_from_queries_keys(const probe& the_probe, layer_view<TQ> queries,
                                     layer_view<TK> keys, const qk_scoring_options& options = {}) {
  using Q = std::remove_const_t<TQ>;
  using K = std::remove_const_t<TK>;
  static_assert(is_storage_dtype_v<Q> && is_storage_dtype_v<K>,
                "razorkv::score_from_queries_keys: unsupported dtype");
  constexpr const char* kWhere = "score_from_queries_keys";
  const layer_view<const Q> q_view = queries;
  const layer_view<const K> k_view = keys;
  const index_t length = the_probe.length();
  RAZORKV_CHECK(q_view.tokens() == length && k_view.tokens() == length, kShapeMismatch, kWhere,
                ": queries.tokens() (", q_view.tokens(), ") and keys.tokens() (", k_view.tokens(),
                ") must equal the probe length (", length, ")");
  RAZORKV_CHECK(q_view.head_dim() == k_view.head_dim(), kShapeMismatch, kWhere,
                ": queries.head_dim() (", q_view.head_dim(), ") != keys.head_dim() (",
                k_view.head_dim(), ")");
  const index_t num_query_heads = q_view.heads();
  const index_t num_kv_heads = k_view.heads();
  RAZORKV_CHECK(num_query_heads % num_kv_heads == 0, kShapeMismatch, kWhere, ": num_query_heads (",
                num_query_heads, ") is not a multiple of num_kv_heads (", num_kv_heads, ")");
  const index_t dim = q_view.head_dim();
  const double scale = detail::softmax_scale(options.scale, dim, kWhere);
  // Scores measure which keys a head attends to most; a scale of 0 or below would score the
  // keys it attends to least (decode's kernels, which only compute, accept any finite scale).
  RAZORKV_CHECK(scale > 0.0, kInvalidArgument, kWhere, ": scale (", scale,
                ") must be > 0: no model attends with it");
  RAZORKV_CHECK(options.row_step > 0, kInvalidArgument, kWhere, ": row_step (", options.row_step,
                ") must be > 0");
  const bool alibi = !options.alibi_slopes.empty();
  RAZORKV_CHECK(!alibi || static_cast<index_t>(options.alibi_slopes.size()) == num_query_heads,
                kShapeMismatch, kWhere, ": alibi_slopes has ", options.alibi_slopes.size(),
                " entries, expected num_query_heads (", num_query_heads, ")");
  for (std::size_t h = 0; h < options.alibi_slopes.size(); ++h) {
    RAZORKV_CHECK(std::isfinite(options.alibi_slopes[h]), kInvalidArgument, kWhere,
                  ": alibi_slopes[", h, "] (", options.alibi_slopes[h], ") must be finite");
  }
  detail::check_finite(q_view, kWhere, "query");
  detail::check_finite(k_view, kWhere, "key");

  const index_t period = the_probe.num_random_tokens();
  const index_t positions = period * the_probe.repeats();
  const index_t offset = the_probe.has_bos() ? 1 : 0;
  std::vector<index_t> scored_rows;  // sequence indices of the scored query rows, increasing
  for (index_t p = period; p < positions; p += options.row_step) scored_rows.push_back(p + offset);
  const index_t group = num_query_heads / num_kv_heads;

  layer_scores result;
  result.echo.assign(static_cast<std::size_t>(num_query_heads), 0.0);
  result.induction.assign(static_cast<std::size_t>(num_query_heads), 0.0);

  detail::run_parallel(options.parallel_for, num_query_heads, [&](index_t head) {
    using detail::kScoreTileCols;
    using detail::kScoreTileRows;
    detail::score_matrix key_rows, query_rows;
    detail::widen_head(k_view, head / group, nullptr, 1.0f, key_rows);
    detail::widen_head(q_view, head, &scored_rows, static_cast<float>(scale), query_rows);
    const float slope =
        alibi ? static_cast<float>(options.alibi_slopes[static_cast<std::size_t>(head)]) : 0.0f;
    const Eigen::ArrayXf column_offsets =
        Eigen::ArrayXf::LinSpaced(kScoreTileCols, 0.0f, static_cast<float>(kScoreTileCols - 1));

    detail::score_matrix tile(kScoreTileRows, kScoreTileCols);
    // Per scored row of the current block: running max, normaliser, echo and induction mass
    // (all relative to exp(running max)).
    std::vector<float> row_max, normaliser, echo_mass, induction_mass;
    double echo_total = 0.0, induction_total = 0.0;
    const index_t rows = static_cast<index_t>(scored_rows.size());
    for (index_t first = 0; first < rows; first += kScoreTileRows) {
      const index_t block = std::min(kScoreTileRows, rows - first);
      const index_t last_column = scored_rows[static_cast<std::size_t>(first + block - 1)];
      row_max.assign(static_cast<std::size_t>(block), -std::numeric_limits<float>::infinity());
      normaliser.assign(static_cast<std::size_t>(block), 0.0f);
      echo_mass.assign(static_cast<std::size_t>(block), 0.0f);
      induction_mass.assign(static_cast<std::size_t>(block), 0.0f);
      for (index_t column0 = 0; column0 <= last_column; column0 += kScoreTileCols) {
        const index_t columns = std::min(kScoreTileCols, last_column + 1 - column0);
        tile.topLeftCorner(block, columns).noalias() =
            query_rows.middleRows(first, block) * key_rows.middleRows(column0, columns).transpose();
        for (index_t r = 0; r < block; ++r) {
          const index_t i = scored_rows[static_cast<std::size_t>(first + r)];
          const index_t visible = std::min(columns, i - column0 + 1);  // causal: j <= i
          if (visible <= 0) continue;
          Eigen::Map<Eigen::ArrayXf> logits(tile.data() + r * kScoreTileCols, visible);
          if (alibi)
            logits += slope * (column_offsets.head(visible) + static_cast<float>(column0 - i));
          const std::size_t ru = static_cast<std::size_t>(r);
          const float rescale = detail::online_softmax_step(logits, row_max[ru], normaliser[ru]);
          echo_mass[ru] *= rescale;
          induction_mass[ru] *= rescale;
          // Earlier occurrences j of this row's id, and the token after each, in this tile.
          const index_t position = i - offset;
          for (index_t slot : the_probe.same_id_slots(position % period)) {
            for (index_t j = slot; j < position; j += period) {
              const index_t echo_column = j + offset - column0;
              if (echo_column >= 0 && echo_column < visible) echo_mass[ru] += logits(echo_column);
              if (echo_column + 1 >= 0 && echo_column + 1 < visible)
                induction_mass[ru] += logits(echo_column + 1);
            }
          }
        }
      }
      for (index_t r = 0; r < block; ++r) {
        const std::size_t ru = static_cast<std::size_t>(r);
        echo_total += static_cast<double>(echo_mass[ru]) / static_cast<double>(normaliser[ru]);
        induction_total +=
            static_cast<double>(induction_mass[ru]) / static_cast<double>(normaliser[ru]);
      }
    }
    result.echo[static_cast<std::size_t>(head)] = echo_total / static_cast<double>(rows);
    result.induction[static_cast<std::size_t>(head)] = induction_total / static_cast<double>(rows);
  });
  // Finite queries and keys can still overflow a float logit (|scale * q.k| > 3.4e38); the
  // softmax is then undefined, and that is the caller's input, not a score.
  for (index_t head = 0; head < num_query_heads; ++head) {
    const double echo = result.echo[static_cast<std::size_t>(head)];
    const double induction = result.induction[static_cast<std::size_t>(head)];
    RAZORKV_CHECK(
        std::isfinite(echo) && std::isfinite(induction), kInvalidArgument, kWhere, ": query head ",
        head, " scores echo ", echo, ", induction ", induction,
        ": its logits overflow float (scale * q.k beyond 3.4e38); scale the queries or keys down");
  }
  return result;
}

RAZORKV_END_NAMESPACE
