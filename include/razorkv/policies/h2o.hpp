// razorkv/policies/h2o.hpp: H2O (Zhang et al., 2023) at a memory budget: per kv head, the
// heavy hitters by accumulated attention plus a recent window, re-ranked at every decode step.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory_resource>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "razorkv/attention/decode.hpp"
#include "razorkv/cache/attention_weights.hpp"
#include "razorkv/cache/head_rows.hpp"
#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/cache/skeleton.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"
#include "razorkv/policies/observed_attention.hpp"
#include "razorkv/policies/policy.hpp"

RAZORKV_BEGIN_NAMESPACE

/// H2O's parameters.
struct h2o_config {
  /// Entries per head of the recent window; 0 means half the budget (H2O's equal split of heavy
  /// hitters and recent tokens), at least 1.
  index_t recent = 0;
};

namespace detail {

// One kv head of an h2o_kv_cache.
template <class T>
struct h2o_head {
  detail::head_rows<T> heavy;           // [heavy_slots, dim]; rows() slots are filled
  std::vector<index_t> heavy_position;  // [heavy_slots], by slot
  std::vector<double> heavy_score;      // [heavy_slots], by slot
  detail::head_rows<T> ring;            // [recent, dim]; a ring once full
  std::vector<index_t> ring_position;   // [recent], by ring slot
  std::vector<double> ring_score;       // [recent], by ring slot
  index_t ring_start = 0;               // slot of the oldest window token
};

}  // namespace detail

/// The H2O cache of one sequence. Each (layer, kv head) holds at most `budget` entries: the
/// last `recent` tokens, and up to budget - recent heavy hitters, the older tokens with the
/// largest accumulated attention. Compression ranks the prompt by the attention mass its
/// observation queries paid (observed_attention; a GQA group's query heads add up for their kv
/// head); during decode, observe() adds the attention decode reports each entry was paid (see
/// attention_weights), and a token
/// leaving the recent window replaces the weakest heavy hitter if its accumulated attention is
/// larger (else it is dropped). Memory is allocated at compression and never grows.
///
/// Entries of a head, in span order: heavy hitters (in slot order; all older than the window),
/// then the window oldest first, so the newest token is last as the contract requires.
template <class T>
class h2o_kv_cache : public detail::compressed_cache_skeleton<detail::h2o_head<T>> {
  static_assert(is_storage_dtype_v<T>, "razorkv::h2o_kv_cache: unsupported storage dtype");
  using skeleton = detail::compressed_cache_skeleton<detail::h2o_head<T>>;

 public:
  using value_type = T;
  using skeleton::head_dim;
  using skeleton::memory_resource;
  using skeleton::num_kv_heads;
  using skeleton::num_layers;

  /// \param resource where every K/V row of the cache comes from (the heavy hitters' and the
  ///        window's, allocated at compression), as razor_kv_cache's; null means
  ///        std::pmr::get_default_resource(). It must outlive the cache and every copy of it (a
  ///        copy allocates from it too). Scores, positions and other bookkeeping come from the
  ///        heap.
  h2o_kv_cache(index_t num_layers, index_t num_kv_heads, index_t head_dim, index_t budget_entries,
               const h2o_config& config = {}, std::pmr::memory_resource* resource = nullptr)
      : skeleton("h2o_kv_cache", num_layers, num_kv_heads, head_dim, resource),
        budget_(budget_entries) {
    constexpr const char* kWhere = "h2o_kv_cache";
    RAZORKV_CHECK(budget_entries >= 1, kInvalidArgument, kWhere, ": the budget (", budget_entries,
                  " entries per head) must be >= 1");
    RAZORKV_CHECK(config.recent >= 0, kInvalidArgument, kWhere, ": recent (", config.recent,
                  ") must be >= 0");
    RAZORKV_CHECK(config.recent <= budget_entries, kInvalidArgument, kWhere, ": recent (",
                  config.recent, ") exceeds the budget (", budget_entries, " entries per head)");
    recent_ = config.recent > 0 ? config.recent : std::max<index_t>(1, budget_entries / 2);
  }

  /// Entries per head at most, of which recent_window() recent and heavy_slots() heavy hitters.
  index_t budget() const noexcept { return budget_; }
  index_t recent_window() const noexcept { return recent_; }
  index_t heavy_slots() const noexcept { return budget_ - recent_; }
  bool is_compressed(index_t layer) const {
    return layer_at(layer, "h2o_kv_cache::is_compressed").compressed;
  }
  index_t num_tokens(index_t layer) const {
    return layer_at(layer, "h2o_kv_cache::num_tokens").tokens;
  }

