// razorkv/attention/decode.hpp: exact decode attention over any KV cache: one (or a few causal)
// new queries per query head, GQA, online softmax across spans and their log-weights.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/dispatch.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/detail/parallel.hpp"
#include "razorkv/detail/simd.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// Options shared by the decode-attention entry points.
struct attention_options {
  /// Multiplies q.k before the softmax; empty means 1/sqrt(head_dim). Must be finite.
  std::optional<double> scale;
  /// Fan-out over kv heads; empty means OpenMP when the caller compiles with it, else serial.
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
};

namespace detail {

// Rows of K/V per online-softmax step. The kernel reads a block of K, then the same block of
// V: 64 rows (32 KB of float K at dim 128) per stream switch keep the hardware prefetchers
// streaming, and amortise the accumulator rescale and the vectorised exp.
inline constexpr index_t kBlockRows = 64;
// 16-bit rows are widened to float this many at a time, so the scratch stays in L1.
inline constexpr index_t kWidenRows = 16;

// scores[q * kBlockRows + r] = queries[q] . keys[r] for q < kQ, r < kRows. One load of each
// key vector feeds all kQ queries (the GQA group), which is what keeps decode memory-bound;
// kQ * kRows independent accumulators keep the FMA pipes busy.
template <class Acc, class S, int kQ, int kRows, int kDim>
inline void dot_rows(const Acc* RAZORKV_RESTRICT queries, const S* RAZORKV_RESTRICT keys,
                     index_t key_stride, index_t runtime_dim, Acc* RAZORKV_RESTRICT scores) noexcept {
  constexpr int kW = simd_lanes<Acc>;
  const index_t dim = kDim > 0 ? kDim : runtime_dim;
  const index_t vector_end = (dim / kW) * kW;
  simd_t<Acc> acc[kQ][kRows];
  for (int q = 0; q < kQ; ++q) {
    for (int r = 0; r < kRows; ++r) acc[q][r] = simd_zero<Acc>();
  }
  for (index_t c = 0; c < vector_end; c += kW) {
    simd_t<Acc> key[kRows];
    for (int r = 0; r < kRows; ++r) key[r] = simd_load_as<Acc>(keys + r * key_stride + c);
    for (int q = 0; q < kQ; ++q) {
      const simd_t<Acc> query = simd_load(queries + q * dim + c);
      for (int r = 0; r < kRows; ++r) acc[q][r] += query * key[r];
    }
  }
  for (int q = 0; q < kQ; ++q) {
    for (int r = 0; r < kRows; ++r) {
      Acc sum = simd_sum<Acc>(acc[q][r]);
      for (index_t c = vector_end; c < dim; ++c) sum += queries[q * dim + c] * static_cast<Acc>(keys[r * key_stride + c]);
      scores[q * kBlockRows + r] = sum;
    }
  }
}

// Register budget of the target (vector registers), and the largest power of two <= n
// within [1, cap]: used to size the register blocks below so they never spill.
inline constexpr int kVectorRegisters = kVectorBytes == 64 ? 32 : 16;
constexpr int pow2_floor(int n, int cap) {
  int p = 1;
  while (p * 2 <= n && p * 2 <= cap) p *= 2;
  return p;
}

// Key rows per dot_rows call: kQ * kRows accumulators + kRows keys + 1 query in registers.
// Capped at 2: measured on AVX-512 (Zen 5), 4 rows x 4 queries is 1.5x slower than 2 x 4.
template <int kQ>
inline constexpr int kDotRows = pow2_floor((kVectorRegisters - 2) / (kQ + 1), 2);

// Value vectors per accumulate step: kQ * kColumns accumulators + kColumns values + 1 weight.
template <int kQ>
inline constexpr int kValueColumns = pow2_floor((kVectorRegisters - 2) / (kQ + 1), 4);

// out[q] += sum_r weights[q * kBlockRows + r] * values[r] for r < rows, q < kQ. Each value
// vector is loaded once for all kQ queries, and kQ x kColumns accumulators stay in registers
// across the rows, so each weight is broadcast once per kColumns vectors.
template <class Acc, class S, int kQ, int kDim>
inline void accumulate_values(const Acc* RAZORKV_RESTRICT weights, const S* RAZORKV_RESTRICT values,
                              index_t value_stride, index_t rows, index_t runtime_dim,
                              Acc* RAZORKV_RESTRICT out) noexcept {
  constexpr int kW = simd_lanes<Acc>;
  constexpr int kC = kValueColumns<kQ>;
  const index_t dim = kDim > 0 ? kDim : runtime_dim;
  const index_t vector_end = (dim / kW) * kW;
  index_t c = 0;
  for (; c + kC * kW <= vector_end; c += kC * kW) {
    simd_t<Acc> acc[kQ][kC];
    for (int q = 0; q < kQ; ++q) {
      for (int j = 0; j < kC; ++j) acc[q][j] = simd_load(out + q * dim + c + j * kW);
    }
    for (index_t r = 0; r < rows; ++r) {
      simd_t<Acc> v[kC];
      for (int j = 0; j < kC; ++j) v[j] = simd_load_as<Acc>(values + r * value_stride + c + j * kW);
      for (int q = 0; q < kQ; ++q) {
        const simd_t<Acc> w = simd_broadcast(weights[q * kBlockRows + r]);
        for (int j = 0; j < kC; ++j) acc[q][j] += w * v[j];
      }
    }
    for (int q = 0; q < kQ; ++q) {
      for (int j = 0; j < kC; ++j) simd_store(out + q * dim + c + j * kW, acc[q][j]);
    }
  }
  for (; c < vector_end; c += kW) {
    simd_t<Acc> acc[kQ];
    for (int q = 0; q < kQ; ++q) acc[q] = simd_load(out + q * dim + c);
    for (index_t r = 0; r < rows; ++r) {
      const simd_t<Acc> v = simd_load_as<Acc>(values + r * value_stride + c);
      for (int q = 0; q < kQ; ++q) acc[q] += simd_broadcast(weights[q * kBlockRows + r]) * v;
    }
    for (int q = 0; q < kQ; ++q) simd_store(out + q * dim + c, acc[q]);
  }
  for (; c < dim; ++c) {
    for (int q = 0; q < kQ; ++q) {
      Acc sum = out[q * dim + c];
      for (index_t r = 0; r < rows; ++r) sum += weights[q * kBlockRows + r] * static_cast<Acc>(values[r * value_stride + c]);
      out[q * dim + c] = sum;
    }
  }
}

// The element type the kernels read a block's rows as: the stored type itself where a vector
// load widens in registers (float and double need none, bfloat16 is a shift, half has an
// instruction on AVX-512F and F16C), else float rows widened into a scratch buffer. Widening
// in registers saves a store and a reload per element: 1.5x on bfloat16 decode (Zen 5, 2 threads).
template <class T>
using kernel_row_t = std::conditional_t<std::is_same_v<T, Eigen::half> && !kHalfInRegisters, float, T>;

// Rows [first, first + rows) of `view` as kernel rows: in place, or widened into `scratch`
// ([kWidenRows, dim]). Returns the row pointer and sets `stride`.
template <class T>
inline const kernel_row_t<T>* block_rows(const matrix_view<const T>& view, index_t first, index_t rows,
                                         accum_t<T>* scratch, index_t& stride) noexcept {
  if constexpr (std::is_same_v<T, kernel_row_t<T>>) {
    (void)rows;
    (void)scratch;
    stride = view.row_stride();
    return view.data() + first * view.row_stride();
  } else {
    const index_t dim = view.cols();
    for (index_t r = 0; r < rows; ++r) widen_row(view.row(first + r), scratch + r * dim, dim);
    stride = dim;
    return scratch;
  }
}

// Software prefetch distance, in bytes of one stream (K or V). The hardware prefetchers alone
// leave the kernel latency-bound: measured on Zen 5 with 2 threads, float, 64K tokens, decode
// went from 24-28 GB/s without to 34-37 GB/s with 8-16 KB of look-ahead.
inline constexpr index_t kPrefetchBytes = 16 * 1024;

// Asks for rows [first, first + count) of `view` (those that exist) to be brought into L1.
template <class T>
inline void prefetch_rows(const matrix_view<const T>& view, index_t first, index_t count) noexcept {
  const index_t last = std::min(first + count, view.rows());
  const index_t row_bytes = view.cols() * static_cast<index_t>(sizeof(T));
  for (index_t r = first; r < last; ++r) {
    const char* row = reinterpret_cast<const char*>(view.data() + r * view.row_stride());
    for (index_t b = 0; b < row_bytes; b += 64) {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
      // GCC 12 deletes __builtin_prefetch in this loop (seen in its assembly); asm stays.
      asm volatile("prefetcht0 %0" : : "m"(*(row + b)));
#elif defined(__GNUC__) || defined(__clang__)
      __builtin_prefetch(row + b, 0, 3);
#endif
    }
  }
}

/// The decode kernel for kQ query vectors that read the same kv head. queries are already
/// multiplied by the softmax scale. Query q reads the first visible[q] entries of the head
/// (the concatenation of its spans). Writes the normalised attention output to out.
///
/// \param spans   [num_spans] the head's spans, validated by the caller
/// \param queries [kQ, dim] scaled queries
/// \param visible [kQ] entries each query may read, each in [1, total entries]
/// \param out     [kQ, dim] result
/// \param scratch [2 * kWidenRows * dim] widened K and V rows (half only; else unused)
/// \param range   [begin, end): the entries this call reads (all of them, or one task's run)
/// \param maybe_partial_max, partial_denominator  [kQ] each: when non-null, out is left
///                un-normalised and the running max and denominator are stored for a merge
template <class T, int kQ, int kDim>
void attend_head(const kv_span<T>* spans, index_t num_spans, index_t runtime_dim,
                 const accum_t<T>* RAZORKV_RESTRICT queries, const index_t* visible,
                 accum_t<T>* RAZORKV_RESTRICT out, accum_t<T>* RAZORKV_RESTRICT scratch,
                 index_t range_begin, index_t range_end, accum_t<T>* maybe_partial_max,
                 accum_t<T>* partial_denominator) {
  using Acc = accum_t<T>;
  using score_block = Eigen::Array<Acc, kBlockRows, 1>;
  constexpr Acc kNegInf = -std::numeric_limits<Acc>::infinity();
  const index_t dim = kDim > 0 ? kDim : runtime_dim;

  Acc running_max[kQ];
  Acc denominator[kQ];
  index_t max_visible = 0;
  for (int q = 0; q < kQ; ++q) {
    running_max[q] = kNegInf;
    denominator[q] = Acc(0);
    max_visible = std::max(max_visible, visible[q]);
  }
  max_visible = std::min(max_visible, range_end);
  std::fill(out, out + kQ * dim, Acc(0));

  alignas(64) Acc weights[kQ * kBlockRows];
  Acc* key_scratch = scratch;
  Acc* value_scratch = scratch == nullptr ? nullptr : scratch + kWidenRows * dim;
  index_t span_first_entry = 0;
  const index_t prefetch_ahead =
      std::max<index_t>(1, kPrefetchBytes / (dim * static_cast<index_t>(sizeof(T))));

  for (index_t s = 0; s < num_spans && span_first_entry < max_visible; ++s) {
    const kv_span<T>& span = spans[s];
    const Acc log_weight = static_cast<Acc>(span.log_weight);
    const index_t length = span.length();
    for (index_t first = std::max<index_t>(0, range_begin - span_first_entry);
         first < length && span_first_entry + first < max_visible; first += kBlockRows) {
      const index_t block_entry = span_first_entry + first;
      const index_t rows = std::min({kBlockRows, length - first, range_end - block_entry});

      // Scores for the whole block, widening at most kWidenRows rows at a time.
      for (index_t sub = 0; sub < rows; sub += kWidenRows) {
        const index_t sub_rows = std::min(kWidenRows, rows - sub);
        index_t key_stride = 0;
        const kernel_row_t<T>* keys = block_rows(span.keys, first + sub, sub_rows, key_scratch, key_stride);
        constexpr int kRows = kDotRows<kQ>;
        index_t r = 0;
        for (; r + kRows <= sub_rows; r += kRows) {
          prefetch_rows(span.keys, first + sub + r + prefetch_ahead, kRows);
          prefetch_rows(span.values, first + sub + r + prefetch_ahead, kRows);
          dot_rows<Acc, kernel_row_t<T>, kQ, kRows, kDim>(queries, keys + r * key_stride, key_stride, dim, weights + sub + r);
        }
        for (; r < sub_rows; ++r) {
          dot_rows<Acc, kernel_row_t<T>, kQ, 1, kDim>(queries, keys + r * key_stride, key_stride, dim, weights + sub + r);
        }
      }

      bool any_weight = false;
      for (int q = 0; q < kQ; ++q) {
        Acc* w = weights + q * kBlockRows;
        // Entries this query may read in this block; the rest (padding past `rows`, and
        // entries newer than the query under the causal mask) get weight exactly 0.
        const index_t readable = std::clamp<index_t>(std::min(visible[q], range_end) - block_entry, 0, rows);
        Eigen::Map<score_block, Eigen::Aligned16> block(w);
        Acc block_max = kNegInf;
        if (readable == kBlockRows) {
          block += log_weight;
          block_max = block.maxCoeff();
        } else if (readable == 0) {
          block.setZero();
          continue;
        } else {
          for (index_t r = 0; r < readable; ++r) {
            w[r] += log_weight;
            block_max = std::max(block_max, w[r]);
          }
          // Unread slots get a finite placeholder so that exp() never sees an unset value;
          // their weight is zeroed right after.
          std::fill(w + readable, w + kBlockRows, block_max);
        }
        if (block_max > running_max[q]) {
          // exp(-inf) == 0 clears the (still empty) accumulators on the first block.
          const Acc rescale = std::exp(running_max[q] - block_max);
          if (rescale != Acc(1)) {
            denominator[q] *= rescale;
            for (index_t c = 0; c < dim; ++c) out[q * dim + c] *= rescale;
          }
          running_max[q] = block_max;
        }
        block = (block - running_max[q]).exp();
        for (index_t r = readable; r < kBlockRows; ++r) w[r] = Acc(0);
        denominator[q] += block.sum();
        any_weight = true;
      }
      if (!any_weight) continue;

      for (index_t sub = 0; sub < rows; sub += kWidenRows) {
        const index_t sub_rows = std::min(kWidenRows, rows - sub);
        index_t value_stride = 0;
        const kernel_row_t<T>* values = block_rows(span.values, first + sub, sub_rows, value_scratch, value_stride);
        accumulate_values<Acc, kernel_row_t<T>, kQ, kDim>(weights + sub, values, value_stride, sub_rows, dim, out);
      }
    }
    span_first_entry += length;
  }

  if (maybe_partial_max != nullptr) {
    for (int q = 0; q < kQ; ++q) {
      maybe_partial_max[q] = running_max[q];
      partial_denominator[q] = denominator[q];
    }
    return;
  }
  for (int q = 0; q < kQ; ++q) {
    RAZORKV_DASSERT(denominator[q] > Acc(0) || std::isnan(denominator[q]));
    const Acc inverse = Acc(1) / denominator[q];
    for (index_t c = 0; c < dim; ++c) out[q * dim + c] *= inverse;
  }
}

// A head longer than this is split across tasks by default (16K entries: 16 MB of float K/V at
// dim 128, far more than a task's fixed cost).
inline constexpr index_t kDefaultEntriesPerTask = 16384;

// Number of query vectors a single kernel pass handles; larger groups take several passes.
inline constexpr index_t kMaxQueriesPerPass = 8;

// Largest power of two <= min(n, kMaxQueriesPerPass).
inline index_t pass_width(index_t n) noexcept {
  index_t width = kMaxQueriesPerPass;
  while (width > n) width /= 2;
  return width;
}

}  // namespace detail

