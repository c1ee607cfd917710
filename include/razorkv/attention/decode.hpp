// razorkv/attention/decode.hpp: exact decode attention over any KV source: one (or a few causal)
// new queries per query head, GQA, online softmax across spans and their log-weights.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <memory_resource>
#include <optional>
#include <vector>

#include "razorkv/attention/decode_schedule.hpp"
#include "razorkv/cache/attention_weights.hpp"
#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/parallel_for.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

namespace detail {
class workspace_scope;
}

/// Memory that decode reuses from call to call. Decode's bookkeeping (the spans it gathers, the
/// scaled queries, its task list, the outputs and partial softmax states of its tasks) is
/// carved from this workspace instead of being allocated: once the workspace has grown to the
/// largest call's needs (the first call, as a rule; it then holds a small multiple of them),
/// a decode allocates nothing. An engine keeps one per thread that calls decode and passes it in
/// attention_options::workspace; one workspace must not serve two calls at the same time.
class decode_workspace {
 public:
  decode_workspace() = default;
  /// A workspace that starts with `bytes` of room, so that no call grows it.
  explicit decode_workspace(std::size_t bytes) { grow(bytes); }
  decode_workspace(decode_workspace&&) noexcept = default;
  decode_workspace& operator=(decode_workspace&&) noexcept = default;

  /// Bytes of room it holds now.
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  friend class detail::workspace_scope;
  void grow(std::size_t bytes) {
    buffer_ = std::make_unique<std::byte[]>(bytes);
    capacity_ = bytes;
  }
  std::unique_ptr<std::byte[]> buffer_;
  std::size_t capacity_ = 0;
  std::size_t wanted_ = 0;  // what the last call that ran out of room would have needed
};

/// Options shared by the decode-attention entry points.
struct attention_options {
  /// Multiplies q.k before the softmax; empty means 1/sqrt(head_dim). Must be finite.
  std::optional<double> scale;
  /// Fan-out over kv heads; empty means the program's (fans_out_over_openmp()).
  parallel_for_fn parallel_for;
  /// A head with more entries than this is read by several tasks, each over a contiguous run of
  /// entries, whose partial softmax states are merged (flash-decoding), so that one long head
  /// (a retrieval head next to compressed ones, or batch 1 on many threads) does not run on a
  /// single thread. 0 means razorkv's default (16384); must be >= 0.
  index_t max_entries_per_task = 0;
  /// The checked mode: every query, key and value the call reads (and each query times the
  /// scale) must be finite, else a kInvalidArgument error names the first that is not, before
  /// anything is written. It reads the layer's K/V once more. false (default, for engines): no
  /// scan, and a NaN or infinity propagates to the outputs it reaches, as IEEE arithmetic does.
  bool check_finite = false;
  /// Where the call's bookkeeping lives: a decode_workspace the caller reuses (decode then
  /// allocates nothing once it is warm), or null for the heap. Prefill attention takes its
  /// bookkeeping from it too; its tiles still allocate their scratch.
  decode_workspace* workspace = nullptr;
};

namespace detail {

// The memory resource of one decode call: a monotonic arena over the workspace's buffer (no
// locks, no frees until the call ends) whose overflow goes to the heap and is counted, so that
// the next call, before it does anything, grows the buffer to fit. Without a workspace, the
// heap.
class workspace_scope {
 public:
  explicit workspace_scope(decode_workspace* workspace) : workspace_(workspace) {
    if (workspace_ == nullptr) return;
    if (workspace_->wanted_ > workspace_->capacity_) workspace_->grow(workspace_->wanted_);
    if (workspace_->capacity_ > 0) {
      arena_.emplace(workspace_->buffer_.get(), workspace_->capacity_, &overflow_);
    } else {
      arena_.emplace(&overflow_);
    }
  }
  workspace_scope(const workspace_scope&) = delete;
  workspace_scope& operator=(const workspace_scope&) = delete;
  ~workspace_scope() {
    if (workspace_ != nullptr && overflow_.bytes > 0)
      workspace_->wanted_ = workspace_->capacity_ + overflow_.bytes;
  }

  std::pmr::memory_resource* resource() noexcept {
    return arena_ ? static_cast<std::pmr::memory_resource*>(&*arena_)
                  : std::pmr::get_default_resource();
  }

 private:
  // The heap, counting what it hands out.
  struct counting_resource final : std::pmr::memory_resource {
    std::size_t bytes = 0;
    void* do_allocate(std::size_t size, std::size_t alignment) override {
      bytes += size;
      return std::pmr::new_delete_resource()->allocate(size, alignment);
    }
    void do_deallocate(void* p, std::size_t size, std::size_t alignment) override {
      std::pmr::new_delete_resource()->deallocate(p, size, alignment);
    }
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
      return this == &other;
    }
  };
  decode_workspace* workspace_;
  counting_resource overflow_;  // declared before the arena, which returns its overflow to it
  std::optional<std::pmr::monotonic_buffer_resource> arena_;
};

