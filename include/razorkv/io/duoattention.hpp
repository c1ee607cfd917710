// razorkv/io/duoattention.hpp: import of DuoAttention's full_attention_heads.tsv (one row per
// layer, one tab-separated gate value per kv head) into a head plan.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "razorkv/config.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace io {

/// How gate values become retrieval heads: value > threshold, or (when sparsity is set) the
/// round((1 - sparsity) * groups) largest values, ties to the lower layer then head.
struct duoattention_import {
  double threshold = 0.5;
  std::optional<double> sparsity;
};

/// Parses the TSV for `shape` (rows x columns must be num_layers x num_kv_heads).
inline head_plan head_plan_from_duoattention(const std::string& tsv, const model_shape& shape,
                                             const duoattention_import& options = {}) {
  constexpr const char* kWhere = "head_plan_from_duoattention";
  head_plan plan(shape);  // checks the shape before reading
  plan.selection().method = "duoattention import";
  std::vector<double> gates;
  std::istringstream lines(tsv);
  std::string line;
  index_t rows = 0;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    index_t columns = 0;
    std::size_t start = 0;
    while (start <= line.size()) {
      const std::size_t tab = std::min(line.find('\t', start), line.size());
      const std::string field = line.substr(start, tab - start);
      std::size_t used = 0;
      double value = 0.0;
      try {
        value = std::stod(field, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      RAZORKV_CHECK(used == field.size() && used > 0 && std::isfinite(value), kParseError, kWhere,
                    ": row ", rows, " column ", columns, ": \"", field,
                    "\" is not a finite number");
      gates.push_back(value);
      ++columns;
      start = tab + 1;
    }
    RAZORKV_CHECK(columns == shape.num_kv_heads, kParseError, kWhere, ": row ", rows, " has ",
                  columns, " values, the model has ", shape.num_kv_heads, " kv heads");
    ++rows;
  }
  RAZORKV_CHECK(rows == shape.num_layers, kParseError, kWhere, ": ", rows, " rows, the model has ",
                shape.num_layers, " layers");
  if (options.sparsity) {
    const double s = *options.sparsity;
    RAZORKV_CHECK(std::isfinite(s) && s >= 0.0 && s <= 1.0, kInvalidArgument, kWhere,
                  ": sparsity (", s, ") must be in [0, 1]");
    std::vector<index_t> order(gates.size());
    std::iota(order.begin(), order.end(), index_t{0});
    std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
      return gates[static_cast<std::size_t>(a)] > gates[static_cast<std::size_t>(b)];
    });
    const auto keep =
        static_cast<std::size_t>(std::llround((1.0 - s) * static_cast<double>(gates.size())));
    for (std::size_t i = 0; i < keep; ++i)
      plan.set_retrieval(order[i] / shape.num_kv_heads, order[i] % shape.num_kv_heads, true);
  } else {
    RAZORKV_CHECK(std::isfinite(options.threshold), kInvalidArgument, kWhere, ": threshold (",
                  options.threshold, ") must be finite");
    for (std::size_t i = 0; i < gates.size(); ++i) {
      if (gates[i] > options.threshold) {
        plan.set_retrieval(static_cast<index_t>(i) / shape.num_kv_heads,
                           static_cast<index_t>(i) % shape.num_kv_heads, true);
      }
    }
  }
  return plan;
}

}  // namespace io
RAZORKV_END_NAMESPACE
