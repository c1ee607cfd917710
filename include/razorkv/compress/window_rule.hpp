// razorkv/compress/window_rule.hpp: how long a non-retrieval head's recent window is after N
// tokens (sinks, S0, C, or a fixed window): the one rule the cache and the memory calculator share.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// The sizing rule of a non-retrieval head. The defaults are the paper's: N0 = 4 sinks, and a
/// recent window of L_h = max(S0, ceil(N / C)) tokens with S0 = 4000, C = 5, after N tokens.
struct window_rule {
  index_t sinks = 4;  ///< N0: the first tokens every head keeps
  index_t s0 = 4000;  ///< S0: the shortest recent window
  double c = 5.0;     ///< C: the window is at least ceil(N / C) tokens; >= 1
  /// > 0: every non-retrieval head keeps exactly this many recent tokens whatever N is (a
  /// fixed-capacity deployment); 0: the window is max(S0, ceil(N / C)). A plan's per-head
  /// buffer override (the ALiBi branch) takes precedence over both.
  index_t fixed_window = 0;
};

/// Throws errc::kInvalidArgument naming the first bad field of `rule`.
inline void check_window_rule(const window_rule& rule, const char* where) {
  RAZORKV_CHECK(rule.sinks >= 0, kInvalidArgument, where, ": sinks (", rule.sinks,
                ") must be >= 0");
  RAZORKV_CHECK(rule.s0 >= 0, kInvalidArgument, where, ": s0 (", rule.s0, ") must be >= 0");
  RAZORKV_CHECK(rule.fixed_window >= 0, kInvalidArgument, where, ": fixed_window (",
                rule.fixed_window, ") must be >= 0");
  RAZORKV_CHECK(!(rule.s0 == 0 && rule.c == 0.0 && rule.fixed_window == 0), kInvalidArgument, where,
                ": s0 (0) and c (0) leave the recent window undefined; set c >= 1");
  RAZORKV_CHECK(std::isfinite(rule.c) && rule.c >= 1.0, kInvalidArgument, where, ": c (", rule.c,
                ") must be >= 1");
}

/// The recent window L_h of a non-retrieval head after `tokens` tokens: `buffer_override` when
/// given (the plan's per-head length), else the fixed window, else max(S0, ceil(N / C)). The
/// rule must have passed check_window_rule.
inline index_t recent_window(index_t tokens, const window_rule& rule,
                             std::optional<index_t> buffer_override = std::nullopt) noexcept {
  if (buffer_override) return *buffer_override;
  if (rule.fixed_window > 0) return rule.fixed_window;
  return std::max(rule.s0, static_cast<index_t>(std::ceil(static_cast<double>(tokens) / rule.c)));
}

RAZORKV_END_NAMESPACE
