// razorkv/policies/observed_attention.hpp: how much attention each prompt position receives from
// the prompt's last queries, per GQA group: the score SnapKV and H2O rank tokens by.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/parallel.hpp"
#include "razorkv/error.hpp"
#include "razorkv/kernels/softmax.hpp"

RAZORKV_BEGIN_NAMESPACE

/// Attention mass per (kv head, prompt position), summed over the kv head's query heads and
/// over the observation queries; each query's softmax sums to 1, so a head's masses sum to
/// (query heads per group) x (observation queries).
struct attention_mass {
  index_t num_kv_heads = 0;
  index_t tokens = 0;
  std::vector<double> values;  // [num_kv_heads, tokens]

  const double* head(index_t kv_head) const {
    RAZORKV_CHECK(kv_head >= 0 && kv_head < num_kv_heads, kOutOfRange,
                  "attention_mass::head: kv_head (", kv_head, ") outside [0, ", num_kv_heads, ")");
    return values.data() + kv_head * tokens;
  }
};

/// Options of observed_attention.
struct observation_options {
  /// Multiplies q.k before the softmax; empty means 1/sqrt(head_dim). Must be finite.
  std::optional<double> scale;
  /// Fan-out over kv heads; empty means the program's (fans_out_over_openmp()).
  parallel_for_fn parallel_for;
};

namespace detail {

template <class TQ, class TK>
void check_observation(const layer_view<const TQ>& queries, const layer_view<const TK>& keys,
                       const char* where) {
  RAZORKV_CHECK(queries.tokens() >= 1, kInvalidArgument, where, ": queries.tokens() (",
                queries.tokens(), ") must be >= 1");
  RAZORKV_CHECK(queries.tokens() <= keys.tokens(), kInvalidArgument, where, ": queries.tokens() (",
                queries.tokens(), ") exceeds the prompt's tokens (keys.tokens() = ", keys.tokens(),
                "); the queries are the prompt's last ones");
  RAZORKV_CHECK(queries.head_dim() == keys.head_dim(), kShapeMismatch, where,
                ": queries.head_dim() (", queries.head_dim(), ") != keys.head_dim() (",
                keys.head_dim(), ")");
  RAZORKV_CHECK(queries.heads() % keys.heads() == 0, kShapeMismatch, where, ": num_query_heads (",
                queries.heads(), ") is not a multiple of num_kv_heads (", keys.heads(), ")");
  check_finite(queries, where, "query");
  check_finite(keys, where, "key");
}

}  // namespace detail

