// razorkv/policies/razor.hpp: RazorAttention sized to a memory budget instead of by
// S0 and C (the window that makes a plan's cache fit), and razor_policy, which uses it.
#pragma once

#include <algorithm>
#include <string>
#include <utility>

#include "razorkv/compress/razor_cache.hpp"
#include "razorkv/compress/razor_config.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"
#include "razorkv/policies/policy.hpp"

RAZORKV_BEGIN_NAMESPACE

/// `base` with the fixed window that makes the plan's cache hold at most budget_entries entries
/// per kv head on average after a prompt of `tokens` tokens: retrieval groups hold all `tokens`,
/// every other group sinks (+ 1 compensation token unless kNone) + the largest window that fits
/// the rest. Throws kInvalidArgument when the budget cannot hold the retrieval groups plus sinks,
/// compensation token and a window of 1 elsewhere (the message gives the minimum), or when the
/// plan has retrieval heads only and the budget is below `tokens`.
inline razor_config razor_config_for_budget(const head_plan& plan, index_t tokens,
                                            index_t budget_entries, razor_config base = {}) {
  constexpr const char* kWhere = "razor_config_for_budget";
  check_config(base, kWhere);
  RAZORKV_CHECK(tokens > 0, kInvalidArgument, kWhere, ": tokens (", tokens, ") must be > 0");
  RAZORKV_CHECK(budget_entries > 0, kInvalidArgument, kWhere, ": the budget (", budget_entries,
                " entries per head) must be > 0");
  const model_shape& shape = plan.shape();
  const index_t groups = shape.num_layers * shape.num_kv_heads;
  const index_t retrieval = plan.num_retrieval(), others = groups - retrieval;
  const index_t total = detail::checked_mul(groups, budget_entries, kWhere);
  const index_t full = detail::checked_mul(retrieval, tokens, kWhere);
  const index_t overhead = base.sinks + (base.compensation == compensation_mode::kNone ? 0 : 1);
  if (others == 0) {
    RAZORKV_CHECK(budget_entries >= tokens, kInvalidArgument, kWhere, ": the budget (",
                  budget_entries, " entries per head) is below the ", tokens,
                  " tokens every head of an all-retrieval plan holds");
    return base;
  }
  const index_t needed = full + others * (overhead + 1);
  RAZORKV_CHECK(total >= needed, kInvalidArgument, kWhere, ": the budget (", budget_entries,
                " entries per head) cannot hold the plan's ", retrieval, " retrieval groups at ",
                tokens, " tokens plus sinks (", base.sinks, ")",
                overhead > base.sinks ? " + 1 compensation token" : "",
                " + a window of 1 in the other ", others, " groups: it needs at least ",
                (needed + groups - 1) / groups, " entries per head");
  base.fixed_window = (total - full) / others - overhead;
  return base;
}

/// RazorAttention as a policy (see the policy contract): `plan`'s retrieval groups keep every
/// token, the others sinks, a compensation token and the window that fills the budget
/// (razor_config_for_budget); `config` gives the sinks and the compensation and decode modes.
struct razor_policy {
  std::string name;
  head_plan plan;
  razor_config config;

  razor_policy(std::string policy_name, head_plan retrieval_plan, const razor_config& base = {})
      : name(std::move(policy_name)), plan(std::move(retrieval_plan)), config(base) {}

  template <class T>
  razor_kv_cache<T> compress(const prompt_kv<T>& prompt, index_t budget_entries) const {
    plan.validate_against(prompt.shape());
    razor_kv_cache<T> cache(plan,
                            razor_config_for_budget(plan, prompt.tokens(), budget_entries, config),
                            prompt.cache_resource);
    for (index_t l = 0; l < prompt.shape().num_layers; ++l) {
      cache.compress_layer(l, prompt.layer(l).keys, prompt.layer(l).values, prompt.parallel_for);
    }
    return cache;
  }
};

RAZORKV_END_NAMESPACE