namespace detail {

// One (cache, layer) of a decode call, validated and ready for the kernels: the spans of every
// kv head, the entries each holds, and the queries scaled and grouped by kv head.
template <class T, class TO>
struct decode_work {
  std::vector<kv_span<T>> spans;        // the heads' non-empty spans, head by head
  std::vector<index_t> first_span;      // [num_kv_heads + 1]: head h's spans are [first_span[h], first_span[h+1])
  std::vector<index_t> entries;         // [num_kv_heads]: entries of head h
  std::vector<accum_t<T>> scaled;       // [num_kv_heads, per_head, head_dim]: scaled queries, j = t * group + g
  layer_view<TO> out;                   // [tokens, num_query_heads, head_dim]
  index_t tokens = 0, group = 0, per_head = 0;
};

// The checked mode of attention_options: names the first non-finite query (or query times
// scale), key or value a decode would read.
template <class T, class TO, class TQ>
void check_decode_inputs_finite(const decode_work<T, TO>& work, const layer_view<TQ>& queries, index_t head_dim,
                                const char* where) {
  for (index_t t = 0; t < queries.tokens(); ++t) {
    for (index_t q = 0; q < queries.heads(); ++q) {
      const auto* row = queries.token(t).row(q);
      for (index_t c = 0; c < head_dim; ++c) {
        const double x = to_double(row[c]);
        RAZORKV_CHECK(std::isfinite(x), kInvalidArgument, where, ": query (", x, ") at token ", t, " head ", q,
                      " dim ", c, " is not finite");
      }
    }
  }
  for (std::size_t i = 0; i < work.scaled.size(); ++i) {
    RAZORKV_CHECK(std::isfinite(work.scaled[i]), kInvalidArgument, where, ": a query times the scale (",
                  work.scaled[i], ") overflows; scale the queries down");
  }
  const index_t num_kv_heads = static_cast<index_t>(work.entries.size());
  for (index_t h = 0; h < num_kv_heads; ++h) {
    index_t entry = 0;
    for (index_t i = work.first_span[static_cast<std::size_t>(h)]; i < work.first_span[static_cast<std::size_t>(h) + 1]; ++i) {
      const kv_span<T>& span = work.spans[static_cast<std::size_t>(i)];
      for (index_t r = 0; r < span.length(); ++r, ++entry) {
        for (index_t c = 0; c < head_dim; ++c) {
          const double k = to_double(span.keys(r, c)), v = to_double(span.values(r, c));
          RAZORKV_CHECK(std::isfinite(k) && std::isfinite(v), kInvalidArgument, where, ": ",
                        std::isfinite(k) ? "value (" : "key (", std::isfinite(k) ? v : k, ") at kv head ", h,
                        " entry ", entry, " dim ", c, " is not finite");
        }
      }
    }
  }
}

// Validates everything a decode over (cache, layer) reads and gathers it, so that a malformed
// cache or query is an error before any output is written and the kernels run without checks.
template <class Cache, class TQ, class TO>
decode_work<typename Cache::value_type, TO> prepare_decode(const Cache& cache, index_t layer, layer_view<TQ> queries,
                                                           layer_view<TO> out, const attention_options& options,
                                                           const char* where) {
  using T = typename Cache::value_type;
  using Acc = accum_t<T>;
  check_layer(cache, layer, where);
  const index_t num_kv_heads = cache.num_kv_heads();
  const index_t head_dim = cache.head_dim();
  const index_t num_query_heads = queries.heads();
  const index_t tokens = queries.tokens();
  RAZORKV_CHECK(tokens > 0, kInvalidArgument, where, ": queries.tokens() (", tokens, ") must be > 0");
  RAZORKV_CHECK(queries.head_dim() == head_dim, kShapeMismatch, where, ": queries.head_dim() (", queries.head_dim(),
                ") != cache.head_dim() (", head_dim, ")");
  RAZORKV_CHECK(num_query_heads % num_kv_heads == 0, kShapeMismatch, where, ": num_query_heads (", num_query_heads,
                ") is not a multiple of num_kv_heads (", num_kv_heads, ")");
  RAZORKV_CHECK(out.tokens() == tokens && out.heads() == num_query_heads && out.head_dim() == head_dim,
                kShapeMismatch, where, ": out is [", out.tokens(), ", ", out.heads(), ", ", out.head_dim(),
                "], queries are [", tokens, ", ", num_query_heads, ", ", head_dim, "]");
  const double scale = options.scale ? *options.scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  RAZORKV_CHECK(std::isfinite(scale), kInvalidArgument, where, ": scale (", scale, ") must be finite");

  decode_work<T, TO> work;
  work.out = out;
  work.tokens = tokens;
  work.first_span.assign(static_cast<std::size_t>(num_kv_heads) + 1, 0);
  work.entries.assign(static_cast<std::size_t>(num_kv_heads), 0);
  for (index_t h = 0; h < num_kv_heads; ++h) {
    const index_t count = cache.num_spans(layer, h);
    for (index_t i = 0; i < count; ++i) {
      kv_span<T> span = cache.span(layer, h, i);
      RAZORKV_CHECK(span.keys.rows() == span.values.rows() && span.keys.cols() == head_dim &&
                        span.values.cols() == head_dim,
                    kShapeMismatch, where, ": span ", i, " of layer ", layer, " kv head ", h, " has keys [",
                    span.keys.rows(), ", ", span.keys.cols(), "] and values [", span.values.rows(), ", ",
                    span.values.cols(), "], head_dim is ", head_dim);
      RAZORKV_CHECK(std::isfinite(span.log_weight), kInvalidArgument, where, ": span ", i, " of layer ", layer,
                    " kv head ", h, " has log_weight (", span.log_weight, "), must be finite");
      work.entries[static_cast<std::size_t>(h)] += span.length();
      if (span.length() > 0) work.spans.push_back(span);
    }
    work.first_span[static_cast<std::size_t>(h) + 1] = static_cast<index_t>(work.spans.size());
    RAZORKV_CHECK(work.entries[static_cast<std::size_t>(h)] >= tokens, kInvalidArgument, where, ": layer ", layer,
                  " kv head ", h, " holds ", work.entries[static_cast<std::size_t>(h)], " entries, fewer than the ",
                  tokens, " new token(s) being decoded");
  }

  work.group = num_query_heads / num_kv_heads;
  work.per_head = checked_mul(tokens, work.group, "decode_attention: queries per kv head");
  work.scaled.resize(static_cast<std::size_t>(
      checked_mul(checked_mul(work.per_head, num_kv_heads, where), head_dim, where)));
  for (index_t h = 0; h < num_kv_heads; ++h) {
    for (index_t j = 0; j < work.per_head; ++j) {
      const TQ* src = queries.token(j / work.group).row(h * work.group + j % work.group);  // TQ may be const
      Acc* dst = work.scaled.data() + (h * work.per_head + j) * head_dim;
      for (index_t c = 0; c < head_dim; ++c) dst[c] = static_cast<Acc>(static_cast<Acc>(src[c]) * scale);
    }
  }
  if (options.check_finite) check_decode_inputs_finite(work, queries, head_dim, where);
  return work;
}

// Runs the kernels of every work item in one parallel loop. Tasks are (work, kv head, run of
// 8, 4, 2 or 1 query vectors, run of entries), longest first: a compressed cache mixes full
// retrieval heads with short ones, and handing out the long ones first keeps a dynamic
// schedule balanced. A head longer than `entries_per_task` is split into runs of entries whose
// partial softmax states (max, denominator, unnormalised output) are merged afterwards.
template <class T, class TO>
void run_decode(const std::vector<decode_work<T, TO>>& works, index_t head_dim, const parallel_for_fn& parallel_for,
                index_t entries_per_task) {
  using Acc = accum_t<T>;
  struct pass {
    index_t work, kv_head, first, width;  // the query vectors [first, first + width) of a kv head
    index_t begin, end;                   // the entries read
    index_t slot;                         // partial-state slot of a split pass, -1 when whole
  };
  struct split {
    index_t work, kv_head, first, width, first_slot, parts;
  };
  std::vector<pass> passes;
  std::vector<split> splits;
  index_t slots = 0;
  for (index_t w = 0; w < static_cast<index_t>(works.size()); ++w) {
    const decode_work<T, TO>& work = works[static_cast<std::size_t>(w)];
    for (index_t h = 0; h < static_cast<index_t>(work.entries.size()); ++h) {
      const index_t entries = work.entries[static_cast<std::size_t>(h)];
      const index_t parts = (entries + entries_per_task - 1) / entries_per_task;
      for (index_t j = 0; j < work.per_head;) {
        const index_t width = pass_width(work.per_head - j);
        if (parts <= 1) {
          passes.push_back({w, h, j, width, 0, entries, -1});
        } else {
          splits.push_back({w, h, j, width, slots, parts});
          for (index_t p = 0; p < parts; ++p) {
            passes.push_back({w, h, j, width, p * entries / parts, (p + 1) * entries / parts, slots++});
          }
        }
        j += width;
      }
    }
  }
  std::stable_sort(passes.begin(), passes.end(),
                   [](const pass& a, const pass& b) { return a.end - a.begin > b.end - b.begin; });

  // Partial states of split passes: [slots, kMaxQueriesPerPass, head_dim] outputs, and
  // [slots, kMaxQueriesPerPass] maxima and denominators.
  const std::size_t per_slot = static_cast<std::size_t>(kMaxQueriesPerPass * head_dim);
  std::vector<Acc> partial_out(static_cast<std::size_t>(slots) * per_slot);
  std::vector<Acc> partial_max(static_cast<std::size_t>(slots * kMaxQueriesPerPass));
  std::vector<Acc> partial_den(partial_max.size());

  const auto write_out = [&](const decode_work<T, TO>& work, index_t kv_head, index_t first, index_t width,
                             const Acc* result) {
    for (index_t q = 0; q < width; ++q) {
      const index_t j = first + q;
      TO* dst = work.out.token(j / work.group).row(kv_head * work.group + j % work.group);
      for (index_t c = 0; c < head_dim; ++c) dst[c] = static_cast<TO>(result[q * head_dim + c]);
    }
  };

  const bool needs_scratch = !std::is_same_v<T, kernel_row_t<T>>;
  run_parallel(parallel_for, static_cast<index_t>(passes.size()), [&](index_t p) {
    const pass& task = passes[static_cast<std::size_t>(p)];
    const decode_work<T, TO>& work = works[static_cast<std::size_t>(task.work)];
    const std::size_t h = static_cast<std::size_t>(task.kv_head);
    index_t visible[kMaxQueriesPerPass];
    for (index_t q = 0; q < task.width; ++q) {
      visible[q] = work.entries[h] - work.tokens + 1 + (task.first + q) / work.group;
    }
    const bool whole = task.slot < 0;
    std::vector<Acc> result(whole ? static_cast<std::size_t>(task.width * head_dim) : 0);
    Acc* out = whole ? result.data() : partial_out.data() + static_cast<std::size_t>(task.slot) * per_slot;
    Acc* maybe_max = whole ? nullptr : partial_max.data() + task.slot * kMaxQueriesPerPass;
    Acc* den = whole ? nullptr : partial_den.data() + task.slot * kMaxQueriesPerPass;
    std::vector<Acc> scratch(needs_scratch ? static_cast<std::size_t>(2 * kWidenRows * head_dim) : 0);
    const kv_span<T>* head_spans = work.spans.data() + work.first_span[h];
    const index_t num_head_spans = work.first_span[h + 1] - work.first_span[h];
    const Acc* head_queries = work.scaled.data() + (task.kv_head * work.per_head + task.first) * head_dim;
    dispatch_head_dim(head_dim, [&](auto dim_constant) {
      dispatch_pow2_upto8(task.width, [&](auto width_constant) {
        attend_head<T, decltype(width_constant)::value, decltype(dim_constant)::value>(
            head_spans, num_head_spans, head_dim, head_queries, visible, out, scratch.data(), task.begin, task.end,
            maybe_max, den);
      });
    });
    if (whole) write_out(work, task.kv_head, task.first, task.width, result.data());
  });

  // Merge: out = sum_p e^(m_p - M) o_p / sum_p e^(m_p - M) d_p, M the largest m_p. The first
  // part holds entry 0, which every query reads, so M is finite.
  run_parallel(parallel_for, static_cast<index_t>(splits.size()), [&](index_t i) {
    const split& group = splits[static_cast<std::size_t>(i)];
    std::vector<Acc> merged(static_cast<std::size_t>(group.width * head_dim), Acc(0));
    for (index_t q = 0; q < group.width; ++q) {
      Acc largest = -std::numeric_limits<Acc>::infinity();
      for (index_t p = 0; p < group.parts; ++p) {
        largest = std::max(largest, partial_max[static_cast<std::size_t>((group.first_slot + p) * kMaxQueriesPerPass + q)]);
      }
      Acc denominator = 0;
      Acc* dst = merged.data() + q * head_dim;
      for (index_t p = 0; p < group.parts; ++p) {
        const index_t slot = group.first_slot + p;
        const Acc part_max = partial_max[static_cast<std::size_t>(slot * kMaxQueriesPerPass + q)];
        if (part_max == -std::numeric_limits<Acc>::infinity()) continue;  // the query read nothing there
        const Acc scale = std::exp(part_max - largest);
        denominator += scale * partial_den[static_cast<std::size_t>(slot * kMaxQueriesPerPass + q)];
        const Acc* src = partial_out.data() + static_cast<std::size_t>(slot) * per_slot + q * head_dim;
        for (index_t c = 0; c < head_dim; ++c) dst[c] += scale * src[c];
      }
      const Acc inverse = Acc(1) / denominator;
      for (index_t c = 0; c < head_dim; ++c) dst[c] *= inverse;
    }
    write_out(works[static_cast<std::size_t>(group.work)], group.kv_head, group.first, group.width, merged.data());
  });
}

inline index_t entries_per_task(const attention_options& options, const char* where) {
  RAZORKV_CHECK(options.max_entries_per_task >= 0, kInvalidArgument, where, ": max_entries_per_task (",
                options.max_entries_per_task, ") must be >= 0");
  return options.max_entries_per_task > 0 ? options.max_entries_per_task : kDefaultEntriesPerTask;
}

template <class Cache, class TQ, class TO>
void check_decode_types() {
  static_assert(is_kv_cache_v<Cache>, "razorkv::decode_attention: Cache does not satisfy the "
                                      "KV-cache contract (see razorkv/cache/kv_cache.hpp)");
  static_assert(is_storage_dtype_v<std::remove_const_t<TQ>> && is_storage_dtype_v<TO>,
                "razorkv::decode_attention: unsupported query dtype, or const output");
}

}  // namespace detail

