// razorkv/synthetic/planted_heads.hpp: synthetic post-RoPE Q/K/V for a probe whose heads have
// known behaviour (echo, induction, previous-token, local, sink, uniform, or mixtures), planted
// through Q/K geometry so that scorers and caches are tested on real softmaxes.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/random.hpp"
#include "razorkv/error.hpp"
#include "razorkv/scoring/probe.hpp"

RAZORKV_BEGIN_NAMESPACE

/// What a planted query head attends to.
enum class head_kind {
  kEcho,           ///< earlier copies of the current token
  kInduction,      ///< the token after each earlier copy of the current token
  kPreviousToken,  ///< the position just before
  kLocal,          ///< a smooth window of recent positions
  kSink,           ///< sequence index 0
  kUniform,        ///< nothing in particular (a zero query)
};

inline const char* head_kind_name(head_kind kind) noexcept {
  switch (kind) {
    case head_kind::kEcho:
      return "echo";
    case head_kind::kInduction:
      return "induction";
    case head_kind::kPreviousToken:
      return "previous-token";
    case head_kind::kLocal:
      return "local";
    case head_kind::kSink:
      return "sink";
    case head_kind::kUniform:
      return "uniform";
  }
  return "unknown";
}

/// One query head: a sum of behaviours, each with a strength in logit units (the logit of a
/// perfect match, after the 1/sqrt(head_dim) scale), plus Gaussian noise on the query.
struct planted_head {
  std::vector<std::pair<head_kind, double>> components;
  double noise = 0.0;  ///< standard deviation of the noise added to each query element
};

/// Shape and behaviour of one synthetic layer.
struct planted_layer_config {
  index_t num_kv_heads = 1;
  index_t head_dim = 128;  ///< >= 16; split into token, previous-token, position and smooth blocks
  std::vector<planted_head> query_heads;  ///< [num_query_heads], a multiple of num_kv_heads
  index_t local_window = 64;              ///< rough width of kLocal heads
  std::uint64_t seed = 0;
};

/// Synthetic Q/K/V of one layer over the probe: queries [L, query heads, dim], keys and values
/// [L, kv heads, dim], contiguous NHD, float.
struct planted_layer {
  index_t length = 0, num_query_heads = 0, num_kv_heads = 0, head_dim = 0;
  std::vector<float> queries, keys, values;

  layer_view<const float> query_view() const {
    return layer_view<const float>::nhd(queries.data(), length, num_query_heads, head_dim);
  }
  layer_view<const float> key_view() const {
    return layer_view<const float>::nhd(keys.data(), length, num_kv_heads, head_dim);
  }
  layer_view<const float> value_view() const {
    return layer_view<const float>::nhd(values.data(), length, num_kv_heads, head_dim);
  }
};

