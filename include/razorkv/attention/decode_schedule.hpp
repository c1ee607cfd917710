// razorkv/attention/decode_schedule.hpp: how a decode call becomes kernel work: validation and
// gathering of a source's spans (prepare), the kernel calls (plan), running them and merging the
// flash-decoding splits (run).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory_resource>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include "razorkv/cache/attention_weights.hpp"
#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/detail/parallel.hpp"
#include "razorkv/error.hpp"
#include "razorkv/kernels/kernel_set.hpp"
#include "razorkv/kernels/softmax.hpp"
#include "razorkv/quant/hadamard.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

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

// One (cache, layer) of a decode call, validated and ready for the kernels: the spans of every
// kv head, the entries each holds, and the queries scaled and grouped by kv head.
// Its lists live in the call's memory resource (a decode_workspace's arena, or the heap).
template <class T, class TO>
struct decode_work {
  explicit decode_work(std::pmr::memory_resource* resource)
      : spans(resource), first_span(resource), entries(resource), scaled(resource) {}

  std::pmr::vector<kv_span<T>> spans;  // the heads' non-empty spans, head by head
  std::pmr::vector<index_t>
      first_span;  // [num_kv_heads + 1]: head h's spans are [first_span[h], first_span[h+1])
  std::pmr::vector<index_t> entries;  // [num_kv_heads]: entries of head h
  std::pmr::vector<accum_t<T>>
      scaled;          // [num_kv_heads, per_head, head_dim]: scaled queries, j = t * group + g
  layer_view<TO> out;  // [tokens, num_query_heads, head_dim]
  attention_weights* weights = nullptr;  // filled with the step's probabilities when non-null
  index_t tokens = 0, group = 0, per_head = 0;
  bool quantised = false;  // some span holds quantised rows: the kernels need their scratch

  // Entries query vector j of kv head h may read: all but the newer new tokens.
  index_t visible(index_t kv_head, index_t j) const noexcept {
    return entries[static_cast<std::size_t>(kv_head)] - tokens + 1 + j / group;
  }
};

// The checked mode of decode (attention_options::check_finite): names the first non-finite query
// (or query times scale), key or value a decode would read.
template <class T, class TO, class TQ>
void check_decode_inputs_finite(const decode_work<T, TO>& work, const layer_view<TQ>& queries,
                                index_t head_dim, const char* where) {
  check_finite(layer_view<const std::remove_const_t<TQ>>(queries), where, "query");
  for (std::size_t i = 0; i < work.scaled.size(); ++i) {
    RAZORKV_CHECK(std::isfinite(work.scaled[i]), kInvalidArgument, where,
                  ": a query times the scale (", work.scaled[i],
                  ") overflows; scale the queries down");
  }
  const index_t num_kv_heads = static_cast<index_t>(work.entries.size());
  for (index_t h = 0; h < num_kv_heads; ++h) {
    index_t entry = 0;
    std::vector<double> key(static_cast<std::size_t>(head_dim)),
        value(static_cast<std::size_t>(head_dim));
    for (index_t i = work.first_span[static_cast<std::size_t>(h)];
         i < work.first_span[static_cast<std::size_t>(h) + 1]; ++i) {
      const kv_span<T>& span = work.spans[static_cast<std::size_t>(i)];
      for (index_t r = 0; r < span.length(); ++r, ++entry) {
        span.keys.widen_rows(r, 1, key.data());
        span.values.widen_rows(r, 1, value.data());
        for (index_t c = 0; c < head_dim; ++c) {
          const double k = key[static_cast<std::size_t>(c)], v = value[static_cast<std::size_t>(c)];
          RAZORKV_CHECK(std::isfinite(k) && std::isfinite(v), kInvalidArgument, where, ": ",
                        std::isfinite(k) ? "value (" : "key (", std::isfinite(k) ? v : k,
                        ") at kv head ", h, " entry ", entry, " dim ", c, " is not finite");
        }
      }
    }
  }
}

