// razorkv/core/head_plan.hpp: which kv heads (GQA groups) of a model keep their full cache,
// optional per-head buffer lengths, and how the decision was made. It checks itself against a
// model shape, so a plan made for another model does not load.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// How the query heads of a GQA group combine into the group's score.
enum class gqa_aggregation {
  kSum,  ///< the paper's authors (default)
  kMax,  ///< Huawei's implementation
  kMean,
};

inline const char* gqa_aggregation_name(gqa_aggregation a) noexcept {
  switch (a) {
    case gqa_aggregation::kSum:
      return "sum";
    case gqa_aggregation::kMax:
      return "max";
    case gqa_aggregation::kMean:
      return "mean";
  }
  return "unknown";
}

/// Every gqa_aggregation, for parsing their names and listing them.
inline constexpr gqa_aggregation kGqaAggregations[] = {gqa_aggregation::kSum, gqa_aggregation::kMax,
                                                       gqa_aggregation::kMean};

/// The gqa_aggregation that gqa_aggregation_name calls `name`, if any.
inline std::optional<gqa_aggregation> gqa_aggregation_from_name(std::string_view name) noexcept {
  for (gqa_aggregation a : kGqaAggregations) {
    if (name == gqa_aggregation_name(a)) return a;
  }
  return std::nullopt;
}

/// A model's shape as razorkv needs it.
struct model_shape {
  index_t num_layers = 0, num_query_heads = 0, num_kv_heads = 0, head_dim = 0;
};

/// The most (layer, head) cells a plan or a score table holds: 2^20, far above any model's
/// (the largest have about 10^4 query heads in all). A larger shape is an error naming it, not
/// a wrapped-around count or gigabytes allocated from a few bytes of a file.
inline constexpr index_t kMaxModelCells = index_t{1} << 20;

namespace detail {

/// layers * heads, checked against kMaxModelCells (kOverflow naming both); both are > 0.
inline index_t model_cells(index_t layers, index_t heads, const char* where,
                           const char* heads_name) {
  RAZORKV_CHECK(heads <= kMaxModelCells && layers <= kMaxModelCells / heads, kOverflow, where,
                ": num_layers (", layers, ") x ", heads_name, " (", heads, ") exceeds ",
                kMaxModelCells, " cells");
  return layers * heads;
}

}  // namespace detail

/// The retrieval decision for every (layer, kv head) of a model.
class head_plan {
 public:
  /// How the plan was made (written by the selector; free text for hand-made plans).
  struct provenance {
    std::string method = "manual";
    double induction_ratio = 0.0;
    double echo_ratio = 0.0;
    gqa_aggregation aggregation = gqa_aggregation::kSum;
    index_t min_groups_per_layer = 0;
    /// The group scores the decision was made from ([num_layers * num_kv_heads], layer-major;
    /// empty for hand-made or imported plans).
    std::vector<double> group_echo, group_induction;
  };

  /// A plan with no retrieval heads for `shape`; throws on a malformed shape.
  explicit head_plan(const model_shape& shape) : shape_(shape) {
    RAZORKV_CHECK(shape.num_layers > 0, kInvalidArgument, "head_plan: num_layers (",
                  shape.num_layers, ") must be > 0");
    RAZORKV_CHECK(shape.num_kv_heads > 0, kInvalidArgument, "head_plan: num_kv_heads (",
                  shape.num_kv_heads, ") must be > 0");
    RAZORKV_CHECK(shape.num_query_heads > 0 && shape.num_query_heads % shape.num_kv_heads == 0,
                  kShapeMismatch, "head_plan: num_query_heads (", shape.num_query_heads,
                  ") is not a positive multiple of num_kv_heads (", shape.num_kv_heads, ")");
    RAZORKV_CHECK(shape.head_dim > 0, kInvalidArgument, "head_plan: head_dim (", shape.head_dim,
                  ") must be > 0");
    const auto cells =
        static_cast<std::size_t>(detail::model_cells(shape.num_layers, shape.num_query_heads,
                                                     "head_plan", "num_query_heads") /
                                 (shape.num_query_heads / shape.num_kv_heads));
    retrieval_.assign(cells, false);
    buffer_.assign(cells, 0);
  }

  const model_shape& shape() const noexcept { return shape_; }
  provenance& selection() noexcept { return provenance_; }
  const provenance& selection() const noexcept { return provenance_; }

  bool is_retrieval(index_t layer, index_t kv_head) const {
    return retrieval_[cell(layer, kv_head, "head_plan::is_retrieval")];
  }
  void set_retrieval(index_t layer, index_t kv_head, bool retrieval) {
    retrieval_[cell(layer, kv_head, "head_plan::set_retrieval")] = retrieval;
  }

