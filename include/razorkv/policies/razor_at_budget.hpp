// razorkv/policies/razor_at_budget.hpp: RazorAttention sized to a memory budget instead of by
// S0 and C: the window that makes a plan's cache fit, for comparisons at equal memory.
#pragma once

#include <algorithm>

#include "razorkv/compress/razor_config.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"
#include "razorkv/select/head_plan.hpp"

RAZORKV_BEGIN_NAMESPACE

/// `base` with the fixed window that makes the plan's cache hold at most budget_entries entries
/// per kv head on average after a prompt of `tokens` tokens: retrieval groups hold all `tokens`,
/// every other group sinks (+ 1 compensation token unless kNone) + the largest window that fits
/// the rest. Throws kInvalidArgument when the budget cannot hold the retrieval groups plus sinks,
/// compensation token and a window of 1 elsewhere (the message gives the minimum), or when the
/// plan has retrieval heads only and the budget is below `tokens`.
inline razor_config razor_config_for_budget(const head_plan& plan, index_t tokens, index_t budget_entries,
                                            razor_config base = {}) {
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
    RAZORKV_CHECK(budget_entries >= tokens, kInvalidArgument, kWhere, ": the budget (", budget_entries,
                  " entries per head) is below the ", tokens, " tokens every head of an all-retrieval plan holds");
    return base;
  }
  const index_t needed = full + others * (overhead + 1);
  RAZORKV_CHECK(total >= needed, kInvalidArgument, kWhere, ": the budget (", budget_entries,
                " entries per head) cannot hold the plan's ", retrieval, " retrieval groups at ", tokens,
                " tokens plus sinks (", base.sinks, ")", overhead > base.sinks ? " + 1 compensation token" : "",
                " + a window of 1 in the other ", others, " groups: it needs at least ",
                (needed + groups - 1) / groups, " entries per head");
  base.fixed_window = (total - full) / others - overhead;
  return base;
}

RAZORKV_END_NAMESPACE
