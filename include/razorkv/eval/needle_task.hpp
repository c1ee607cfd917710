// razorkv/eval/needle_task.hpp: needle-in-a-haystack prompts for synthetic models: key/value
// token pairs planted at a chosen depth, asked for again at decode, with the answers known.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"
#include "razorkv/scoring/probe.hpp"
#include "razorkv/synthetic/planted_heads.hpp"

RAZORKV_BEGIN_NAMESPACE

/// The shape of one needle prompt.
struct needle_task_config {
  index_t context_tokens = 4096;       ///< prompt length N, BOS and questions included
  double depth = 0.5;                  ///< where the needles sit in the haystack: 0 first, 1 last
  index_t needles = 4;                 ///< K key/value pairs, each asked for once
  index_t haystack_vocabulary = 4096;  ///< distinct filler tokens (drawn with replacement)
  std::uint64_t seed = 0;
  /// The needles' values are this many times longer than the filler's, so that a head's
  /// output says clearly whether it holds one (an unrelated value of the same length would
  /// project onto it by about 1/sqrt(head_dim) of its length, a needle's by 1).
  double answer_value_scale = 4.0;
};

/// A needle prompt as token slots for make_planted_layer: [BOS | haystack with K adjacent pairs
/// (A_i, B_i) at the chosen depth | A_1 .. A_K (the questions)], then K decode tokens A_1 .. A_K
/// that ask again. At decode step i an induction head (attending to the token after an earlier
/// copy of A_i) fetches B_i's value from position needle_positions[i] + 1, an echo head
/// (attending to earlier copies of A_i) A_i's value from needle_positions[i]; local heads cannot
/// reach them from the end of a long haystack.
struct needle_task {
  std::vector<index_t> token_slots;       ///< [prompt_tokens + needles]
  index_t vocabulary = 0;                 ///< slots used: filler, 2 per needle, BOS (last)
  index_t prompt_tokens = 0;              ///< N
  std::vector<index_t> needle_positions;  ///< [needles]: position of A_i in the haystack
  double answer_value_scale = 1.0;        ///< from the config: scale of the values at A_i and B_i
};

inline needle_task make_needle_task(const needle_task_config& config) {
  constexpr const char* kWhere = "make_needle_task";
  RAZORKV_CHECK(config.needles >= 1, kInvalidArgument, kWhere, ": needles (", config.needles,
                ") must be >= 1");
  RAZORKV_CHECK(config.haystack_vocabulary >= 1, kInvalidArgument, kWhere,
                ": haystack_vocabulary (", config.haystack_vocabulary, ") must be >= 1");
  RAZORKV_CHECK(std::isfinite(config.depth) && config.depth >= 0.0 && config.depth <= 1.0,
                kInvalidArgument, kWhere, ": depth (", config.depth, ") must be in [0, 1]");
  const index_t haystack = config.context_tokens - 1 - config.needles;  // pairs included
  RAZORKV_CHECK(haystack >= 2 * config.needles, kInvalidArgument, kWhere, ": context_tokens (",
                config.context_tokens, ") cannot hold a BOS, ", config.needles,
                " needle pairs and ", config.needles, " questions");
  RAZORKV_CHECK(std::isfinite(config.answer_value_scale) && config.answer_value_scale > 0.0,
                kInvalidArgument, kWhere, ": answer_value_scale (", config.answer_value_scale,
                ") must be > 0");
  needle_task task;
  task.answer_value_scale = config.answer_value_scale;
  const index_t first_needle_slot = config.haystack_vocabulary;
  const index_t bos = first_needle_slot + 2 * config.needles;
  task.vocabulary = bos + 1;
  task.prompt_tokens = config.context_tokens;
  std::mt19937_64 rng(config.seed);
  task.token_slots.push_back(bos);
  for (index_t t = 0; t < haystack; ++t) {
    task.token_slots.push_back(static_cast<index_t>(
        detail::uniform_below(rng, static_cast<std::uint64_t>(config.haystack_vocabulary))));
  }
  const index_t start = 1 + static_cast<index_t>(std::llround(
                                config.depth * static_cast<double>(haystack - 2 * config.needles)));
  for (index_t i = 0; i < config.needles; ++i) {
    const index_t position = start + 2 * i;
    task.token_slots[static_cast<std::size_t>(position)] = first_needle_slot + 2 * i;
    task.token_slots[static_cast<std::size_t>(position + 1)] = first_needle_slot + 2 * i + 1;
    task.needle_positions.push_back(position);
  }
  for (int pass = 0; pass < 2; ++pass) {  // the questions in the prompt, then at decode
    for (index_t i = 0; i < config.needles; ++i)
      task.token_slots.push_back(first_needle_slot + 2 * i);
  }
  return task;
}

/// One needle read by one query head: at decode step `step` query head `query_head` of layer
/// `layer` should return the value stored at `answer_position` of its kv head.
struct needle_trial {
  index_t layer = 0, query_head = 0, step = 0, answer_position = 0;
  head_kind reader = head_kind::kInduction;  ///< kInduction or kEcho
};

/// Every (needle, reader) pair of `task` on a planted model: each query head planted as an
/// induction head reads B_i (answer needle_positions[i] + 1), each echo head A_i
/// (needle_positions[i]). A head counts as a reader when its strongest component is of that kind.
inline std::vector<needle_trial> needle_trials(const needle_task& task,
                                               const std::vector<planted_layer_config>& model) {
  std::vector<needle_trial> trials;
  for (index_t l = 0; l < static_cast<index_t>(model.size()); ++l) {
    const auto& heads = model[static_cast<std::size_t>(l)].query_heads;
    for (index_t h = 0; h < static_cast<index_t>(heads.size()); ++h) {
      const auto& components = heads[static_cast<std::size_t>(h)].components;
      if (components.empty()) continue;
      auto strongest = components.front();
      for (const auto& c : components) {
        if (c.second > strongest.second) strongest = c;
      }
      if (strongest.first != head_kind::kInduction && strongest.first != head_kind::kEcho) continue;
      for (index_t i = 0; i < static_cast<index_t>(task.needle_positions.size()); ++i) {
        const index_t p = task.needle_positions[static_cast<std::size_t>(i)];
        trials.push_back(
            {l, h, i, strongest.first == head_kind::kInduction ? p + 1 : p, strongest.first});
      }
    }
  }
  return trials;
}

RAZORKV_END_NAMESPACE
