// razorkv/eval/harness.hpp: runs any KV-compression policy (full, StreamingLLM, SnapKV, H2O,
// RazorAttention and its ablations, a user's) on one prompt at one memory budget, and scores it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "razorkv/attention/decode.hpp"
#include "razorkv/cache/dense_cache.hpp"
#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/compress/kv_memory.hpp"
#include "razorkv/compress/razor_cache.hpp"
#include "razorkv/compress/razor_config.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"
#include "razorkv/eval/needle_task.hpp"
#include "razorkv/policies/any_policy.hpp"
#include "razorkv/policies/h2o.hpp"
#include "razorkv/policies/memory_budget.hpp"
#include "razorkv/policies/observed_attention.hpp"
#include "razorkv/policies/policy.hpp"
#include "razorkv/policies/razor.hpp"
#include "razorkv/policies/selected_cache.hpp"
#include "razorkv/policies/snapkv.hpp"
#include "razorkv/policies/streaming_llm.hpp"

RAZORKV_BEGIN_NAMESPACE

/// A plan of `count` retrieval groups drawn uniformly at random (the "random heads" ablation).
inline head_plan random_plan(const model_shape& shape, index_t count, std::uint64_t seed) {
  head_plan plan(shape);
  const index_t groups = shape.num_layers * shape.num_kv_heads;
  RAZORKV_CHECK(count >= 0 && count <= groups, kInvalidArgument, "random_plan: count (", count,
                ") must be in [0, ", groups, "]");
  std::vector<index_t> ids(static_cast<std::size_t>(groups));
  std::iota(ids.begin(), ids.end(), index_t{0});
  std::mt19937_64 rng(seed);
  for (index_t i = 0; i < count; ++i) {  // partial Fisher-Yates with razorkv's portable draw
    const auto j = i + static_cast<index_t>(
                           detail::uniform_below(rng, static_cast<std::uint64_t>(groups - i)));
    std::swap(ids[static_cast<std::size_t>(i)], ids[static_cast<std::size_t>(j)]);
    plan.set_retrieval(ids[static_cast<std::size_t>(i)] / shape.num_kv_heads,
                       ids[static_cast<std::size_t>(i)] % shape.num_kv_heads, true);
  }
  plan.selection().method = "random";
  return plan;
}