/// Decode attention with a few new queries per query head, causal among themselves: the
/// cache already holds the keys and values of the `queries.tokens()` new tokens as the newest
/// entries of every kv head, and new token t attends to every entry except the
/// (tokens - 1 - t) entries after its own. tokens == 1 is ordinary decode.
///
/// GQA: query head h reads kv head h / (num_query_heads / num_kv_heads). Logits are
/// scale * q.k + the span's log-weight; the softmax is computed online in accum_t<T>.
///
/// \param queries [tokens, num_query_heads, head_dim], any strides (TQ: any storage dtype)
/// \param out     [tokens, num_query_heads, head_dim], any strides (TO: any storage dtype).
///                It may alias queries: every query is read before the first write.
template <class Cache, class TQ, class TO>
void decode_attention_multi(const Cache& cache, index_t layer, layer_view<TQ> queries,
                            layer_view<TO> out, const attention_options& options = {}) {
  detail::check_decode_types<Cache, TQ, TO>();
  using T = typename Cache::value_type;
  std::vector<detail::decode_work<T, TO>> works;
  works.push_back(detail::prepare_decode(cache, layer, queries, out, options, "decode_attention"));
  detail::run_decode(works, cache.head_dim(), options.parallel_for, detail::entries_per_task(options, "decode_attention"));
}

