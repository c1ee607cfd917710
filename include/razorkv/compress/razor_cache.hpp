// razorkv/compress/razor_cache.hpp: razor_kv_cache<T>, the RazorAttention KV cache: full K/V for
// retrieval heads, sinks + one compensation token + a recent window for every other head.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <memory_resource>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "razorkv/cache/dense_cache.hpp"
#include "razorkv/cache/head_rows.hpp"
#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/cache/skeleton.hpp"
#include "razorkv/compress/column_sums.hpp"
#include "razorkv/compress/kv_memory.hpp"
#include "razorkv/compress/razor_config.hpp"
#include "razorkv/compress/razor_head.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/any_view.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/detail/parallel.hpp"
#include "razorkv/error.hpp"
#include "razorkv/kernels/softmax.hpp"
#include "razorkv/quant/storage.hpp"

RAZORKV_BEGIN_NAMESPACE

/// The compensation token of one head: the dropped tokens' count, their mean key and value as
/// stored (rounded to T), and their exact sums in double.
template <class T>
struct compensation_token {
  index_t count = 0;           ///< tokens folded into it (0: nothing dropped yet)
  matrix_view<const T> key;    ///< [1, head_dim] mean key, or empty when count == 0 or mode none
  matrix_view<const T> value;  ///< [1, head_dim] mean value, likewise
  const double* key_sum = nullptr;    ///< [head_dim] sum of the dropped keys; null for mode none
  const double* value_sum = nullptr;  ///< [head_dim] sum of the dropped values; null for mode none
};

namespace detail {

struct razor_state_access;  // save_state and restore_state (compress/razor_state.hpp)

}  // namespace detail

/// The RazorAttention KV cache of one sequence (docs/method.md, section 4), built from a head
/// plan and a razor_config, then filled one layer at a time by compress_layer (from the engine's
/// prefill K/V, read in place) and grown by append during decode.
///
/// Per (layer, kv head):
///  - a retrieval head holds every token, bit-identical to the dense cache;
///  - any other head holds the first N0 tokens (sinks), one compensation token for the D
///    dropped tokens (mean key, mean value, count D; log-weight ln D in kWeighted mode, 0 in
///    kUnweighted, absent in kNone), and the last L_h tokens, L_h = max(S0, ceil(N / C)) or
///    the fixed or per-head window. Nothing is dropped while N <= N0 + L_h.
/// Each head is exposed through the generic KV-cache contract as spans [sinks | compensation |
/// recent (| recent, wrapped) | appended blocks], so decode_attention runs on it as on any other
/// cache. A growing head (a retrieval head; every head in append mode) fills the room its
/// compression left (config.decode_reserve) and then chains blocks of config.growth_rows rows:
/// it never copies what it holds to grow.
///
/// Spans and views stay valid until the next append or compress_layer on the same layer.
/// Distinct caches may be used from distinct threads; one cache is not synchronised.
template <class T>
class razor_kv_cache : public detail::compressed_cache_skeleton<detail::razor_head<T>> {
  static_assert(is_storage_dtype_v<T>, "razorkv::razor_kv_cache: unsupported storage dtype");
  using skeleton = detail::compressed_cache_skeleton<detail::razor_head<T>>;

 public:
  using value_type = T;
  using skeleton::head_dim;
  using skeleton::memory_resource;
  using skeleton::num_kv_heads;
  using skeleton::num_layers;

  /// An empty cache (every layer uncompressed) for the plan's model shape. The cache keeps its
  /// own copy of the plan.
  ///
  /// \param resource where every K/V row of the cache comes from (64-byte aligned blocks: the
  ///        sinks, windows, compensation tokens and their sums, appended blocks), so that an engine
  ///        can pool it with the rest of its KV memory; null means
  ///        std::pmr::get_default_resource(). It must outlive the cache and every copy of it (a
  ///        copy allocates from it too). The cache's bookkeeping (a few hundred bytes per kv head)
  ///        comes from the heap.
  razor_kv_cache(head_plan plan, const razor_config& config,
                 std::pmr::memory_resource* resource = nullptr)
      : razor_kv_cache(std::make_shared<const head_plan>(std::move(plan)), config, resource) {}

  /// A cache that shares `plan` with every other cache built from the same pointer: an engine
  /// serving many sequences of one model holds one plan, not one per sequence. The plan is
  /// immutable once shared.
  razor_kv_cache(std::shared_ptr<const head_plan> plan, const razor_config& config,
                 std::pmr::memory_resource* resource = nullptr)
      : skeleton("razor_kv_cache", shape_of(plan).num_layers, shape_of(plan).num_kv_heads,
                 shape_of(plan).head_dim, resource),
        plan_(std::move(plan)),
        config_(config) {
    check_config(config_, "razor_kv_cache");
    check_storage(config_.storage, head_dim(), "razor_kv_cache: config");
    if (config_.retrieval_storage) {
      check_storage(*config_.retrieval_storage, head_dim(),
                    "razor_kv_cache: config.retrieval_storage");
      RAZORKV_CHECK(config_.retrieval_storage->rotate_keys == config_.storage.rotate_keys,
                    kInvalidArgument, "razor_kv_cache: config.retrieval_storage.rotate_keys (",
                    config_.retrieval_storage->rotate_keys, ") != config.storage.rotate_keys (",
                    config_.storage.rotate_keys, "): a cache rotates all its keys or none");
    }
  }