// Validates everything a decode over (cache, layer) reads and gathers it, so that a malformed
// cache or query is an error before any output is written and the kernels run without checks.
// `weights`, when non-null, is checked and given room for the step; run_decode shapes it once
// nothing else can fail, so a failed decode leaves the caller's weights as they were.
template <class Source, class TQ, class TO>
decode_work<typename Source::value_type, TO> prepare_decode(
    const Source& cache, index_t layer, layer_view<TQ> queries, layer_view<TO> out,
    attention_weights* weights, const std::optional<double>& scale_option, bool check_finite,
    const char* where, std::pmr::memory_resource* resource) {
  using T = typename Source::value_type;
  using Acc = accum_t<T>;
  check_layer(cache, layer, where);
  const index_t num_kv_heads = cache.num_kv_heads();
  const index_t head_dim = cache.head_dim();
  const index_t num_query_heads = queries.heads();
  const index_t tokens = queries.tokens();
  RAZORKV_CHECK(tokens > 0, kInvalidArgument, where, ": queries.tokens() (", tokens,
                ") must be > 0");
  RAZORKV_CHECK(queries.head_dim() == head_dim, kShapeMismatch, where, ": queries.head_dim() (",
                queries.head_dim(), ") != cache.head_dim() (", head_dim, ")");
  RAZORKV_CHECK(num_query_heads % num_kv_heads == 0, kShapeMismatch, where, ": num_query_heads (",
                num_query_heads, ") is not a multiple of num_kv_heads (", num_kv_heads, ")");
  RAZORKV_CHECK(
      out.tokens() == tokens && out.heads() == num_query_heads && out.head_dim() == head_dim,
      kShapeMismatch, where, ": out is [", out.tokens(), ", ", out.heads(), ", ", out.head_dim(),
      "], queries are [", tokens, ", ", num_query_heads, ", ", head_dim, "]");
  if constexpr (has_num_query_heads<Source>::value) {
    const index_t planned = cache.num_query_heads();
    RAZORKV_CHECK(planned == 0 || planned == num_query_heads, kShapeMismatch, where,
                  ": queries have ", num_query_heads, " heads, the cache was planned for ", planned,
                  " query heads");
  }
  if constexpr (has_is_compressed<Source>::value) {
    RAZORKV_CHECK(cache.is_compressed(layer), kInvalidArgument, where, ": layer ", layer,
                  " has not been compressed yet (compress_layer its prefill before decoding it)");
  }
  if constexpr (has_max_new_tokens<Source>::value) {
    const index_t limit = cache.max_new_tokens(layer);
    RAZORKV_CHECK(tokens <= limit, kInvalidArgument, where, ": queries.tokens() (", tokens,
                  ") exceeds the ", limit, " newest tokens layer ", layer,
                  " keeps as they are (older ones are folded into the compensation token); "
                  "decode at most that many tokens at once");
  }

  const double scale = softmax_scale(scale_option, head_dim, where);

  decode_work<T, TO> work(resource);
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
                    kShapeMismatch, where, ": span ", i, " of layer ", layer, " kv head ", h,
                    " has keys [", span.keys.rows(), ", ", span.keys.cols(), "] and values [",
                    span.values.rows(), ", ", span.values.cols(), "], head_dim is ", head_dim);
      // Quantised rows of a source razorkv did not build are checked like any other view.
      if (span.keys.is_quantised()) span.keys.quantised().check(where, "a span's quantised keys");
      if (span.values.is_quantised())
        span.values.quantised().check(where, "a span's quantised values");
      RAZORKV_CHECK(std::isfinite(span.log_weight), kInvalidArgument, where, ": span ", i,
                    " of layer ", layer, " kv head ", h, " has log_weight (", span.log_weight,
                    "), must be finite");
      work.entries[static_cast<std::size_t>(h)] += span.length();
      work.quantised = work.quantised || span.keys.is_quantised() || span.values.is_quantised();
      if (span.length() > 0) {
        const bool first = work.spans.size() ==
                           static_cast<std::size_t>(work.first_span[static_cast<std::size_t>(h)]);
        RAZORKV_CHECK(first || span.rotated_keys == work.spans.back().rotated_keys,
                      kInvalidArgument, where, ": span ", i, " of layer ", layer, " kv head ", h,
                      span.rotated_keys ? " holds rotated keys" : " holds keys not rotated",
                      " and the spans before it do not; a head's keys are rotated or not");
        work.spans.push_back(span);
      }
    }
    work.first_span[static_cast<std::size_t>(h) + 1] = static_cast<index_t>(work.spans.size());
    RAZORKV_CHECK(work.entries[static_cast<std::size_t>(h)] >= tokens, kInvalidArgument, where,
                  ": layer ", layer, " kv head ", h, " holds ",
                  work.entries[static_cast<std::size_t>(h)], " entries, fewer than the ", tokens,
                  " new token(s) being decoded");
  }
  work.group = num_query_heads / num_kv_heads;
  work.per_head = checked_mul(tokens, work.group, where);
  work.scaled.resize(static_cast<std::size_t>(
      checked_mul(checked_mul(work.per_head, num_kv_heads, where), head_dim, where)));
  for (index_t h = 0; h < num_kv_heads; ++h) {
    for (index_t j = 0; j < work.per_head; ++j) {
      const TQ* src =
          queries.token(j / work.group).row(h * work.group + j % work.group);  // TQ may be const
      Acc* dst = work.scaled.data() + (h * work.per_head + j) * head_dim;
      for (index_t c = 0; c < head_dim; ++c)
        dst[c] = static_cast<Acc>(static_cast<Acc>(src[c]) * scale);
      // Keys stored rotated are read with the query rotated the same way (q . k is unchanged).
      const std::size_t first =
          static_cast<std::size_t>(work.first_span[static_cast<std::size_t>(h)]);
      if (first < work.spans.size() && work.spans[first].rotated_keys)
        hadamard_rotate(dst, head_dim);
    }
  }
  if (check_finite) check_decode_inputs_finite(work, queries, head_dim, where);
  if (weights != nullptr) {
    weights->reserve(tokens, num_query_heads, work.entries.data(), num_kv_heads);  // checks too
    work.weights = weights;
  }
  return work;
}

