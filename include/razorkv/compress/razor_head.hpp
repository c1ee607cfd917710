// razorkv/compress/razor_head.hpp: one kv head of a razor_kv_cache (its sinks, compensation token,
// recent window as a ring, and the blocks a growing head chains) and the operations on its ring.
#pragma once

#include <algorithm>
#include <cmath>
#include <utility>

#include "razorkv/cache/head_rows.hpp"
#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/compress/column_sums.hpp"
#include "razorkv/compress/razor_config.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/kernels/dispatch.hpp"
#include "razorkv/quant/row_blocks.hpp"
#include "razorkv/quant/storage.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

// sums[c] += the rows' column c, for rows as a head stores them: typed rows through the column-sum
// kernel, quantised ones as the values they stand for (a window's rows are folded as stored).
template <class T>
void add_stored_rows_to_sums(column_sums_fn<T> sum_columns, const kv_rows<T>& rows,
                             double* sums) noexcept {
  if (!rows.is_quantised()) {
    add_rows_to_sums(sum_columns, rows.typed(), sums);
    return;
  }
  const quantised_rows& q = rows.quantised();
  for (index_t r = 0; r < q.rows; ++r) {
    for (index_t b = 0; b < q.cols / kQuantBlock; ++b) {
      float block[kQuantBlock];
      dequantise_block(q.format, q.row(r) + b * block_bytes(q.format), block);
      for (index_t i = 0; i < kQuantBlock; ++i) sums[b * kQuantBlock + i] += block[i];
    }
  }
}

// One kv head of a razor_kv_cache.
//
// The ring: `recent` holds ring_rows entries, oldest first, starting at row ring_start and
// wrapping to row 0 at recent.capacity(); recent.rows() is how far rows were ever written, so
// that views into the ring stay inside written rows. A retrieval head's ring holds every token it
// was compressed with; another head's holds its recent window, and in bounded decode at most
// `window` entries, whatever leaves it folded into the compensation token. A growing head (a
// retrieval head; every head in append mode) writes new tokens into the ring's free room first,
// then into chained blocks (`appended`), so that it never copies what it holds.
template <class T>
struct razor_head {
  bool retrieval = false;
  index_t window = 0;   // L_h; in bounded mode the most entries the ring keeps (>= 1)
  head_rows<T> sinks;   // [<= N0, dim] (non-retrieval heads; fewer for a short prompt)
  head_rows<T> recent;  // the ring
  index_t ring_start = 0, ring_rows = 0;
  row_blocks<T> appended;  // a growing head's tokens past the ring's room
  index_t dropped = 0;     // D: tokens folded into the compensation token
  // [1, dim] each: the sums of the dropped keys and of the dropped values, in double (one row
  // from compression on; none in mode none).
  head_rows<double> sums;
  head_rows<T> mean;  // [1, dim] once D > 0 (capacity 1 from compression, not in mode none)

  // Entries the head holds, the compensation token counting as one.
  index_t entries() const noexcept {
    return sinks.rows() + mean.rows() + ring_rows + appended.rows();
  }

  // Of `added` new tokens, how many a growing head writes into the room its ring has left.
  index_t room(index_t added) const noexcept {
    return std::min(added, recent.capacity() - ring_rows);
  }

  // The head's spans before its appended blocks, in order (sinks, compensation token, ring
  // oldest first: [start, capacity) then [0, wrapped)), empty parts skipped: f(span) for each of
  // these (at most four). The compensation token's log-weight is ln D in kWeighted mode.
  template <class F>
  void for_each_fixed_span(compensation_mode compensation, F&& f) const {
    const auto part = [&](const head_rows<T>& rows, index_t first, index_t count,
                          float log_weight) {
      if (count > 0) f(kv_span<T>{rows.keys(first, count), rows.values(first, count), log_weight});
    };
    part(sinks, 0, sinks.rows(), 0.0f);
    if (mean.rows() > 0) {
      const float log_weight = compensation == compensation_mode::kWeighted
                                   ? static_cast<float>(std::log(static_cast<double>(dropped)))
                                   : 0.0f;
      part(mean, 0, 1, log_weight);
    }
    const index_t first_part = std::min(ring_rows, recent.capacity() - ring_start);
    part(recent, ring_start, first_part, 0.0f);
    part(recent, 0, ring_rows - first_part, 0.0f);
  }

