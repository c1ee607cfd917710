// razorkv/scoring/dense_scorer.hpp: echo and induction scores (docs/method.md, section 2) from one
// layer's captured attention probabilities [query heads, L, L] over the probe.
#pragma once

#include <cmath>
#include <vector>

#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"
#include "razorkv/scoring/head_scores.hpp"
#include "razorkv/scoring/probe.hpp"

RAZORKV_BEGIN_NAMESPACE

/// Options of the scorers.
struct scoring_options {
  /// Every row of the probabilities must sum to 1 within this (the BOS column included).
  double row_sum_tolerance = 1e-2;
  /// Score every row_step-th row of copies 2..R (1: all rows). Larger steps make calibration
  /// of big models cheaper at some cost in ranking fidelity.
  index_t row_step = 1;
};

/// Echo and induction scores of every query head of one layer.
///
/// For each scored row i (positions P .. P*R - 1, BOS excluded, every row_step-th) and every
/// earlier position j < i holding the same id as i: echo_i = sum_j A[i, j] and
/// induction_i = sum_j A[i, j + 1]. A head's score is the mean over the scored rows. The BOS
/// column stays in the softmax denominator: probabilities are read as given, not renormalised.
///
/// \param probabilities [num_query_heads, L, L] row-major, L == the_probe.length(); entry
///                      (h, i, j) is the attention of query i on key j (sequence indices)
template <class T>
layer_scores score_from_probabilities(const probe& the_probe, const T* probabilities,
                                      index_t num_query_heads, index_t length,
                                      const scoring_options& options = {}) {
  static_assert(is_storage_dtype_v<T>, "razorkv::score_from_probabilities: unsupported dtype");
  constexpr const char* kWhere = "score_from_probabilities";
  RAZORKV_CHECK(num_query_heads > 0, kInvalidArgument, kWhere, ": num_query_heads (",
                num_query_heads, ") must be > 0");
  RAZORKV_CHECK(length == the_probe.length(), kShapeMismatch, kWhere, ": length (", length,
                ") != probe length (", the_probe.length(), " = ", the_probe.num_random_tokens(),
                " x ", the_probe.repeats(), the_probe.has_bos() ? " + 1 BOS" : "", ")");
  RAZORKV_CHECK(probabilities != nullptr, kInvalidArgument, kWhere, ": probabilities is null");
  RAZORKV_CHECK(options.row_step > 0, kInvalidArgument, kWhere, ": row_step (", options.row_step,
                ") must be > 0");
  RAZORKV_CHECK(options.row_sum_tolerance >= 0.0, kInvalidArgument, kWhere, ": row_sum_tolerance (",
                options.row_sum_tolerance, ") must be >= 0");
  const index_t square = detail::checked_mul(length, length, "score_from_probabilities: L * L");
  detail::checked_mul(square, num_query_heads, "score_from_probabilities: heads * L * L");

  const auto value = [](T x) { return detail::to_double(x); };
  // Every entry finite, every row a distribution: checked before any score is computed.
  for (index_t h = 0; h < num_query_heads; ++h) {
    for (index_t i = 0; i < length; ++i) {
      const T* row = probabilities + h * square + i * length;
      double sum = 0.0;
      for (index_t j = 0; j < length; ++j) {
        const double a = value(row[j]);
        RAZORKV_CHECK(std::isfinite(a), kInvalidArgument, kWhere, ": probability (", a,
                      ") at head ", h, " row ", i, " column ", j, " is not finite");
        sum += a;
      }
      RAZORKV_CHECK(std::fabs(sum - 1.0) <= options.row_sum_tolerance, kInvalidArgument, kWhere,
                    ": row ", i, " of head ", h, " sums to ", sum, ", not 1 within ",
                    options.row_sum_tolerance);
    }
  }

  const index_t period = the_probe.num_random_tokens();
  const index_t positions = period * the_probe.repeats();
  const index_t offset = the_probe.has_bos() ? 1 : 0;
  layer_scores result;
  result.echo.assign(static_cast<std::size_t>(num_query_heads), 0.0);
  result.induction.assign(static_cast<std::size_t>(num_query_heads), 0.0);
  index_t rows_scored = 0;
  for (index_t i = period; i < positions; i += options.row_step) ++rows_scored;

  for (index_t h = 0; h < num_query_heads; ++h) {
    double echo = 0.0, induction = 0.0;
    for (index_t i = period; i < positions; i += options.row_step) {
      const T* row = probabilities + h * square + (i + offset) * length;
      for (index_t slot : the_probe.same_id_slots(i % period)) {
        for (index_t j = slot; j < i; j += period) {
          echo += value(row[j + offset]);
          induction += value(row[j + 1 + offset]);
        }
      }
    }
    result.echo[static_cast<std::size_t>(h)] = echo / static_cast<double>(rows_scored);
    result.induction[static_cast<std::size_t>(h)] = induction / static_cast<double>(rows_scored);
  }
  return result;
}

RAZORKV_END_NAMESPACE