// Turns one query's logits, as attend_head stored them for the `visible` entries it reads, into
// probabilities exp(logit - max) / denominator (max and denominator: the query's final softmax
// state), and zeroes the entries it may not read. In float: the weights are float. The exp runs
// over an aligned block, so every entry takes the same vectorised path whatever the row's
// alignment, and equal inputs give equal weights bit for bit.
template <class Acc>
void logits_to_probabilities(float* row, index_t visible, index_t entries, Acc max,
                             Acc denominator) noexcept {
  const auto shift = static_cast<float>(max);
  const auto scale = static_cast<float>(Acc(1) / denominator);
  alignas(64) float block[std::size_t{kBlockRows}];
  Eigen::Map<Eigen::Array<float, kBlockRows, 1>, Eigen::Aligned64> values(block);
  for (index_t first = 0; first < visible; first += kBlockRows) {
    const index_t count = std::min(kBlockRows, visible - first);
    std::copy(row + first, row + first + count, block);
    std::fill(block + count, block + kBlockRows, shift);
    values = (values - shift).exp() * scale;
    std::copy(block, block + count, row + first);
  }
  std::fill(row + visible, row + entries, 0.0f);
}

// --- The plan: which kernel calls a decode makes, and where each writes -----------------------

// One kernel call: the query vectors [first, first + width) of a kv head over its entries
// [begin, end).
struct decode_pass {
  index_t work, kv_head, first, width;
  index_t begin, end;
  index_t slot;    // partial-state slot of a split pass, -1 when whole
  index_t result;  // a whole pass's [width, head_dim] output in decode_buffers::results
};

// The passes that one (work, kv head, run of query vectors) was split into, merged afterwards.
struct decode_split {
  index_t work, kv_head, first, width, first_slot, parts, result;
};

struct decode_plan {
  explicit decode_plan(std::pmr::memory_resource* resource) : passes(resource), splits(resource) {}

  std::pmr::vector<decode_pass> passes;  // longest first
  std::pmr::vector<decode_split> splits;
  index_t slots = 0;        // partial states of split passes
  index_t result_size = 0;  // elements of whole passes' and merges' outputs
};