  /// Keeps, per kv head, the last recent_window() prompt tokens and the heavy_slots() earlier
  /// ones with the largest `prompt_mass` (ties to the earlier position), scored with that mass.
  /// keys and values are [N, num_kv_heads, head_dim] in any layout, read in place; prompt_mass is
  /// observed_attention over those keys. On error nothing changes.
  void compress_layer(index_t layer, layer_view<const T> keys, layer_view<const T> values,
                      const attention_mass& prompt_mass) {
    constexpr const char* kWhere = "h2o_kv_cache::compress_layer";
    layer_storage& target = layer_at(layer, kWhere);
    RAZORKV_CHECK(!target.compressed, kInvalidArgument, kWhere, ": layer (", layer,
                  ") is already compressed");
    detail::check_token_views(keys, values, num_kv_heads(), head_dim(), kWhere);
    const index_t tokens = keys.tokens();
    RAZORKV_CHECK(prompt_mass.num_kv_heads == num_kv_heads() && prompt_mass.tokens == tokens,
                  kShapeMismatch, kWhere, ": prompt_mass is [", prompt_mass.num_kv_heads,
                  " kv heads, ", prompt_mass.tokens, " tokens], the prompt [", num_kv_heads(), ", ",
                  tokens, "]");
    for (std::size_t i = 0; i < prompt_mass.values.size(); ++i) {
      RAZORKV_CHECK(std::isfinite(prompt_mass.values[i]), kInvalidArgument, kWhere,
                    ": prompt_mass value ", i, " (", prompt_mass.values[i], ") is not finite");
    }
    std::vector<head_state> heads(static_cast<std::size_t>(num_kv_heads()));
    for (head_state& head : heads) {
      head.heavy = detail::head_rows<T>(heavy_slots(), head_dim(), memory_resource());
      head.ring = detail::head_rows<T>(recent_, head_dim(), memory_resource());
      head.heavy_position.assign(static_cast<std::size_t>(heavy_slots()), 0);
      head.heavy_score.assign(static_cast<std::size_t>(heavy_slots()), 0.0);
      head.ring_position.assign(static_cast<std::size_t>(recent_), 0);
      head.ring_score.assign(static_cast<std::size_t>(recent_), 0.0);
    }
    const index_t in_window = std::min(tokens, recent_), candidates = tokens - in_window;
    for (index_t h = 0; h < num_kv_heads(); ++h) {
      head_state& head = heads[static_cast<std::size_t>(h)];
      const double* mass = prompt_mass.head(h);
      const matrix_view<const T> k = keys.head(h), v = values.head(h);
      std::vector<index_t> order(static_cast<std::size_t>(candidates));
      std::iota(order.begin(), order.end(), index_t{0});
      const auto heavy = static_cast<std::ptrdiff_t>(std::min(candidates, heavy_slots()));
      std::partial_sort(
          order.begin(), order.begin() + heavy, order.end(),
          [&](index_t a, index_t b) { return mass[a] != mass[b] ? mass[a] > mass[b] : a < b; });
      order.resize(static_cast<std::size_t>(heavy));
      std::sort(order.begin(), order.end());
      for (index_t p : order) {
        const index_t slot = head.heavy.rows();
        head.heavy.write(slot, k.middle_rows(p, 1), v.middle_rows(p, 1));
        head.heavy.set_rows(slot + 1);
        head.heavy_position[static_cast<std::size_t>(slot)] = p;
        head.heavy_score[static_cast<std::size_t>(slot)] = mass[p];
      }
      head.ring.write(0, k.middle_rows(candidates, in_window),
                      v.middle_rows(candidates, in_window));
      head.ring.set_rows(in_window);
      for (index_t i = 0; i < in_window; ++i) {
        head.ring_position[static_cast<std::size_t>(i)] = candidates + i;
        head.ring_score[static_cast<std::size_t>(i)] = mass[candidates + i];
      }
    }
    target.heads = std::move(heads);
    target.tokens = target.prompt_tokens = tokens;
    target.compressed = true;
  }