inline index_t entries_per_task(const attention_options& options, const char* where) {
  RAZORKV_CHECK(options.max_entries_per_task >= 0, kInvalidArgument, where,
                ": max_entries_per_task (", options.max_entries_per_task, ") must be >= 0");
  return options.max_entries_per_task > 0 ? options.max_entries_per_task : kDefaultEntriesPerTask;
}

template <class Source, class TQ, class TO>
void decode_one(const Source& source, index_t layer, layer_view<TQ> queries, layer_view<TO> out,
                attention_weights* weights, const attention_options& options) {
  check_decode_types<Source, TQ, TO>();
  using T = typename Source::value_type;
  workspace_scope memory(options.workspace);
  std::pmr::vector<decode_work<T, TO>> works(memory.resource());
  works.push_back(prepare_decode(source, layer, queries, out, weights, options.scale,
                                 options.check_finite, "decode_attention", memory.resource()));
  run_decode(works, source.head_dim(), options.parallel_for,
             entries_per_task(options, "decode_attention"), memory.resource());
}

}  // namespace detail

/// The instruction set razorkv's kernels (decode's, prefill's tile and compression's column sums)
/// run with: "avx512", "avx2", "sse2" (x86-64), "neon", ... Header-only, that of the flags the
/// calling translation unit is compiled with. Linked with razorkv::kernels on x86-64, the best one
/// the CPU runs, chosen at the first call ("avx512_zen" on an AMD CPU with AVX-512: the same
/// instructions, compiled with AMD Zen's tuning); the environment variable RAZORKV_KERNEL_ISA names
/// another (to compare them), and a name the build lacks or the CPU cannot run is an error, here
/// and from the first decode, prefill or compression.
inline const char* kernel_isa() { return detail::kernels_isa_name(); }

/// Decode attention with a few new queries per query head, causal among themselves: the
/// source (a cache, or a read-only source such as paged_kv_view) already holds the keys and
/// values of the `queries.tokens()` new tokens as the newest entries of every kv head, and new
/// token t attends to every entry except the (tokens - 1 - t) entries after its own.
/// tokens == 1 is ordinary decode.
///
/// GQA: query head h reads kv head h / (num_query_heads / num_kv_heads). Logits are
/// scale * q.k + the span's log-weight; the softmax is computed online in accum_t<T>.
///
/// \param queries [tokens, num_query_heads, head_dim], any strides (TQ: any storage dtype)
/// \param out     [tokens, num_query_heads, head_dim], any strides (TO: any storage dtype).
///                It may alias queries: every query is read before the first write.
/// \param weights when given, also receives the step's attention probabilities (see
///                attention_weights), for observe_decode; it costs no second read of the keys.
template <class Source, class TQ, class TO>
void decode_attention_multi(const Source& source, index_t layer, layer_view<TQ> queries,
                            layer_view<TO> out, attention_weights& weights,
                            const attention_options& options = {}) {
  detail::decode_one(source, layer, queries, out, &weights, options);
}
template <class Source, class TQ, class TO>
void decode_attention_multi(const Source& source, index_t layer, layer_view<TQ> queries,
                            layer_view<TO> out, const attention_options& options = {}) {
  detail::decode_one(source, layer, queries, out, nullptr, options);
}

