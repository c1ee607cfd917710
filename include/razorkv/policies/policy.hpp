// razorkv/policies/policy.hpp: the contract every KV-compression policy implements (make a
// cache of a prompt at a budget), the prompt it reads, and the full-cache policy.
#pragma once

#include <functional>
#include <memory_resource>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "razorkv/cache/dense_cache.hpp"
#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/core/parallel_for.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"
#include "razorkv/policies/memory_budget.hpp"
#include "razorkv/policies/observed_attention.hpp"

RAZORKV_BEGIN_NAMESPACE

/// One layer's queries, keys and values over a run of tokens, as views into the caller's memory:
/// queries [tokens, num_query_heads, head_dim], keys and values [tokens, num_kv_heads, head_dim].
template <class T>
struct layer_sequence {
  layer_view<const T> queries, keys, values;
};

/// The prompt a policy compresses, every layer, read in place: its keys and values
/// ([N, num_kv_heads, head_dim] per layer) and the queries of its last Nq tokens
/// ([Nq, num_query_heads, head_dim], Nq <= N, the same Nq in every layer; 0 when no policy that
/// reads queries will run: StreamingLLM, razor and the full cache read none, SnapKV reads its
/// window's, H2O the ones it observes).
template <class T>
class prompt_kv {
 public:
  /// Attention the prompt's last `queries` queries pay to every prompt position of `layer`
  /// (observed_attention). An evaluation that runs many policies on one prompt sets
  /// `observed_attention_hook` to share one computation; empty, each policy computes its own.
  using observation_fn = std::function<attention_mass(index_t layer, index_t queries)>;

  prompt_kv(const model_shape& shape, std::vector<layer_sequence<T>> layers)
      : shape_(shape), layers_(std::move(layers)) {
    constexpr const char* kWhere = "prompt_kv";
    static_cast<void>(head_plan(shape));  // validates the shape
    RAZORKV_CHECK(static_cast<index_t>(layers_.size()) == shape.num_layers, kShapeMismatch, kWhere,
                  ": ", layers_.size(), " layers given, the model has ", shape.num_layers);
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const layer_sequence<T>& s = layers_[l];
      const layer_sequence<T>& first = layers_[0];
      // An empty query view (default-constructed) reads as 0 queries of the right shape.
      const bool no_queries = s.queries.tokens() == 0;
      RAZORKV_CHECK(
          (no_queries || (s.queries.heads() == shape.num_query_heads &&
                          s.queries.head_dim() == shape.head_dim)) &&
              s.keys.heads() == shape.num_kv_heads && s.values.heads() == shape.num_kv_heads &&
              s.keys.head_dim() == shape.head_dim && s.values.head_dim() == shape.head_dim,
          kShapeMismatch, kWhere, ": layer ", l, " is not [tokens, ", shape.num_query_heads, " | ",
          shape.num_kv_heads, " heads, ", shape.head_dim, "]");
      RAZORKV_CHECK(s.keys.tokens() > 0 && s.keys.tokens() == first.keys.tokens() &&
                        s.values.tokens() == s.keys.tokens(),
                    kShapeMismatch, kWhere, ": layer ", l, " holds ", s.keys.tokens(), " keys and ",
                    s.values.tokens(), " values, layer 0 ", first.keys.tokens(),
                    " keys (must be equal and > 0)");
      RAZORKV_CHECK(
          s.queries.tokens() == first.queries.tokens() && s.queries.tokens() <= s.keys.tokens(),
          kShapeMismatch, kWhere, ": layer ", l, " holds ", s.queries.tokens(),
          " queries; every layer must hold the same number, at most its ", s.keys.tokens(),
          " tokens");
    }
  }

  const model_shape& shape() const noexcept { return shape_; }
  /// N: the prompt's tokens.
  index_t tokens() const noexcept { return layers_[0].keys.tokens(); }
  /// Nq: the prompt queries given (the last Nq tokens').
  index_t num_queries() const noexcept { return layers_[0].queries.tokens(); }
  const layer_sequence<T>& layer(index_t l) const {
    RAZORKV_CHECK(l >= 0 && l < shape_.num_layers, kOutOfRange, "prompt_kv::layer: layer (", l,
                  ") outside [0, ", shape_.num_layers, ")");
    return layers_[static_cast<std::size_t>(l)];
  }

  /// observed_attention of the last `queries` prompt queries of `layer` over its keys. Throws
  /// kInvalidArgument naming `who` (the policy's parameter) when fewer queries were given.
  attention_mass observed(index_t layer, index_t queries, const char* who) const {
    RAZORKV_CHECK(queries >= 1 && queries <= num_queries(), kInvalidArgument, who, " (", queries,
                  ") needs that many prompt queries; the prompt_kv holds ", num_queries(),
                  " of its ", tokens(), " tokens");
    if (observed_attention_hook) return observed_attention_hook(layer, queries);
    const layer_sequence<T>& s = this->layer(layer);
    observation_options options;
    options.parallel_for = parallel_for;
    return observed_attention(s.queries.middle_tokens(num_queries() - queries, queries), s.keys,
                              options);
  }

  /// Fan-out for compression and scoring; empty means the program's (fans_out_over_openmp()).
  parallel_for_fn parallel_for;
  /// Where the cache a policy makes of this prompt takes its K/V rows from (every policy here
  /// passes it to the cache it builds; see razor_kv_cache); null means
  /// std::pmr::get_default_resource(). It must outlive that cache and its copies.
  std::pmr::memory_resource* cache_resource = nullptr;
  /// See observation_fn.
  observation_fn observed_attention_hook;

 private:
  model_shape shape_;
  std::vector<layer_sequence<T>> layers_;
};

