// razorkv/eval/harness.hpp: runs KV-compression policies (full, StreamingLLM, SnapKV, H2O,
// RazorAttention and its ablations) on one prompt at one memory budget, and scores the outputs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "razorkv/attention/decode.hpp"
#include "razorkv/cache/dense_cache.hpp"
#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/compress/razor_cache.hpp"
#include "razorkv/compress/razor_config.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"
#include "razorkv/eval/needle_task.hpp"
#include "razorkv/policies/h2o.hpp"
#include "razorkv/policies/memory_budget.hpp"
#include "razorkv/policies/observed_attention.hpp"
#include "razorkv/policies/razor_at_budget.hpp"
#include "razorkv/policies/selected_cache.hpp"
#include "razorkv/policies/snapkv.hpp"
#include "razorkv/policies/streaming_llm.hpp"
#include "razorkv/select/head_plan.hpp"
#include "razorkv/select/kv_budget.hpp"

RAZORKV_BEGIN_NAMESPACE

/// The KV-compression methods the harness compares.
enum class policy_kind { kFull, kStreamingLLM, kSnapKV, kH2O, kRazor };

/// One method and its parameters; a budget turns it into a cache (run_policy).
struct policy {
  std::string name;
  policy_kind kind = policy_kind::kFull;
  std::optional<head_plan> plan;  ///< kRazor: the groups that keep every token
  razor_config razor;             ///< kRazor: sinks and compensation (the window comes from the budget)
  index_t sinks = 4;              ///< kStreamingLLM
  snapkv_config snapkv;           ///< kSnapKV
  h2o_config h2o;                 ///< kH2O
  /// kH2O: the last this many prompt queries rank the prompt (0: every prompt query, as H2O does).
  index_t h2o_observed_queries = 0;
};

inline policy full_policy() {
  policy p;
  p.name = "full";
  return p;
}
inline policy streaming_llm_policy(index_t sinks = 4) {
  policy p;
  p.name = "streaming_llm";
  p.kind = policy_kind::kStreamingLLM;
  p.sinks = sinks;
  return p;
}
inline policy snapkv_policy(const snapkv_config& config = {}) {
  policy p;
  p.name = "snapkv";
  p.kind = policy_kind::kSnapKV;
  p.snapkv = config;
  return p;
}
inline policy h2o_policy(const h2o_config& config = {}, index_t observed_queries = 0) {
  policy p;
  p.name = "h2o";
  p.kind = policy_kind::kH2O;
  p.h2o = config;
  p.h2o_observed_queries = observed_queries;
  return p;
}
/// RazorAttention with `plan`'s retrieval groups; `config` gives sinks and compensation mode.
inline policy razor_policy(std::string name, head_plan plan, const razor_config& config = {}) {
  policy p;
  p.name = std::move(name);
  p.kind = policy_kind::kRazor;
  p.plan = std::move(plan);
  p.razor = config;
  return p;
}

/// A plan of `count` retrieval groups drawn uniformly at random (the "random heads" ablation).
inline head_plan random_plan(const model_shape& shape, index_t count, std::uint64_t seed) {
  head_plan plan(shape);
  const index_t groups = shape.num_layers * shape.num_kv_heads;
  RAZORKV_CHECK(count >= 0 && count <= groups, kInvalidArgument, "random_plan: count (", count, ") must be in [0, ",
                groups, "]");
  std::vector<index_t> ids(static_cast<std::size_t>(groups));
  std::iota(ids.begin(), ids.end(), index_t{0});
  std::mt19937_64 rng(seed);
  for (index_t i = 0; i < count; ++i) {  // partial Fisher-Yates with razorkv's portable draw
    const auto j = i + static_cast<index_t>(detail::uniform_below(rng, static_cast<std::uint64_t>(groups - i)));
    std::swap(ids[static_cast<std::size_t>(i)], ids[static_cast<std::size_t>(j)]);
    plan.set_retrieval(ids[static_cast<std::size_t>(i)] / shape.num_kv_heads,
                       ids[static_cast<std::size_t>(i)] % shape.num_kv_heads, true);
  }
  plan.selection().method = "random";
  return plan;
}

/// The cache each policy produces, behind the one KV-cache contract.
template <class T>
using policy_cache = std::variant<dense_kv_cache<T>, razor_kv_cache<T>, selected_kv_cache<T>, h2o_kv_cache<T>>;

/// One layer's queries, keys and values over the prompt and the decode tokens after it:
/// queries [tokens, num_query_heads, head_dim], keys and values [tokens, num_kv_heads, head_dim].
template <class T>
struct layer_sequence {
  layer_view<const T> queries, keys, values;
};