  /// A per-head buffer length L_h that replaces max(S0, N / C) for a non-retrieval head
  /// (the ALiBi branch); empty when none was set.
  std::optional<index_t> buffer_override(index_t layer, index_t kv_head) const {
    const index_t tokens = buffer_[cell(layer, kv_head, "head_plan::buffer_override")];
    return tokens > 0 ? std::optional<index_t>(tokens) : std::nullopt;
  }
  void set_buffer_override(index_t layer, index_t kv_head, index_t tokens) {
    RAZORKV_CHECK(tokens > 0, kInvalidArgument, "head_plan::set_buffer_override: tokens (", tokens,
                  ") must be > 0");
    buffer_[cell(layer, kv_head, "head_plan::set_buffer_override")] = tokens;
  }

  /// Retrieval kv heads of one layer, increasing.
  std::vector<index_t> retrieval_heads(index_t layer) const {
    std::vector<index_t> heads;
    for (index_t h = 0; h < shape_.num_kv_heads; ++h) {
      if (is_retrieval(layer, h)) heads.push_back(h);
    }
    return heads;
  }
  /// Number of retrieval (layer, kv head) groups in the model.
  index_t num_retrieval() const noexcept {
    index_t n = 0;
    for (bool r : retrieval_) n += r ? 1 : 0;
    return n;
  }

  /// The plan of one tensor-parallel rank that holds kv heads [first, first + count) of every
  /// layer (and their query heads): the same decisions, buffer overrides and provenance, with
  /// kv head `first` as the slice's head 0. Its group scores are sliced alike.
  head_plan slice_kv_heads(index_t first, index_t count) const {
    RAZORKV_CHECK(count > 0 && first >= 0 && first <= shape_.num_kv_heads - count, kOutOfRange,
                  "head_plan::slice_kv_heads: kv heads [", first, ", ", first, " + ", count,
                  ") are not a non-empty range of [0, ", shape_.num_kv_heads, ")");
    model_shape sliced = shape_;
    sliced.num_kv_heads = count;
    sliced.num_query_heads = shape_.num_query_heads / shape_.num_kv_heads * count;
    head_plan slice(sliced);
    slice.provenance_ = provenance_;
    const auto slice_scores = [&](const std::vector<double>& scores) {
      std::vector<double> kept;
      if (scores.size() != retrieval_.size()) return kept;
      for (index_t l = 0; l < shape_.num_layers; ++l) {
        const auto begin =
            scores.begin() + static_cast<std::ptrdiff_t>(l * shape_.num_kv_heads + first);
        kept.insert(kept.end(), begin, begin + static_cast<std::ptrdiff_t>(count));
      }
      return kept;
    };
    slice.provenance_.group_echo = slice_scores(provenance_.group_echo);
    slice.provenance_.group_induction = slice_scores(provenance_.group_induction);
    for (index_t l = 0; l < shape_.num_layers; ++l) {
      for (index_t h = 0; h < count; ++h) {
        const std::size_t from = cell(l, first + h, "head_plan::slice_kv_heads");
        const std::size_t to = static_cast<std::size_t>(l * count + h);
        slice.retrieval_[to] = retrieval_[from];
        slice.buffer_[to] = buffer_[from];
      }
    }
    return slice;
  }

  /// Throws errc::kShapeMismatch naming the first field that differs from `model`.
  void validate_against(const model_shape& model) const {
    const auto check = [](index_t mine, index_t theirs, const char* name) {
      RAZORKV_CHECK(mine == theirs, kShapeMismatch, "head_plan::validate_against: the plan has ",
                    name, " ", mine, ", the model has ", theirs);
    };
    check(shape_.num_layers, model.num_layers, "num_layers");
    check(shape_.num_query_heads, model.num_query_heads, "num_query_heads");
    check(shape_.num_kv_heads, model.num_kv_heads, "num_kv_heads");
    check(shape_.head_dim, model.head_dim, "head_dim");
  }

 private:
  std::size_t cell(index_t layer, index_t kv_head, const char* where) const {
    RAZORKV_CHECK(layer >= 0 && layer < shape_.num_layers, kOutOfRange, where, ": layer (", layer,
                  ") outside [0, ", shape_.num_layers, ")");
    RAZORKV_CHECK(kv_head >= 0 && kv_head < shape_.num_kv_heads, kOutOfRange, where, ": kv_head (",
                  kv_head, ") outside [0, ", shape_.num_kv_heads, ")");
    return static_cast<std::size_t>(layer * shape_.num_kv_heads + kv_head);
  }

  model_shape shape_;
  provenance provenance_;
  std::vector<bool> retrieval_;  // [num_layers, num_kv_heads]
  std::vector<index_t> buffer_;  // [num_layers, num_kv_heads], 0 = no override
};

RAZORKV_END_NAMESPACE