  const head_plan& plan() const noexcept { return *plan_; }
  /// The plan as the pointer the cache shares (for building more caches on it).
  const std::shared_ptr<const head_plan>& shared_plan() const noexcept { return plan_; }
  const razor_config& config() const noexcept { return config_; }

  /// Whether compress_layer has run on `layer`.
  bool is_compressed(index_t layer) const {
    return layer_at(layer, "razor_kv_cache::is_compressed").compressed;
  }
  /// Tokens the layer has seen: the prefill plus every appended token (N, growing in decode).
  index_t num_tokens(index_t layer) const {
    return layer_at(layer, "razor_kv_cache::num_tokens").tokens;
  }
  /// Tokens of the layer's prompt (what compress_layer and compress_chunk were handed).
  index_t prompt_tokens(index_t layer) const {
    return layer_at(layer, "razor_kv_cache::prompt_tokens").prompt_tokens;
  }
  /// The query heads the plan was made for, which decode checks its queries against.
  index_t num_query_heads() const noexcept { return plan_->shape().num_query_heads; }
  bool is_retrieval(index_t layer, index_t kv_head) const {
    return plan_->is_retrieval(layer, kv_head);
  }
  /// The head's recent window L_h as fixed at compression (0 for a retrieval head).
  index_t window(index_t layer, index_t kv_head) const {
    return head_at(layer, kv_head, "razor_kv_cache::window").window;
  }
  /// How many of the layer's newest tokens every head still holds as entries of their own, as
  /// decode_attention_multi needs its new tokens to be (it checks its token count against this):
  /// a head that dropped tokens holds its window and what it appended since (in bounded mode,
  /// the window alone); a retrieval head, or one that dropped nothing, holds every token. So a
  /// chunk of a chunked prefill, or a run of tokens appended together, must fit in the windows.
  index_t max_new_tokens(index_t layer) const {
    const layer_storage& l = layer_at(layer, "razor_kv_cache::max_new_tokens");
    index_t limit = std::numeric_limits<index_t>::max();
    for (const head_state& head : l.heads) {
      if (!head.retrieval && head.dropped > 0)
        limit = std::min(limit, head.ring_rows + head.appended.rows());
    }
    return limit;
  }

  /// Compresses the engine's prefill K/V of one layer into this cache. keys and values are
  /// [N, num_kv_heads, head_dim] in any layout (NHD, HND, padded), read in place: no copy of the
  /// full layer is made, only what the cache keeps. The layer must not be compressed yet. A
  /// prompt of N <= sinks + L_h tokens is kept whole (N < sinks included). With
  /// config.check_finite, a non-finite key or value is an error naming it. On error nothing
  /// changes. Heads are processed in parallel (`parallel_for`, else the program's fan-out:
  /// fans_out_over_openmp()).
  void compress_layer(index_t layer, layer_view<const T> keys, layer_view<const T> values,
                      const parallel_for_fn& parallel_for = {}) {
    constexpr const char* kWhere = "razor_kv_cache::compress_layer";
    detail::check_token_views(keys, values, num_kv_heads(), head_dim(), kWhere);
    std::vector<T> rotated;
    if (rotated_keys()) keys = detail::rotated_keys(keys, rotated, parallel_for);
    std::vector<token_pieces> heads(static_cast<std::size_t>(num_kv_heads()));
    for (index_t h = 0; h < num_kv_heads(); ++h) {
      heads[static_cast<std::size_t>(h)].keys.push_back(keys.head(h));
      heads[static_cast<std::size_t>(h)].values.push_back(values.head(h));
    }
    compress_checked(layer, keys.tokens(), heads, parallel_for);
  }
  /// The same for K/V whose dtype is known at run time; a dtype other than T is an error.
  void compress_layer(index_t layer, const any_layer_view& keys, const any_layer_view& values,
                      const parallel_for_fn& parallel_for = {}) {
    constexpr const char* kWhere = "razor_kv_cache::compress_layer";
    const layer_view<const T> typed_keys = keys.as<T>(kWhere, "keys");
    const layer_view<const T> typed_values = values.as<T>(kWhere, "values");
    compress_layer(layer, typed_keys, typed_values, parallel_for);
  }
  /// The same from any KV source that holds the uncompressed prefill, such as an engine's page
  /// pool seen through paged_kv_view (one span per page): layer `layer` of `prefill` is read
  /// span by span, in place. Every head must hold the same tokens in spans of log-weight 0.
  template <class Source, class = std::enable_if_t<is_kv_source_v<Source>>>
  void compress_layer(index_t layer, const Source& prefill,
                      const parallel_for_fn& parallel_for = {}) {
    static_assert(std::is_same_v<typename Source::value_type, T>,
                  "razor_kv_cache::compress_layer: the prefill cache stores another dtype");
    constexpr const char* kWhere = "razor_kv_cache::compress_layer";
    check_layer(prefill, layer, kWhere);
    RAZORKV_CHECK(prefill.num_kv_heads() == num_kv_heads() && prefill.head_dim() == head_dim(),
                  kShapeMismatch, kWhere, ": the prefill cache has ", prefill.num_kv_heads(),
                  " kv heads of dim ", prefill.head_dim(), ", this cache ", num_kv_heads(),
                  " of dim ", head_dim());
    std::vector<token_pieces> heads(static_cast<std::size_t>(num_kv_heads()));
    index_t tokens = -1;
    for (index_t h = 0; h < num_kv_heads(); ++h) {
      token_pieces& pieces = heads[static_cast<std::size_t>(h)];
      index_t held = 0;
      for (index_t i = 0; i < prefill.num_spans(layer, h); ++i) {
        const kv_span<T> span = prefill.span(layer, h, i);
        RAZORKV_CHECK(span.log_weight == 0.0f, kInvalidArgument, kWhere, ": span ", i,
                      " of kv head ", h, " has log_weight (", span.log_weight,
                      "); the prefill must be uncompressed");
        RAZORKV_CHECK(span.keys.rows() == span.values.rows() && span.keys.cols() == head_dim() &&
                          span.values.cols() == head_dim(),
                      kShapeMismatch, kWhere, ": span ", i, " of kv head ", h, " has keys [",
                      span.keys.rows(), ", ", span.keys.cols(), "] and values [",
                      span.values.rows(), ", ", span.values.cols(), "]");
        if (span.length() == 0) continue;
        pieces.keys.push_back(span.keys.typed(kWhere));
        pieces.values.push_back(span.values.typed(kWhere));
        held += span.length();
      }
      RAZORKV_CHECK(tokens < 0 || held == tokens, kShapeMismatch, kWhere, ": kv head ", h,
                    " of the prefill holds ", held, " tokens, kv head 0 holds ", tokens);
      tokens = held;
    }
    // A cache storing rotated keys takes each piece's keys in rotated.
    std::vector<std::vector<T>> rotated;
    if (rotated_keys()) {
      for (token_pieces& pieces : heads) {
        for (matrix_view<const T>& piece : pieces.keys) {
          rotated.emplace_back();
          piece = detail::rotated_keys(layer_view<const T>::nhd(piece.data(), piece.rows(), 1,
                                                                piece.cols(), piece.row_stride()),
                                       rotated.back(), parallel_for)
                      .head(0);
        }
      }
    }
    compress_checked(layer, tokens, heads, parallel_for);
  }

