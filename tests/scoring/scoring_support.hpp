// tests/scoring/scoring_support.hpp: the reference probabilities for scorer tests: the causal
// softmax (with optional ALiBi) of given queries and keys, computed in double.
#pragma once

#include <razorkv/razorkv.hpp>

#include <cmath>
#include <limits>
#include <vector>

namespace razorkv_test {

/// [num_query_heads, L, L] row-major probabilities of softmax(scale * q.k - slope * (i - j)),
/// causal, from [L, heads, dim] queries and keys.
template <class TQ, class TK>
std::vector<double> reference_probabilities(razorkv::layer_view<const TQ> q,
                                            razorkv::layer_view<const TK> k, double scale,
                                            const std::vector<double>& slopes = {}) {
  using razorkv::index_t;
  const index_t length = q.tokens(), heads = q.heads(), dim = q.head_dim();
  const index_t group = heads / k.heads();
  std::vector<double> a(static_cast<std::size_t>(heads * length * length), 0.0);
  std::vector<double> logits(static_cast<std::size_t>(length));
  for (index_t h = 0; h < heads; ++h) {
    for (index_t i = 0; i < length; ++i) {
      double max_logit = -std::numeric_limits<double>::infinity();
      for (index_t j = 0; j <= i; ++j) {
        double dot = 0.0;
        for (index_t c = 0; c < dim; ++c) {
          dot += razorkv::detail::to_double(q.token(i).row(h)[c]) *
                 razorkv::detail::to_double(k.token(j).row(h / group)[c]);
        }
        double s = scale * dot;
        if (!slopes.empty()) s -= slopes[static_cast<std::size_t>(h)] * static_cast<double>(i - j);
        logits[static_cast<std::size_t>(j)] = s;
        max_logit = std::fmax(max_logit, s);
      }
      double sum = 0.0;
      for (index_t j = 0; j <= i; ++j)
        sum += std::exp(logits[static_cast<std::size_t>(j)] - max_logit);
      for (index_t j = 0; j <= i; ++j) {
        a[static_cast<std::size_t>((h * length + i) * length + j)] =
            std::exp(logits[static_cast<std::size_t>(j)] - max_logit) / sum;
      }
    }
  }
  return a;
}

}  // namespace razorkv_test
