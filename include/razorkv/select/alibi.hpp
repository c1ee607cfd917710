// razorkv/select/alibi.hpp: retrieval heads of ALiBi models (docs/method.md, section 3): the
// standard slopes, each head's attention span L_h = (2B - ln eps) / slope, and a plan that keeps
// the long-span heads full and gives every other head its span as its own buffer.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <vector>

#include "razorkv/config.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// The ALiBi slopes of Press et al. for `num_heads` heads: 2^(-8 i / n), i = 1..n, for a power
/// of two n; otherwise those of the largest power of two m < n followed by every other slope
/// of 2m, as the reference implementation does.
inline std::vector<double> alibi_slopes(index_t num_heads) {
  RAZORKV_CHECK(num_heads > 0, kInvalidArgument, "alibi_slopes: num_heads (", num_heads,
                ") must be > 0");
  const auto power_of_two_slopes = [](index_t n) {
    std::vector<double> s(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i)
      s[static_cast<std::size_t>(i)] =
          std::pow(2.0, -8.0 * static_cast<double>(i + 1) / static_cast<double>(n));
    return s;
  };
  index_t m = 1;
  while (m * 2 <= num_heads) m *= 2;
  std::vector<double> slopes = power_of_two_slopes(m);
  if (m < num_heads) {
    const std::vector<double> finer = power_of_two_slopes(2 * m);
    for (index_t i = 0; i < num_heads - m; ++i)
      slopes.push_back(finer[static_cast<std::size_t>(2 * i)]);
  }
  return slopes;
}

/// The bound B on |scale * q.k| from the weights: scale * ||W_Q W_K^T||_2 * h^2, where h bounds
/// the norm of the (normalised) hidden states.
inline double alibi_logit_bound(double spectral_norm, double hidden_norm_bound, double scale) {
  RAZORKV_CHECK(std::isfinite(spectral_norm) && spectral_norm >= 0 &&
                    std::isfinite(hidden_norm_bound) && hidden_norm_bound >= 0 &&
                    std::isfinite(scale) && scale > 0,
                kInvalidArgument, "alibi_logit_bound: spectral_norm (", spectral_norm,
                "), hidden_norm_bound (", hidden_norm_bound, ") and scale (", scale,
                ") must be finite and >= 0 (scale > 0)");
  return scale * spectral_norm * hidden_norm_bound * hidden_norm_bound;
}

/// Distance beyond which a head with `slope` gives less than `eps` of its attention when every
/// logit is within [-B, B]: (2B - ln eps) / slope.
inline double alibi_span(double slope, double bound, double eps = 1e-3) {
  RAZORKV_CHECK(std::isfinite(slope) && slope > 0, kInvalidArgument, "alibi_span: slope (", slope,
                ") must be > 0");
  RAZORKV_CHECK(std::isfinite(bound) && bound >= 0, kInvalidArgument, "alibi_span: bound (", bound,
                ") must be >= 0");
  RAZORKV_CHECK(eps > 0 && eps < 1, kInvalidArgument, "alibi_span: eps (", eps,
                ") must be in (0, 1)");
  return (2.0 * bound - std::log(eps)) / slope;
}

/// Options of select_alibi_heads: which heads are retrieval heads is decided by exactly one of
/// seq_len and ratio.
struct alibi_selection {
  double bound = 0.0;  ///< B, e.g. from alibi_logit_bound
  double eps = 1e-3;
  index_t seq_len = 0;          ///< > 0: heads whose span reaches this are retrieval heads
  std::optional<double> ratio;  ///< in [0, 1]: instead, the top ratio of groups by span
};

/// A plan for an ALiBi model whose query heads use `slopes` (one per query head, the same in
/// every layer). A group's span is the largest of its query heads'. Retrieval groups keep full
/// caches; every other group gets ceil(span) as its buffer override.
inline head_plan select_alibi_heads(const model_shape& shape, const std::vector<double>& slopes,
                                    const alibi_selection& options) {
  head_plan plan(shape);
  RAZORKV_CHECK(static_cast<index_t>(slopes.size()) == shape.num_query_heads, kShapeMismatch,
                "select_alibi_heads: ", slopes.size(), " slopes for ", shape.num_query_heads,
                " query heads");
  const bool by_ratio = options.ratio.has_value();
  RAZORKV_CHECK(!by_ratio || options.seq_len == 0, kInvalidArgument,
                "select_alibi_heads: give seq_len or ratio, not both (seq_len ", options.seq_len,
                ", ratio ", options.ratio.value_or(0.0), ")");
  // Written so that a NaN ratio fails too.
  RAZORKV_CHECK(!by_ratio || (*options.ratio >= 0.0 && *options.ratio <= 1.0), kInvalidArgument,
                "select_alibi_heads: ratio (", options.ratio.value_or(0.0), ") must be in [0, 1]");
  RAZORKV_CHECK(by_ratio || options.seq_len > 0, kInvalidArgument, "select_alibi_heads: seq_len (",
                options.seq_len, ") must be > 0 unless a ratio is given");
  const index_t group = shape.num_query_heads / shape.num_kv_heads;
  std::vector<double> spans(static_cast<std::size_t>(shape.num_kv_heads), 0.0);
  for (index_t q = 0; q < shape.num_query_heads; ++q) {
    double& span = spans[static_cast<std::size_t>(q / group)];
    span =
        std::max(span, alibi_span(slopes[static_cast<std::size_t>(q)], options.bound, options.eps));
  }
  std::vector<bool> retrieval(spans.size(), false);
  if (by_ratio) {
    const index_t total = shape.num_layers * shape.num_kv_heads;
    const auto keep =
        static_cast<index_t>(std::llround(*options.ratio * static_cast<double>(total)));
    // Same spans in every layer: rank (layer, group) by span, ties to the lower layer and head.
    std::vector<index_t> order(static_cast<std::size_t>(total));
    std::iota(order.begin(), order.end(), index_t{0});
    std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
      return spans[static_cast<std::size_t>(a % shape.num_kv_heads)] >
             spans[static_cast<std::size_t>(b % shape.num_kv_heads)];
    });
    for (index_t i = 0; i < keep; ++i)
      plan.set_retrieval(order[static_cast<std::size_t>(i)] / shape.num_kv_heads,
                         order[static_cast<std::size_t>(i)] % shape.num_kv_heads, true);
  } else {
    for (index_t l = 0; l < shape.num_layers; ++l)
      for (index_t g = 0; g < shape.num_kv_heads; ++g) {
        if (spans[static_cast<std::size_t>(g)] >= static_cast<double>(options.seq_len))
          plan.set_retrieval(l, g, true);
      }
  }
  // A span past any sequence length means the head keeps everything; capping it at 2^62 tokens
  // keeps that meaning and keeps the conversion (and sinks + window later) within index_t.
  constexpr double kLongestBuffer = 4611686018427387904.0;  // 2^62
  for (index_t l = 0; l < shape.num_layers; ++l) {
    for (index_t g = 0; g < shape.num_kv_heads; ++g) {
      const double span = std::min(std::ceil(spans[static_cast<std::size_t>(g)]), kLongestBuffer);
      if (!plan.is_retrieval(l, g)) plan.set_buffer_override(l, g, static_cast<index_t>(span));
    }
  }
  plan.selection().method = "alibi span";
  return plan;
}

RAZORKV_END_NAMESPACE