  /// Chunked prefill: compresses the next `keys.tokens()` tokens of layer `layer`'s prompt as
  /// they arrive, so an engine never holds the layer's dense K/V (peak: the compressed cache
  /// plus one chunk). The first chunk of a layer is compress_layer; after every chunk the layer
  /// holds, bit for bit, the entries and compensation tokens that compress_layer over the whole
  /// prompt so far gives (the window start N - L_h only moves forward as N grows, so a token
  /// that has left the window never comes back). Its spans may split differently (the window
  /// is a ring), so a decode over it agrees with one over the one-shot cache to float rounding.
  /// Chunks end where decode begins: after an append, compress_chunk is an error. keys and
  /// values are [tokens, num_kv_heads, head_dim], any layout; a retrieval head chains the chunk
  /// as one block, a window that outgrows its rows moves to rows 1.5x larger. On error (a
  /// failed allocation included) nothing changes.
  void compress_chunk(index_t layer, layer_view<const T> keys, layer_view<const T> values,
                      const parallel_for_fn& parallel_for = {}) {
    constexpr const char* kWhere = "razor_kv_cache::compress_chunk";
    layer_storage& l = layer_at(layer, kWhere);
    if (!l.compressed) {
      compress_layer(layer, keys, values, parallel_for);
      return;
    }
    RAZORKV_CHECK(l.tokens == l.prompt_tokens, kInvalidArgument, kWhere, ": layer (", layer,
                  ") has decoded ", l.tokens - l.prompt_tokens,
                  " token(s) since its prompt; chunks must all come before decode");
    detail::check_token_views(keys, values, num_kv_heads(), head_dim(), kWhere);
    const index_t added = keys.tokens();
    if (added == 0) return;
    if (config_.check_finite) check_tokens_finite(keys, values, layer, l.tokens, kWhere);
    std::vector<T> rotated;
    if (rotated_keys()) keys = detail::rotated_keys(keys, rotated, parallel_for);
    const index_t total = detail::checked_add(l.tokens, added, kWhere);
    const razor_budget budget = config_.budget();
    const detail::column_sums_fn<T> sum_columns = detail::column_sums_kernel<T>();  // may throw

    // Phase 1, which may throw: what the chunk needs allocated, kept aside until phase 2.
    struct head_growth {
      index_t to_sinks = 0, rule_window = 0;
      detail::head_rows<T> rows;  // a larger window's rows, when the window outgrows its own
    };
    std::vector<head_growth> growth(l.heads.size());
    for (std::size_t h = 0; h < l.heads.size(); ++h) {
      head_state& head = l.heads[h];
      head_growth& g = growth[h];
      if (head.retrieval) {
        // One block per chunk, rounded up to whole growth_rows: few spans.
        const index_t block = detail::checked_mul(
            (added + config_.growth_rows - 1) / config_.growth_rows, config_.growth_rows, kWhere);
        head.appended.reserve_more(added - head.room(added), block, head_dim(), memory_resource(),
                                   config_.storage_for(true));
        continue;
      }
      g.to_sinks = std::min(added, config_.sinks - head.sinks.rows());
      g.rule_window =
          recent_window(total, budget, plan_->buffer_override(layer, static_cast<index_t>(h)));
      const index_t kept = std::min(total - head.sinks.rows() - g.to_sinks, g.rule_window);
      const index_t needed =
          config_.decode == decode_mode::kBounded ? std::max<index_t>(g.rule_window, 1) : kept;
      const index_t capacity = head.recent.capacity();
      if (needed > capacity) {
        const index_t reserve =
            config_.decode == decode_mode::kBounded ? 0 : config_.decode_reserve;
        g.rows = detail::head_rows<T>(
            std::max(detail::checked_add(needed, reserve, kWhere), capacity + capacity / 2),
            head_dim(), memory_resource(), config_.storage_for(false));
      }
    }
    // Phase 2: nothing allocates or throws.
    detail::run_parallel(parallel_for, num_kv_heads(), [&](index_t h) {
      head_state& head = l.heads[static_cast<std::size_t>(h)];
      head_growth& g = growth[static_cast<std::size_t>(h)];
      const matrix_view<const T> chunk_keys = keys.head(h), chunk_values = values.head(h);
      if (head.retrieval) {
        head.push_growing(chunk_keys, chunk_values);
        return;
      }
      head.sinks.write(head.sinks.rows(), chunk_keys.middle_rows(0, g.to_sinks),
                       chunk_values.middle_rows(0, g.to_sinks));
      head.sinks.set_rows(head.sinks.rows() + g.to_sinks);
      if (g.rows.capacity() > 0) head.move_ring(std::move(g.rows));
      head.window = config_.decode == decode_mode::kBounded ? std::max<index_t>(g.rule_window, 1)
                                                            : g.rule_window;
      head.slide_window(chunk_keys.middle_rows(g.to_sinks, added - g.to_sinks),
                        chunk_values.middle_rows(g.to_sinks, added - g.to_sinks), g.rule_window,
                        sum_columns);
    });
    l.tokens = l.prompt_tokens = total;
  }
  /// The same for K/V whose dtype is known at run time; a dtype other than T is an error.
  void compress_chunk(index_t layer, const any_layer_view& keys, const any_layer_view& values,
                      const parallel_for_fn& parallel_for = {}) {
    constexpr const char* kWhere = "razor_kv_cache::compress_chunk";
    compress_chunk(layer, keys.as<T>(kWhere, "keys"), values.as<T>(kWhere, "values"), parallel_for);
  }