  // Writes rows at the end of the ring, wrapping at its capacity (which must hold them): new rows
  // (matrix_view), or rows as a head stores them (kv_rows, copied without quantising again).
  template <class Rows>
  void push_ring(const Rows& keys, const Rows& values) noexcept {
    const index_t capacity = recent.capacity();
    for (index_t done = 0; done < keys.rows();) {
      const index_t slot = (ring_start + ring_rows) % capacity;
      const index_t take = std::min(keys.rows() - done, capacity - slot);
      recent.write(slot, keys.middle_rows(done, take), values.middle_rows(done, take));
      recent.set_rows(std::max(recent.rows(), slot + take));
      ring_rows += take;
      done += take;
    }
  }

  // A growing head keeps every row: the ring's room first, then chained blocks (reserved).
  void push_growing(const matrix_view<const T>& keys, const matrix_view<const T>& values) noexcept {
    const index_t added = keys.rows(), into_ring = room(added);
    push_ring(keys.middle_rows(0, into_ring), values.middle_rows(0, into_ring));
    appended.append(keys.middle_rows(into_ring, added - into_ring),
                    values.middle_rows(into_ring, added - into_ring));
  }

  // Moves the ring into `larger` rows, oldest first from row 0.
  void move_ring(head_rows<T>&& larger) noexcept {
    razor_head moved;
    moved.recent = std::move(larger);
    const index_t first_part = std::min(ring_rows, recent.capacity() - ring_start);
    moved.push_ring(recent.keys(ring_start, first_part), recent.values(ring_start, first_part));
    moved.push_ring(recent.keys(0, ring_rows - first_part),
                    recent.values(0, ring_rows - first_part));
    recent = std::move(moved.recent);
    ring_start = 0;
  }

  // Rewrites the stored mean token from the exact sums.
  void refresh_mean() noexcept {
    const index_t dim = sums.dim();
    store_mean(sums.key_row(0), dropped, dim, mean.key_row(0));
    store_mean(sums.value_row(0), dropped, dim, mean.value_row(0));
    mean.set_rows(1);
  }

  // Keeps the last `keep` tokens of the stream [ring, oldest first | new tokens] (bounded
  // decode; a window that chunked prefill moves forward); whatever falls off the ring's front is
  // folded, in stream order, into the compensation token (by sum_columns). The ring's capacity
  // holds what stays.
  void slide_window(const matrix_view<const T>& new_keys, const matrix_view<const T>& new_values,
                    index_t keep, column_sums_fn<T> sum_columns) noexcept {
    const index_t capacity = recent.capacity(), added = new_keys.rows();
    const index_t evicted = std::max<index_t>(0, ring_rows + added - keep);
    const index_t from_ring = std::min(ring_rows, evicted), from_new = evicted - from_ring;
    const bool compensate = sums.rows() > 0;
    const auto fold = [&](const kv_rows<T>& k, const kv_rows<T>& v) {
      if (!compensate || k.rows() == 0) return;
      add_stored_rows_to_sums(sum_columns, k, sums.key_row(0));
      add_stored_rows_to_sums(sum_columns, v, sums.value_row(0));
    };
    if (from_ring > 0) {
      // The oldest ring rows: [start, capacity) first, then from row 0.
      const index_t first_part = std::min(from_ring, capacity - ring_start);
      fold(recent.keys(ring_start, first_part), recent.values(ring_start, first_part));
      fold(recent.keys(0, from_ring - first_part), recent.values(0, from_ring - first_part));
      ring_start = (ring_start + from_ring) % capacity;
      ring_rows -= from_ring;
    }
    fold(kv_rows<T>(new_keys.middle_rows(0, from_new)),
         kv_rows<T>(new_values.middle_rows(0, from_new)));
    push_ring(new_keys.middle_rows(from_new, added - from_new),
              new_values.middle_rows(from_new, added - from_new));
    if (evicted > 0) {
      dropped += evicted;
      if (compensate) refresh_mean();
    }
  }
};

}  // namespace detail
RAZORKV_END_NAMESPACE
