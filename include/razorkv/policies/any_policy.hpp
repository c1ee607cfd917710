// razorkv/policies/any_policy.hpp: razorkv::policy, a value that holds any policy (the shipped
// ones or a user's), so that lists of different policies run through one loop.
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "razorkv/cache/any_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"
#include "razorkv/policies/policy.hpp"

RAZORKV_BEGIN_NAMESPACE

/// Any policy, behind the policy contract: `name`, and compress(prompt, budget_entries), which
/// returns the held policy's cache as an any_kv_cache<T>. Built implicitly from a policy value:
///   std::vector<razorkv::policy> policies = {razorkv::full_policy(), razorkv::snapkv_policy(),
///   my_policy{}};
/// It copies the policy it is given (policies are small values: parameters and a plan).
class policy {
 public:
  /// The held policy's name (a copy: renaming this value leaves the held policy as it was).
  std::string name;

  template <class P, class = std::enable_if_t<!std::is_same_v<std::decay_t<P>, policy>>>
  policy(P&& p)  // NOLINT(google-explicit-constructor): any policy is a policy
      : name(std::string(p.name)),
        held_(std::make_shared<const model<std::decay_t<P>>>(std::forward<P>(p))) {
    static_assert(is_policy_v<std::decay_t<P>>,
                  "razorkv::policy: P does not satisfy the policy contract");
  }

  /// The held policy's cache of `prompt` at `budget_entries` entries per kv head.
  template <class T>
  any_kv_cache<T> compress(const prompt_kv<T>& prompt, index_t budget_entries) const {
    static_assert(is_storage_dtype_v<T>, "razorkv::policy::compress: unsupported storage dtype");
    return held_->compress(prompt, budget_entries);
  }

  /// The held policy when it is a P, else null (as std::function::target).
  template <class P>
  const P* target() const noexcept {
    const auto* typed = dynamic_cast<const model<P>*>(held_.get());
    return typed ? &typed->held : nullptr;
  }

 private:
  // One virtual per storage dtype: a template member cannot be virtual, and the dtypes are four.
  struct interface {
    virtual ~interface() = default;
    virtual any_kv_cache<float> compress(const prompt_kv<float>& prompt, index_t budget) const = 0;
    virtual any_kv_cache<double> compress(const prompt_kv<double>& prompt,
                                          index_t budget) const = 0;
    virtual any_kv_cache<Eigen::half> compress(const prompt_kv<Eigen::half>& prompt,
                                               index_t budget) const = 0;
    virtual any_kv_cache<Eigen::bfloat16> compress(const prompt_kv<Eigen::bfloat16>& prompt,
                                                   index_t budget) const = 0;
  };

  template <class P>
  struct model final : interface {
    template <class Q>
    explicit model(Q&& q) : held(std::forward<Q>(q)) {}
    any_kv_cache<float> compress(const prompt_kv<float>& prompt, index_t budget) const override {
      return held.compress(prompt, budget);
    }
    any_kv_cache<double> compress(const prompt_kv<double>& prompt, index_t budget) const override {
      return held.compress(prompt, budget);
    }
    any_kv_cache<Eigen::half> compress(const prompt_kv<Eigen::half>& prompt,
                                       index_t budget) const override {
      return held.compress(prompt, budget);
    }
    any_kv_cache<Eigen::bfloat16> compress(const prompt_kv<Eigen::bfloat16>& prompt,
                                           index_t budget) const override {
      return held.compress(prompt, budget);
    }
    P held;
  };

  std::shared_ptr<const interface> held_;  // immutable, so copies share it
};

static_assert(is_policy_v<policy>, "razorkv::policy must satisfy the policy contract");

RAZORKV_END_NAMESPACE