  /// The contract's append: adds keys.tokens() new tokens ([tokens, num_kv_heads, head_dim], any
  /// layout, not pointing into this cache) to every head of a compressed layer. Retrieval heads
  /// and, in append mode, every head keep them; in bounded mode a non-retrieval head's window
  /// slides and the tokens leaving it are folded into its compensation token (so a
  /// decode_attention_multi over k new tokens needs k <= the smallest window). On error
  /// (including a failed allocation) nothing changes.
  void append(index_t layer, layer_view<const T> keys, layer_view<const T> values) {
    constexpr const char* kWhere = "razor_kv_cache::append";
    layer_storage& l = layer_at(layer, kWhere);
    RAZORKV_CHECK(l.compressed, kInvalidArgument, kWhere, ": layer (", layer,
                  ") has not been compressed yet (call compress_layer with its prefill first)");
    detail::check_token_views(keys, values, num_kv_heads(), head_dim(), kWhere);
    const index_t added = keys.tokens();
    if (added == 0) return;
    if (config_.check_finite) check_tokens_finite(keys, values, layer, l.tokens, kWhere);
    std::vector<T> rotated;
    if (rotated_keys()) keys = detail::rotated_keys(keys, rotated);
    const index_t total = detail::checked_add(l.tokens, added, "razor_kv_cache::append: tokens");
    const detail::column_sums_fn<T> sum_columns = detail::column_sums_kernel<T>();  // may throw

    // Phase 1, which may throw: the blocks growing heads need past their room (none while the
    // room lasts, and then append allocates nothing).
    for (head_state& head : l.heads) {
      if (grows(head))
        head.appended.reserve_more(added - head.room(added), config_.growth_rows, head_dim(),
                                   memory_resource(), config_.storage_for(head.retrieval));
    }
    // Phase 2: no allocation, nothing that throws.
    for (std::size_t h = 0; h < l.heads.size(); ++h) {
      head_state& head = l.heads[h];
      const matrix_view<const T> new_keys = keys.head(static_cast<index_t>(h));
      const matrix_view<const T> new_values = values.head(static_cast<index_t>(h));
      if (grows(head)) {
        head.push_growing(new_keys, new_values);
      } else {
        head.slide_window(new_keys, new_values, head.window, sum_columns);
      }
    }
    l.tokens = total;
  }