// The policy contract. A policy P is a copyable value with
//   p.name                              -> convertible to std::string: how reports call it
//   p.compress(prompt, budget_entries)  -> a KV cache (is_kv_cache_v) holding the prompt_kv<T>
//       `prompt` compressed to at most budget_entries entries per kv head on average
//       (entries_per_head of a memory_budget), for every storage dtype T, its K/V rows from
//       prompt.cache_resource; it throws the policy's error, naming the parameter, when the
//       budget or the prompt cannot hold it.
// A cache that learns during decode has observe(layer, queries) (see observe_decode).
// Policies are plug-ins: the evaluation harness and any_policy run any P without naming it.
namespace detail {

template <class P, class = void>
struct is_policy_impl : std::false_type {};

template <class P>
struct is_policy_impl<P, std::void_t<decltype(std::string(std::declval<const P&>().name)),
                                     decltype(std::declval<const P&>().compress(
                                         std::declval<const prompt_kv<float>&>(), index_t{}))>>
    : std::bool_constant<is_kv_cache_v<decltype(std::declval<const P&>().compress(
          std::declval<const prompt_kv<float>&>(), index_t{}))>> {};

}  // namespace detail

/// True when P satisfies the policy contract above (checked for float prompts).
template <class P>
inline constexpr bool is_policy_v = detail::is_policy_impl<std::remove_cv_t<P>>::value;

/// The cache policy `p` makes of `prompt` at `budget`: p.compress with the budget turned into
/// entries per kv head (entries_per_head) for the prompt's length and dtype.
template <class P, class T>
auto compress_prompt(const P& p, const prompt_kv<T>& prompt, const memory_budget& budget) {
  static_assert(is_policy_v<P>, "razorkv::compress_prompt: P does not satisfy the policy contract");
  return p.compress(prompt, entries_per_head(budget, prompt.shape(), prompt.tokens(),
                                             static_cast<index_t>(sizeof(T))));
}

/// No compression: a dense cache of the whole prompt (the reference every policy is compared
/// against). It ignores the budget.
struct full_policy {
  std::string name = "full";
  /// How the rows are stored (quant/storage.hpp): T, or the 8-/4-bit rows of a quantised cache.
  kv_storage storage;

  template <class T>
  dense_kv_cache<T> compress(const prompt_kv<T>& prompt, index_t /*budget_entries*/) const {
    const model_shape& shape = prompt.shape();
    dense_kv_cache<T> cache(shape.num_layers, shape.num_kv_heads, shape.head_dim, prompt.tokens(),
                            prompt.cache_resource, storage);
    for (index_t l = 0; l < shape.num_layers; ++l)
      cache.append(l, prompt.layer(l).keys, prompt.layer(l).values);
    return cache;
  }
};

RAZORKV_END_NAMESPACE
