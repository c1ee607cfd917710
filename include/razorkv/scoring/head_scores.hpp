// razorkv/scoring/head_scores.hpp: the echo and induction score of every query head of every
// layer, filled one layer at a time while the engine's probe prefill runs.
#pragma once

#include <cmath>
#include <vector>

#include "razorkv/config.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// One layer's scores, one entry per query head.
struct layer_scores {
  std::vector<double> echo;       // [num_query_heads]
  std::vector<double> induction;  // [num_query_heads]
};

/// Scores of a whole model: layers x query heads, echo and induction. The shape is fixed at
/// construction and every call is checked against it; a layer is written whole or not at all.
class head_scores {
 public:
  head_scores(index_t num_layers, index_t num_query_heads, index_t num_kv_heads)
      : num_layers_(num_layers), num_query_heads_(num_query_heads), num_kv_heads_(num_kv_heads) {
    RAZORKV_CHECK(num_layers > 0, kInvalidArgument, "head_scores: num_layers (", num_layers,
                  ") must be > 0");
    RAZORKV_CHECK(num_query_heads > 0, kInvalidArgument, "head_scores: num_query_heads (",
                  num_query_heads, ") must be > 0");
    RAZORKV_CHECK(num_kv_heads > 0 && num_query_heads % num_kv_heads == 0, kShapeMismatch,
                  "head_scores: num_query_heads (", num_query_heads,
                  ") is not a positive multiple of num_kv_heads (", num_kv_heads, ")");
    const auto cells = static_cast<std::size_t>(
        detail::model_cells(num_layers, num_query_heads, "head_scores", "num_query_heads"));
    echo_.assign(cells, 0.0);
    induction_.assign(cells, 0.0);
    filled_.assign(static_cast<std::size_t>(num_layers), false);
  }

  index_t num_layers() const noexcept { return num_layers_; }
  index_t num_query_heads() const noexcept { return num_query_heads_; }
  index_t num_kv_heads() const noexcept { return num_kv_heads_; }
  /// Query heads per kv head (the GQA group size).
  index_t group_size() const noexcept { return num_query_heads_ / num_kv_heads_; }

  /// Stores one layer's scores (overwriting a previous set_layer of the same layer). Checks the
  /// layer index, the head counts and that every score is finite before writing anything.
  void set_layer(index_t layer, const layer_scores& scores) {
    check_layer(layer, "head_scores::set_layer");
    for (const auto* values : {&scores.echo, &scores.induction}) {
      const char* name = values == &scores.echo ? "echo" : "induction";
      RAZORKV_CHECK(static_cast<index_t>(values->size()) == num_query_heads_, kShapeMismatch,
                    "head_scores::set_layer: layer ", layer, " has ", values->size(), " ", name,
                    " scores, expected num_query_heads (", num_query_heads_, ")");
      for (std::size_t h = 0; h < values->size(); ++h) {
        RAZORKV_CHECK(std::isfinite((*values)[h]), kInvalidArgument,
                      "head_scores::set_layer: ", name, " score of layer ", layer, " head ", h,
                      " is ", (*values)[h]);
      }
    }
    for (index_t h = 0; h < num_query_heads_; ++h) {
      echo_[cell(layer, h)] = scores.echo[static_cast<std::size_t>(h)];
      induction_[cell(layer, h)] = scores.induction[static_cast<std::size_t>(h)];
    }
    filled_[static_cast<std::size_t>(layer)] = true;
  }

  double echo(index_t layer, index_t head) const {
    return echo_[checked_cell(layer, head, "head_scores::echo")];
  }
  double induction(index_t layer, index_t head) const {
    return induction_[checked_cell(layer, head, "head_scores::induction")];
  }
  /// Whether set_layer has stored `layer`.
  bool has_layer(index_t layer) const {
    check_layer(layer, "head_scores::has_layer");
    return filled_[static_cast<std::size_t>(layer)];
  }
  /// Whether every layer has been stored.
  bool complete() const noexcept {
    for (bool f : filled_) {
      if (!f) return false;
    }
    return true;
  }

 private:
  void check_layer(index_t layer, const char* where) const {
    RAZORKV_CHECK(layer >= 0 && layer < num_layers_, kOutOfRange, where, ": layer (", layer,
                  ") outside [0, ", num_layers_, ")");
  }
  std::size_t cell(index_t layer, index_t head) const noexcept {
    return static_cast<std::size_t>(layer * num_query_heads_ + head);
  }
  std::size_t checked_cell(index_t layer, index_t head, const char* where) const {
    check_layer(layer, where);
    RAZORKV_CHECK(head >= 0 && head < num_query_heads_, kOutOfRange, where, ": head (", head,
                  ") outside [0, ", num_query_heads_, ")");
    return cell(layer, head);
  }

  index_t num_layers_, num_query_heads_, num_kv_heads_;
  std::vector<double> echo_;       // [num_layers, num_query_heads]
  std::vector<double> induction_;  // [num_layers, num_query_heads]
  std::vector<bool> filled_;       // [num_layers]
};

RAZORKV_END_NAMESPACE