  /// Empties `layer` (it reads as uncompressed again) but keeps its buffers, so that the next
  /// compress_layer of a sequence no longer than this one allocates nothing: an engine that
  /// serves request after request from one cache per slot pays for fresh pages only once.
  /// release() gives the memory back instead.
  void clear(index_t layer) {
    layer_storage& l = layer_at(layer, "razor_kv_cache::clear");
    l.tokens = l.prompt_tokens = 0;
    l.compressed = false;
  }
  /// clear(layer) for every layer.
  void clear() {
    for (index_t l = 0; l < num_layers(); ++l) clear(l);
  }
  /// Empties `layer` and frees every buffer it held (allocated_bytes() drops by its share): for
  /// a finished sequence whose memory the engine wants back. The cache stays usable.
  void release(index_t layer) { layer_at(layer, "razor_kv_cache::release") = layer_storage{}; }
  /// release(layer) for every layer.
  void release() {
    for (index_t l = 0; l < num_layers(); ++l) release(l);
  }

  // --- The KV-cache contract -------------------------------------------------------------

  index_t num_spans(index_t layer, index_t kv_head) const {
    index_t count = 0;
    const head_state& head = head_at(layer, kv_head, "razor_kv_cache::num_spans");
    head.for_each_fixed_span(config_.compensation, [&](const kv_span<T>&) { ++count; });
    return count + head.appended.blocks_in_use();
  }
  // Found without walking the appended blocks: decode asks for every span of a head, and a
  // retrieval head at 128K tokens has 512 of them.
  kv_span<T> span(index_t layer, index_t kv_head, index_t i) const {
    const head_state& head = head_at(layer, kv_head, "razor_kv_cache::span");
    kv_span<T> found;
    index_t fixed = 0;
    head.for_each_fixed_span(config_.compensation, [&](const kv_span<T>& s) {
      if (fixed++ == i) found = s;
    });
    if (i < 0 || i >= fixed) {
      const index_t blocks = head.appended.blocks_in_use();
      RAZORKV_CHECK(i >= 0 && i < fixed + blocks, kOutOfRange, "razor_kv_cache::span: span (", i,
                    ") outside [0, ", fixed + blocks, ")");
      found = head.appended.span(i - fixed);
    }
    found.rotated_keys = rotated_keys();
    return found;
  }

  // --- Inspection and memory accounting ----------------------------------------------------

  /// The head's compensation token (count 0 for retrieval heads and heads that dropped nothing).
  compensation_token<T> compensation(index_t layer, index_t kv_head) const {
    const head_state& head = head_at(layer, kv_head, "razor_kv_cache::compensation");
    compensation_token<T> token;
    token.count = head.dropped;
    if (head.mean.rows() > 0) {
      token.key = head.mean.keys(0, 1).typed();
      token.value = head.mean.values(0, 1).typed();
    }
    if (head.sums.rows() > 0) {
      token.key_sum = head.sums.key_row(0);
      token.value_sum = head.sums.value_row(0);
    }
    return token;
  }

  /// Tokens the layer's heads have folded into their compensation tokens, summed over its kv
  /// heads. 0 after compressing a prompt says the cache kept it whole: no head had more than its
  /// sinks and window (a window of at least S0 = 4,000 tokens by default), so the layer holds
  /// what a dense cache does.
  index_t dropped_tokens(index_t layer) const {
    index_t total = 0;
    for (index_t h = 0; h < num_kv_heads(); ++h) {
      total += head_at(layer, h, "razor_kv_cache::dropped_tokens").dropped;
    }
    return total;
  }
  /// dropped_tokens over every layer.
  index_t dropped_tokens() const {
    index_t total = 0;
    for (index_t l = 0; l < num_layers(); ++l) total += dropped_tokens(l);
    return total;
  }

  /// Entries (rows of K and of V) the head holds, the compensation token counting as one.
  index_t entries(index_t layer, index_t kv_head) const {
    const head_state& head = head_at(layer, kv_head, "razor_kv_cache::entries");
    return head.entries();
  }
  /// K/V bytes the head holds: 2 * entries * head_dim * sizeof(T), the rule of the memory
  /// calculator (compress/kv_memory.hpp), which this agrees with exactly after compression; with
  /// quantised storage, a window's and a retrieval head's rows count their blocks' bytes.
  index_t kv_bytes(index_t layer, index_t kv_head) const {
    const head_state& head = head_at(layer, kv_head, "razor_kv_cache::kv_bytes");
    const index_t typed = head.sinks.rows() + head.mean.rows();
    return detail::checked_add(head_kv_bytes(typed, head_dim(), static_cast<index_t>(sizeof(T))),
                               detail::checked_mul(head.ring_rows + head.appended.rows(),
                                                   stored_entry_bytes(head), "kv bytes"),
                               "kv bytes");
  }
  index_t kv_bytes(index_t layer) const {
    index_t total = 0;
    for (index_t h = 0; h < num_kv_heads(); ++h)
      total = detail::checked_add(total, kv_bytes(layer, h), "kv bytes");
    return total;
  }
  index_t kv_bytes() const {
    index_t total = 0;
    for (index_t l = 0; l < num_layers(); ++l)
      total = detail::checked_add(total, kv_bytes(l), "kv bytes");
    return total;
  }
  /// What a dense cache of the same tokens holds.
  index_t dense_kv_bytes(index_t layer) const {
    return detail::checked_mul(
        num_kv_heads(),
        head_kv_bytes(num_tokens(layer), head_dim(), static_cast<index_t>(sizeof(T))), "kv bytes");
  }
  index_t dense_kv_bytes() const {
    index_t total = 0;
    for (index_t l = 0; l < num_layers(); ++l)
      total = detail::checked_add(total, dense_kv_bytes(l), "kv bytes");
    return total;
  }
  /// kv_bytes() / dense_kv_bytes() (1 for an empty cache).
  double compression_ratio() const {
    const index_t dense = dense_kv_bytes();
    return dense == 0 ? 1.0 : static_cast<double>(kv_bytes()) / static_cast<double>(dense);
  }
  /// Every byte the cache has allocated: K/V rows including reserved capacity, and the double
  /// sums behind the compensation tokens.
  index_t allocated_bytes() const noexcept {
    index_t total = 0;
    for (const layer_storage& l : layers_) {
      for (const head_state& head : l.heads) {
        total += head.sinks.allocated_bytes() + head.recent.allocated_bytes() +
                 head.appended.allocated_bytes() + head.mean.allocated_bytes() +
                 head.sums.allocated_bytes();
      }
    }
    return total;
  }

