// razorkv/policies/snapkv.hpp: SnapKV (Li et al., 2024) at a memory budget: per kv head, the
// prompt positions its observation window attends to most (pooled), plus the window itself.
#pragma once

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"
#include "razorkv/policies/observed_attention.hpp"
#include "razorkv/policies/policy.hpp"
#include "razorkv/policies/selected_cache.hpp"

RAZORKV_BEGIN_NAMESPACE

/// How SnapKV smooths the votes of its observation window before ranking positions.
enum class snapkv_pooling {
  kMax,      ///< 1-D max pooling (the SnapKV reference's default)
  kAverage,  ///< 1-D average pooling, zero padded at the ends (PyTorch's avg_pool1d)
};

/// SnapKV's parameters; the defaults are the paper's.
struct snapkv_config {
  index_t window = 32;  ///< w: the prompt's last w queries vote, and their w tokens are always kept
  index_t kernel = 5;   ///< pooling width (odd; 1 disables pooling)
  snapkv_pooling pooling = snapkv_pooling::kMax;
};

/// Throws kInvalidArgument naming the bad field, or when the budget or the prompt cannot hold
/// the observation window.
inline void check_snapkv(const snapkv_config& config, index_t tokens, index_t budget_entries,
                         const char* where) {
  RAZORKV_CHECK(config.window >= 1, kInvalidArgument, where, ": window (", config.window,
                ") must be >= 1");
  RAZORKV_CHECK(config.kernel >= 1 && config.kernel % 2 == 1, kInvalidArgument, where, ": kernel (",
                config.kernel, ") must be odd and >= 1");
  RAZORKV_CHECK(
      config.pooling == snapkv_pooling::kMax || config.pooling == snapkv_pooling::kAverage,
      kInvalidArgument, where, ": pooling (", static_cast<int>(config.pooling),
      ") is not a snapkv_pooling");
  RAZORKV_CHECK(config.window <= tokens, kInvalidArgument, where, ": window (", config.window,
                ") is longer than the prompt (", tokens, " tokens)");
  RAZORKV_CHECK(budget_entries >= config.window, kInvalidArgument, where, ": the budget (",
                budget_entries, " entries per head) is smaller than the observation window (",
                config.window, ")");
}

/// The prompt positions one kv head keeps: the last `window` positions, and the
/// budget_entries - window positions of the prefix [0, N - window) whose pooled votes are
/// largest (ties to the earlier position); every position when N <= budget_entries. Increasing.
///
/// \param votes [N] attention mass from the window's queries (observed_attention of the last
///              `window` queries, one kv head), only the prefix of which is read
inline std::vector<index_t> snapkv_positions(const double* votes, index_t tokens,
                                             index_t budget_entries,
                                             const snapkv_config& config = {}) {
  check_snapkv(config, tokens, budget_entries, "snapkv_positions");
  std::vector<index_t> kept;
  if (tokens <= budget_entries) {
    kept.resize(static_cast<std::size_t>(tokens));
    std::iota(kept.begin(), kept.end(), index_t{0});
    return kept;
  }
  const index_t prefix = tokens - config.window, half = config.kernel / 2;
  std::vector<double> pooled(static_cast<std::size_t>(prefix));
  for (index_t j = 0; j < prefix; ++j) {
    const index_t lo = std::max<index_t>(0, j - half), hi = std::min(prefix - 1, j + half);
    double value =
        config.pooling == snapkv_pooling::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
    for (index_t i = lo; i <= hi; ++i) {
      value = config.pooling == snapkv_pooling::kMax ? std::max(value, votes[i]) : value + votes[i];
    }
    pooled[static_cast<std::size_t>(j)] =
        config.pooling == snapkv_pooling::kMax ? value : value / static_cast<double>(config.kernel);
  }
  std::vector<index_t> order(static_cast<std::size_t>(prefix));
  std::iota(order.begin(), order.end(), index_t{0});
  const auto chosen = static_cast<std::ptrdiff_t>(budget_entries - config.window);
  std::partial_sort(order.begin(), order.begin() + chosen, order.end(), [&](index_t a, index_t b) {
    const double pa = pooled[static_cast<std::size_t>(a)], pb = pooled[static_cast<std::size_t>(b)];
    return pa != pb ? pa > pb : a < b;
  });
  kept.assign(order.begin(), order.begin() + chosen);
  std::sort(kept.begin(), kept.end());
  for (index_t p = prefix; p < tokens; ++p) kept.push_back(p);
  return kept;
}

/// SnapKV on one layer: the attention of the prompt's last `window` queries (window_queries,
/// [window, num_query_heads, head_dim]; a GQA group's query heads vote together for their kv
/// head) picks each kv head's positions, which `cache` keeps from keys and values
/// ([N, num_kv_heads, head_dim]). On error the cache is unchanged.
template <class T, class TQ>
void snapkv_compress_layer(selected_kv_cache<T>& cache, index_t layer,
                           layer_view<TQ> window_queries, layer_view<const T> keys,
                           layer_view<const T> values, index_t budget_entries,
                           const snapkv_config& config = {},
                           const observation_options& options = {}) {
  constexpr const char* kWhere = "snapkv_compress_layer";
  check_snapkv(config, keys.tokens(), budget_entries, kWhere);
  RAZORKV_CHECK(window_queries.tokens() == config.window, kShapeMismatch, kWhere,
                ": window_queries.tokens() (", window_queries.tokens(), ") != window (",
                config.window, ")");
  const attention_mass votes = observed_attention(window_queries, keys, options);
  std::vector<std::vector<index_t>> keep;
  for (index_t h = 0; h < votes.num_kv_heads; ++h) {
    keep.push_back(snapkv_positions(votes.head(h), keys.tokens(), budget_entries, config));
  }
  cache.compress_layer(layer, keys, values, keep);
}

/// SnapKV as a policy (see the policy contract): the prompt's last `config.window` queries
/// (which the prompt_kv must hold) pick each kv head's positions.
struct snapkv_policy {
  std::string name = "snapkv";
  snapkv_config config;

  snapkv_policy() = default;
  explicit snapkv_policy(const snapkv_config& snapkv) : config(snapkv) {}

  template <class T>
  selected_kv_cache<T> compress(const prompt_kv<T>& prompt, index_t budget_entries) const {
    const model_shape& shape = prompt.shape();
    const index_t tokens = prompt.tokens();
    check_snapkv(config, tokens, budget_entries, "snapkv_policy");
    selected_kv_cache<T> cache(shape.num_layers, shape.num_kv_heads, shape.head_dim,
                               prompt.cache_resource);
    for (index_t l = 0; l < shape.num_layers; ++l) {
      const attention_mass votes = prompt.observed(l, config.window, "snapkv_policy: window");
      std::vector<std::vector<index_t>> keep;
      for (index_t h = 0; h < shape.num_kv_heads; ++h) {
        keep.push_back(snapkv_positions(votes.head(h), tokens, budget_entries, config));
      }
      cache.compress_layer(l, prompt.layer(l).keys, prompt.layer(l).values, keep);
    }
    return cache;
  }
};

RAZORKV_END_NAMESPACE