/// A prompt and its decode tokens, every layer, as the harness reads them (views; the caller
/// keeps the memory alive). Attention scores the SnapKV and H2O policies rank the prompt by are
/// computed once per (layer, observation length) and shared by every run on this prompt.
template <class T>
class eval_prompt {
 public:
  eval_prompt(const model_shape& shape, std::vector<layer_sequence<T>> layers,
              index_t prompt_tokens)
      : shape_(shape), layers_(std::move(layers)), prompt_tokens_(prompt_tokens) {
    constexpr const char* kWhere = "eval_prompt";
    static_cast<void>(head_plan(shape));  // validates the shape
    RAZORKV_CHECK(static_cast<index_t>(layers_.size()) == shape.num_layers, kShapeMismatch, kWhere,
                  ": ", layers_.size(), " layers given, the model has ", shape.num_layers);
    RAZORKV_CHECK(prompt_tokens > 0, kInvalidArgument, kWhere, ": prompt_tokens (", prompt_tokens,
                  ") must be > 0");
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const layer_sequence<T>& s = layers_[l];
      RAZORKV_CHECK(
          s.queries.heads() == shape.num_query_heads && s.keys.heads() == shape.num_kv_heads &&
              s.values.heads() == shape.num_kv_heads && s.queries.head_dim() == shape.head_dim &&
              s.keys.head_dim() == shape.head_dim && s.values.head_dim() == shape.head_dim,
          kShapeMismatch, kWhere, ": layer ", l, " is not [tokens, ", shape.num_query_heads, " | ",
          shape.num_kv_heads, " heads, ", shape.head_dim, "]");
      RAZORKV_CHECK(s.queries.tokens() == layers_[0].queries.tokens() &&
                        s.keys.tokens() == s.queries.tokens() &&
                        s.values.tokens() == s.queries.tokens(),
                    kShapeMismatch, kWhere, ": layer ", l, " holds ", s.queries.tokens(), " / ",
                    s.keys.tokens(), " / ", s.values.tokens(),
                    " query / key / value tokens, layer 0 ", layers_[0].queries.tokens());
    }
    RAZORKV_CHECK(prompt_tokens <= layers_[0].queries.tokens(), kInvalidArgument, kWhere,
                  ": prompt_tokens (", prompt_tokens, ") exceeds the tokens given (",
                  layers_[0].queries.tokens(), ")");
  }

  const model_shape& shape() const noexcept { return shape_; }
  const layer_sequence<T>& layer(index_t l) const {
    return layers_.at(static_cast<std::size_t>(l));
  }
  index_t prompt_tokens() const noexcept { return prompt_tokens_; }
  index_t decode_steps() const noexcept { return layers_[0].queries.tokens() - prompt_tokens_; }

  /// The prompt part (its keys, values and every prompt query) as policies read it, with
  /// observed attention memoised across every policy run on this prompt (see observed).
  /// `on_observed(seconds)` is called with the recorded cost of each memoised score fetched
  /// minus what fetching it took, so that a caller can charge scoring once to every run.
  prompt_kv<T> policy_input(const parallel_for_fn& parallel_for = {},
                            std::function<void(double)> on_observed = {}) const {
    std::vector<layer_sequence<T>> layers;
    for (const layer_sequence<T>& s : layers_) {
      layers.push_back({s.queries.middle_tokens(0, prompt_tokens_),
                        s.keys.middle_tokens(0, prompt_tokens_),
                        s.values.middle_tokens(0, prompt_tokens_)});
    }
    prompt_kv<T> input(shape_, std::move(layers));
    input.parallel_for = parallel_for;
    // A copy of this prompt (views and the shared memo), so the input outlives this object.
    input.observed_attention_hook = [self = *this, parallel_for, on_observed](index_t layer,
                                                                              index_t queries) {
      const auto start = std::chrono::steady_clock::now();
      const auto& [mass, seconds] = self.observed(layer, queries, parallel_for);
      attention_mass copy = mass;
      if (on_observed) {
        on_observed(
            seconds -
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      return copy;
    };
    return input;
  }

  /// observed_attention of the prompt's last `queries` queries in `layer`, and the seconds
  /// it took when first computed.
  const std::pair<attention_mass, double>& observed(
      index_t layer, index_t queries, const parallel_for_fn& parallel_for = {}) const {
    std::lock_guard<std::mutex> lock(memo_->mutex);
    auto& slot = memo_->masses[{layer, queries}];
    if (!slot) {
      const layer_sequence<T>& s = this->layer(layer);
      observation_options options;
      options.parallel_for = parallel_for;
      const auto start = std::chrono::steady_clock::now();
      attention_mass mass =
          observed_attention(s.queries.middle_tokens(prompt_tokens_ - queries, queries),
                             s.keys.middle_tokens(0, prompt_tokens_), options);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      slot = std::make_unique<std::pair<attention_mass, double>>(std::move(mass), seconds);
    }
    return *slot;
  }

 private:
  struct memo {
    std::mutex mutex;
    std::map<std::pair<index_t, index_t>, std::unique_ptr<std::pair<attention_mass, double>>>
        masses;
  };
  model_shape shape_;
  std::vector<layer_sequence<T>> layers_;
  index_t prompt_tokens_;
  std::shared_ptr<memo> memo_ = std::make_shared<memo>();
};

/// What one policy did on one prompt at one budget.
struct policy_run {
  std::string policy;
  index_t budget_entries = 0;   ///< the budget as entries per kv head
  index_t kv_bytes = 0;         ///< K/V the cache held after compressing the prompt
  index_t full_kv_bytes = 0;    ///< K/V of the full cache of the prompt
  double compress_seconds = 0;  ///< every layer, SnapKV/H2O attention scoring included
  double decode_seconds = 0;    ///< one decode step over every layer, observe included (median)
  /// [layer][step * num_query_heads * head_dim]: each decode step's attention output.
  std::vector<std::vector<float>> outputs;
};

/// Options of run_policy.
struct run_options {
  parallel_for_fn parallel_for;  ///< passed to compression, scoring and decode
};

/// The cache policy `p` makes of `prompt`'s first prompt_tokens() tokens at `budget` (every
/// layer compressed; SnapKV and H2O rank the prompt by its queries, memoised across runs).
/// Throws the policy's error when the budget cannot hold it.
template <class P, class T>
auto compress_prompt(const P& p, const eval_prompt<T>& prompt, const memory_budget& budget,
                     const run_options& options = {}) {
  return compress_prompt(p, prompt.policy_input(options.parallel_for), budget);
}

/// Runs `p` on `prompt` at `budget`: compresses the prompt of every layer into the policy's
/// cache, then for each decode token appends its K/V to every layer, runs decode_attention, and
/// (H2O) hands the cache the attention weights decode returned. Throws the policy's error when the
/// budget cannot hold it (e.g. below SnapKV's window or razor's retrieval groups).
template <class P, class T>
policy_run run_policy(const P& p, const eval_prompt<T>& prompt, const memory_budget& budget,
                      const run_options& options = {}) {
  static_assert(is_policy_v<P>, "razorkv::run_policy: P does not satisfy the policy contract");
  using clock = std::chrono::steady_clock;
  const model_shape& shape = prompt.shape();
  policy_run run;
  run.policy = std::string(p.name);
  run.budget_entries =
      entries_per_head(budget, shape, prompt.prompt_tokens(), static_cast<index_t>(sizeof(T)));
  run.full_kv_bytes = full_kv_bytes(shape, prompt.prompt_tokens(), static_cast<index_t>(sizeof(T)));

  // Compression time includes each attention score once, whether this run computed it or an
  // earlier run on the prompt did (then its recorded cost is credited).
  double memo_credit = 0;
  const prompt_kv<T> input = prompt.policy_input(
      options.parallel_for, [&memo_credit](double credit) { memo_credit += credit; });
  const auto start = clock::now();
  auto cache = p.compress(input, run.budget_entries);
  run.compress_seconds = std::chrono::duration<double>(clock::now() - start).count() + memo_credit;
  run.kv_bytes = held_kv_bytes(cache);

  const index_t steps = prompt.decode_steps(), heads = shape.num_query_heads, dim = shape.head_dim;
  run.outputs.assign(static_cast<std::size_t>(shape.num_layers),
                     std::vector<float>(static_cast<std::size_t>(steps * heads * dim)));
  std::vector<double> step_seconds;
  attention_options attention;
  attention.parallel_for = options.parallel_for;
  // A cache that learns from decode (H2O) gets each step's attention weights from decode itself.
  const bool observes = observes_attention(cache);
  attention_weights weights;
  for (index_t s = 0; s < steps; ++s) {
    const index_t t = prompt.prompt_tokens() + s;
    double seconds = 0;
    for (index_t l = 0; l < shape.num_layers; ++l) {
      const layer_sequence<T>& seq = prompt.layer(l);
      cache.append(l, seq.keys.middle_tokens(t, 1), seq.values.middle_tokens(t, 1));
      const matrix_view<const T> query = seq.queries.token(t);
      const matrix_view<float> out(
          run.outputs[static_cast<std::size_t>(l)].data() + s * heads * dim, heads, dim);
      const auto begin = clock::now();
      if (observes) {
        decode_attention(cache, l, query, out, weights, attention);
        observe_decode(cache, l, weights);
      } else {
        decode_attention(cache, l, query, out, attention);
      }
      seconds += std::chrono::duration<double>(clock::now() - begin).count();
    }
    step_seconds.push_back(seconds);
  }
  if (!step_seconds.empty()) {
    std::nth_element(step_seconds.begin(),
                     step_seconds.begin() + static_cast<std::ptrdiff_t>(step_seconds.size() / 2),
                     step_seconds.end());
    run.decode_seconds = step_seconds[step_seconds.size() / 2];
  }
  return run;
}

/// Relative L2 error of each layer's decode outputs against the reference run's:
/// ||run - reference|| / ||reference|| over every step, query head and dimension.
inline std::vector<double> relative_l2_per_layer(const policy_run& run,
                                                 const policy_run& reference) {
  RAZORKV_CHECK(run.outputs.size() == reference.outputs.size(), kShapeMismatch,
                "relative_l2_per_layer: ", run.outputs.size(), " layers vs ",
                reference.outputs.size(), " in the reference");
  std::vector<double> errors;
  for (std::size_t l = 0; l < run.outputs.size(); ++l) {
    const auto& got = run.outputs[l];
    const auto& want = reference.outputs[l];
    RAZORKV_CHECK(got.size() == want.size(), kShapeMismatch, "relative_l2_per_layer: layer ", l,
                  " has ", got.size(), " outputs, the reference ", want.size());
    double error = 0, norm = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      error += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      norm += static_cast<double>(want[i]) * want[i];
    }
    errors.push_back(norm > 0 ? std::sqrt(error / norm) : std::sqrt(error));
  }
  return errors;
}