  /// The contract's append: each new token ([tokens, num_kv_heads, head_dim], any layout, not
  /// pointing into this cache) enters the recent window with score 0; the token it pushes out
  /// competes with the heavy hitters. Never allocates.
  void append(index_t layer, layer_view<const T> keys, layer_view<const T> values) {
    constexpr const char* kWhere = "h2o_kv_cache::append";
    layer_storage& l = layer_at(layer, kWhere);
    RAZORKV_CHECK(l.compressed, kInvalidArgument, kWhere, ": layer (", layer,
                  ") has not been compressed yet (call compress_layer with its prompt first)");
    detail::check_token_views(keys, values, num_kv_heads(), head_dim(), kWhere);
    detail::checked_add(l.tokens, keys.tokens(), "h2o_kv_cache::append: tokens");
    for (index_t h = 0; h < num_kv_heads(); ++h) {
      head_state& head = l.heads[static_cast<std::size_t>(h)];
      const matrix_view<const T> k = keys.head(h), v = values.head(h);
      for (index_t t = 0; t < keys.tokens(); ++t)
        push(head, k.middle_rows(t, 1), v.middle_rows(t, 1), l.tokens + t);
    }
    l.tokens += keys.tokens();
  }

  /// The observe hook (see observe_decode): adds to each entry the attention that the newest
  /// weights.tokens() tokens paid it (a GQA group's query heads add up for their kv head), as
  /// decode_attention_multi(*this, layer, queries, out, weights) reported it after those tokens
  /// were appended. tokens must be <= recent_window(); the weights must cover this layer's heads
  /// as they are and be finite and >= 0. Allocates nothing; on error nothing changes.
  void observe(index_t layer, const attention_weights& weights) {
    constexpr const char* kWhere = "h2o_kv_cache::observe";
    layer_storage& l = layer_at(layer, kWhere);
    RAZORKV_CHECK(l.compressed, kInvalidArgument, kWhere, ": layer (", layer,
                  ") has not been compressed yet");
    RAZORKV_CHECK(weights.num_kv_heads() == num_kv_heads(), kShapeMismatch, kWhere,
                  ": weights cover ", weights.num_kv_heads(), " kv heads, the cache has ",
                  num_kv_heads());
    const index_t tokens = weights.tokens();
    RAZORKV_CHECK(tokens <= recent_, kInvalidArgument, kWhere, ": weights.tokens() (", tokens,
                  ") exceeds the recent window (", recent_, ")");
    for (index_t h = 0; h < num_kv_heads(); ++h) {
      const head_state& head = l.heads[static_cast<std::size_t>(h)];
      const index_t entries = head.heavy.rows() + head.ring.rows();
      RAZORKV_CHECK(weights.entries(h) == entries, kShapeMismatch, kWhere, ": weights of kv head ",
                    h, " cover ", weights.entries(h), " entries, the head holds ", entries,
                    " (decode after append, and observe before the next append)");
      RAZORKV_CHECK(tokens <= head.ring.rows(), kInvalidArgument, kWhere, ": weights.tokens() (",
                    tokens, ") exceeds the tokens in kv head ", h, "'s window (", head.ring.rows(),
                    ")");
      const matrix_view<const float> w = weights.kv_head(h);
      for (index_t r = 0; r < w.rows(); ++r) {
        for (index_t e = 0; e < entries; ++e) {
          RAZORKV_CHECK(std::isfinite(w(r, e)) && w(r, e) >= 0.0f, kInvalidArgument, kWhere,
                        ": weight (", w(r, e), ") of kv head ", h, " row ", r, " entry ", e,
                        " is not a finite probability");
        }
      }
    }
    for (index_t h = 0; h < num_kv_heads(); ++h) {
      const matrix_view<const float> w = weights.kv_head(h);
      for_each_entry(l.heads[static_cast<std::size_t>(h)], [&](index_t e, const T*, double& score) {
        double paid = 0;
        for (index_t r = 0; r < w.rows(); ++r) paid += static_cast<double>(w(r, e));
        score += paid;
      });
    }
  }