// Tasks are (work, kv head, run of 8, 4, 2 or 1 query vectors, run of entries), longest first: a
// compressed cache mixes full retrieval heads with short ones, and handing out the long ones
// first keeps a dynamic schedule balanced. A head longer than `entries_per_task` is split into
// runs of entries whose partial softmax states (max, denominator, unnormalised output) are merged
// afterwards (flash-decoding).
template <class T, class TO>
decode_plan plan_decode(const std::pmr::vector<decode_work<T, TO>>& works, index_t head_dim,
                        index_t entries_per_task, std::pmr::memory_resource* resource) {
  decode_plan plan(resource);
  for (index_t w = 0; w < static_cast<index_t>(works.size()); ++w) {
    const decode_work<T, TO>& work = works[static_cast<std::size_t>(w)];
    for (index_t h = 0; h < static_cast<index_t>(work.entries.size()); ++h) {
      const index_t entries = work.entries[static_cast<std::size_t>(h)];
      const index_t parts = (entries + entries_per_task - 1) / entries_per_task;
      for (index_t j = 0; j < work.per_head;) {
        const index_t width = pass_width(work.per_head - j);
        if (parts <= 1) {
          plan.passes.push_back({w, h, j, width, 0, entries, -1, plan.result_size});
        } else {
          plan.splits.push_back({w, h, j, width, plan.slots, parts, plan.result_size});
          for (index_t p = 0; p < parts; ++p) {
            plan.passes.push_back(
                {w, h, j, width, p * entries / parts, (p + 1) * entries / parts, plan.slots++, -1});
          }
        }
        plan.result_size += width * head_dim;
        j += width;
      }
    }
  }
  // Longest first, ties in the order made (std::stable_sort would allocate a buffer).
  std::sort(plan.passes.begin(), plan.passes.end(), [](const decode_pass& a, const decode_pass& b) {
    const index_t a_length = a.end - a.begin, b_length = b.end - b.begin;
    if (a_length != b_length) return a_length > b_length;
    return std::tie(a.work, a.kv_head, a.first, a.begin) <
           std::tie(b.work, b.kv_head, b.first, b.begin);
  });
  return plan;
}

// Every buffer the passes and merges write, carved out before the fan-out, so that the tasks
// allocate nothing (and a call nothing at all from a decode_workspace large enough): outputs of
// whole passes and of merges ([result_size]); partial states of split passes
// ([slots, kMaxQueriesPerPass, head_dim] outputs, [slots, kMaxQueriesPerPass] maxima and
// denominators); each pass's rows widened from half or dequantised ([2 * kWidenRows, head_dim],
// only where the CPU cannot widen half in registers or a span is quantised).
template <class Acc>
struct decode_buffers {
  decode_buffers(const decode_plan& plan, index_t head_dim, bool needs_widening_scratch,
                 std::pmr::memory_resource* resource)
      : per_slot(static_cast<std::size_t>(kMaxQueriesPerPass * head_dim)),
        scratch_per_pass(
            needs_widening_scratch ? static_cast<std::size_t>(2 * kWidenRows * head_dim) : 0),
        results(static_cast<std::size_t>(plan.result_size), resource),
        partial_out(static_cast<std::size_t>(plan.slots) * per_slot, resource),
        partial_max(static_cast<std::size_t>(plan.slots * kMaxQueriesPerPass), resource),
        partial_den(partial_max.size(), resource),
        scratch(plan.passes.size() * scratch_per_pass, resource) {}

  std::size_t per_slot, scratch_per_pass;
  std::pmr::vector<Acc> results, partial_out, partial_max, partial_den, scratch;

  Acc* slot_max(index_t slot) { return partial_max.data() + slot * kMaxQueriesPerPass; }
  Acc* slot_den(index_t slot) { return partial_den.data() + slot * kMaxQueriesPerPass; }
  Acc* slot_out(index_t slot) {
    return partial_out.data() + static_cast<std::size_t>(slot) * per_slot;
  }
};

// --- Run and merge -------------------------------------------------------------------------

// Writes the normalised outputs of query vectors [first, first + width) of a kv head to the
// call's out, in its dtype.
template <class T, class TO>
void write_decode_out(const decode_work<T, TO>& work, index_t kv_head, index_t first, index_t width,
                      index_t head_dim, const accum_t<T>* result) {
  for (index_t q = 0; q < width; ++q) {
    const index_t j = first + q;
    TO* dst = work.out.token(j / work.group).row(kv_head * work.group + j % work.group);
    for (index_t c = 0; c < head_dim; ++c) dst[c] = static_cast<TO>(result[q * head_dim + c]);
  }
}

