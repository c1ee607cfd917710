// razorkv/io/plan_files.hpp: a head plan read from, or written to, any format razorkv knows
// (its own JSON, mindspore_gs JSON, DuoAttention TSV), by name or recognised from the text.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "razorkv/config.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/error.hpp"
#include "razorkv/io/duoattention.hpp"
#include "razorkv/io/json.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace io {

enum class plan_format {
  kAuto,         ///< recognised from the text (reading only)
  kRazorkv,      ///< razorkv's JSON (head_plan_to_json): carries its shape
  kMindspore,    ///< mindspore_gs JSON {"<layer>": [kv heads]}: needs the model's shape
  kDuoattention  ///< DuoAttention's gate TSV (layers x kv heads): needs the shape and a rule
};

inline const char* plan_format_name(plan_format f) noexcept {
  switch (f) {
    case plan_format::kAuto:
      return "auto";
    case plan_format::kRazorkv:
      return "razorkv";
    case plan_format::kMindspore:
      return "mindspore";
    case plan_format::kDuoattention:
      return "duoattention";
  }
  return "unknown";
}

/// The format plan_format_name calls `name`: "auto", "razorkv", "mindspore" or "duoattention";
/// anything else is kInvalidArgument.
inline plan_format parse_plan_format(const std::string& name) {
  for (const plan_format f : {plan_format::kAuto, plan_format::kRazorkv, plan_format::kMindspore,
                              plan_format::kDuoattention}) {
    if (name == plan_format_name(f)) return f;
  }
  RAZORKV_CHECK(false, kInvalidArgument, "plan format (\"", name,
                "\") must be auto, razorkv, mindspore or duoattention");
  return plan_format::kAuto;
}

/// The format of a plan file's text: a JSON object with "format" is razorkv's, any other JSON
/// object mindspore_gs's, and text that is not JSON (or a bare number: a one-gate TSV) a
/// DuoAttention TSV.
inline plan_format detect_plan_format(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || j.is_number()) return plan_format::kDuoattention;
  if (j.is_object() && j.contains("format")) return plan_format::kRazorkv;
  RAZORKV_CHECK(j.is_object(), kParseError,
                "detect_plan_format: a JSON plan must be an object, this one is ", j.type_name());
  return plan_format::kMindspore;
}

/// What reading a plan needs beyond its text.
struct plan_read_options {
  plan_format format = plan_format::kAuto;
  /// The model's shape: required by mindspore_gs and DuoAttention files (which do not carry
  /// it); a razorkv file is checked against it when given.
  std::optional<model_shape> shape;
  /// DuoAttention gates: threshold, or sparsity when set (see duoattention_import).
  duoattention_import gates;
};

/// Reads a plan in any format; errors name the format and, for a missing shape, what to give.
inline head_plan parse_head_plan(const std::string& text, const plan_read_options& options = {}) {
  const plan_format format =
      options.format == plan_format::kAuto ? detect_plan_format(text) : options.format;
  if (format == plan_format::kRazorkv) {
    head_plan plan = head_plan_from_json(text);
    if (options.shape) plan.validate_against(*options.shape);
    return plan;
  }
  RAZORKV_CHECK(options.shape.has_value(), kInvalidArgument, "parse_head_plan: a ",
                plan_format_name(format),
                " plan does not carry the model's shape; give num_layers, num_query_heads, "
                "num_kv_heads and head_dim");
  if (format == plan_format::kMindspore) return head_plan_from_mindspore(text, *options.shape);
  return head_plan_from_duoattention(text, *options.shape, options.gates);
}

/// The plan as `format`'s text. A DuoAttention file gets gate 1 for a retrieval head and 0 for
/// any other, which the default threshold (0.5) reads back as the same plan; kAuto is
/// kInvalidArgument.
inline std::string format_head_plan(const head_plan& plan, plan_format format) {
  RAZORKV_CHECK(format != plan_format::kAuto, kInvalidArgument,
                "format_head_plan: name the format to write (razorkv, mindspore or duoattention)");
  if (format == plan_format::kRazorkv) return head_plan_to_json(plan);
  if (format == plan_format::kMindspore) return head_plan_to_mindspore(plan);
  std::string tsv;
  for (index_t l = 0; l < plan.shape().num_layers; ++l) {
    for (index_t h = 0; h < plan.shape().num_kv_heads; ++h)
      tsv += std::string(h ? "\t" : "") + (plan.is_retrieval(l, h) ? "1" : "0");
    tsv += "\n";
  }
  return tsv;
}

}  // namespace io
RAZORKV_END_NAMESPACE