/// Builds the layer over any token sequence: token_slots[t] in [0, vocabulary) is the token at
/// sequence index t (dense ids). Every key holds four blocks: a random unit code of its token,
/// the code of the previous token (for index 0, the code of slot vocabulary - 1: give a BOS at
/// index 0 that slot), a random unit code of its position, and a smooth positional code whose
/// first element marks sequence index 0. A query head sums the block that makes it match what
/// its kind looks for, scaled by the kind's strength; with GQA all heads of a group share the
/// keys and differ only in their queries.
inline planted_layer make_planted_layer(const std::vector<index_t>& token_slots, index_t vocabulary,
                                        const planted_layer_config& config) {
  const index_t heads = static_cast<index_t>(config.query_heads.size());
  const index_t dim = config.head_dim;
  RAZORKV_CHECK(config.num_kv_heads > 0 && heads > 0 && heads % config.num_kv_heads == 0,
                kShapeMismatch, "make_planted_layer: query_heads.size() (", heads,
                ") must be a positive multiple of num_kv_heads (", config.num_kv_heads, ")");
  RAZORKV_CHECK(dim >= 16, kInvalidArgument, "make_planted_layer: head_dim (", dim,
                ") must be >= 16");
  RAZORKV_CHECK(config.local_window > 0, kInvalidArgument, "make_planted_layer: local_window (",
                config.local_window, ") must be > 0");
  const index_t block = dim / 4;
  const index_t token_block = 0, previous_block = block, position_block = 2 * block,
                smooth_block = 3 * block;
  const index_t smooth_dims = dim - smooth_block;  // first one is the sink marker
  const index_t frequencies = (smooth_dims - 1) / 2;

  RAZORKV_CHECK(vocabulary > 0, kInvalidArgument, "make_planted_layer: vocabulary (", vocabulary,
                ") must be > 0");
  const index_t length = static_cast<index_t>(token_slots.size());
  for (index_t t = 0; t < length; ++t) {
    const index_t slot = token_slots[static_cast<std::size_t>(t)];
    RAZORKV_CHECK(slot >= 0 && slot < vocabulary, kOutOfRange, "make_planted_layer: token_slots[",
                  t, "] (", slot, ") outside [0, ", vocabulary, ")");
  }
  std::mt19937_64 rng(config.seed);
  const auto normal = [](std::mt19937_64& g) { return detail::standard_normal(g); };
  const auto unit_codes = [&](index_t count) {
    std::vector<double> codes(static_cast<std::size_t>(count * block));
    for (index_t c = 0; c < count; ++c) {
      double norm = 0.0;
      for (index_t d = 0; d < block; ++d)
        norm += std::pow(codes[static_cast<std::size_t>(c * block + d)] = normal(rng), 2);
      for (index_t d = 0; d < block; ++d)
        codes[static_cast<std::size_t>(c * block + d)] /= std::sqrt(norm);
    }
    return codes;
  };
  const auto slot_of = [&](index_t t) { return token_slots[static_cast<std::size_t>(t)]; };

  planted_layer layer;
  layer.length = length;
  layer.num_query_heads = heads;
  layer.num_kv_heads = config.num_kv_heads;
  layer.head_dim = dim;
  layer.queries.assign(static_cast<std::size_t>(length * heads * dim), 0.0f);
  layer.keys.assign(static_cast<std::size_t>(length * config.num_kv_heads * dim), 0.0f);
  layer.values.assign(layer.keys.size(), 0.0f);
  const double root_dim = std::sqrt(static_cast<double>(dim));
  const double pi = 3.14159265358979323846;
  // Geometrically spaced frequencies from pi / (window * F) to pi / window. Evenly spaced ones
  // would all realign every 2 * window * F tokens and make kLocal heads read that far back as
  // strongly as their own neighbourhood; with irrational ratios the code never realigns.
  const auto frequency = [&](index_t f) {
    const double span = static_cast<double>(std::max<index_t>(frequencies - 1, 1));
    return pi / static_cast<double>(config.local_window) *
           std::pow(static_cast<double>(frequencies),
                    -static_cast<double>(frequencies - 1 - f) / span);
  };

  for (index_t kv = 0; kv < config.num_kv_heads; ++kv) {
    const auto token_codes = unit_codes(vocabulary);
    const auto position_codes = unit_codes(length);
    for (index_t t = 0; t < length; ++t) {
      float* key = layer.keys.data() + (t * config.num_kv_heads + kv) * dim;
      const index_t slot = slot_of(t);
      const index_t previous = t > 0 ? slot_of(t - 1) : vocabulary - 1;
      for (index_t d = 0; d < block; ++d) {
        key[token_block + d] =
            static_cast<float>(token_codes[static_cast<std::size_t>(slot * block + d)]);
        key[previous_block + d] =
            static_cast<float>(token_codes[static_cast<std::size_t>(previous * block + d)]);
        key[position_block + d] =
            static_cast<float>(position_codes[static_cast<std::size_t>(t * block + d)]);
      }
      key[smooth_block] = t == 0 ? 1.0f : 0.0f;
      for (index_t f = 0; f < frequencies; ++f) {
        key[smooth_block + 1 + 2 * f] =
            static_cast<float>(std::cos(frequency(f) * static_cast<double>(t)) /
                               std::sqrt(static_cast<double>(frequencies)));
        key[smooth_block + 2 + 2 * f] =
            static_cast<float>(std::sin(frequency(f) * static_cast<double>(t)) /
                               std::sqrt(static_cast<double>(frequencies)));
      }
      float* value = layer.values.data() + (t * config.num_kv_heads + kv) * dim;
      for (index_t d = 0; d < dim; ++d) value[d] = static_cast<float>(normal(rng));
    }
    const index_t group = heads / config.num_kv_heads;
    for (index_t g = 0; g < group; ++g) {
      const index_t h = kv * group + g;
      const planted_head& spec = config.query_heads[static_cast<std::size_t>(h)];
      for (index_t t = 0; t < length; ++t) {
        float* query = layer.queries.data() + (t * heads + h) * dim;
        const float* own_key = layer.keys.data() + (t * config.num_kv_heads + kv) * dim;
        for (const auto& [kind, strength] : spec.components) {
          const double s = strength * root_dim;  // logit = s * code . code / sqrt(dim)
          switch (kind) {
            case head_kind::kEcho:  // match keys whose token code equals this token's
              for (index_t d = 0; d < block; ++d)
                query[token_block + d] += static_cast<float>(s * own_key[token_block + d]);
              break;
            case head_kind::kInduction:  // match keys whose previous token is this token
              for (index_t d = 0; d < block; ++d)
                query[previous_block + d] += static_cast<float>(s * own_key[token_block + d]);
              break;
            case head_kind::kPreviousToken:
              if (t > 0) {
                const float* previous_key = own_key - config.num_kv_heads * dim;
                for (index_t d = 0; d < block; ++d)
                  query[position_block + d] +=
                      static_cast<float>(s * previous_key[position_block + d]);
              }
              break;
            case head_kind::kLocal:
              for (index_t d = 1; d < smooth_dims; ++d)
                query[smooth_block + d] += static_cast<float>(s * own_key[smooth_block + d]);
              break;
            case head_kind::kSink:
              query[smooth_block] += static_cast<float>(s);
              break;
            case head_kind::kUniform:
              break;
          }
        }
        if (spec.noise > 0.0) {
          for (index_t d = 0; d < dim; ++d)
            query[d] += static_cast<float>(spec.noise * normal(rng));
        }
      }
    }
  }
  return layer;
}

/// The layer over a probe: its P random ids as slots [0, P), the BOS (when present) as slot P.
inline planted_layer make_planted_layer(const probe& the_probe,
                                        const planted_layer_config& config) {
  const index_t period = the_probe.num_random_tokens();
  const index_t offset = the_probe.has_bos() ? 1 : 0;
  std::vector<index_t> slots(static_cast<std::size_t>(the_probe.length()));
  for (index_t t = 0; t < the_probe.length(); ++t) {
    slots[static_cast<std::size_t>(t)] = t < offset ? period : (t - offset) % period;
  }
  return make_planted_layer(slots, period + 1, config);
}

RAZORKV_END_NAMESPACE