/// A prompt and its decode tokens, every layer, as the harness reads them (views; the caller
/// keeps the memory alive). Attention scores the SnapKV and H2O policies rank the prompt by are
/// computed once per (layer, observation length) and shared by every run on this prompt.
template <class T>
class eval_prompt {
 public:
  eval_prompt(const model_shape& shape, std::vector<layer_sequence<T>> layers, index_t prompt_tokens)
      : shape_(shape), layers_(std::move(layers)), prompt_tokens_(prompt_tokens) {
    constexpr const char* kWhere = "eval_prompt";
    static_cast<void>(head_plan(shape));  // validates the shape
    RAZORKV_CHECK(static_cast<index_t>(layers_.size()) == shape.num_layers, kShapeMismatch, kWhere, ": ",
                  layers_.size(), " layers given, the model has ", shape.num_layers);
    RAZORKV_CHECK(prompt_tokens > 0, kInvalidArgument, kWhere, ": prompt_tokens (", prompt_tokens, ") must be > 0");
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const layer_sequence<T>& s = layers_[l];
      RAZORKV_CHECK(s.queries.heads() == shape.num_query_heads && s.keys.heads() == shape.num_kv_heads &&
                        s.values.heads() == shape.num_kv_heads && s.queries.head_dim() == shape.head_dim &&
                        s.keys.head_dim() == shape.head_dim && s.values.head_dim() == shape.head_dim,
                    kShapeMismatch, kWhere, ": layer ", l, " is not [tokens, ", shape.num_query_heads, " | ",
                    shape.num_kv_heads, " heads, ", shape.head_dim, "]");
      RAZORKV_CHECK(s.queries.tokens() == layers_[0].queries.tokens() && s.keys.tokens() == s.queries.tokens() &&
                        s.values.tokens() == s.queries.tokens(),
                    kShapeMismatch, kWhere, ": layer ", l, " holds ", s.queries.tokens(), " / ", s.keys.tokens(), " / ",
                    s.values.tokens(), " query / key / value tokens, layer 0 ", layers_[0].queries.tokens());
    }
    RAZORKV_CHECK(prompt_tokens <= layers_[0].queries.tokens(), kInvalidArgument, kWhere, ": prompt_tokens (",
                  prompt_tokens, ") exceeds the tokens given (", layers_[0].queries.tokens(), ")");
  }

  const model_shape& shape() const noexcept { return shape_; }
  const layer_sequence<T>& layer(index_t l) const { return layers_.at(static_cast<std::size_t>(l)); }
  index_t prompt_tokens() const noexcept { return prompt_tokens_; }
  index_t decode_steps() const noexcept { return layers_[0].queries.tokens() - prompt_tokens_; }

  /// observed_attention of the prompt's last `queries` queries in `layer`, and the seconds
  /// it took when first computed.
  const std::pair<attention_mass, double>& observed(index_t layer, index_t queries,
                                                    const parallel_for_fn& parallel_for = {}) const {
    std::lock_guard<std::mutex> lock(memo_->mutex);
    auto& slot = memo_->masses[{layer, queries}];
    if (!slot) {
      const layer_sequence<T>& s = this->layer(layer);
      observation_options options;
      options.parallel_for = parallel_for;
      const auto start = std::chrono::steady_clock::now();
      attention_mass mass = observed_attention(s.queries.middle_tokens(prompt_tokens_ - queries, queries),
                                               s.keys.middle_tokens(0, prompt_tokens_), options);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      slot = std::make_unique<std::pair<attention_mass, double>>(std::move(mass), seconds);
    }
    return *slot;
  }

 private:
  struct memo {
    std::mutex mutex;
    std::map<std::pair<index_t, index_t>, std::unique_ptr<std::pair<attention_mass, double>>> masses;
  };
  model_shape shape_;
  std::vector<layer_sequence<T>> layers_;
  index_t prompt_tokens_;
  std::shared_ptr<memo> memo_ = std::make_shared<memo>();
};

/// What one policy did on one prompt at one budget.
struct policy_run {
  std::string policy;
  index_t budget_entries = 0;  ///< the budget as entries per kv head
  index_t kv_bytes = 0;        ///< K/V the cache held after compressing the prompt
  index_t full_kv_bytes = 0;   ///< K/V of the full cache of the prompt
  double compress_seconds = 0;  ///< every layer, SnapKV/H2O attention scoring included
  double decode_seconds = 0;    ///< one decode step over every layer (median over the steps)
  /// [layer][step * num_query_heads * head_dim]: each decode step's attention output.
  std::vector<std::vector<float>> outputs;
};

/// Options of run_policy.
struct run_options {
  parallel_for_fn parallel_for;  ///< passed to compression, scoring and decode
};