/// Decode attention for a batch of independent sequences, one cache each, in one parallel
/// loop over every (sequence, kv head): sequence b's query is queries.token(b) and its output
/// out.token(b). The caches may hold different numbers of entries; they must share num_kv_heads
/// and head_dim.
///
/// \param caches  [batch] pointers to the sequences' caches, none null
/// \param queries [batch, num_query_heads, head_dim], any strides
/// \param out     [batch, num_query_heads, head_dim], any strides; may alias queries
template <class Cache, class TQ, class TO>
void decode_attention_batch(const Cache* const* caches, index_t batch, index_t layer, layer_view<TQ> queries,
                            layer_view<TO> out, const attention_options& options = {}) {
  detail::check_decode_types<Cache, TQ, TO>();
  using T = typename Cache::value_type;
  constexpr const char* kWhere = "decode_attention_batch";
  RAZORKV_CHECK(batch > 0 && caches != nullptr, kInvalidArgument, kWhere, ": batch (", batch,
                ") must be > 0, with a non-null caches array");
  RAZORKV_CHECK(queries.tokens() == batch && out.tokens() == batch, kShapeMismatch, kWhere, ": queries.tokens() (",
                queries.tokens(), ") and out.tokens() (", out.tokens(), ") must equal batch (", batch, ")");
  std::vector<detail::decode_work<T, TO>> works;
  works.reserve(static_cast<std::size_t>(batch));
  for (index_t b = 0; b < batch; ++b) {
    const Cache* cache = caches[b];
    RAZORKV_CHECK(cache != nullptr, kInvalidArgument, kWhere, ": caches[", b, "] is null");
    RAZORKV_CHECK(cache->num_kv_heads() == caches[0]->num_kv_heads() && cache->head_dim() == caches[0]->head_dim(),
                  kShapeMismatch, kWhere, ": caches[", b, "] has ", cache->num_kv_heads(), " kv heads of dim ",
                  cache->head_dim(), ", caches[0] has ", caches[0]->num_kv_heads(), " of dim ",
                  caches[0]->head_dim());
    const auto one_token = [b](auto view) {
      using V = decltype(view);
      return V(view.data() + b * view.token_stride(), 1, view.heads(), view.head_dim(), view.token_stride(),
               view.head_stride());
    };
    works.push_back(detail::prepare_decode(*cache, layer, one_token(queries), one_token(out), options, kWhere));
  }
  detail::run_decode(works, caches[0]->head_dim(), options.parallel_for, detail::entries_per_task(options, kWhere));
}