/// The attention that the prompt's last m queries pay to each of its N positions, per kv head:
/// query r (r < m) sits at position N - m + r and attends causally to positions [0, N - m + r]
/// with softmax(scale * q.k). SnapKV observes its window (m = 32); H2O observes every prompt
/// query (m = N) or the last m an engine can afford. Non-finite queries or keys are rejected.
///
/// \param queries [m, num_query_heads, head_dim], the prompt's last m queries, any strides
/// \param keys    [N, num_kv_heads, head_dim], the prompt's keys, any strides
template <class TQ, class TK>
attention_mass observed_attention(layer_view<TQ> queries, layer_view<TK> keys,
                                  const observation_options& options = {}) {
  using Q = std::remove_const_t<TQ>;
  using K = std::remove_const_t<TK>;
  static_assert(is_storage_dtype_v<Q> && is_storage_dtype_v<K>,
                "razorkv::observed_attention: unsupported dtype");
  const layer_view<const Q> q_view = queries;
  const layer_view<const K> k_view = keys;
  const double scale =
      detail::softmax_scale(options.scale, q_view.head_dim(), "observed_attention");
  detail::check_observation(q_view, k_view, "observed_attention");
  const index_t observed = q_view.tokens(), tokens = k_view.tokens();
  const index_t group = q_view.heads() / k_view.heads();
  const index_t first_position = tokens - observed;

  attention_mass mass;
  mass.num_kv_heads = k_view.heads();
  mass.tokens = tokens;
  mass.values.assign(static_cast<std::size_t>(mass.num_kv_heads * tokens), 0.0);
  // Query rows per GEMM: the [rows, N] logit block stays under 16 MB.
  const index_t block_rows = std::clamp<index_t>((index_t{4} << 20) / tokens, 1, 128);

  detail::run_parallel(options.parallel_for, mass.num_kv_heads, [&](index_t kv_head) {
    detail::score_matrix key_rows, query_rows, logits;
    detail::widen_head(k_view, kv_head, nullptr, 1.0f, key_rows);
    Eigen::ArrayXd column_mass = Eigen::ArrayXd::Zero(tokens);
    Eigen::ArrayXf block_mass(
        tokens);  // one block's rows summed in float (<= 128 terms), then added in double
    for (index_t q = kv_head * group; q < (kv_head + 1) * group; ++q) {
      detail::widen_head(q_view, q, nullptr, static_cast<float>(scale), query_rows);
      for (index_t first = 0; first < observed; first += block_rows) {
        const index_t rows = std::min(block_rows, observed - first);
        const index_t visible = first_position + first + rows;  // columns the block's last row sees
        logits.noalias() =
            query_rows.middleRows(first, rows) * key_rows.topRows(visible).transpose();
        block_mass.head(visible).setZero();
        for (index_t r = 0; r < rows; ++r) {
          const index_t seen = first_position + first + r + 1;  // causal: positions [0, seen)
          auto row = logits.row(r).head(seen).array();
          detail::softmax_in_place(row);
          block_mass.head(seen) += row.transpose();
        }
        column_mass.head(visible) += block_mass.head(visible).template cast<double>();
      }
    }
    Eigen::Map<Eigen::ArrayXd>(mass.values.data() + kv_head * tokens, tokens) = column_mass;
  });
  return mass;
}

namespace reference {

/// observed_attention computed plainly, one query and one key at a time, in double.
template <class TQ, class TK>
attention_mass observed_attention(layer_view<TQ> queries, layer_view<TK> keys,
                                  std::optional<double> scale_option = {}) {
  using Q = std::remove_const_t<TQ>;
  using K = std::remove_const_t<TK>;
  const layer_view<const Q> q_view = queries;
  const layer_view<const K> k_view = keys;
  const double scale =
      detail::softmax_scale(scale_option, q_view.head_dim(), "reference::observed_attention");
  detail::check_observation(q_view, k_view, "reference::observed_attention");
  const index_t observed = q_view.tokens(), tokens = k_view.tokens(), dim = q_view.head_dim();
  const index_t group = q_view.heads() / k_view.heads();
  attention_mass mass;
  mass.num_kv_heads = k_view.heads();
  mass.tokens = tokens;
  mass.values.assign(static_cast<std::size_t>(mass.num_kv_heads * tokens), 0.0);
  std::vector<double> logits(static_cast<std::size_t>(tokens));
  for (index_t q = 0; q < q_view.heads(); ++q) {
    const index_t kv_head = q / group;
    for (index_t r = 0; r < observed; ++r) {
      const index_t seen = tokens - observed + r + 1;
      const Q* query = q_view.token(r).row(q);
      double max_logit = -1.0e300, sum = 0.0;
      for (index_t j = 0; j < seen; ++j) {
        const K* key = k_view.token(j).row(kv_head);
        double dot = 0.0;
        for (index_t c = 0; c < dim; ++c)
          dot += detail::to_double(query[c]) * detail::to_double(key[c]);
        logits[static_cast<std::size_t>(j)] = scale * dot;
        max_logit = std::max(max_logit, scale * dot);
      }
      for (index_t j = 0; j < seen; ++j)
        sum += std::exp(logits[static_cast<std::size_t>(j)] - max_logit);
      for (index_t j = 0; j < seen; ++j) {
        mass.values[static_cast<std::size_t>(kv_head * tokens + j)] +=
            std::exp(logits[static_cast<std::size_t>(j)] - max_logit) / sum;
      }
    }
  }
  return mass;
}

}  // namespace reference

RAZORKV_END_NAMESPACE