  /// observe() for a caller that kept no weights: decodes the newest queries.tokens() tokens'
  /// queries ([tokens, num_query_heads, head_dim], any strides) over this cache once more for
  /// their weights, in the checked mode (non-finite queries are an error), and observes them.
  template <class TQ>
  void observe(index_t layer, layer_view<TQ> queries, attention_options options = {}) {
    constexpr const char* kWhere = "h2o_kv_cache::observe";
    RAZORKV_CHECK(layer_at(layer, kWhere).compressed, kInvalidArgument, kWhere, ": layer (", layer,
                  ") has not been compressed yet");
    const layer_view<const std::remove_const_t<TQ>> q = queries;
    RAZORKV_CHECK(q.tokens() <= recent_, kInvalidArgument, kWhere, ": queries.tokens() (",
                  q.tokens(), ") exceeds the recent window (", recent_, ")");
    std::vector<float> out(static_cast<std::size_t>(detail::checked_mul(
        q.tokens() * q.heads(), q.head_dim(), "h2o_kv_cache::observe: queries")));
    attention_weights weights;
    options.check_finite = true;
    decode_attention_multi(*this, layer, q,
                           layer_view<float>::nhd(out.data(), q.tokens(), q.heads(), q.head_dim()),
                           weights, options);
    observe(layer, weights);
  }

  index_t num_spans(index_t layer, index_t kv_head) const {
    index_t spans = 0;
    for_each_span(head_at(layer, kv_head, "h2o_kv_cache::num_spans"),
                  [&](const kv_span<T>&) { ++spans; });
    return spans;
  }
  kv_span<T> span(index_t layer, index_t kv_head, index_t i) const {
    const head_state& head = head_at(layer, kv_head, "h2o_kv_cache::span");
    index_t seen = 0;
    kv_span<T> found{};
    for_each_span(head, [&](const kv_span<T>& s) {
      if (seen++ == i) found = s;
    });
    RAZORKV_CHECK(i >= 0 && i < seen, kOutOfRange, "h2o_kv_cache::span: span (", i,
                  ") outside [0, ", seen, ")");
    return found;
  }

  /// Sequence positions and accumulated attention of the head's entries, in entry order.
  std::vector<index_t> positions(index_t layer, index_t kv_head) const {
    std::vector<index_t> out;
    const head_state& head = head_at(layer, kv_head, "h2o_kv_cache::positions");
    for_each_entry(
        head, [&](index_t e, const T*, const double&) { out.push_back(entry_position(head, e)); });
    return out;
  }
  std::vector<double> scores(index_t layer, index_t kv_head) const {
    std::vector<double> out;
    for_each_entry(head_at(layer, kv_head, "h2o_kv_cache::scores"),
                   [&](index_t, const T*, const double& score) { out.push_back(score); });
    return out;
  }
  // The memory vocabulary every razorkv cache shares.
  /// Entries the head holds (at most the budget).
  index_t entries(index_t layer, index_t kv_head) const {
    const head_state& head = head_at(layer, kv_head, "h2o_kv_cache::entries");
    return head.heavy.rows() + head.ring.rows();
  }
  /// K/V bytes held.
  index_t kv_bytes() const { return held_kv_bytes(*this); }
  /// K/V bytes allocated: the budget's rows of every compressed head, allocated at compression.
  index_t allocated_bytes() const noexcept {
    index_t total = 0;
    for (const layer_storage& l : layers_) {
      for (const head_state& head : l.heads)
        total += head.heavy.allocated_bytes() + head.ring.allocated_bytes();
    }
    return total;
  }

 private:
  using head_state = detail::h2o_head<T>;
  using layer_storage = detail::compressed_layer<head_state>;
  using skeleton::head_at;
  using skeleton::layer_at;
  using skeleton::layers_;

  // Slot of window entry i (0 = oldest).
  index_t ring_slot(const head_state& head, index_t i) const noexcept {
    return (head.ring_start + i) % recent_;
  }

  index_t entry_position(const head_state& head, index_t e) const {
    const index_t heavy = head.heavy.rows();
    return e < heavy ? head.heavy_position[static_cast<std::size_t>(e)]
                     : head.ring_position[static_cast<std::size_t>(ring_slot(head, e - heavy))];
  }

  // Calls f(entry index, key row, score) for every entry in span order.
  template <class Head, class F>
  void for_each_entry(Head& head, F&& f) const {
    const index_t heavy = head.heavy.rows();
    for (index_t e = 0; e < heavy; ++e)
      f(e, head.heavy.key_row(e), head.heavy_score[static_cast<std::size_t>(e)]);
    for (index_t i = 0; i < head.ring.rows(); ++i) {
      const index_t slot = ring_slot(head, i);
      f(heavy + i, head.ring.key_row(slot), head.ring_score[static_cast<std::size_t>(slot)]);
    }
  }

