// razorkv/policies/streaming_llm.hpp: StreamingLLM (Xiao et al., 2023) at a memory budget: every
// head keeps the first `sinks` tokens and a sliding recent window, nothing else.
#pragma once

#include <memory_resource>
#include <string>

#include "razorkv/compress/razor_cache.hpp"
#include "razorkv/compress/razor_config.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"
#include "razorkv/policies/policy.hpp"

RAZORKV_BEGIN_NAMESPACE

/// StreamingLLM is RazorAttention with no retrieval heads and no compensation token: sinks plus
/// a window of budget - sinks tokens on every head, sliding during decode (bounded). This is the
/// razor_config that says so; use it with a plan that has no retrieval heads
/// (make_streaming_llm_cache does both).
inline razor_config streaming_llm_config(index_t budget_entries, index_t sinks = 4) {
  constexpr const char* kWhere = "streaming_llm_config";
  RAZORKV_CHECK(sinks >= 0, kInvalidArgument, kWhere, ": sinks (", sinks, ") must be >= 0");
  RAZORKV_CHECK(budget_entries >= sinks + 1, kInvalidArgument, kWhere, ": the budget (",
                budget_entries, " entries per head) is smaller than sinks (", sinks,
                ") + a recent window of at least 1");
  razor_config config;
  config.sinks = sinks;
  config.fixed_window = budget_entries - sinks;
  config.compensation = compensation_mode::kNone;
  config.decode = decode_mode::kBounded;
  return config;
}

/// An empty StreamingLLM cache for `shape` (fill it with compress_layer, as a razor_kv_cache),
/// its K/V rows from `resource` (null: the default resource).
template <class T>
razor_kv_cache<T> make_streaming_llm_cache(const model_shape& shape, index_t budget_entries,
                                           index_t sinks = 4,
                                           std::pmr::memory_resource* resource = nullptr) {
  head_plan no_retrieval(shape);
  no_retrieval.selection().method = "streaming_llm";
  return razor_kv_cache<T>(std::move(no_retrieval), streaming_llm_config(budget_entries, sinks),
                           resource);
}

/// StreamingLLM as a policy (see the policy contract): every head keeps `sinks` and the
/// largest window the budget allows.
struct streaming_llm_policy {
  std::string name = "streaming_llm";
  index_t sinks = 4;

  streaming_llm_policy() = default;
  explicit streaming_llm_policy(index_t sink_tokens) : sinks(sink_tokens) {}

  template <class T>
  razor_kv_cache<T> compress(const prompt_kv<T>& prompt, index_t budget_entries) const {
    razor_kv_cache<T> cache =
        make_streaming_llm_cache<T>(prompt.shape(), budget_entries, sinks, prompt.cache_resource);
    for (index_t l = 0; l < prompt.shape().num_layers; ++l) {
      cache.compress_layer(l, prompt.layer(l).keys, prompt.layer(l).values, prompt.parallel_for);
    }
    return cache;
  }
};

RAZORKV_END_NAMESPACE