// Runs every pass of the plan in one parallel loop. A whole pass writes its output (and, when
// the work reports weights, its probabilities); a split pass leaves its partial state for
// merge_decode_splits.
template <class T, class TO>
void run_decode_passes(const std::pmr::vector<decode_work<T, TO>>& works, const decode_plan& plan,
                       decode_buffers<accum_t<T>>& buffers, const attend_head_table<T>& kernels,
                       index_t head_dim, const parallel_for_fn& parallel_for) {
  using Acc = accum_t<T>;
  run_parallel(parallel_for, static_cast<index_t>(plan.passes.size()), [&](index_t p) {
    const decode_pass& task = plan.passes[static_cast<std::size_t>(p)];
    const decode_work<T, TO>& work = works[static_cast<std::size_t>(task.work)];
    const std::size_t h = static_cast<std::size_t>(task.kv_head);
    index_t visible[kMaxQueriesPerPass];
    for (index_t q = 0; q < task.width; ++q)
      visible[q] = work.visible(task.kv_head, task.first + q);
    const bool whole = task.slot < 0;
    // A whole pass that reports weights keeps its softmax state, to normalise them below.
    Acc whole_max[kMaxQueriesPerPass], whole_den[kMaxQueriesPerPass];
    const bool keep_state = whole && work.weights != nullptr;

    attend_head_params<T> call;
    call.spans = work.spans.data() + work.first_span[h];
    call.num_spans = work.first_span[h + 1] - work.first_span[h];
    call.head_dim = head_dim;
    call.queries = work.scaled.data() + (task.kv_head * work.per_head + task.first) * head_dim;
    call.visible = visible;
    call.out = whole ? buffers.results.data() + task.result : buffers.slot_out(task.slot);
    call.scratch =
        buffers.scratch_per_pass == 0
            ? nullptr
            : buffers.scratch.data() + static_cast<std::size_t>(p) * buffers.scratch_per_pass;
    call.range_begin = task.begin;
    call.range_end = task.end;
    if (!whole) {
      call.partial_max = buffers.slot_max(task.slot);
      call.partial_denominator = buffers.slot_den(task.slot);
    } else if (keep_state) {
      call.partial_max = whole_max;
      call.partial_denominator = whole_den;
    }
    if (work.weights != nullptr) {
      const matrix_view<float> head_weights = work.weights->kv_head(task.kv_head);
      call.logits = head_weights.row(task.first);
      call.logits_stride = head_weights.row_stride();
    }
    kernels.find(task.width, head_dim)(call);

    if (keep_state) {
      for (index_t q = 0; q < task.width; ++q) {
        const Acc inverse = Acc(1) / whole_den[q];
        for (index_t c = 0; c < head_dim; ++c) call.out[q * head_dim + c] *= inverse;
        logits_to_probabilities(call.logits + q * call.logits_stride, visible[q], work.entries[h],
                                whole_max[q], whole_den[q]);
      }
    }
    if (whole) write_decode_out(work, task.kv_head, task.first, task.width, head_dim, call.out);
  });
}

// Merges the split passes: out = sum_p e^(m_p - M) o_p / sum_p e^(m_p - M) d_p, M the largest
// m_p. The first part holds entry 0, which every query reads, so M is finite.
template <class T, class TO>
void merge_decode_splits(const std::pmr::vector<decode_work<T, TO>>& works, const decode_plan& plan,
                         decode_buffers<accum_t<T>>& buffers, index_t head_dim,
                         const parallel_for_fn& parallel_for) {
  using Acc = accum_t<T>;
  constexpr Acc kNegInf = -std::numeric_limits<Acc>::infinity();
  run_parallel(parallel_for, static_cast<index_t>(plan.splits.size()), [&](index_t i) {
    const decode_split& group = plan.splits[static_cast<std::size_t>(i)];
    const decode_work<T, TO>& work = works[static_cast<std::size_t>(group.work)];
    Acc* merged = buffers.results.data() + group.result;
    for (index_t q = 0; q < group.width; ++q) {
      Acc largest = kNegInf;
      for (index_t p = 0; p < group.parts; ++p) {
        largest = std::max(largest, buffers.slot_max(group.first_slot + p)[q]);
      }
      Acc denominator = 0;
      Acc* dst = merged + q * head_dim;
      for (index_t p = 0; p < group.parts; ++p) {
        const index_t slot = group.first_slot + p;
        const Acc part_max = buffers.slot_max(slot)[q];
        if (part_max == kNegInf) continue;  // the query read nothing there
        const Acc scale = std::exp(part_max - largest);
        denominator += scale * buffers.slot_den(slot)[q];
        const Acc* src = buffers.slot_out(slot) + q * head_dim;
        for (index_t c = 0; c < head_dim; ++c) dst[c] += scale * src[c];
      }
      const Acc inverse = Acc(1) / denominator;
      for (index_t c = 0; c < head_dim; ++c) dst[c] *= inverse;
      if (work.weights != nullptr) {
        const index_t j = group.first + q;
        logits_to_probabilities(
            work.weights->kv_head(group.kv_head).row(j), work.visible(group.kv_head, j),
            work.entries[static_cast<std::size_t>(group.kv_head)], largest, denominator);
      }
    }
    write_decode_out(work, group.kv_head, group.first, group.width, head_dim, merged);
  });
}

