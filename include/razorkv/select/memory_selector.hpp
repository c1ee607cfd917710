// razorkv/select/memory_selector.hpp: selection by memory instead of by ratio: the most
// retrieval groups whose RazorAttention cache fits a byte budget at a given sequence length.
#pragma once

#include "razorkv/compress/kv_memory.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/error.hpp"
#include "razorkv/scoring/head_scores.hpp"
#include "razorkv/select/head_selector.hpp"

RAZORKV_BEGIN_NAMESPACE

/// The target of select_for_budget.
struct memory_target {
  index_t budget_bytes = 0;  ///< K/V bytes allowed for the whole model
  index_t seq_len = 0;       ///< at this many tokens
  index_t dtype_bytes = 2;
  razor_budget budget;  ///< N0, S0, C of the non-retrieval heads
};

/// Scales config's ratios (keeping their proportion) to the largest overall retrieval ratio
/// whose plan fits the target, and returns that plan; its provenance records the ratios chosen.
/// Throws if even no retrieval group fits, naming the budget and the smallest possible size.
inline head_plan select_for_budget(const head_scores& scores, index_t head_dim,
                                   const memory_target& target,
                                   const selection_config& config = {}) {
  RAZORKV_CHECK(target.budget_bytes > 0 && target.seq_len > 0 && target.dtype_bytes > 0,
                kInvalidArgument, "select_for_budget: budget_bytes (", target.budget_bytes,
                "), seq_len (", target.seq_len, ") and dtype_bytes (", target.dtype_bytes,
                ") must be > 0");
  const double share = config.induction_ratio + config.echo_ratio;
  RAZORKV_CHECK(share > 0, kInvalidArgument,
                "select_for_budget: induction_ratio + echo_ratio must be > 0");
  const index_t groups = scores.num_layers() * scores.num_kv_heads();
  // Try k = groups, groups - 1, ... retrieval units; the first plan that fits is the largest.
  for (index_t k = groups; k >= 0; --k) {
    selection_config scaled = config;
    const double overall = static_cast<double>(k) / static_cast<double>(groups);
    scaled.induction_ratio = overall * config.induction_ratio / share;
    scaled.echo_ratio = overall * config.echo_ratio / share;
    head_plan plan = select_retrieval_heads(scores, head_dim, scaled);
    if (compressed_kv_bytes(plan, target.seq_len, target.budget, target.dtype_bytes) <=
        target.budget_bytes) {
      plan.selection().method = "razorattention, memory budget";
      return plan;
    }
  }
  head_plan none(
      model_shape{scores.num_layers(), scores.num_query_heads(), scores.num_kv_heads(), head_dim});
  RAZORKV_CHECK(false, kInvalidArgument, "select_for_budget: budget_bytes (", target.budget_bytes,
                ") is below the smallest RazorAttention cache at seq_len ", target.seq_len, " (",
                compressed_kv_bytes(none, target.seq_len, target.budget, target.dtype_bytes),
                " bytes)");
  return none;
}

RAZORKV_END_NAMESPACE
