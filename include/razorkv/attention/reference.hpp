// razorkv/attention/reference.hpp: the plain scalar decode attention in double, the oracle that
// every optimised attention kernel is tested against. Slow on purpose: no blocking, no tricks.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"
#include "razorkv/kernels/softmax.hpp"
#include "razorkv/quant/hadamard.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

// One entry of a head, oldest first: its key and value as the values they stand for (a quantised
// row dequantised), in double, and its span's log-weight.
struct reference_entry {
  std::vector<double> key, value;
  double log_weight;
  bool rotated_key;  // stored rotated: read with the query rotated
};

template <class Source>
std::vector<reference_entry> reference_entries(const Source& cache, index_t layer,
                                               index_t kv_head) {
  std::vector<reference_entry> entries;
  const index_t dim = cache.head_dim();
  for (index_t i = 0; i < cache.num_spans(layer, kv_head); ++i) {
    const auto span = cache.span(layer, kv_head, i);
    for (index_t r = 0; r < span.length(); ++r) {
      reference_entry e{std::vector<double>(static_cast<std::size_t>(dim)),
                        std::vector<double>(static_cast<std::size_t>(dim)),
                        static_cast<double>(span.log_weight), span.rotated_keys};
      span.keys.widen_rows(r, 1, e.key.data());
      span.values.widen_rows(r, 1, e.value.data());
      entries.push_back(std::move(e));
    }
  }
  return entries;
}

}  // namespace detail

namespace reference {

/// The attention probabilities razorkv::decode_attention_multi reports (attention_weights),
/// computed entry by entry in double with a two-pass softmax. Returns [tokens * num_query_heads]
/// rows, row t * num_query_heads + h over the entries of query head h's kv head, 0 where the
/// causal mask hides an entry.
template <class Source, class TQ>
std::vector<std::vector<double>> attention_weights_multi(
    const Source& cache, index_t layer, layer_view<TQ> queries,
    std::optional<double> scale = std::nullopt) {
  check_layer(cache, layer, "reference::decode_attention");
  const index_t num_kv_heads = cache.num_kv_heads();
  const index_t dim = cache.head_dim();
  const index_t num_query_heads = queries.heads();
  const index_t tokens = queries.tokens();
  RAZORKV_CHECK(queries.head_dim() == dim && num_query_heads % num_kv_heads == 0, kShapeMismatch,
                "reference::decode_attention: queries [", tokens, ", ", num_query_heads, ", ",
                queries.head_dim(), "] do not fit kv heads ", num_kv_heads, " x dim ", dim);
  const double s = detail::softmax_scale(scale, dim, "reference::decode_attention");
  const index_t group = num_query_heads / num_kv_heads;

  std::vector<std::vector<double>> weights(static_cast<std::size_t>(tokens * num_query_heads));
  for (index_t h = 0; h < num_query_heads; ++h) {
    const index_t kv_head = h / group;
    const auto entries = detail::reference_entries(cache, layer, kv_head);
    const index_t total = static_cast<index_t>(entries.size());
    RAZORKV_CHECK(total >= tokens, kInvalidArgument, "reference::decode_attention: kv head ",
                  kv_head, " holds ", total, " entries, fewer than ", tokens, " new tokens");
    for (index_t t = 0; t < tokens; ++t) {
      std::vector<double> q(static_cast<std::size_t>(dim));
      for (index_t c = 0; c < dim; ++c)
        q[static_cast<std::size_t>(c)] = detail::to_double(queries.token(t).row(h)[c]);
      // Keys stored rotated meet the query rotated the same way (q . k is unchanged).
      std::vector<double> rotated = q;
      const bool any_rotated =
          std::any_of(entries.begin(), entries.end(), [](const auto& e) { return e.rotated_key; });
      if (any_rotated) hadamard_rotate(rotated.data(), dim);
      const index_t visible = total - tokens + 1 + t;
      std::vector<double>& w = weights[static_cast<std::size_t>(t * num_query_heads + h)];
      w.assign(static_cast<std::size_t>(total), 0.0);
      double max_logit = -std::numeric_limits<double>::infinity();
      for (index_t e = 0; e < visible; ++e) {
        double dot = 0.0;
        for (index_t c = 0; c < dim; ++c) {
          const detail::reference_entry& entry = entries[static_cast<std::size_t>(e)];
          dot += (entry.rotated_key ? rotated : q)[static_cast<std::size_t>(c)] *
                 entry.key[static_cast<std::size_t>(c)];
        }
        w[static_cast<std::size_t>(e)] = s * dot + entries[static_cast<std::size_t>(e)].log_weight;
        max_logit = std::max(max_logit, w[static_cast<std::size_t>(e)]);
      }
      double denominator = 0.0;
      for (index_t e = 0; e < visible; ++e) {
        w[static_cast<std::size_t>(e)] = std::exp(w[static_cast<std::size_t>(e)] - max_logit);
        denominator += w[static_cast<std::size_t>(e)];
      }
      for (index_t e = 0; e < visible; ++e) w[static_cast<std::size_t>(e)] /= denominator;
    }
  }
  return weights;
}

/// Same contract as razorkv::decode_attention_multi, computed entry by entry in double from
/// attention_weights_multi. Returns [tokens, num_query_heads, head_dim], row-major.
template <class Source, class TQ>
std::vector<double> decode_attention_multi(const Source& cache, index_t layer,
                                           layer_view<TQ> queries,
                                           std::optional<double> scale = std::nullopt) {
  const auto weights = attention_weights_multi(cache, layer, queries, scale);
  const index_t num_query_heads = queries.heads(), tokens = queries.tokens();
  const index_t dim = cache.head_dim(), group = num_query_heads / cache.num_kv_heads();
  std::vector<double> out(static_cast<std::size_t>(tokens * num_query_heads * dim), 0.0);
  for (index_t h = 0; h < num_query_heads; ++h) {
    const auto entries = detail::reference_entries(cache, layer, h / group);
    for (index_t t = 0; t < tokens; ++t) {
      const std::vector<double>& w = weights[static_cast<std::size_t>(t * num_query_heads + h)];
      double* o = out.data() + (t * num_query_heads + h) * dim;
      for (std::size_t e = 0; e < entries.size(); ++e) {
        for (index_t c = 0; c < dim; ++c)
          o[c] += w[e] * entries[e].value[static_cast<std::size_t>(c)];
      }
    }
  }
  return out;
}

/// One new query per query head: returns [num_query_heads, head_dim], row-major.
template <class Source, class TQ>
std::vector<double> decode_attention(const Source& cache, index_t layer, matrix_view<TQ> queries,
                                     std::optional<double> scale = std::nullopt) {
  return decode_attention_multi(cache, layer,
                                layer_view<TQ>(queries.data(), 1, queries.rows(), queries.cols(),
                                               queries.cols(), queries.row_stride()),
                                scale);
}

}  // namespace reference
RAZORKV_END_NAMESPACE