// A decode call's kernels, planned, run and merged. Everything that can fail (the kernel choice,
// the buffers) happens before the caller's weights change or the first task runs.
template <class T, class TO>
void run_decode(const std::pmr::vector<decode_work<T, TO>>& works, index_t head_dim,
                const parallel_for_fn& parallel_for, index_t entries_per_task,
                std::pmr::memory_resource* resource) {
  const decode_plan plan = plan_decode(works, head_dim, entries_per_task, resource);
  const dtype_kernels<T>& chosen = kernels_for<T>();  // may throw
  const bool quantised = std::any_of(works.begin(), works.end(),
                                     [](const decode_work<T, TO>& w) { return w.quantised; });
  decode_buffers<accum_t<T>> buffers(plan, head_dim, chosen.needs_widening_scratch || quantised,
                                     resource);
  // Nothing below throws: now the caller's weights take the step's shape (prepare_decode gave
  // them room, so this allocates nothing).
  for (const decode_work<T, TO>& work : works) {
    if (work.weights != nullptr)
      work.weights->reset(work.tokens, work.group * static_cast<index_t>(work.entries.size()),
                          work.entries.data(), static_cast<index_t>(work.entries.size()));
  }
  run_decode_passes(works, plan, buffers, chosen.attend_head, head_dim, parallel_for);
  merge_decode_splits(works, plan, buffers, head_dim, parallel_for);
}

template <class Source, class TQ, class TO>
void check_decode_types() {
  static_assert(is_kv_source_v<Source>,
                "razorkv::decode_attention: Source does not satisfy the "
                "KV-source contract (see razorkv/cache/kv_cache.hpp)");
  static_assert(is_storage_dtype_v<std::remove_const_t<TQ>> && is_storage_dtype_v<TO>,
                "razorkv::decode_attention: unsupported query dtype, or const output");
}

// The scheduler depends only on the storage and output dtypes, so razorkv::kernels compiles it
// once too (see RAZORKV_SEPARATE_KERNELS in dispatch.hpp).
// clang-format off
#define RAZORKV_DECODE_SCHEDULE_SIGNATURE(T, TO)                                   \
  void run_decode<T, TO>(const std::pmr::vector<decode_work<T, TO>>&, index_t,      \
                         const parallel_for_fn&, index_t, std::pmr::memory_resource*)
#define RAZORKV_DECODE_SCHEDULES_OF_TYPE(X, T) \
  X(T, float) X(T, double) X(T, Eigen::half) X(T, Eigen::bfloat16)
/// Calls X(T, TO) for every storage dtype T and output dtype TO.
#define RAZORKV_FOR_EACH_DECODE_SCHEDULE(X)        \
  RAZORKV_DECODE_SCHEDULES_OF_TYPE(X, float)       \
  RAZORKV_DECODE_SCHEDULES_OF_TYPE(X, double)      \
  RAZORKV_DECODE_SCHEDULES_OF_TYPE(X, Eigen::half) \
  RAZORKV_DECODE_SCHEDULES_OF_TYPE(X, Eigen::bfloat16)
// clang-format on

#if defined(RAZORKV_SEPARATE_KERNELS) && RAZORKV_SEPARATE_KERNELS
#define RAZORKV_DECLARE_DECODE_SCHEDULE(T, TO) \
  extern template RAZORKV_DECODE_SCHEDULE_SIGNATURE(T, TO);
RAZORKV_FOR_EACH_DECODE_SCHEDULE(RAZORKV_DECLARE_DECODE_SCHEDULE)
#undef RAZORKV_DECLARE_DECODE_SCHEDULE
#endif

}  // namespace detail
RAZORKV_END_NAMESPACE
