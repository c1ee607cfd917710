// Tests of what the README says allocates nothing, with a counting allocator: this binary
// replaces malloc and its relatives (which operator new, std::vector and Eigen all reach), so a
// path that allocates in any way is caught, not only one a cache's own counter sees.
#include <gtest/gtest.h>

#include <razorkv/attention/decode.hpp>
#include <razorkv/cache/attention_weights.hpp>
#include <razorkv/cache/dense_cache.hpp>
#include <razorkv/compress/razor_cache.hpp>
#include <razorkv/compress/razor_state.hpp>
#include <razorkv/policies/h2o.hpp>
#include <razorkv/policies/observed_attention.hpp>
#include <razorkv/policies/selected_cache.hpp>

#include <malloc.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "support/strong_guarantee.hpp"
#include "support/test_support.hpp"

// glibc's allocator under its internal names: the replacements count, then forward.
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);
}

namespace {
std::atomic<long> allocations{0}, allocated_bytes{0};
// What the heap has out, in usable bytes, and the allocation number that fails (-1: none), for
// the strong-guarantee tests, which make each allocation of a call fail in turn.
std::atomic<long> outstanding_bytes{0}, fail_at{-1};
bool count_allocation(std::size_t bytes) {
  if (allocations.load(std::memory_order_relaxed) == fail_at.load(std::memory_order_relaxed))
    return false;
  allocations.fetch_add(1, std::memory_order_relaxed);
  allocated_bytes.fetch_add(static_cast<long>(bytes), std::memory_order_relaxed);
  return true;
}
void* track(void* p) {
  if (p != nullptr)
    outstanding_bytes.fetch_add(static_cast<long>(malloc_usable_size(p)),
                                std::memory_order_relaxed);
  return p;
}
void untrack(void* p) {
  if (p != nullptr)
    outstanding_bytes.fetch_sub(static_cast<long>(malloc_usable_size(p)),
                                std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* malloc(std::size_t n) { return count_allocation(n) ? track(__libc_malloc(n)) : nullptr; }
void* calloc(std::size_t count, std::size_t n) {
  return count_allocation(count * n) ? track(__libc_calloc(count, n)) : nullptr;
}
void* realloc(void* p, std::size_t n) {
  if (!count_allocation(n)) return nullptr;
  untrack(p);
  void* moved = __libc_realloc(p, n);
  track(moved != nullptr || n == 0 ? moved : p);
  return moved;
}
void* memalign(std::size_t alignment, std::size_t n) {
  return count_allocation(n) ? track(__libc_memalign(alignment, n)) : nullptr;
}
void* aligned_alloc(std::size_t alignment, std::size_t n) { return memalign(alignment, n); }
int posix_memalign(void** out, std::size_t alignment, std::size_t n) {
  void* p = memalign(alignment, n);
  if (p == nullptr) return 12;  // ENOMEM
  *out = p;
  return 0;
}
void free(void* p) {
  untrack(p);
  __libc_free(p);
}
}

namespace {

using razorkv::index_t;
using razorkv::layer_view;

// Allocations (and their bytes) made since construction, by any thread; these tests run one.
class allocation_count {
 public:
  allocation_count() : start_(allocations.load()), start_bytes_(allocated_bytes.load()) {}
  long operator()() const { return allocations.load() - start_; }
  long bytes() const { return allocated_bytes.load() - start_bytes_; }

 private:
  long start_, start_bytes_;
};

TEST(CountingAllocator, SeesOperatorNewVectorsAndEigen) {
  const allocation_count count;
  auto boxed = std::make_unique<int>(3);
  std::vector<float> v(100);
  Eigen::MatrixXf m(40, 40);
  EXPECT_EQ(count(), 3);
}

struct token_source {
  std::vector<float> data;
  index_t kv_heads, dim;
  token_source(index_t tokens, index_t heads, index_t head_dim, std::mt19937_64& rng)
      : data(razorkv_test::random_values<float>(static_cast<std::size_t>(tokens * heads * head_dim),
                                                rng)),
        kv_heads(heads),
        dim(head_dim) {}
  layer_view<const float> tokens(index_t first, index_t count) const {
    return layer_view<const float>::nhd(
               data.data(), static_cast<index_t>(data.size()) / (kv_heads * dim), kv_heads, dim)
        .middle_tokens(first, count);
  }
};

constexpr index_t kKvHeads = 4, kDim = 32, kPrompt = 400, kSteps = 300;

razorkv::razor_kv_cache<float> bounded_cache(index_t decode_reserve) {
  razorkv::head_plan plan(razorkv::model_shape{1, 8, kKvHeads, kDim});
  plan.set_retrieval(0, 1, true);
  razorkv::razor_config config;
  config.fixed_window = 32;
  config.decode = razorkv::decode_mode::kBounded;
  config.decode_reserve = decode_reserve;
  return razorkv::razor_kv_cache<float>(plan, config);
}

TEST(Allocations, BoundedDecodeAppendsWithoutAllocatingWithinTheReserve) {
  std::mt19937_64 rng(71);
  const token_source kv(kPrompt + 2 * kSteps, kKvHeads, kDim, rng);
  razorkv::razor_kv_cache<float> cache = bounded_cache(kSteps);
  cache.compress_layer(0, kv.tokens(0, kPrompt), kv.tokens(0, kPrompt));
  index_t t = kPrompt;
  {
    // Local heads slide their windows; the retrieval head fills its room (the reserve), which
    // allocated_bytes_after foresees.
    const allocation_count count;
    for (; cache.allocated_bytes_after(1) == cache.allocated_bytes(); ++t)
      cache.append(0, kv.tokens(t, 1), kv.tokens(t, 1));
    EXPECT_EQ(count(), 0);
    EXPECT_GE(t - kPrompt, kSteps);
  }
  // Past its room the retrieval head keeps every token in a new block of growth_rows rows: K
  // and V of one block (and the block list), never a copy of what it holds.
  const index_t predicted = cache.allocated_bytes_after(1);
  const allocation_count count;
  cache.append(0, kv.tokens(t, 1), kv.tokens(t, 1));
  EXPECT_GE(count(), 2);
  EXPECT_LE(count(), 3);
  EXPECT_EQ(count.bytes() >= 2 * 256 * kDim * static_cast<long>(sizeof(float)), true);
  EXPECT_EQ(cache.allocated_bytes(), predicted);
}

TEST(Allocations, AGrowingHeadChainsBlocksAndNeverMovesWhatItHolds) {
  std::mt19937_64 rng(77);
  const index_t steps = 1000;
  const token_source kv(kPrompt + steps, kKvHeads, kDim, rng);
  razorkv::head_plan plan(razorkv::model_shape{1, 8, kKvHeads, kDim});
  plan.set_retrieval(0, 1, true);
  razorkv::razor_config config;  // append mode: every head grows
  config.fixed_window = 32;
  razorkv::razor_kv_cache<float> cache(plan, config);
  cache.compress_layer(0, kv.tokens(0, kPrompt), kv.tokens(0, kPrompt));
  const auto span_rows = [&](const std::vector<index_t>& spans) {
    std::vector<const float*> rows;
    for (index_t h = 0; h < kKvHeads; ++h) {
      for (index_t s = 0; s < spans[static_cast<std::size_t>(h)]; ++s)
        rows.push_back(cache.span(0, h, s).keys.typed().data());
    }
    return rows;
  };
  std::vector<index_t> spans;
  for (index_t h = 0; h < kKvHeads; ++h) spans.push_back(cache.num_spans(0, h));
  const std::vector<const float*> first_rows = span_rows(spans);
  const allocation_count count;
  for (index_t t = kPrompt; t < kPrompt + steps; ++t)
    cache.append(0, kv.tokens(t, 1), kv.tokens(t, 1));
  // Every head chained ceil((steps - room) / 256) blocks: two buffers each, plus the lists.
  const long blocks_per_head = (steps + 255) / 256;
  EXPECT_LE(count(), kKvHeads * blocks_per_head * 3);
  EXPECT_LT(count.bytes(), kKvHeads * (blocks_per_head + 1) * 2 * 256 * kDim * 4);
  // The spans compression made are where they were; the blocks are spans after them.
  EXPECT_EQ(span_rows(spans), first_rows);
  for (index_t h = 0; h < kKvHeads; ++h) {
    EXPECT_GT(cache.num_spans(0, h), spans[static_cast<std::size_t>(h)]);
    EXPECT_EQ(cache.entries(0, h), razorkv::num_entries(cache, 0, h));
  }
}

TEST(Allocations, ABoundedCacheWithoutRetrievalHeadsNeverAllocatesAfterCompression) {
  std::mt19937_64 rng(72);
  const token_source kv(kPrompt + 2 * kSteps, kKvHeads, kDim, rng);
  razorkv::razor_kv_cache<float> cache(
      razorkv::head_plan(razorkv::model_shape{1, 8, kKvHeads, kDim}),
      razorkv::razor_config::fixed_capacity(64));
  cache.compress_layer(0, kv.tokens(0, kPrompt), kv.tokens(0, kPrompt));
  const allocation_count count;
  for (index_t t = 0; t < 2 * kSteps; t += 3) {
    cache.append(0, kv.tokens(kPrompt + t, 3), kv.tokens(kPrompt + t, 3));
  }
  EXPECT_EQ(count(), 0);
}

TEST(Allocations, ASelectedCacheChainsABlockEvery256Tokens) {
  std::mt19937_64 rng(78);
  const index_t steps = 512;
  const token_source kv(kPrompt + steps, kKvHeads, kDim, rng);
  razorkv::selected_kv_cache<float> cache(1, kKvHeads, kDim);
  std::vector<std::vector<index_t>> keep(static_cast<std::size_t>(kKvHeads));
  for (index_t p = 0; p < kPrompt; p += 3) {
    for (auto& list : keep) list.push_back(p);
  }
  cache.compress_layer(0, kv.tokens(0, kPrompt), kv.tokens(0, kPrompt), keep);
  const allocation_count count;
  for (index_t t = kPrompt; t < kPrompt + steps; ++t)
    cache.append(0, kv.tokens(t, 1), kv.tokens(t, 1));
  // Two blocks per head (K and V each, and the block list): nothing per token.
  EXPECT_LE(count(), kKvHeads * 2 * 3);
  EXPECT_EQ(cache.positions(0, 0).back(), kPrompt + steps - 1);
  EXPECT_EQ(cache.entries(0, 0), static_cast<index_t>(keep[0].size()) + steps);
}

TEST(Allocations, CompressingAfterClearReusesTheKvBuffers) {
  std::mt19937_64 rng(73);
  const token_source kv(kPrompt, kKvHeads, kDim, rng);
  razorkv::razor_kv_cache<float> cache = bounded_cache(16);
  cache.compress_layer(0, kv.tokens(0, kPrompt), kv.tokens(0, kPrompt));
  const long kv_bytes = cache.allocated_bytes();
  for (const index_t tokens : {kPrompt, kPrompt - 57, index_t{100}}) {
    cache.clear();
    const allocation_count count;
    cache.compress_layer(0, kv.tokens(0, tokens), kv.tokens(0, tokens));
    // No K/V memory: only the bookkeeping of the call (a few small lists per kv head).
    EXPECT_LE(count(), 4 * kKvHeads) << tokens << " tokens";
    EXPECT_LE(count.bytes(), 512 * kKvHeads) << tokens << " tokens";
    EXPECT_EQ(cache.allocated_bytes(), kv_bytes);
  }
  // A longer sequence than any before needs more rows: the bookkeeping bound is not vacuous.
  const token_source longer(2 * kPrompt, kKvHeads, kDim, rng);
  cache.clear();
  const allocation_count count;
  cache.compress_layer(0, longer.tokens(0, 2 * kPrompt), longer.tokens(0, 2 * kPrompt));
  EXPECT_GT(count.bytes(), 2 * kPrompt * kDim * static_cast<long>(sizeof(float)));
}

TEST(Allocations, DecodeAllocatesBookkeepingNotEntries) {
  // Without a workspace, decode_attention allocates its per-call work lists (spans, scaled
  // queries, tasks and their outputs): the same whatever the heads hold.
  std::mt19937_64 rng(76);
  const index_t query_heads = 8;
  const token_source q(1, query_heads, kDim, rng);
  std::vector<float> out(static_cast<std::size_t>(query_heads * kDim));
  const auto o = layer_view<float>::nhd(out.data(), 1, query_heads, kDim);
  long bytes[2] = {0, 0};
  for (const index_t tokens : {index_t{100}, index_t{5000}}) {
    const token_source kv(tokens, kKvHeads, kDim, rng);
    razorkv::dense_kv_cache<float> cache(1, kKvHeads, kDim);
    cache.append(0, kv.tokens(0, tokens), kv.tokens(0, tokens));
    const allocation_count count;
    razorkv::decode_attention_multi(cache, 0, q.tokens(0, 1), o);
    bytes[tokens == 100 ? 0 : 1] = count.bytes();
  }
  EXPECT_EQ(bytes[0], bytes[1]);
  EXPECT_LE(bytes[1], 8192);
}

// With a decode_workspace, decode carves its bookkeeping from the workspace: a workspace with
// room enough makes every call allocation-free, with weights, split heads (partial states and a
// merge), a batch and the caller's parallel-for hook; one that starts empty grows a few times
// (as a vector does) and is then free, also over a cache that keeps growing; without one,
// decode allocates (the counter sees it).
TEST(Allocations, DecodeWithAWorkspaceAllocatesNothingOnceWarm) {
  std::mt19937_64 rng(77);
  const index_t query_heads = 8, steps = 300;
  const token_source kv(kPrompt + steps, kKvHeads, kDim, rng);
  const token_source q(3, query_heads, kDim, rng);
  razorkv::razor_config config;
  config.fixed_window = 32;
  config.decode = razorkv::decode_mode::kBounded;
  razorkv::razor_kv_cache<float> bounded(
      razorkv::head_plan(razorkv::model_shape{1, query_heads, kKvHeads, kDim}), config);
  razorkv::head_plan plan(razorkv::model_shape{1, query_heads, kKvHeads, kDim});
  plan.set_retrieval(0, 0, true);
  razorkv::razor_kv_cache<float> growing(plan, config);  // its retrieval head keeps every token
  for (auto* cache : {&bounded, &growing})
    cache->compress_layer(0, kv.tokens(0, kPrompt), kv.tokens(0, kPrompt));
  std::vector<float> out(static_cast<std::size_t>(3 * query_heads * kDim));
  const auto o = layer_view<float>::nhd(out.data(), 3, query_heads, kDim);
  razorkv::attention_weights weights;  // the caller's, sized for the longest step up front
  weights.reset(1, query_heads, std::vector<index_t>(kKvHeads, kPrompt + steps));
  razorkv::decode_workspace roomy(std::size_t{64} << 10), workspace, growing_workspace;
  razorkv::attention_options options;
  options.max_entries_per_task = 64;  // every head split into parts that are merged
  options.parallel_for = [](index_t count, const std::function<void(index_t)>& body) {
    for (index_t i = 0; i < count; ++i) body(i);
  };
  // Calls that allocated: with the roomy workspace, the one that starts empty, and the latter
  // over the growing cache.
  long roomy_calls = 0, empty_calls = 0, growing_calls = 0;
  for (index_t t = kPrompt; t < kPrompt + steps; ++t) {
    bounded.append(0, kv.tokens(t, 1), kv.tokens(t, 1));
    growing.append(0, kv.tokens(t, 1), kv.tokens(t, 1));
    options.workspace = &roomy;
    const allocation_count roomy_count;
    razorkv::decode_attention_multi(bounded, 0, q.tokens(0, 1), o.middle_tokens(0, 1), weights,
                                    options);
    roomy_calls += roomy_count() > 0 ? 1 : 0;
    options.workspace = &workspace;
    const allocation_count count;
    razorkv::decode_attention_multi(bounded, 0, q.tokens(0, 1), o.middle_tokens(0, 1), weights,
                                    options);
    empty_calls += count() > 0 ? 1 : 0;
    options.workspace = &growing_workspace;
    const allocation_count growing_count;
    razorkv::decode_attention_multi(growing, 0, q.tokens(0, 1), o.middle_tokens(0, 1), weights,
                                    options);
    growing_calls += growing_count() > 0 ? 1 : 0;
  }
  EXPECT_EQ(roomy_calls, 0);
  EXPECT_GE(empty_calls, 1);  // the first call finds no room
  EXPECT_LE(empty_calls, 3) << "of " << steps << " steps";
  EXPECT_LE(growing_calls, 6) << "of " << steps << " steps over a growing cache";
  options.workspace = &workspace;

  // A batch of three sequences, three causal tokens each, and single tokens: the same workspace
  // grows once for the largest call, then every call is free.
  std::vector<razorkv::dense_kv_cache<float>> batch;
  for (index_t b = 0; b < 3; ++b) {
    batch.emplace_back(1, kKvHeads, kDim);
    batch.back().append(0, kv.tokens(0, 200 + 50 * b), kv.tokens(0, 200 + 50 * b));
  }
  const razorkv::dense_kv_cache<float>* sources[] = {&batch[0], &batch[1], &batch[2]};
  const auto run = [&] {
    razorkv::decode_attention_batch(sources, 3, 0, q.tokens(0, 3), o, options);
    razorkv::decode_attention_multi(batch[2], 0, q.tokens(0, 3), o, options);
    razorkv::decode_attention(batch[1], 0,
                              razorkv::matrix_view<const float>(q.data.data(), query_heads, kDim),
                              razorkv::matrix_view<float>(out.data(), query_heads, kDim), options);
  };
  run();
  const allocation_count count;
  for (int i = 0; i < 5; ++i) run();
  EXPECT_EQ(count(), 0);

  // No workspace: decode allocates.
  options.workspace = nullptr;
  const allocation_count heap;
  razorkv::decode_attention_batch(sources, 3, 0, q.tokens(0, 3), o, options);
  EXPECT_GT(heap(), 0);
}

TEST(Allocations, H2ODecodeAllocatesNothingButTheDecodeCall) {
  std::mt19937_64 rng(74);
  const index_t query_heads = 8;
  const token_source kv(kPrompt + kSteps, kKvHeads, kDim, rng);
  const token_source q(kPrompt + kSteps, query_heads, kDim, rng);
  razorkv::h2o_kv_cache<float> cache(1, kKvHeads, kDim, 48);
  cache.compress_layer(
      0, kv.tokens(0, kPrompt), kv.tokens(0, kPrompt),
      razorkv::observed_attention(q.tokens(kPrompt - 16, 16), kv.tokens(0, kPrompt)));
  std::vector<float> out(static_cast<std::size_t>(query_heads * kDim));
  const auto o = layer_view<float>::nhd(out.data(), 1, query_heads, kDim);
  razorkv::attention_weights weights;
  long append_and_observe = 0;
  for (index_t t = kPrompt; t < kPrompt + kSteps; ++t) {
    const allocation_count append_count;
    cache.append(0, kv.tokens(t, 1), kv.tokens(t, 1));
    append_and_observe += append_count();
    // decode_attention allocates its per-call work lists (spans, scaled queries), not the
    // weights, whose buffer is reused from the first step on.
    razorkv::decode_attention_multi(cache, 0, q.tokens(t, 1), o, weights);
    const allocation_count observe_count;
    razorkv::observe_decode(cache, 0, weights);
    append_and_observe += observe_count();
  }
  EXPECT_EQ(append_and_observe, 0);
}

TEST(Allocations, ReshapingAttentionWeightsWithinTheirCapacityIsFree) {
  razorkv::attention_weights weights;
  const std::vector<index_t> large = {300, 200}, small = {10, 250};
  weights.reset(2, 8, large);
  const allocation_count count;
  weights.reset(2, 8, small);
  weights.reset(1, 2, {7, 7});  // the braced list itself allocates: counted below
  weights.reset(2, 8, large);
  EXPECT_EQ(count(), 1);
}

TEST(Allocations, DenseAppendWithinTheReserveIsFree) {
  std::mt19937_64 rng(75);
  const token_source kv(kSteps, kKvHeads, kDim, rng);
  razorkv::dense_kv_cache<float> cache(1, kKvHeads, kDim, kSteps);
  const allocation_count count;
  for (index_t t = 0; t < kSteps; ++t) cache.append(0, kv.tokens(t, 1), kv.tokens(t, 1));
  EXPECT_EQ(count(), 0);
}

// The strong guarantee against the heap, where a cache's bookkeeping comes from (the pool tests of
// test_exception_safety.cpp fail the K/V rows' allocations): a copy assignment, a compression and
// an append whose k-th heap allocation fails leave the razor cache's saved state as it was. A copy
// assignment keeps no byte of a failed copy; compression and append may keep capacity they
// reserved, so only the copy's heap is counted.
TEST(Allocations, EveryHeapAllocationThatFailsLeavesTheRazorCacheAsItWas) {
  std::mt19937_64 rng(76);
  const token_source kv(kPrompt + 40, kKvHeads, kDim, rng);
  razorkv::head_plan plan(razorkv::model_shape{2, 8, kKvHeads, kDim});
  plan.set_retrieval(0, 1, true);
  razorkv::razor_config config;
  config.fixed_window = 32;
  config.growth_rows = 8;
  const auto build = [&](index_t prompt) {
    razorkv::razor_kv_cache<float> cache(plan, config);
    for (index_t l = 0; l < 2; ++l) {
      cache.compress_layer(l, kv.tokens(0, prompt), kv.tokens(0, prompt));
      cache.append(l, kv.tokens(prompt, 3), kv.tokens(prompt, 3));
    }
    return cache;
  };
  const auto state = [](const razorkv::razor_kv_cache<float>& cache) {
    return razorkv::save_state(cache);
  };
  const auto fail = [](long k) { fail_at = k < 0 ? -1 : allocations.load() + k; };
  const auto heap = [](const razorkv::razor_kv_cache<float>&) { return outstanding_bytes.load(); };
  const auto kept = [](const razorkv::razor_kv_cache<float>&) { return 0L; };
  const razorkv::razor_kv_cache<float> source = build(kPrompt);
  using cache_t = razorkv::razor_kv_cache<float>;
  EXPECT_GT(razorkv_test::check_strong_guarantee(
                [&] { return build(100); }, [&](cache_t& c) { c = source; }, state, fail, heap),
            2);
  EXPECT_GT(
      razorkv_test::check_strong_guarantee(
          [&] {
            cache_t c(plan, config);
            c.compress_layer(0, kv.tokens(0, 50), kv.tokens(0, 50));
            return c;
          },
          [&](cache_t& c) { c.compress_layer(1, kv.tokens(0, kPrompt), kv.tokens(0, kPrompt)); },
          state, fail, kept),
      2);
  EXPECT_GT(razorkv_test::check_strong_guarantee(
                [&] { return build(200); },
                [&](cache_t& c) { c.append(0, kv.tokens(kPrompt, 20), kv.tokens(kPrompt, 20)); },
                state, fail, kept),
            0);
}

// A decode whose k-th heap allocation fails (its bookkeeping, or the weights' growth) leaves the
// caller's attention weights as they were: they change only once nothing else can fail.
TEST(Allocations, AFailedDecodeLeavesTheCallersWeightsAsTheyWere) {
  std::mt19937_64 rng(77);
  const token_source kv(kPrompt, kKvHeads, kDim, rng);
  razorkv::dense_kv_cache<float> cache(1, kKvHeads, kDim);
  cache.append(0, kv.tokens(0, kPrompt), kv.tokens(0, kPrompt));
  const std::vector<float> q = razorkv_test::random_values<float>(2 * kKvHeads * kDim, rng);
  std::vector<float> out(q.size());
  const auto build = [] {
    razorkv::attention_weights weights;  // an earlier, smaller step's
    weights.reset(1, 2 * kKvHeads, std::vector<index_t>(kKvHeads, 3));
    weights.kv_head(1)(0, 2) = 0.25f;
    return weights;
  };
  const auto step = [&](razorkv::attention_weights& weights) {
    razorkv::decode_attention(cache, 0,
                              razorkv::matrix_view<const float>(q.data(), 2 * kKvHeads, kDim),
                              razorkv::matrix_view<float>(out.data(), 2 * kKvHeads, kDim), weights);
  };
  const auto state = [](const razorkv::attention_weights& weights) {
    std::vector<float> seen = {static_cast<float>(weights.tokens())};
    for (index_t h = 0; h < weights.num_kv_heads(); ++h) {
      const razorkv::matrix_view<const float> w = weights.kv_head(h);
      for (index_t r = 0; r < w.rows(); ++r) seen.insert(seen.end(), w.row(r), w.row(r) + w.cols());
    }
    return seen;
  };
  EXPECT_GT(razorkv_test::check_strong_guarantee(
                build, step, state, [](long k) { fail_at = k < 0 ? -1 : allocations.load() + k; },
                [](const razorkv::attention_weights&) { return 0L; }),
            0);
}

}  // namespace
