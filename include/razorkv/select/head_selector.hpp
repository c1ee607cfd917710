// razorkv/select/head_selector.hpp: turns head scores into a head plan (docs/method.md, section 2):
// global ranking over all layers, top induction_ratio by induction and top echo_ratio by echo,
// with the GQA group (kv head) as the unit.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "razorkv/config.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"
#include "razorkv/scoring/head_scores.hpp"

RAZORKV_BEGIN_NAMESPACE

/// Parameters of select_retrieval_heads.
struct selection_config {
  double induction_ratio = 0.14;  ///< fraction of all groups kept by induction score
  double echo_ratio = 0.01;       ///< fraction of all groups kept by echo score
  gqa_aggregation aggregation = gqa_aggregation::kSum;
  /// At least this many retrieval groups in every layer (the best remaining groups of a layer
  /// by induction, then echo, are added); 0 for none.
  index_t min_groups_per_layer = 0;
};

/// Scores of each GQA group: [num_layers * num_kv_heads], layer-major.
struct group_scores {
  std::vector<double> echo, induction;
};

/// Combines each group's query-head scores by `aggregation`.
inline group_scores aggregate_groups(const head_scores& scores, gqa_aggregation aggregation) {
  RAZORKV_CHECK(scores.complete(), kInvalidArgument,
                "aggregate_groups: head_scores is incomplete (every layer needs set_layer)");
  const index_t group = scores.group_size();
  group_scores out;
  for (index_t l = 0; l < scores.num_layers(); ++l) {
    for (index_t g = 0; g < scores.num_kv_heads(); ++g) {
      double echo =
          aggregation == gqa_aggregation::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
      double induction = echo;
      for (index_t q = g * group; q < (g + 1) * group; ++q) {
        if (aggregation == gqa_aggregation::kMax) {
          echo = std::max(echo, scores.echo(l, q));
          induction = std::max(induction, scores.induction(l, q));
        } else {
          echo += scores.echo(l, q);
          induction += scores.induction(l, q);
        }
      }
      if (aggregation == gqa_aggregation::kMean) {
        echo /= static_cast<double>(group);
        induction /= static_cast<double>(group);
      }
      out.echo.push_back(echo);
      out.induction.push_back(induction);
    }
  }
  return out;
}

namespace detail {
// Indices of the `count` largest values; ties go to the lower index (lower layer, then head).
inline std::vector<index_t> top_indices(const std::vector<double>& values, index_t count) {
  std::vector<index_t> order(values.size());
  std::iota(order.begin(), order.end(), index_t{0});
  std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
    return values[static_cast<std::size_t>(a)] > values[static_cast<std::size_t>(b)];
  });
  order.resize(static_cast<std::size_t>(count));
  return order;
}

inline void check_ratio(double ratio, const char* name) {
  RAZORKV_CHECK(std::isfinite(ratio) && ratio >= 0.0 && ratio <= 1.0, kInvalidArgument,
                "select_retrieval_heads: ", name, " (", ratio, ") must be in [0, 1]");
}
}  // namespace detail

/// Selects the retrieval groups of a model: exactly round(groups * induction_ratio) groups by
/// induction score and round(groups * echo_ratio) by echo score, ranked globally over all
/// layers, ties to the lower layer then the lower kv head; the plan is their union (a group
/// chosen by both counts once), plus the per-layer minimum if one is set.
inline head_plan select_retrieval_heads(const head_scores& scores, index_t head_dim,
                                        const selection_config& config = {}) {
  detail::check_ratio(config.induction_ratio, "induction_ratio");
  detail::check_ratio(config.echo_ratio, "echo_ratio");
  RAZORKV_CHECK(
      config.min_groups_per_layer >= 0 && config.min_groups_per_layer <= scores.num_kv_heads(),
      kInvalidArgument, "select_retrieval_heads: min_groups_per_layer (",
      config.min_groups_per_layer, ") must be in [0, num_kv_heads = ", scores.num_kv_heads(), "]");
  head_plan plan(
      model_shape{scores.num_layers(), scores.num_query_heads(), scores.num_kv_heads(), head_dim});
  const group_scores groups = aggregate_groups(scores, config.aggregation);
  const index_t total = scores.num_layers() * scores.num_kv_heads();
  const auto count = [&](double ratio) {
    return static_cast<index_t>(std::llround(static_cast<double>(total) * ratio));
  };
  const index_t kv_heads = scores.num_kv_heads();
  for (index_t id : detail::top_indices(groups.induction, count(config.induction_ratio))) {
    plan.set_retrieval(id / kv_heads, id % kv_heads, true);
  }
  for (index_t id : detail::top_indices(groups.echo, count(config.echo_ratio))) {
    plan.set_retrieval(id / kv_heads, id % kv_heads, true);
  }
  if (config.min_groups_per_layer > 0) {
    for (index_t layer = 0; layer < scores.num_layers(); ++layer) {
      std::vector<index_t> order(static_cast<std::size_t>(kv_heads));
      std::iota(order.begin(), order.end(), index_t{0});
      std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
        const std::size_t ia = static_cast<std::size_t>(layer * kv_heads + a),
                          ib = static_cast<std::size_t>(layer * kv_heads + b);
        if (groups.induction[ia] != groups.induction[ib])
          return groups.induction[ia] > groups.induction[ib];
        return groups.echo[ia] > groups.echo[ib];
      });
      index_t held = static_cast<index_t>(plan.retrieval_heads(layer).size());
      for (index_t g : order) {
        if (held >= config.min_groups_per_layer) break;
        if (!plan.is_retrieval(layer, g)) {
          plan.set_retrieval(layer, g, true);
          ++held;
        }
      }
    }
  }
  auto& why = plan.selection();
  why.method = "razorattention";
  why.induction_ratio = config.induction_ratio;
  why.echo_ratio = config.echo_ratio;
  why.aggregation = config.aggregation;
  why.min_groups_per_layer = config.min_groups_per_layer;
  why.group_echo = groups.echo;
  why.group_induction = groups.induction;
  return plan;
}

RAZORKV_END_NAMESPACE