  template <class F>
  void for_each_span(const head_state& head, F&& f) const {
    const auto part = [&](const detail::head_rows<T>& rows, index_t first, index_t count) {
      if (count > 0) f(kv_span<T>{rows.keys(first, count), rows.values(first, count), 0.0f});
    };
    part(head.heavy, 0, head.heavy.rows());
    const index_t rows = head.ring.rows(), first_part = std::min(rows, recent_ - head.ring_start);
    part(head.ring, head.ring_start, first_part);
    part(head.ring, 0, rows - first_part);
  }

  // One new token into the window; the token it pushes out may become a heavy hitter.
  void push(head_state& head, const matrix_view<const T>& key, const matrix_view<const T>& value,
            index_t position) {
    if (head.ring.rows() < recent_) {  // not full yet: ring_start is 0
      const index_t slot = head.ring.rows();
      head.ring.write(slot, key, value);
      head.ring.set_rows(slot + 1);
      head.ring_position[static_cast<std::size_t>(slot)] = position;
      head.ring_score[static_cast<std::size_t>(slot)] = 0.0;
      return;
    }
    const index_t leaving = head.ring_start;
    const std::size_t lu = static_cast<std::size_t>(leaving);
    const matrix_view<const T> leaving_key = head.ring.keys(leaving, 1).typed(),
                               leaving_value = head.ring.values(leaving, 1).typed();
    const index_t filled = head.heavy.rows();
    if (filled < heavy_slots()) {
      head.heavy.write(filled, leaving_key, leaving_value);
      head.heavy.set_rows(filled + 1);
      head.heavy_position[static_cast<std::size_t>(filled)] = head.ring_position[lu];
      head.heavy_score[static_cast<std::size_t>(filled)] = head.ring_score[lu];
    } else if (filled > 0) {
      const auto weakest =
          static_cast<index_t>(std::min_element(head.heavy_score.begin(), head.heavy_score.end()) -
                               head.heavy_score.begin());
      if (head.ring_score[lu] > head.heavy_score[static_cast<std::size_t>(weakest)]) {
        head.heavy.write(weakest, leaving_key, leaving_value);
        head.heavy_position[static_cast<std::size_t>(weakest)] = head.ring_position[lu];
        head.heavy_score[static_cast<std::size_t>(weakest)] = head.ring_score[lu];
      }
    }
    head.ring.write(leaving, key, value);
    head.ring_position[lu] = position;
    head.ring_score[lu] = 0.0;
    head.ring_start = (head.ring_start + 1) % recent_;
  }

  index_t budget_, recent_ = 1;
};

static_assert(is_kv_cache_v<h2o_kv_cache<float>>,
              "h2o_kv_cache must satisfy the KV-cache contract");

/// H2O as a policy (see the policy contract): the prompt's last `observed_queries` queries (0:
/// all of them, as H2O does; the prompt_kv must hold them) rank the prompt, and the cache keeps
/// re-ranking during decode through observe_decode.
struct h2o_policy {
  std::string name = "h2o";
  h2o_config config;
  index_t observed_queries = 0;

  h2o_policy() = default;
  explicit h2o_policy(const h2o_config& h2o, index_t observed = 0)
      : config(h2o), observed_queries(observed) {}

  template <class T>
  h2o_kv_cache<T> compress(const prompt_kv<T>& prompt, index_t budget_entries) const {
    const model_shape& shape = prompt.shape();
    const index_t tokens = prompt.tokens();
    const index_t queries = observed_queries > 0 ? observed_queries : tokens;
    RAZORKV_CHECK(observed_queries >= 0 && queries <= tokens, kInvalidArgument,
                  "h2o_policy: observed_queries (", observed_queries, ") must be in [0, ", tokens,
                  "], the prompt's tokens");
    h2o_kv_cache<T> cache(shape.num_layers, shape.num_kv_heads, shape.head_dim, budget_entries,
                          config, prompt.cache_resource);
    for (index_t l = 0; l < shape.num_layers; ++l) {
      cache.compress_layer(l, prompt.layer(l).keys, prompt.layer(l).values,
                           prompt.observed(l, queries, "h2o_policy: observed_queries"));
    }
    return cache;
  }
};

RAZORKV_END_NAMESPACE