  // --- Planning: what the cache will hold after `tokens` more decode steps ------------------

  /// kv_bytes() once `tokens` more tokens are appended to every compressed layer: growing heads
  /// gain a row per token, a bounded head's window fills up to its size and then folds into its
  /// compensation token (which appears with the first token folded).
  index_t kv_bytes_after(index_t tokens) const {
    check_planned_tokens(tokens, "razor_kv_cache::kv_bytes_after");
    index_t bytes = 0;
    for (const layer_storage& l : layers_) {
      if (!l.compressed) continue;  // a cleared layer keeps its heads' buffers, not its tokens
      for (const head_state& head : l.heads) {
        bytes = detail::checked_add(bytes, bytes_after(head, tokens), "kv bytes");
      }
    }
    return bytes;
  }
  /// allocated_bytes() once `tokens` more tokens are appended to every compressed layer: the
  /// blocks growing heads chain past their room (bounded heads never allocate).
  index_t allocated_bytes_after(index_t tokens) const {
    check_planned_tokens(tokens, "razor_kv_cache::allocated_bytes_after");
    index_t bytes = allocated_bytes();
    for (const layer_storage& l : layers_) {
      if (!l.compressed) continue;  // appends to it are errors: it grows no block
      for (const head_state& head : l.heads) {
        if (grows(head)) {
          const index_t past_room = tokens - head.room(tokens);
          const index_t block_bytes =
              detail::checked_mul(config_.growth_rows, stored_entry_bytes(head), "allocated bytes");
          bytes = detail::checked_add(
              bytes,
              detail::checked_mul(head.appended.blocks_needed(past_room, config_.growth_rows),
                                  block_bytes, "allocated bytes"),
              "allocated bytes");
        }
      }
    }
    return bytes;
  }

 private:
  using head_state = detail::razor_head<T>;
  using layer_storage = detail::compressed_layer<head_state>;
  using skeleton::head_at;
  using skeleton::layer_at;
  using skeleton::layers_;

  // Whether every key the cache stores is rotated (config.storage.rotate_keys).
  bool rotated_keys() const noexcept { return config_.storage.rotate_keys; }

  // Bytes of one key row plus value row of the head's window or retrieval rows (as configured).
  index_t stored_entry_bytes(const head_state& head) const {
    const auto element = static_cast<index_t>(sizeof(T));
    const kv_storage& storage = config_.storage_for(head.retrieval);
    return storage.key_row_bytes(head_dim(), element) +
           storage.value_row_bytes(head_dim(), element);
  }

  // Whether the head keeps every token it is appended (else it is a bounded ring).
  bool grows(const head_state& head) const noexcept {
    return head.retrieval || config_.decode == decode_mode::kAppend;
  }
  // K/V bytes the head will hold after `tokens` more tokens: its sinks and compensation token as
  // T, its ring and blocks as stored.
  index_t bytes_after(const head_state& head, index_t tokens) const {
    index_t typed = head.sinks.rows() + head.mean.rows();
    index_t stored = head.ring_rows + head.appended.rows();
    if (grows(head)) {
      stored = detail::checked_add(stored, tokens, "entries");
    } else {
      stored = std::min(head.window, head.ring_rows + tokens);
      const bool folds = head.ring_rows + tokens > head.window;
      if (head.mean.rows() == 0 && folds && config_.compensation != compensation_mode::kNone)
        ++typed;
    }
    return detail::checked_add(head_kv_bytes(typed, head_dim(), static_cast<index_t>(sizeof(T))),
                               detail::checked_mul(stored, stored_entry_bytes(head), "kv bytes"),
                               "kv bytes");
  }
  static void check_planned_tokens(index_t tokens, const char* where) {
    RAZORKV_CHECK(tokens >= 0, kInvalidArgument, where, ": tokens (", tokens, ") must be >= 0");
  }

  // One head's prefill as contiguous pieces, oldest first: one piece for a layer view, one per
  // span (page) for a cache.
  struct token_pieces {
    std::vector<matrix_view<const T>> keys, values;  // [pieces], row counts equal pairwise
  };

