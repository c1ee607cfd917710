// razorkv/attention/prefill.hpp: exact attention for a chunk of many new queries (chunked prefill)
// over any KV source, causal among themselves, tiled into GEMMs with an online softmax.
#pragma once

#include <algorithm>
#include <memory_resource>
#include <vector>

#include "razorkv/attention/decode.hpp"
#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/decode_schedule.hpp"
#include "razorkv/detail/parallel.hpp"
#include "razorkv/detail/prefill_kernels.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

// Runs the tiles of one prefill call: (kv head, kPrefillQueryRows query vectors) each, the
// tiles that read the most entries first, each writing its own rows of `out`.
template <class T, class TO>
void run_prefill(const decode_work<T, TO>& work, index_t head_dim,
                 const parallel_for_fn& parallel_for, std::pmr::memory_resource* resource) {
  struct tile {
    index_t kv_head, first, rows;  // the query vectors [first, first + rows) of a kv head
  };
  std::pmr::vector<tile> tiles(resource);
  const index_t num_kv_heads = static_cast<index_t>(work.entries.size());
  for (index_t h = 0; h < num_kv_heads; ++h) {
    for (index_t j = 0; j < work.per_head; j += kPrefillQueryRows)
      tiles.push_back({h, j, std::min(kPrefillQueryRows, work.per_head - j)});
  }
  const auto reads = [&work](const tile& t) {
    return work.visible(t.kv_head, t.first + t.rows - 1);
  };
  std::sort(tiles.begin(), tiles.end(), [&reads](const tile& a, const tile& b) {
    if (reads(a) != reads(b)) return reads(a) > reads(b);
    return a.kv_head != b.kv_head ? a.kv_head < b.kv_head : a.first < b.first;
  });

  run_parallel(parallel_for, static_cast<index_t>(tiles.size()), [&](index_t i) {
    const tile& task = tiles[static_cast<std::size_t>(i)];
    const std::size_t h = static_cast<std::size_t>(task.kv_head);
    index_t visible[std::size_t{kPrefillQueryRows}];
    for (index_t r = 0; r < task.rows; ++r) visible[r] = work.visible(task.kv_head, task.first + r);
    prefill_scratch<T> scratch;
    prefill_tile<T>(work.spans.data() + work.first_span[h],
                    work.first_span[h + 1] - work.first_span[h], head_dim,
                    work.scaled.data() + (task.kv_head * work.per_head + task.first) * head_dim,
                    task.rows, visible, scratch);
    for (index_t r = 0; r < task.rows; ++r) {
      const index_t j = task.first + r;
      TO* dst = work.out.token(j / work.group).row(task.kv_head * work.group + j % work.group);
      for (index_t c = 0; c < head_dim; ++c) dst[c] = static_cast<TO>(scratch.out(r, c));
    }
  });
}

}  // namespace detail

/// Attention for a chunk of new queries, the prefill counterpart of decode_attention_multi with
/// the same contract: the source already holds the keys and values of the `queries.tokens()`
/// new tokens as the newest entries of every kv head (append or compress_chunk them first), and
/// new token t attends to every entry except the (tokens - 1 - t) entries after its own. GQA,
/// scale, span log-weights and the checked mode (options.check_finite) are as in decode; a
/// razor cache's max_new_tokens bounds the chunk the same way.
///
/// How it differs: decode_attention_multi reads a kv head once per 8 query vectors, which is
/// right for a few tokens; here a tile of 64 query vectors (tokens x GQA group) meets each
/// block of 256 entries in two matrix products (Eigen's GEMM; scores, then values) with the
/// online softmax between them, so a long chunk runs at matrix-multiply speed rather than at
/// the rate the cache can be read. Tiles fan out over options.parallel_for;
/// options.max_entries_per_task does not apply (a chunk has tiles enough to share out). When
/// razorkv runs its tiles on OpenMP's pool, Eigen runs each product on the calling thread.
/// Results agree with decode_attention_multi and the reference to float rounding, not bit for
/// bit (the products sum in another order).
///
/// \param queries [tokens, num_query_heads, head_dim], any strides (TQ: any storage dtype)
/// \param out     [tokens, num_query_heads, head_dim], any strides (TO: any storage dtype).
///                It may alias queries: every query is read before the first write.
template <class Source, class TQ, class TO>
void prefill_attention(const Source& source, index_t layer, layer_view<TQ> queries,
                       layer_view<TO> out, const attention_options& options = {}) {
  detail::check_decode_types<Source, TQ, TO>();
  detail::workspace_scope memory(options.workspace);
  const auto work =
      detail::prepare_decode(source, layer, queries, out, nullptr, options.scale,
                             options.check_finite, "prefill_attention", memory.resource());
  detail::run_prefill(work, source.head_dim(), options.parallel_for, memory.resource());
}

RAZORKV_END_NAMESPACE
