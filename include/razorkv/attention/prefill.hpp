// razorkv/attention/prefill.hpp: exact attention for a chunk of many new queries (chunked prefill)
// over any KV source, causal among themselves, tiled into GEMMs with an online softmax.
#pragma once

#include <algorithm>
#include <memory>
#include <memory_resource>
#include <vector>

#include "razorkv/attention/decode.hpp"
#include "razorkv/attention/decode_schedule.hpp"
#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/parallel.hpp"
#include "razorkv/kernels/kernel_set.hpp"
#include "razorkv/kernels/prefill.hpp"

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

  const prefill_tile_fn<T> kernel = kernels_for<T>().prefill_tile;  // may throw
  using Acc = accum_t<T>;
  // The kernel's scratch, then the tile's output.
  const index_t kernel_scratch = prefill_scratch_elements(head_dim);
  const index_t scratch_size = kernel_scratch + kPrefillQueryRows * head_dim;
  run_parallel(parallel_for, static_cast<index_t>(tiles.size()), [&](index_t i) {
    const tile& task = tiles[static_cast<std::size_t>(i)];
    const std::size_t h = static_cast<std::size_t>(task.kv_head);
    index_t visible[std::size_t{kPrefillQueryRows}];
    for (index_t r = 0; r < task.rows; ++r) visible[r] = work.visible(task.kv_head, task.first + r);
    // Uninitialised: the kernel writes what it reads. A tile is ~1e7 multiply-adds and more, so
    // one allocation per tile does not show (measured: allocation and page faults under 0.2%).
    const std::unique_ptr<Acc[]> scratch(new Acc[static_cast<std::size_t>(scratch_size)]);
    Acc* const tile_out = scratch.get() + kernel_scratch;
    kernel(work.spans.data() + work.first_span[h], work.first_span[h + 1] - work.first_span[h],
           head_dim, work.scaled.data() + (task.kv_head * work.per_head + task.first) * head_dim,
           task.rows, visible, scratch.get(), tile_out);
    for (index_t r = 0; r < task.rows; ++r) {
      const index_t j = task.first + r;
      TO* dst = work.out.token(j / work.group).row(task.kv_head * work.group + j % work.group);
      for (index_t c = 0; c < head_dim; ++c) dst[c] = static_cast<TO>(tile_out[r * head_dim + c]);
    }
  });
}

}  // namespace detail

/// Query vectors per kv head (tokens x GQA group) up to which prefill_attention runs the decode
/// kernel: the tiles vectorise across queries, 8 to 32 at a time, and below that they compute
/// mostly padding. Measured on Zen 5 with AVX-512 (1,024 cached tokens, 8 kv heads, dim 128, 2
/// threads): at 16 vectors per head decode took 0.7x the tile's time, at 32 the tile 0.8x
/// decode's.
inline constexpr index_t kPrefillDecodeVectors = 16;

/// Attention for a chunk of new queries, the prefill counterpart of decode_attention_multi with
/// the same contract: the source already holds the keys and values of the `queries.tokens()`
/// new tokens as the newest entries of every kv head (append or compress_chunk them first), and
/// new token t attends to every entry except the (tokens - 1 - t) entries after its own. GQA,
/// scale, span log-weights and the checked mode (options.check_finite) are as in decode; a
/// razor cache's max_new_tokens bounds the chunk the same way.
///
/// How it differs: decode_attention_multi reads a kv head once per 8 query vectors, which is
/// right for a few tokens; here a tile of 64 query vectors (tokens x GQA group) meets each
/// block of 256 entries in two register-tiled matrix products (scores, then values) with the
/// online softmax between them, so a long chunk runs at matrix-multiply speed rather than at
/// the rate the cache can be read. The tile is a kernel like decode's: compiled for the
/// caller's ISA, or picked for the CPU at run time where the build links razorkv::kernels.
/// Tiles fan out over options.parallel_for; options.max_entries_per_task does not apply (a
/// chunk has tiles enough to share out). A chunk of at most kPrefillDecodeVectors query vectors
/// per kv head (4 tokens at GQA 4) would leave the tiles mostly padding, and runs
/// decode_attention_multi's kernel instead (options.max_entries_per_task applies there).
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
  constexpr const char* kWhere = "prefill_attention";
  const index_t entries_per_task = detail::entries_per_task(options, kWhere);
  detail::workspace_scope memory(options.workspace);
  std::pmr::vector<detail::decode_work<typename Source::value_type, TO>> works(memory.resource());
  works.push_back(detail::prepare_decode(source, layer, queries, out, nullptr, options.scale,
                                         options.check_finite, kWhere, memory.resource()));
  if (works.front().per_head <= kPrefillDecodeVectors) {
    detail::run_decode(works, source.head_dim(), options.parallel_for, entries_per_task,
                       memory.resource());
  } else {
    detail::run_prefill(works.front(), source.head_dim(), options.parallel_for, memory.resource());
  }
}

RAZORKV_END_NAMESPACE