  // Calls f(keys, values) on the parts of the pieces that cover rows [first, first + count).
  template <class F>
  static void for_rows(const token_pieces& pieces, index_t first, index_t count, F&& f) {
    index_t start = 0;  // first row of the current piece
    for (std::size_t p = 0; p < pieces.keys.size() && count > 0; ++p) {
      const index_t rows = pieces.keys[p].rows();
      if (first < start + rows) {
        const index_t offset = first - start, take = std::min(count, rows - offset);
        f(pieces.keys[p].middle_rows(offset, take), pieces.values[p].middle_rows(offset, take));
        first += take;
        count -= take;
      }
      start += rows;
    }
  }

  void compress_checked(index_t layer, index_t tokens, const std::vector<token_pieces>& sources,
                        const parallel_for_fn& parallel_for) {
    constexpr const char* kWhere = "razor_kv_cache::compress_layer";
    layer_storage& target = layer_at(layer, kWhere);
    RAZORKV_CHECK(!target.compressed, kInvalidArgument, kWhere, ": layer (", layer,
                  ") is already compressed");
    RAZORKV_CHECK(tokens > 0, kInvalidArgument, kWhere, ": the prefill of layer ", layer,
                  " has no tokens");
    if (config_.check_finite) {
      for (index_t h = 0; h < num_kv_heads(); ++h) {
        for_rows(sources[static_cast<std::size_t>(h)], 0, tokens,
                 [&, first = index_t{0}](const matrix_view<const T>& k,
                                         const matrix_view<const T>& v) mutable {
                   check_rows_finite(k, v, layer, h, first, kWhere);
                   first += k.rows();
                 });
      }
    }
    const index_t dim = head_dim();
    const razor_budget budget = config_.budget();
    const bool compensate = config_.compensation != compensation_mode::kNone;
    const detail::column_sums_fn<T> sum_columns = detail::column_sums_kernel<T>();  // may throw
    const bool bounded = config_.decode == decode_mode::kBounded;

    // Allocate every head first (this may throw; the layer reads as uncompressed until the
    // end), reusing the buffers a cleared layer kept where they are large enough.
    std::vector<head_state> kept = std::move(target.heads);
    kept.resize(static_cast<std::size_t>(num_kv_heads()));
    // Rows of T (sinks, compensation token; double for its sums), or as config.storage says (a
    // window, a retrieval head's rows).
    const auto rows_for = [&](auto& old, index_t needed, const kv_storage& storage = {}) {
      using rows_t = std::remove_reference_t<decltype(old)>;  // head_rows of T, or of double
      if (old.capacity() >= needed && needed > 0 && old.key_format() == storage.keys &&
          old.value_format() == storage.values) {
        rows_t reused = std::move(old);
        reused.set_rows(0);
        return reused;
      }
      return rows_t(needed, dim, memory_resource(), storage);
    };
    std::vector<head_state> heads(static_cast<std::size_t>(num_kv_heads()));
    struct head_job {
      index_t head, sinks, keep_recent, dropped;
    };
    std::vector<head_job> jobs;
    for (index_t h = 0; h < num_kv_heads(); ++h) {
      head_state& head = heads[static_cast<std::size_t>(h)];
      head_state& old = kept[static_cast<std::size_t>(h)];
      head.retrieval = plan_->is_retrieval(layer, h);
      head.appended = std::move(old.appended);  // blocks an earlier sequence grew, emptied
      head.appended.clear();
      if (head.retrieval) {
        head.recent =
            rows_for(old.recent, detail::checked_add(tokens, config_.decode_reserve, kWhere),
                     config_.storage_for(true));
        jobs.push_back({h, 0, tokens, 0});
        continue;
      }
      head.window = recent_window(tokens, budget, plan_->buffer_override(layer, h));
      // A prompt shorter than the sinks is all sinks; room for all of them stays for the chunks
      // of a chunked prefill.
      const index_t sinks = std::min(config_.sinks, tokens);
      const index_t keep_recent = std::min(tokens - sinks, head.window);
      const index_t dropped = tokens - sinks - keep_recent;
      head.sinks = rows_for(old.sinks, config_.sinks);
      if (bounded) {
        head.window =
            std::max<index_t>(head.window, 1);  // the newest token is always an entry of its own
        head.recent = rows_for(old.recent, head.window, config_.storage_for(false));
      } else {
        head.recent =
            rows_for(old.recent, detail::checked_add(keep_recent, config_.decode_reserve, kWhere),
                     config_.storage_for(false));
      }
      if (compensate) {
        head.sums = rows_for(old.sums, 1);
        std::fill_n(head.sums.key_row(0), dim, 0.0);
        std::fill_n(head.sums.value_row(0), dim, 0.0);
        head.sums.set_rows(1);
        head.mean = rows_for(old.mean, 1);
      }
      jobs.push_back({h, sinks, keep_recent, dropped});
    }
    // Longest jobs first (retrieval heads copy all N rows), so a dynamic schedule balances.
    std::stable_sort(jobs.begin(), jobs.end(), [&](const head_job& a, const head_job& b) {
      return a.keep_recent + a.dropped > b.keep_recent + b.dropped;
    });

    detail::run_parallel(parallel_for, static_cast<index_t>(jobs.size()), [&](index_t j) {
      const head_job& job = jobs[static_cast<std::size_t>(j)];
      head_state& head = heads[static_cast<std::size_t>(job.head)];
      const token_pieces& source = sources[static_cast<std::size_t>(job.head)];
      for_rows(source, 0, job.sinks,
               [&](const matrix_view<const T>& k, const matrix_view<const T>& v) {
                 head.sinks.write(head.sinks.rows(), k, v);
                 head.sinks.set_rows(head.sinks.rows() + k.rows());
               });
      if (job.dropped > 0) {
        head.dropped = job.dropped;
        if (compensate) {
          for_rows(source, job.sinks, job.dropped,
                   [&](const matrix_view<const T>& k, const matrix_view<const T>& v) {
                     detail::add_rows_to_sums(sum_columns, k, head.sums.key_row(0));
                     detail::add_rows_to_sums(sum_columns, v, head.sums.value_row(0));
                   });
          head.refresh_mean();
        }
      }
      for_rows(source, tokens - job.keep_recent, job.keep_recent,
               [&](const matrix_view<const T>& k, const matrix_view<const T>& v) {
                 head.push_ring(k, v);
               });
    });

    target.heads = std::move(heads);
    target.tokens = target.prompt_tokens = tokens;
    target.compressed = true;
  }

