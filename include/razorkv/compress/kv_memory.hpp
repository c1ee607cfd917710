// razorkv/compress/kv_memory.hpp: the KV-cache memory of a model, full and under RazorAttention
// (docs/method.md, sections 4-5), for a plan or a retrieval fraction, rows of the dtype or
// quantised (docs/quantisation.md); presets of common models.
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
#include "razorkv/quant/storage.hpp"

RAZORKV_BEGIN_NAMESPACE

/// What decides a head's size in memory: the window rule, whether the dropped tokens leave one
/// compensation token (false: plain truncation), and how rows are stored (windows and retrieval
/// heads as `storage` says, retrieval heads as `retrieval_storage` when set; sinks and the
/// compensation token always as the dtype). razor_config::budget() gives the one a cache uses.
struct razor_budget : window_rule {
  bool compensation_token = true;
  kv_storage storage;
  std::optional<kv_storage> retrieval_storage;

  const kv_storage& storage_for(bool retrieval) const noexcept {
    return retrieval && retrieval_storage ? *retrieval_storage : storage;
  }
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

/// Bytes of K and V for `entries` entries of one head, of which `plain` are rows of the dtype
/// (sinks, a compensation token) and the rest stored as `storage` says.
inline index_t head_kv_bytes(index_t entries, index_t plain, index_t head_dim, index_t dtype_bytes,
                             const kv_storage& storage) {
  const index_t stored_row =
      detail::checked_add(storage.key_row_bytes(head_dim, dtype_bytes),
                          storage.value_row_bytes(head_dim, dtype_bytes), "kv bytes");
  return detail::checked_add(head_kv_bytes(plain, head_dim, dtype_bytes),
                             detail::checked_mul(entries - plain, stored_row, "kv bytes"),
                             "kv bytes");
}

/// Full-cache bytes of a model at `tokens` tokens, every row stored as `storage` says (rows of
/// the dtype by default; a dense_kv_cache given that storage holds this many).
inline index_t full_kv_bytes(const model_shape& m, index_t tokens, index_t dtype_bytes,
                             const kv_storage& storage = {}) {
  RAZORKV_CHECK(tokens >= 0 && dtype_bytes > 0, kInvalidArgument, "full_kv_bytes: tokens (", tokens,
                ") and dtype_bytes (", dtype_bytes, ") must be >= 0 and > 0");
  check_storage(storage, m.head_dim, "full_kv_bytes");
  return detail::checked_mul(detail::checked_mul(m.num_layers, m.num_kv_heads, "kv heads"),
                             head_kv_bytes(tokens, 0, m.head_dim, dtype_bytes, storage),
                             "kv bytes");
}

namespace detail {
// Bytes of one head after compressing `tokens` tokens: a retrieval head keeps them all as its
// storage says; another keeps its sinks (and a compensation token) as the dtype and its window
// as its storage says.
inline index_t razor_head_bytes(bool retrieval, index_t tokens, const razor_budget& b,
                                std::optional<index_t> buffer_override, index_t head_dim,
                                index_t dtype_bytes) {
  if (retrieval) return head_kv_bytes(tokens, 0, head_dim, dtype_bytes, b.storage_for(true));
  const index_t entries = compressed_entries(tokens, b, buffer_override);
  const index_t sinks = std::min(b.sinks, tokens);
  const index_t plain = sinks + (entries < tokens && b.compensation_token ? 1 : 0);
  return head_kv_bytes(entries, plain, head_dim, dtype_bytes, b.storage_for(false));
}
inline void check_budget_storage(const razor_budget& b, index_t head_dim, const char* where) {
  check_storage(b.storage, head_dim, where);
  if (b.retrieval_storage) check_storage(*b.retrieval_storage, head_dim, where);
}
}  // namespace detail

/// RazorAttention bytes of a model at `tokens` tokens with the plan's retrieval groups full.
inline index_t compressed_kv_bytes(const head_plan& plan, index_t tokens, const razor_budget& b,
                                   index_t dtype_bytes) {
  RAZORKV_CHECK(dtype_bytes > 0, kInvalidArgument, "compressed_kv_bytes: dtype_bytes (",
                dtype_bytes, ") must be > 0");
  const model_shape& m = plan.shape();
  detail::check_budget_storage(b, m.head_dim, "compressed_kv_bytes");
  index_t total = 0;
  for (index_t l = 0; l < m.num_layers; ++l) {
    for (index_t h = 0; h < m.num_kv_heads; ++h) {
      total = detail::checked_add(
          total,
          detail::razor_head_bytes(plan.is_retrieval(l, h), tokens, b, plan.buffer_override(l, h),
                                   m.head_dim, dtype_bytes),
          "kv bytes");
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
  RAZORKV_CHECK(dtype_bytes > 0, kInvalidArgument, "compressed_kv_bytes: dtype_bytes (",
                dtype_bytes, ") must be > 0");
  detail::check_budget_storage(b, m.head_dim, "compressed_kv_bytes");
  const index_t groups = m.num_layers * m.num_kv_heads;
  const index_t full =
      static_cast<index_t>(std::llround(retrieval_fraction * static_cast<double>(groups)));
  const auto head = [&](bool retrieval) {
    return detail::razor_head_bytes(retrieval, tokens, b, std::nullopt, m.head_dim, dtype_bytes);
  };
  return detail::checked_add(detail::checked_mul(full, head(true), "kv bytes"),
                             detail::checked_mul(groups - full, head(false), "kv bytes"),
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