namespace detail {

// Builds the policy's cache of the prompt. memo_credit gets, for every memoised attention score
// used, its recorded cost minus what fetching it took now, so that compression time always
// includes scoring once, whether this run computed it or an earlier run on the prompt did.
template <class T>
policy_cache<T> compress_prompt(const policy& p, const eval_prompt<T>& prompt, index_t budget, const run_options& options,
                                double& memo_credit) {
  const auto observed = [&](index_t layer, index_t queries) -> const attention_mass& {
    const auto start = std::chrono::steady_clock::now();
    const auto& [mass, seconds] = prompt.observed(layer, queries, options.parallel_for);
    memo_credit += seconds - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return mass;
  };
  const model_shape& shape = prompt.shape();
  const index_t n = prompt.prompt_tokens();
  const auto keys = [&](index_t l) { return prompt.layer(l).keys.middle_tokens(0, n); };
  const auto values = [&](index_t l) { return prompt.layer(l).values.middle_tokens(0, n); };
  switch (p.kind) {
    case policy_kind::kFull: {
      dense_kv_cache<T> cache(shape.num_layers, shape.num_kv_heads, shape.head_dim, n);
      for (index_t l = 0; l < shape.num_layers; ++l) cache.append(l, keys(l), values(l));
      return cache;
    }
    case policy_kind::kStreamingLLM: {
      razor_kv_cache<T> cache = make_streaming_llm_cache<T>(shape, budget, p.sinks);
      for (index_t l = 0; l < shape.num_layers; ++l) cache.compress_layer(l, keys(l), values(l), options.parallel_for);
      return cache;
    }
    case policy_kind::kRazor: {
      RAZORKV_CHECK(p.plan.has_value(), kInvalidArgument, "run_policy: razor policy \"", p.name, "\" has no plan");
      p.plan->validate_against(shape);
      razor_kv_cache<T> cache(*p.plan, razor_config_for_budget(*p.plan, n, budget, p.razor));
      for (index_t l = 0; l < shape.num_layers; ++l) cache.compress_layer(l, keys(l), values(l), options.parallel_for);
      return cache;
    }
    case policy_kind::kSnapKV: {
      check_snapkv(p.snapkv, n, budget, "run_policy: snapkv");
      selected_kv_cache<T> cache(shape.num_layers, shape.num_kv_heads, shape.head_dim);
      for (index_t l = 0; l < shape.num_layers; ++l) {
        const attention_mass& votes = observed(l, p.snapkv.window);
        std::vector<std::vector<index_t>> keep;
        for (index_t h = 0; h < shape.num_kv_heads; ++h) keep.push_back(snapkv_positions(votes.head(h), n, budget, p.snapkv));
        cache.compress_layer(l, keys(l), values(l), keep);
      }
      return cache;
    }
    case policy_kind::kH2O: {
      const index_t observed_queries = p.h2o_observed_queries > 0 ? p.h2o_observed_queries : n;
      RAZORKV_CHECK(observed_queries <= n, kInvalidArgument, "run_policy: h2o_observed_queries (", observed_queries,
                    ") exceeds the prompt (", n, " tokens)");
      h2o_kv_cache<T> cache(shape.num_layers, shape.num_kv_heads, shape.head_dim, budget, p.h2o);
      for (index_t l = 0; l < shape.num_layers; ++l) {
        cache.compress_layer(l, keys(l), values(l), observed(l, observed_queries));
      }
      return cache;
    }
  }
  RAZORKV_CHECK(false, kInvalidArgument, "run_policy: kind (", static_cast<int>(p.kind), ") is not a policy_kind");
  return dense_kv_cache<T>(1, 1, 1);
}

}  // namespace detail

/// The cache policy `p` makes of `prompt`'s first prompt_tokens() tokens at `budget` (every
/// layer compressed; SnapKV and H2O rank the prompt by its queries). run_policy decodes over
/// it; an engine runs its own decode loop over it with std::visit, calling observe_decode after
/// each decode_attention. Throws the policy's error when the budget cannot hold it.
template <class T>
policy_cache<T> compress_prompt(const policy& p, const eval_prompt<T>& prompt,
                                const memory_budget& budget, const run_options& options = {}) {
  double memo_credit = 0;
  constexpr auto kDtypeBytes = static_cast<index_t>(sizeof(T));
  const index_t entries =
      entries_per_head(budget, prompt.shape(), prompt.prompt_tokens(), kDtypeBytes);
  return detail::compress_prompt(p, prompt, entries, options, memo_credit);
}