  // Throws kInvalidArgument naming the first non-finite key or value of a head's rows, the first
  // of which is the layer's token `first_token` (config.check_finite).
  void check_rows_finite(const matrix_view<const T>& keys, const matrix_view<const T>& values,
                         index_t layer, index_t kv_head, index_t first_token,
                         const char* where) const {
    for (const matrix_view<const T>* rows : {&keys, &values}) {
      index_t row = 0, col = 0;
      const bool finite = !detail::find_non_finite(*rows, row, col);
      RAZORKV_CHECK(finite, kInvalidArgument, where, ": ", rows == &keys ? "key" : "value", " (",
                    finite ? 0.0 : detail::to_double((*rows)(row, col)), ") of token ",
                    first_token + row, " in layer ", layer, " kv head ", kv_head, " dim ", col,
                    " is not finite (config.check_finite)");
      if constexpr (std::is_same_v<T, double>) {
        // The compensation sums are doubles: finite double tokens this large could sum to an
        // infinity no token holds (2^63 tokens below 2^960 cannot). Narrower dtypes cannot.
        constexpr double kLargestSummable = 0x1p960;
        for (index_t r = 0; r < rows->rows(); ++r) {
          for (index_t c = 0; c < rows->cols(); ++c) {
            RAZORKV_CHECK(std::abs((*rows)(r, c)) <= kLargestSummable, kInvalidArgument, where,
                          ": ", rows == &keys ? "key" : "value", " (", (*rows)(r, c), ") of token ",
                          first_token + r, " in layer ", layer, " kv head ", kv_head, " dim ", c,
                          " is over 2^960, where the compensation sums could overflow "
                          "(config.check_finite)");
          }
        }
      }
    }
  }

  // check_rows_finite over every kv head of new tokens, the first being the layer's `first_token`.
  void check_tokens_finite(const layer_view<const T>& keys, const layer_view<const T>& values,
                           index_t layer, index_t first_token, const char* where) const {
    for (index_t h = 0; h < num_kv_heads(); ++h)
      check_rows_finite(keys.head(h), values.head(h), layer, h, first_token, where);
  }

  static const model_shape& shape_of(const std::shared_ptr<const head_plan>& plan) {
    RAZORKV_CHECK(plan != nullptr, kInvalidArgument, "razor_kv_cache: plan is null");
    return plan->shape();
  }

  friend struct detail::razor_state_access;

  std::shared_ptr<const head_plan> plan_;  // never null
  razor_config config_;
};

static_assert(is_kv_cache_v<razor_kv_cache<float>>,
              "razor_kv_cache must satisfy the KV-cache contract");

/// Compresses every layer of a prefilled dense cache: the RazorAttention cache of the same
/// sequence under `plan` and `config`. The dense cache is only read. Throws kShapeMismatch when
/// the plan was made for another model shape.
template <class T>
razor_kv_cache<T> compress_cache(const dense_kv_cache<T>& dense, const head_plan& plan,
                                 const razor_config& config,
                                 const parallel_for_fn& parallel_for = {}) {
  const model_shape& shape = plan.shape();
  const auto check = [](index_t planned, index_t held, const char* name) {
    RAZORKV_CHECK(planned == held, kShapeMismatch, "compress_cache: the plan has ", name, " ",
                  planned, ", the dense cache has ", held);
  };
  check(shape.num_layers, dense.num_layers(), "num_layers");
  check(shape.num_kv_heads, dense.num_kv_heads(), "num_kv_heads");
  check(shape.head_dim, dense.head_dim(), "head_dim");
  razor_kv_cache<T> cache(plan, config);
  for (index_t l = 0; l < dense.num_layers(); ++l) {
    cache.compress_layer(l, dense.keys(l), dense.values(l), parallel_for);
  }
  return cache;
}

RAZORKV_END_NAMESPACE
