// razorkv/policies/memory_budget.hpp: one budget unit for every KV-compression policy (entries
// per kv head, bytes, or a fraction of the full cache), so that policies compare at equal memory.
#pragma once

#include <cmath>

#include "razorkv/config.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// The unit a memory_budget is stated in.
enum class budget_unit {
  kEntriesPerHead,  ///< K/V entries per kv head, averaged over every (layer, kv head)
  kBytes,           ///< K/V bytes of the whole model (every layer, every kv head)
  kFractionOfFull,  ///< a fraction in (0, 1] of the full cache at the prompt's length
};

inline const char* budget_unit_name(budget_unit unit) noexcept {
  switch (unit) {
    case budget_unit::kEntriesPerHead:
      return "entries_per_head";
    case budget_unit::kBytes:
      return "bytes";
    case budget_unit::kFractionOfFull:
      return "fraction_of_full";
  }
  return "unknown";
}

/// How much K/V memory a policy may hold after compressing a prompt. Every policy turns it into
/// the same number of entries per kv head (entries_per_head below) and holds at most that many
/// on average, so two policies given the same budget hold the same memory (to one entry per
/// head). Under GQA a kv head's K/V is counted once, whatever the number of query heads.
struct memory_budget {
  budget_unit unit = budget_unit::kEntriesPerHead;
  double amount = 0.0;

  static memory_budget entries_per_head(index_t entries) {
    return {budget_unit::kEntriesPerHead, static_cast<double>(entries)};
  }
  static memory_budget bytes(index_t bytes) {
    return {budget_unit::kBytes, static_cast<double>(bytes)};
  }
  static memory_budget fraction_of_full(double fraction) {
    return {budget_unit::kFractionOfFull, fraction};
  }
};

/// The entries per kv head that `budget` allows a cache of model `shape`, after a prompt of
/// `tokens` tokens stored in `dtype_bytes`-byte elements. Bytes are rounded down to whole
/// entries per head; a fraction f gives floor(f * tokens). Throws kInvalidArgument naming the
/// unit and the amount when the budget is not a positive amount of its unit, not a whole number
/// of entries, or less than one entry per kv head.
inline index_t entries_per_head(const memory_budget& budget, const model_shape& shape,
                                index_t tokens, index_t dtype_bytes) {
  constexpr const char* kWhere = "memory_budget";
  RAZORKV_CHECK(tokens > 0, kInvalidArgument, kWhere, ": tokens (", tokens, ") must be > 0");
  RAZORKV_CHECK(dtype_bytes > 0, kInvalidArgument, kWhere, ": dtype_bytes (", dtype_bytes,
                ") must be > 0");
  RAZORKV_CHECK(shape.num_layers > 0 && shape.num_kv_heads > 0 && shape.head_dim > 0,
                kInvalidArgument, kWhere, ": the model shape (", shape.num_layers, " layers, ",
                shape.num_kv_heads, " kv heads, head_dim ", shape.head_dim, ") must be positive");
  const double amount = budget.amount;
  const char* unit = budget_unit_name(budget.unit);
  RAZORKV_CHECK(budget.unit == budget_unit::kEntriesPerHead || budget.unit == budget_unit::kBytes ||
                    budget.unit == budget_unit::kFractionOfFull,
                kInvalidArgument, kWhere, ": unit (", static_cast<int>(budget.unit),
                ") is not a budget_unit");
  RAZORKV_CHECK(std::isfinite(amount) && amount > 0.0, kInvalidArgument, kWhere, ": ", unit, " (",
                amount, ") must be > 0");
  switch (budget.unit) {
    case budget_unit::kEntriesPerHead:
      RAZORKV_CHECK(amount == std::floor(amount) && amount < 9.0e15, kInvalidArgument, kWhere,
                    ": entries_per_head (", amount, ") must be a whole number of entries");
      return static_cast<index_t>(amount);
    case budget_unit::kBytes: {
      RAZORKV_CHECK(amount == std::floor(amount) && amount < 9.0e15, kInvalidArgument, kWhere,
                    ": bytes (", amount, ") must be a whole number of bytes");
      const index_t per_entry =
          detail::checked_mul(detail::checked_mul(shape.num_layers * shape.num_kv_heads,
                                                  2 * shape.head_dim, "memory_budget: bytes"),
                              dtype_bytes, "memory_budget: bytes");
      const index_t entries = static_cast<index_t>(amount) / per_entry;
      RAZORKV_CHECK(entries >= 1, kInvalidArgument, kWhere, ": bytes (", amount,
                    ") is less than one entry per kv head (", per_entry, " bytes for ",
                    shape.num_layers, " layers x ", shape.num_kv_heads, " kv heads x K and V of ",
                    shape.head_dim, " x ", dtype_bytes,
                    " bytes); a budget in bytes counts the whole model's K and V");
      return entries;
    }
    case budget_unit::kFractionOfFull: {
      RAZORKV_CHECK(amount <= 1.0, kInvalidArgument, kWhere, ": fraction_of_full (", amount,
                    ") must be in (0, 1]; for a number of entries use "
                    "memory_budget::entries_per_head, for bytes "
                    "memory_budget::bytes");
      const auto entries = static_cast<index_t>(std::floor(amount * static_cast<double>(tokens)));
      RAZORKV_CHECK(entries >= 1, kInvalidArgument, kWhere, ": fraction_of_full (", amount, ") of ",
                    tokens, " tokens is less than one entry per kv head");
      return entries;
    }
  }
  return 0;
}

RAZORKV_END_NAMESPACE
