// razorkv/compress/kv_memory.hpp: the KV-cache memory of a model, full and under RazorAttention
// (docs/method.md, sections 4-5), for a plan or a retrieval fraction; presets of common models.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "razorkv/compress/window_rule.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// What decides a non-retrieval head's size in memory: the window rule, and whether the dropped
/// tokens leave one compensation token (false: plain truncation). razor_config::budget() gives
/// the one a cache uses.
struct razor_budget : window_rule {
  bool compensation_token = true;
};

inline void check_budget(const razor_budget& b, const char* where) { check_window_rule(b, where); }

/// Entries a non-retrieval head holds after compressing `tokens` tokens: all of them when
/// tokens <= sinks + window, else sinks + 1 compensation token + window (sinks + window without
/// a compensation token), where the window is recent_window(tokens, b, buffer_override).
inline index_t compressed_entries(index_t tokens, const razor_budget& b,
                                  std::optional<index_t> buffer_override = std::nullopt) {
  check_budget(b, "compressed_entries");
  RAZORKV_CHECK(tokens >= 0, kInvalidArgument, "compressed_entries: tokens (", tokens,
                ") must be >= 0");
  RAZORKV_CHECK(!buffer_override || *buffer_override > 0, kInvalidArgument,
                "compressed_entries: buffer_override (", buffer_override.value_or(0),
                ") must be > 0");
  const index_t window = recent_window(tokens, b, buffer_override);
  if (tokens <= b.sinks + window) return tokens;
  return b.sinks + (b.compensation_token ? 1 : 0) + window;
}

/// Bytes of K and V for `entries` entries of one head: 2 * entries * head_dim * dtype_bytes.
/// (The per-head count of a compensation token is metadata and not counted.)
inline index_t head_kv_bytes(index_t entries, index_t head_dim, index_t dtype_bytes) {
  // Each product checked, so that an overflow names the values the caller gave.
  const index_t k_and_v = detail::checked_mul(entries, 2, "kv bytes");
  return detail::checked_mul(detail::checked_mul(k_and_v, head_dim, "kv bytes"), dtype_bytes,
                             "kv bytes");
}

/// Full-cache bytes of a model at `tokens` tokens.
inline index_t full_kv_bytes(const model_shape& m, index_t tokens, index_t dtype_bytes) {
  RAZORKV_CHECK(tokens >= 0 && dtype_bytes > 0, kInvalidArgument, "full_kv_bytes: tokens (", tokens,
                ") and dtype_bytes (", dtype_bytes, ") must be >= 0 and > 0");
  return detail::checked_mul(detail::checked_mul(m.num_layers, m.num_kv_heads, "kv heads"),
                             head_kv_bytes(tokens, m.head_dim, dtype_bytes), "kv bytes");
}

/// RazorAttention bytes of a model at `tokens` tokens with the plan's retrieval groups full.
inline index_t compressed_kv_bytes(const head_plan& plan, index_t tokens, const razor_budget& b,
                                   index_t dtype_bytes) {
  RAZORKV_CHECK(dtype_bytes > 0, kInvalidArgument, "compressed_kv_bytes: dtype_bytes (",
                dtype_bytes, ") must be > 0");
  const model_shape& m = plan.shape();
  index_t total = 0;
  for (index_t l = 0; l < m.num_layers; ++l) {
    for (index_t h = 0; h < m.num_kv_heads; ++h) {
      const index_t entries = plan.is_retrieval(l, h)
                                  ? tokens
                                  : compressed_entries(tokens, b, plan.buffer_override(l, h));
      total =
          detail::checked_add(total, head_kv_bytes(entries, m.head_dim, dtype_bytes), "kv bytes");
    }
  }
  return total;
}

/// The same for a fraction of retrieval groups instead of a plan: round(fraction * groups)
/// groups full, the rest compressed.
inline index_t compressed_kv_bytes(const model_shape& m, double retrieval_fraction, index_t tokens,
                                   const razor_budget& b, index_t dtype_bytes) {
  RAZORKV_CHECK(
      std::isfinite(retrieval_fraction) && retrieval_fraction >= 0.0 && retrieval_fraction <= 1.0,
      kInvalidArgument, "compressed_kv_bytes: retrieval_fraction (", retrieval_fraction,
      ") must be in [0, 1]");
  const index_t groups = m.num_layers * m.num_kv_heads;
  const index_t full =
      static_cast<index_t>(std::llround(retrieval_fraction * static_cast<double>(groups)));
  return detail::checked_add(
      detail::checked_mul(full, head_kv_bytes(tokens, m.head_dim, dtype_bytes), "kv bytes"),
      detail::checked_mul(groups - full,
                          head_kv_bytes(compressed_entries(tokens, b), m.head_dim, dtype_bytes),
                          "kv bytes"),
      "kv bytes");
}

/// Published shapes of common models (name, shape).
struct model_preset {
  const char* name;
  model_shape shape;
};
inline const std::vector<model_preset>& model_presets() {
  static const std::vector<model_preset> presets = {
      {"llama-2-7b", {32, 32, 32, 128}},  {"llama-3-8b", {32, 32, 8, 128}},
      {"llama-3.1-8b", {32, 32, 8, 128}}, {"mistral-7b", {32, 32, 8, 128}},
      {"qwen1.5-7b", {32, 32, 32, 128}},  {"qwen2-7b", {28, 28, 4, 128}},
  };
  return presets;
}
/// The preset called `name`; throws naming the known presets otherwise.
inline model_shape model_preset_shape(const std::string& name) {
  std::string known;
  for (const auto& p : model_presets()) {
    if (name == p.name) return p.shape;
    known += std::string(known.empty() ? "" : ", ") + p.name;
  }
  RAZORKV_CHECK(false, kInvalidArgument, "model_preset_shape: unknown model \"", name,
                "\" (known: ", known, ")");
  return {};
}

RAZORKV_END_NAMESPACE