/// decode_attention_batch over a vector of caches.
template <class Cache, class TQ, class TO>
void decode_attention_batch(const std::vector<Cache>& caches, index_t layer, layer_view<TQ> queries,
                            layer_view<TO> out, const attention_options& options = {}) {
  RAZORKV_CHECK(!caches.empty(), kInvalidArgument, "decode_attention_batch: caches is empty");
  std::vector<const Cache*> pointers;
  for (const Cache& c : caches) pointers.push_back(&c);
  decode_attention_batch(pointers.data(), static_cast<index_t>(pointers.size()), layer, queries, out, options);
}

/// Decode attention for one new query per query head (see decode_attention_multi).
///
/// \param queries [num_query_heads, head_dim], any row stride
/// \param out     [num_query_heads, head_dim], any row stride; may alias queries
template <class Cache, class TQ, class TO>
void decode_attention(const Cache& cache, index_t layer, matrix_view<TQ> queries,
                      matrix_view<TO> out, const attention_options& options = {}) {
  RAZORKV_CHECK(queries.rows() > 0, kInvalidArgument, "decode_attention: num_query_heads (",
                queries.rows(), ") must be > 0");
  RAZORKV_CHECK(out.rows() == queries.rows() && out.cols() == queries.cols(), kShapeMismatch,
                "decode_attention: out is [", out.rows(), ", ", out.cols(), "], queries are [",
                queries.rows(), ", ", queries.cols(), "]");
  decode_attention_multi(cache, layer,
                         layer_view<TQ>(queries.data(), 1, queries.rows(), queries.cols(),
                                        queries.cols(), queries.row_stride()),
                         layer_view<TO>(out.data(), 1, out.rows(), out.cols(), out.cols(),
                                        out.row_stride()),
                         options);
}

RAZORKV_END_NAMESPACE