/// Runs `p` on `prompt` at `budget`: compresses the prompt of every layer into the policy's
/// cache, then for each decode token appends its K/V to every layer, runs decode_attention, and
/// (H2O) lets the cache observe the token's attention. Throws the policy's error when the budget
/// cannot hold it (e.g. below SnapKV's window or razor's retrieval groups).
template <class T>
policy_run run_policy(const policy& p, const eval_prompt<T>& prompt, const memory_budget& budget,
                      const run_options& options = {}) {
  using clock = std::chrono::steady_clock;
  const model_shape& shape = prompt.shape();
  policy_run run;
  run.policy = p.name;
  run.budget_entries = entries_per_head(budget, shape, prompt.prompt_tokens(), static_cast<index_t>(sizeof(T)));
  run.full_kv_bytes = full_kv_bytes(shape, prompt.prompt_tokens(), static_cast<index_t>(sizeof(T)));

  double memo_credit = 0;
  const auto start = clock::now();
  policy_cache<T> cache = detail::compress_prompt(p, prompt, run.budget_entries, options, memo_credit);
  run.compress_seconds = std::chrono::duration<double>(clock::now() - start).count() + memo_credit;
  std::visit([&](const auto& c) { run.kv_bytes = held_kv_bytes(c); }, cache);

  const index_t steps = prompt.decode_steps(), heads = shape.num_query_heads, dim = shape.head_dim;
  run.outputs.assign(static_cast<std::size_t>(shape.num_layers), std::vector<float>(static_cast<std::size_t>(steps * heads * dim)));
  std::vector<double> step_seconds;
  attention_options attention;
  attention.parallel_for = options.parallel_for;
  std::visit(
      [&](auto& c) {
        for (index_t s = 0; s < steps; ++s) {
          const index_t t = prompt.prompt_tokens() + s;
          double seconds = 0;
          for (index_t l = 0; l < shape.num_layers; ++l) {
            const layer_sequence<T>& seq = prompt.layer(l);
            c.append(l, seq.keys.middle_tokens(t, 1), seq.values.middle_tokens(t, 1));
            const matrix_view<const T> query = seq.queries.token(t);
            const matrix_view<float> out(run.outputs[static_cast<std::size_t>(l)].data() + s * heads * dim, heads, dim);
            const auto begin = clock::now();
            decode_attention(c, l, query, out, attention);
            seconds += std::chrono::duration<double>(clock::now() - begin).count();
            observe_decode(c, l, seq.queries.middle_tokens(t, 1));
          }
          step_seconds.push_back(seconds);
        }
      },
      cache);
  if (!step_seconds.empty()) {
    std::nth_element(step_seconds.begin(), step_seconds.begin() + static_cast<std::ptrdiff_t>(step_seconds.size() / 2),
                     step_seconds.end());
    run.decode_seconds = step_seconds[step_seconds.size() / 2];
  }
  return run;
}

/// Relative L2 error of each layer's decode outputs against the reference run's:
/// ||run - reference|| / ||reference|| over every step, query head and dimension.
inline std::vector<double> relative_l2_per_layer(const policy_run& run, const policy_run& reference) {
  RAZORKV_CHECK(run.outputs.size() == reference.outputs.size(), kShapeMismatch, "relative_l2_per_layer: ",
                run.outputs.size(), " layers vs ", reference.outputs.size(), " in the reference");
  std::vector<double> errors;
  for (std::size_t l = 0; l < run.outputs.size(); ++l) {
    const auto& got = run.outputs[l];
    const auto& want = reference.outputs[l];
    RAZORKV_CHECK(got.size() == want.size(), kShapeMismatch, "relative_l2_per_layer: layer ", l, " has ", got.size(),
                  " outputs, the reference ", want.size());
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
double needle_coefficient(const policy_run& run, const eval_prompt<T>& prompt, const needle_trial& trial) {
  const model_shape& shape = prompt.shape();
  RAZORKV_CHECK(trial.layer >= 0 && trial.layer < static_cast<index_t>(run.outputs.size()) && trial.query_head >= 0 &&
                    trial.query_head < shape.num_query_heads && trial.step >= 0 &&
                    trial.step < prompt.decode_steps() && trial.answer_position >= 0 &&
                    trial.answer_position < prompt.prompt_tokens(),
                kOutOfRange, "needle_coefficient: trial (layer ", trial.layer, ", query head ", trial.query_head,
                ", step ", trial.step, ", answer ", trial.answer_position, ") is outside the prompt or the run");
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
std::vector<bool> needles_recovered(const policy_run& run, const policy_run& reference, const eval_prompt<T>& prompt,
                                    const std::vector<needle_trial>& trials) {
  std::vector<bool> recovered;
  for (const needle_trial& trial : trials) {
    const double full = needle_coefficient(reference, prompt, trial);
    recovered.push_back(full >= 0.1 && needle_coefficient(run, prompt, trial) >= 0.5 * full);
  }
  return recovered;
}

RAZORKV_END_NAMESPACE
