// razorkv/synthetic/planted_model.hpp: synthetic multi-layer models, each layer a random mix of
// planted heads (mostly local, sink and uniform heads, a few echo and induction heads).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/random.hpp"
#include "razorkv/error.hpp"
#include "razorkv/synthetic/planted_heads.hpp"

RAZORKV_BEGIN_NAMESPACE

/// The shape of a synthetic model.
struct planted_model_shape {
  index_t num_layers = 6;
  index_t num_query_heads = 16;
  index_t num_kv_heads = 4;
  index_t head_dim = 64;
};

/// One layer of a synthetic model: each query head draws its behaviour from `rng` (1 in 10 an
/// echo head, 2 in 10 an induction head (one of them mixed with a local component), 1 in 10
/// each previous-token, sink and uniform, the rest local heads with a sink component), with a
/// random strength in [2, 12] and query noise 0.2. `seed` seeds the layer's codes and values.
inline planted_layer_config random_planted_layer(std::mt19937_64& rng, std::uint64_t seed,
                                                 const planted_model_shape& shape) {
  RAZORKV_CHECK(shape.num_kv_heads > 0 && shape.num_query_heads > 0 &&
                    shape.num_query_heads % shape.num_kv_heads == 0,
                kShapeMismatch, "random_planted_layer: num_query_heads (", shape.num_query_heads,
                ") must be a positive multiple of num_kv_heads (", shape.num_kv_heads, ")");
  planted_layer_config config;
  config.num_kv_heads = shape.num_kv_heads;
  config.head_dim = shape.head_dim;
  config.seed = seed;
  const auto strength = [](std::mt19937_64& g) { return detail::uniform_real(g, 2.0, 12.0); };
  const auto kind = [](std::mt19937_64& g) {
    return static_cast<int>(detail::uniform_below(g, 10));
  };
  for (index_t h = 0; h < shape.num_query_heads; ++h) {
    planted_head head;
    switch (kind(rng)) {
      case 0:
        head.components = {{head_kind::kEcho, strength(rng)}};
        break;
      case 1:
        head.components = {{head_kind::kInduction, strength(rng)}};
        break;
      case 2:
        head.components = {{head_kind::kInduction, strength(rng)}, {head_kind::kLocal, 3.0}};
        break;
      case 3:
        head.components = {{head_kind::kPreviousToken, strength(rng)}};
        break;
      case 4:
        head.components = {{head_kind::kSink, strength(rng)}};
        break;
      case 5:
        head.components = {{head_kind::kUniform, 0.0}};
        break;
      default:
        head.components = {{head_kind::kLocal, strength(rng)}, {head_kind::kSink, 2.0}};
        break;
    }
    head.noise = 0.2;
    config.query_heads.push_back(head);
  }
  return config;
}

/// Every layer of a synthetic model, drawn in order from one generator seeded with `seed`;
/// layer l's codes use seed `100 + l`.
inline std::vector<planted_layer_config> random_planted_model(const planted_model_shape& shape,
                                                              std::uint64_t seed) {
  RAZORKV_CHECK(shape.num_layers > 0, kInvalidArgument, "random_planted_model: num_layers (",
                shape.num_layers, ") must be > 0");
  std::mt19937_64 rng(seed);
  std::vector<planted_layer_config> layers;
  for (index_t l = 0; l < shape.num_layers; ++l) {
    layers.push_back(random_planted_layer(rng, static_cast<std::uint64_t>(100 + l), shape));
  }
  return layers;
}

namespace detail {

// A head that reads locally or broadly: local with a sink component (1 in 2), sink,
// previous-token or uniform (1 in 6 each).
inline std::vector<std::pair<head_kind, double>> draw_non_retrieval_head(std::mt19937_64& rng) {
  switch (detail::uniform_below(rng, 6)) {
    case 0:
      return {{head_kind::kSink, 4.0}};
    case 1:
      return {{head_kind::kPreviousToken, 16.0}};
    case 2:
      return {{head_kind::kUniform, 0.0}};
    default:
      return {{head_kind::kLocal, 8.0}, {head_kind::kSink, 2.0}};
  }
}

inline void check_model_shape(const planted_model_shape& shape, const char* where) {
  RAZORKV_CHECK(shape.num_layers > 0, kInvalidArgument, where, ": num_layers (", shape.num_layers,
                ") must be > 0");
  RAZORKV_CHECK(shape.num_kv_heads > 0 && shape.num_query_heads > 0 &&
                    shape.num_query_heads % shape.num_kv_heads == 0,
                kShapeMismatch, where, ": num_query_heads (", shape.num_query_heads,
                ") must be a positive multiple of num_kv_heads (", shape.num_kv_heads, ")");
}

}  // namespace detail