/// Decode attention for a batch of independent sequences, one source (cache) each, in one parallel
/// loop over every (sequence, kv head): sequence b's query is queries.token(b) and its output
/// out.token(b). The caches may hold different numbers of entries; they must share num_kv_heads
/// and head_dim.
///
/// \param caches  [batch] pointers to the sequences' caches, none null
/// \param queries [batch, num_query_heads, head_dim], any strides
/// \param out     [batch, num_query_heads, head_dim], any strides; may alias queries
/// \param weights null, or [batch] pointers: sequence b's attention probabilities go to
///                *weights[b] where it is non-null (distinct objects), as in
///                decode_attention_multi
template <class Source, class TQ, class TO>
void decode_attention_batch(const Source* const* caches, index_t batch, index_t layer,
                            layer_view<TQ> queries, layer_view<TO> out,
                            attention_weights* const* weights,
                            const attention_options& options = {}) {
  detail::check_decode_types<Source, TQ, TO>();
  using T = typename Source::value_type;
  constexpr const char* kWhere = "decode_attention_batch";
  RAZORKV_CHECK(batch > 0 && caches != nullptr, kInvalidArgument, kWhere, ": batch (", batch,
                ") must be > 0, with a non-null caches array");
  RAZORKV_CHECK(queries.tokens() == batch && out.tokens() == batch, kShapeMismatch, kWhere,
                ": queries.tokens() (", queries.tokens(), ") and out.tokens() (", out.tokens(),
                ") must equal batch (", batch, ")");
  detail::workspace_scope memory(options.workspace);
  std::pmr::vector<detail::decode_work<T, TO>> works(memory.resource());
  works.reserve(static_cast<std::size_t>(batch));
  for (index_t b = 0; b < batch; ++b) {
    const Source* cache = caches[b];
    RAZORKV_CHECK(cache != nullptr, kInvalidArgument, kWhere, ": caches[", b, "] is null");
    RAZORKV_CHECK(cache->num_kv_heads() == caches[0]->num_kv_heads() &&
                      cache->head_dim() == caches[0]->head_dim(),
                  kShapeMismatch, kWhere, ": caches[", b, "] has ", cache->num_kv_heads(),
                  " kv heads of dim ", cache->head_dim(), ", caches[0] has ",
                  caches[0]->num_kv_heads(), " of dim ", caches[0]->head_dim());
    const auto one_token = [b](auto view) {
      using V = decltype(view);
      return V(view.data() + b * view.token_stride(), 1, view.heads(), view.head_dim(),
               view.token_stride(), view.head_stride());
    };
    attention_weights* sequence_weights = weights == nullptr ? nullptr : weights[b];
    if (sequence_weights != nullptr) {
      for (index_t other = 0; other < b; ++other) {
        RAZORKV_CHECK(weights[other] != sequence_weights, kInvalidArgument, kWhere, ": weights[", b,
                      "] is weights[", other, "]; each sequence needs its own");
      }
    }
    works.push_back(detail::prepare_decode(*cache, layer, one_token(queries), one_token(out),
                                           sequence_weights, options.scale, options.check_finite,
                                           kWhere, memory.resource()));
  }
  detail::run_decode(works, caches[0]->head_dim(), options.parallel_for,
                     detail::entries_per_task(options, kWhere), memory.resource());
}

/// decode_attention_batch without attention weights.
template <class Source, class TQ, class TO>
void decode_attention_batch(const Source* const* caches, index_t batch, index_t layer,
                            layer_view<TQ> queries, layer_view<TO> out,
                            const attention_options& options = {}) {
  decode_attention_batch(caches, batch, layer, queries, out,
                         static_cast<attention_weights* const*>(nullptr), options);
}

/// decode_attention_batch over a vector of sources.
template <class Source, class TQ, class TO>
void decode_attention_batch(const std::vector<Source>& caches, index_t layer,
                            layer_view<TQ> queries, layer_view<TO> out,
                            const attention_options& options = {}) {
  RAZORKV_CHECK(!caches.empty(), kInvalidArgument, "decode_attention_batch: caches is empty");
  std::vector<const Source*> pointers;
  for (const Source& c : caches) pointers.push_back(&c);
  decode_attention_batch(pointers.data(), static_cast<index_t>(pointers.size()), layer, queries,
                         out, options);
}

namespace detail {

// One new token's [num_query_heads, head_dim] rows as a [1, heads, head_dim] layer view.
template <class T>
layer_view<T> as_one_token(const matrix_view<T>& rows) {
  return layer_view<T>(rows.data(), 1, rows.rows(), rows.cols(), rows.cols(), rows.row_stride());
}

template <class TQ, class TO>
void check_one_token(const matrix_view<TQ>& queries, const matrix_view<TO>& out) {
  RAZORKV_CHECK(queries.rows() > 0, kInvalidArgument, "decode_attention: num_query_heads (",
                queries.rows(), ") must be > 0");
  RAZORKV_CHECK(out.rows() == queries.rows() && out.cols() == queries.cols(), kShapeMismatch,
                "decode_attention: out is [", out.rows(), ", ", out.cols(), "], queries are [",
                queries.rows(), ", ", queries.cols(), "]");
}

}  // namespace detail

/// Decode attention for one new query per query head (see decode_attention_multi).
///
/// \param queries [num_query_heads, head_dim], any row stride
/// \param out     [num_query_heads, head_dim], any row stride; may alias queries
/// \param weights when given, also receives the step's attention probabilities (see
///                decode_attention_multi)
template <class Source, class TQ, class TO>
void decode_attention(const Source& source, index_t layer, matrix_view<TQ> queries,
                      matrix_view<TO> out, attention_weights& weights,
                      const attention_options& options = {}) {
  detail::check_one_token(queries, out);
  detail::decode_one(source, layer, detail::as_one_token(queries), detail::as_one_token(out),
                     &weights, options);
}
template <class Source, class TQ, class TO>
void decode_attention(const Source& source, index_t layer, matrix_view<TQ> queries,
                      matrix_view<TO> out, const attention_options& options = {}) {
  detail::check_one_token(queries, out);
  detail::decode_one(source, layer, detail::as_one_token(queries), detail::as_one_token(out),
                     nullptr, options);
}

RAZORKV_END_NAMESPACE
