// razorkv/eval/synthetic_suite.hpp: the harness's inputs from a planted model: a plan found by
// calibrating on a probe, and owned Q/K/V of any token sequence as an eval_prompt.
#pragma once

#include <exception>
#include <utility>
#include <vector>

#include "razorkv/config.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/parallel.hpp"
#include "razorkv/error.hpp"
#include "razorkv/eval/harness.hpp"
#include "razorkv/eval/needle_task.hpp"
#include "razorkv/scoring/head_scores.hpp"
#include "razorkv/scoring/probe.hpp"
#include "razorkv/scoring/streaming_scorer.hpp"
#include "razorkv/select/head_selector.hpp"
#include "razorkv/synthetic/planted_heads.hpp"

RAZORKV_BEGIN_NAMESPACE

/// The model shape of a planted model (every layer must agree).
inline model_shape planted_shape(const std::vector<planted_layer_config>& model) {
  RAZORKV_CHECK(!model.empty(), kInvalidArgument, "planted_shape: the model has no layers");
  const planted_layer_config& first = model.front();
  for (std::size_t l = 0; l < model.size(); ++l) {
    RAZORKV_CHECK(model[l].num_kv_heads == first.num_kv_heads &&
                      model[l].head_dim == first.head_dim &&
                      model[l].query_heads.size() == first.query_heads.size(),
                  kShapeMismatch, "planted_shape: layer ", l, " differs in shape from layer 0");
  }
  return {static_cast<index_t>(model.size()), static_cast<index_t>(first.query_heads.size()),
          first.num_kv_heads, first.head_dim};
}

/// What an engine does offline, on a planted model: run the probe through every layer, score
/// each head from its queries and keys, select the retrieval groups.
inline head_plan calibrate_planted_model(const std::vector<planted_layer_config>& model,
                                         const probe& the_probe,
                                         const selection_config& selection = {}) {
  const model_shape shape = planted_shape(model);
  head_scores scores(shape.num_layers, shape.num_query_heads, shape.num_kv_heads);
  for (index_t l = 0; l < shape.num_layers; ++l) {
    const planted_layer layer = make_planted_layer(the_probe, model[static_cast<std::size_t>(l)]);
    scores.set_layer(l, score_from_queries_keys(the_probe, layer.query_view(), layer.key_view()));
  }
  return select_retrieval_heads(scores, shape.head_dim, selection);
}

/// A planted model's Q/K/V over one token sequence (owned), and the eval_prompt that reads
/// them: the first prompt_tokens tokens are the prompt, the rest are decoded one by one.
/// Move-only, since the prompt views the layers it owns.
class planted_prompt {
 public:
  planted_prompt(const std::vector<planted_layer_config>& model,
                 const std::vector<index_t>& token_slots, index_t vocabulary, index_t prompt_tokens)
      : layers_(make_layers(model, token_slots, vocabulary)),
        prompt_(planted_shape(model), views(layers_), prompt_tokens) {}
  /// The needle task's sequence, with the values at every needle pair scaled by
  /// task.answer_value_scale in every layer and kv head.
  planted_prompt(const std::vector<planted_layer_config>& model, const needle_task& task)
      : layers_(make_layers(model, task.token_slots, task.vocabulary, &task)),
        prompt_(planted_shape(model), views(layers_), task.prompt_tokens) {}
  planted_prompt(planted_prompt&&) = default;
  planted_prompt(const planted_prompt&) = delete;
  planted_prompt& operator=(const planted_prompt&) = delete;

  const eval_prompt<float>& prompt() const noexcept { return prompt_; }
  const std::vector<planted_layer>& layers() const noexcept { return layers_; }

 private:
  static std::vector<planted_layer> make_layers(const std::vector<planted_layer_config>& model,
                                                const std::vector<index_t>& token_slots,
                                                index_t vocabulary,
                                                const needle_task* task = nullptr) {
    // Layers draw from their own seeds, so they are built in parallel (the generator dominates
    // the harness's time otherwise); an error in any is rethrown here.
    std::vector<planted_layer> layers(model.size());
    std::vector<std::exception_ptr> errors(model.size());
    detail::run_parallel({}, static_cast<index_t>(model.size()), [&](index_t l) {
      const auto lu = static_cast<std::size_t>(l);
      try {
        planted_layer layer = make_planted_layer(token_slots, vocabulary, model[lu]);
        for (index_t p : task ? task->needle_positions : std::vector<index_t>{}) {
          const auto scale = static_cast<float>(task->answer_value_scale);
          const std::size_t first =
              static_cast<std::size_t>(p * layer.num_kv_heads * layer.head_dim);
          const std::size_t count =
              static_cast<std::size_t>(2 * layer.num_kv_heads * layer.head_dim);  // A_i, B_i
          for (std::size_t i = first; i < first + count; ++i) layer.values[i] *= scale;
        }
        layers[lu] = std::move(layer);
      } catch (...) {
        errors[lu] = std::current_exception();
      }
    });
    for (const std::exception_ptr& error : errors) {
      if (error) std::rethrow_exception(error);
    }
    return layers;
  }
  static std::vector<layer_sequence<float>> views(const std::vector<planted_layer>& layers) {
    std::vector<layer_sequence<float>> out;
    for (const planted_layer& layer : layers)
      out.push_back({layer.query_view(), layer.key_view(), layer.value_view()});
    return out;
  }

  std::vector<planted_layer> layers_;  // the vectors' buffers stay put when this object moves
  eval_prompt<float> prompt_;
};

RAZORKV_END_NAMESPACE