/// A model with RazorAttention's premise built in: exactly `retrieval_groups` of its
/// num_layers x num_kv_heads GQA groups, drawn at random, hold an induction head (strength 6 to
/// 12, and half of them an echo head too); every other query head reads locally or broadly: a
/// local head with a sink component (1 in 2), a sink head, a previous-token head, or a uniform
/// head (1 in 6 each). Layer l's codes use seed `seed + 100 + l`.
inline std::vector<planted_layer_config> sparse_retrieval_model(const planted_model_shape& shape,
                                                                index_t retrieval_groups,
                                                                std::uint64_t seed) {
  detail::check_model_shape(shape, "sparse_retrieval_model");
  const index_t groups = shape.num_layers * shape.num_kv_heads;
  RAZORKV_CHECK(retrieval_groups >= 0 && retrieval_groups <= groups, kInvalidArgument,
                "sparse_retrieval_model: retrieval_groups (", retrieval_groups, ") must be in [0, ",
                groups, "]");
  std::mt19937_64 rng(seed);
  std::vector<char> holds_retrieval(static_cast<std::size_t>(groups), 0);
  std::fill(holds_retrieval.begin(), holds_retrieval.begin() + retrieval_groups, 1);
  detail::shuffle(holds_retrieval.begin(), holds_retrieval.end(), rng);

  const auto strength = [](std::mt19937_64& g) { return detail::uniform_real(g, 6.0, 12.0); };
  const index_t group_size = shape.num_query_heads / shape.num_kv_heads;
  std::vector<planted_layer_config> layers;
  for (index_t l = 0; l < shape.num_layers; ++l) {
    planted_layer_config config;
    config.num_kv_heads = shape.num_kv_heads;
    config.head_dim = shape.head_dim;
    config.seed = seed + 100 + static_cast<std::uint64_t>(l);
    for (index_t h = 0; h < shape.num_query_heads; ++h) {
      planted_head head;
      head.noise = 0.2;
      const index_t g = h / group_size, member = h % group_size;
      const bool retrieval_group =
          holds_retrieval[static_cast<std::size_t>(l * shape.num_kv_heads + g)] != 0;
      if (retrieval_group && member == 0) {
        head.components = {{head_kind::kInduction, strength(rng)}};
      } else if (retrieval_group && member == 1 && group_size > 1 && rng() % 2 == 0) {
        head.components = {{head_kind::kEcho, strength(rng)}};
      } else {
        head.components = detail::draw_non_retrieval_head(rng);
      }
      config.query_heads.push_back(head);
    }
    layers.push_back(std::move(config));
  }
  return layers;
}

/// A model whose retrieval heads come in two disjoint sets, as in the paper's ablation: exactly
/// `induction_groups` GQA groups hold an induction head (query head 0 of the group) and
/// `echo_groups` other groups an echo head, all of logit strength `strength`; every other query
/// head reads locally or broadly (as in sparse_retrieval_model). The groups are drawn at random;
/// layer l's codes use seed `seed + 100 + l`. Strong heads (the default 16: e^16 = 8.9e6 times a
/// random key) fetch their match out of contexts of tens of thousands of tokens.
inline std::vector<planted_layer_config> retrieval_model(const planted_model_shape& shape,
                                                         index_t induction_groups,
                                                         index_t echo_groups, std::uint64_t seed,
                                                         double strength = 16.0) {
  detail::check_model_shape(shape, "retrieval_model");
  const index_t groups = shape.num_layers * shape.num_kv_heads;
  RAZORKV_CHECK(
      induction_groups >= 0 && echo_groups >= 0 && induction_groups + echo_groups <= groups,
      kInvalidArgument, "retrieval_model: induction_groups (", induction_groups,
      ") + echo_groups (", echo_groups, ") must be in [0, ", groups, "]");
  RAZORKV_CHECK(std::isfinite(strength) && strength > 0.0, kInvalidArgument,
                "retrieval_model: strength (", strength, ") must be > 0");
  enum : char { kNone, kInductionGroup, kEchoGroup };
  std::mt19937_64 rng(seed);
  std::vector<char> role(static_cast<std::size_t>(groups), kNone);
  std::fill(role.begin(), role.begin() + induction_groups, kInductionGroup);
  std::fill(role.begin() + induction_groups, role.begin() + induction_groups + echo_groups,
            kEchoGroup);
  detail::shuffle(role.begin(), role.end(), rng);

  const index_t group_size = shape.num_query_heads / shape.num_kv_heads;
  std::vector<planted_layer_config> layers;
  for (index_t l = 0; l < shape.num_layers; ++l) {
    planted_layer_config config;
    config.num_kv_heads = shape.num_kv_heads;
    config.head_dim = shape.head_dim;
    config.seed = seed + 100 + static_cast<std::uint64_t>(l);
    for (index_t h = 0; h < shape.num_query_heads; ++h) {
      planted_head head;
      head.noise = 0.2;
      const char group_role =
          role[static_cast<std::size_t>(l * shape.num_kv_heads + h / group_size)];
      if (group_role == kInductionGroup && h % group_size == 0) {
        head.components = {{head_kind::kInduction, strength}};
      } else if (group_role == kEchoGroup && h % group_size == 0) {
        head.components = {{head_kind::kEcho, strength}};
      } else {
        head.components = detail::draw_non_retrieval_head(rng);
      }
      config.query_heads.push_back(head);
    }
    layers.push_back(std::move(config));
  }
  return layers;
}

RAZORKV_END_NAMESPACE