/// How much of the trial's answer a run's output carries: out . v / (v . v), with v the value
/// at the answer position (1 when the head returns exactly v, 1/k when it splits its attention
/// evenly over v and k - 1 unrelated values).
template <class T>
double needle_coefficient(const policy_run& run, const eval_prompt<T>& prompt,
                          const needle_trial& trial) {
  const model_shape& shape = prompt.shape();
  RAZORKV_CHECK(trial.layer >= 0 && trial.layer < static_cast<index_t>(run.outputs.size()) &&
                    trial.query_head >= 0 && trial.query_head < shape.num_query_heads &&
                    trial.step >= 0 && trial.step < prompt.decode_steps() &&
                    trial.answer_position >= 0 && trial.answer_position < prompt.prompt_tokens(),
                kOutOfRange, "needle_coefficient: trial (layer ", trial.layer, ", query head ",
                trial.query_head, ", step ", trial.step, ", answer ", trial.answer_position,
                ") is outside the prompt or the run");
  const index_t kv_head = trial.query_head / (shape.num_query_heads / shape.num_kv_heads);
  const T* answer = prompt.layer(trial.layer).values.token(trial.answer_position).row(kv_head);
  const float* out = run.outputs[static_cast<std::size_t>(trial.layer)].data() +
                     (trial.step * shape.num_query_heads + trial.query_head) * shape.head_dim;
  double dot = 0, norm = 0;
  for (index_t c = 0; c < shape.head_dim; ++c) {
    const double v = detail::to_double(answer[c]);
    dot += out[c] * v;
    norm += v * v;
  }
  return norm > 0 ? dot / norm : 0.0;
}

/// Whether the run recovers each trial's needle: its output carries at least half of the answer
/// the reference (full cache) output carries, and the reference carries at least 0.1 of it.
template <class T>
std::vector<bool> needles_recovered(const policy_run& run, const policy_run& reference,
                                    const eval_prompt<T>& prompt,
                                    const std::vector<needle_trial>& trials) {
  std::vector<bool> recovered;
  for (const needle_trial& trial : trials) {
    const double full = needle_coefficient(reference, prompt, trial);
    recovered.push_back(full >= 0.1 && needle_coefficient(run, prompt, trial) >= 0.5 * full);
  }
  return recovered;
}

RAZORKV_END_NAMESPACE
