// Tests of policies as plug-ins: a policy written outside the library (the README's
// keep_first_policy) runs through compress_prompt, razorkv::policy and the harness; caches of
// different policies batch through any_kv_cache; prompt_kv asks only for the queries a policy
// reads, and names the parameter when they are missing; every policy's cache takes its rows from
// the prompt's memory resource.
#include <gtest/gtest.h>

#include <razorkv/eval.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "support/counting_resource.hpp"
#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;

// The README's example of a policy of one's own: the first E tokens of every head.
struct keep_first_policy {
  std::string name = "keep_first";
  template <class T>
  razorkv::selected_kv_cache<T> compress(const razorkv::prompt_kv<T>& prompt,
                                         index_t budget) const {
    const razorkv::model_shape& shape = prompt.shape();
    razorkv::selected_kv_cache<T> cache(shape.num_layers, shape.num_kv_heads, shape.head_dim,
                                        prompt.cache_resource);
    std::vector<index_t> first(static_cast<std::size_t>(std::min(budget, prompt.tokens())));
    std::iota(first.begin(), first.end(), index_t{0});
    for (index_t l = 0; l < shape.num_layers; ++l) {
      cache.compress_layer(
          l, prompt.layer(l).keys, prompt.layer(l).values,
          std::vector<std::vector<index_t>>(static_cast<std::size_t>(shape.num_kv_heads), first));
    }
    return cache;
  }
};
static_assert(razorkv::is_policy_v<keep_first_policy>);
static_assert(razorkv::is_policy_v<razorkv::razor_policy>);
static_assert(razorkv::is_policy_v<razorkv::policy>);
static_assert(!razorkv::is_policy_v<int>);
static_assert(!razorkv::is_policy_v<razorkv::dense_kv_cache<float>>);

// Random Q/K/V of a small GQA model: 2 layers, 4 query / 2 kv heads of dim 32.
struct random_prompt {
  razorkv::model_shape shape{2, 4, 2, 32};
  index_t tokens;
  std::vector<std::vector<float>> q, k, v;

  explicit random_prompt(index_t n, std::uint64_t seed = 3) : tokens(n) {
    std::mt19937_64 rng(seed);
    for (index_t l = 0; l < shape.num_layers; ++l) {
      q.push_back(razorkv_test::random_values<float>(static_cast<std::size_t>(n * 4 * 32), rng));
      k.push_back(razorkv_test::random_values<float>(static_cast<std::size_t>(n * 2 * 32), rng));
      v.push_back(razorkv_test::random_values<float>(static_cast<std::size_t>(n * 2 * 32), rng));
    }
  }
  std::vector<razorkv::layer_sequence<float>> layers(index_t prompt_tokens, index_t queries) const {
    std::vector<razorkv::layer_sequence<float>> out;
    for (std::size_t l = 0; l < q.size(); ++l) {
      const auto all_q = razorkv::layer_view<const float>::nhd(q[l].data(), tokens, 4, 32);
      out.push_back({all_q.middle_tokens(prompt_tokens - queries, queries),
                     razorkv::layer_view<const float>::nhd(k[l].data(), tokens, 2, 32)
                         .middle_tokens(0, prompt_tokens),
                     razorkv::layer_view<const float>::nhd(v[l].data(), tokens, 2, 32)
                         .middle_tokens(0, prompt_tokens)});
    }
    return out;
  }
  razorkv::prompt_kv<float> prompt(index_t prompt_tokens, index_t queries) const {
    return razorkv::prompt_kv<float>(shape, layers(prompt_tokens, queries));
  }
};

// The shipped policies and keep_first_policy, for a prompt of `shape` with at least 64 queries
// (H2O observes them); razor keeps kv head 1 of layer 0 whole.
std::vector<razorkv::policy> six_policies(const razorkv::model_shape& shape) {
  razorkv::head_plan plan(shape);
  plan.set_retrieval(0, 1, true);
  return {razorkv::full_policy(),          razorkv::razor_policy("razor", plan),
          razorkv::streaming_llm_policy(), razorkv::snapkv_policy(),
          razorkv::h2o_policy({}, 64),     keep_first_policy{}};
}

TEST(PolicyPlugins, AUserPolicyRunsThroughCompressPromptThePolicyValueAndTheHarness) {
  const random_prompt r(200);
  const razorkv::prompt_kv<float> prompt = r.prompt(192, 0);
  const razorkv::memory_budget budget = razorkv::memory_budget::entries_per_head(50);
  const razorkv::selected_kv_cache<float> typed =
      razorkv::compress_prompt(keep_first_policy{}, prompt, budget);
  EXPECT_EQ(typed.positions(1, 1), std::vector<index_t>([] {
              std::vector<index_t> p(50);
              std::iota(p.begin(), p.end(), index_t{0});
              return p;
            }()));
  const razorkv::policy erased = keep_first_policy{};
  EXPECT_EQ(erased.name, "keep_first");
  ASSERT_NE(erased.target<keep_first_policy>(), nullptr);
  EXPECT_EQ(erased.target<razorkv::full_policy>(), nullptr);
  const razorkv::any_kv_cache<float> any = razorkv::compress_prompt(erased, prompt, budget);
  ASSERT_NE(any.target<razorkv::selected_kv_cache<float>>(), nullptr);
  EXPECT_EQ(any.kv_bytes(), razorkv::held_kv_bytes(typed));
  EXPECT_EQ(any.kv_bytes(), 2 * 2 * 50 * 2 * 32 * static_cast<index_t>(sizeof(float)));

  // The harness runs it like any shipped policy, and decodes the same outputs through the
  // typed policy and the erased one.
  const razorkv::eval_prompt<float> eval(r.shape, r.layers(200, 200), 192);
  const razorkv::policy_run direct = razorkv::run_policy(keep_first_policy{}, eval, budget);
  const razorkv::policy_run through_value = razorkv::run_policy(erased, eval, budget);
  EXPECT_EQ(direct.policy, "keep_first");
  EXPECT_EQ(direct.kv_bytes, any.kv_bytes());
  EXPECT_EQ(direct.outputs, through_value.outputs);
  // Keeping only the first quarter of the prompt is far from the full cache.
  const razorkv::policy_run full = razorkv::run_policy(razorkv::full_policy(), eval, budget);
  for (double error : razorkv::relative_l2_per_layer(direct, full)) EXPECT_GT(error, 0.05);
}

TEST(PolicyPlugins, CachesOfDifferentPoliciesDecodeAsOneBatch) {
  const random_prompt r(300);
  const razorkv::prompt_kv<float> prompt = r.prompt(300, 64);
  const std::vector<razorkv::policy> policies = six_policies(r.shape);
  std::vector<razorkv::any_kv_cache<float>> caches;
  for (const razorkv::policy& p : policies) {
    caches.push_back(
        razorkv::compress_prompt(p, prompt, razorkv::memory_budget::fraction_of_full(0.4)));
  }
  const index_t batch = static_cast<index_t>(caches.size());
  std::mt19937_64 rng(9);
  const std::vector<float> queries =
      razorkv_test::random_values<float>(static_cast<std::size_t>(batch * 4 * 32), rng);
  std::vector<float> batched(queries.size()), single(queries.size());
  for (index_t layer = 0; layer < 2; ++layer) {
    razorkv::decode_attention_batch(
        caches, layer, razorkv::layer_view<const float>::nhd(queries.data(), batch, 4, 32),
        razorkv::layer_view<float>::nhd(batched.data(), batch, 4, 32));
    for (index_t b = 0; b < batch; ++b) {
      razorkv::decode_attention(
          caches[static_cast<std::size_t>(b)], layer,
          razorkv::matrix_view<const float>(queries.data() + b * 4 * 32, 4, 32),
          razorkv::matrix_view<float>(single.data() + b * 4 * 32, 4, 32));
    }
    EXPECT_EQ(batched, single) << "layer " << layer;
  }
  // Each erased cache is the policy's own type.
  EXPECT_NE(caches[0].target<razorkv::dense_kv_cache<float>>(), nullptr);
  EXPECT_NE(caches[1].target<razorkv::razor_kv_cache<float>>(), nullptr);
  EXPECT_NE(caches[4].target<razorkv::h2o_kv_cache<float>>(), nullptr);
  EXPECT_EQ(caches[4].target<razorkv::razor_kv_cache<float>>(), nullptr);
}

// prompt_kv::cache_resource reaches the cache of every policy (the README's own included): all
// that allocated_bytes() counts, and its copies' too, comes from that resource and goes back, and
// the cache decodes as the same policy's cache on the default resource does, bit for bit.
TEST(PolicyPlugins, EveryPolicysCacheTakesItsRowsFromThePromptsResource) {
  const random_prompt r(300);
  const razorkv::prompt_kv<float> heap_prompt = r.prompt(300, 64);
  razorkv::prompt_kv<float> pooled_prompt = r.prompt(300, 64);
  razorkv_test::counting_resource pool;
  pooled_prompt.cache_resource = &pool;
  const std::vector<razorkv::policy> policies = six_policies(r.shape);
  std::mt19937_64 rng(5);
  const std::vector<float> queries = razorkv_test::random_values<float>(4 * 32, rng);
  const razorkv::matrix_view<const float> query(queries.data(), 4, 32);
  for (const razorkv::policy& p : policies) {
    const razorkv::memory_budget budget = razorkv::memory_budget::fraction_of_full(0.4);
    {
      const razorkv::any_kv_cache<float> pooled =
          razorkv::compress_prompt(p, pooled_prompt, budget);
      const razorkv::any_kv_cache<float> heap = razorkv::compress_prompt(p, heap_prompt, budget);
      const long bytes = pooled.allocated_bytes();
      EXPECT_GT(bytes, 0) << p.name;
      EXPECT_EQ(pool.outstanding, bytes) << p.name;
      for (index_t layer = 0; layer < 2; ++layer) {
        std::vector<float> from_pool(queries.size()), from_heap(queries.size());
        razorkv::decode_attention(pooled, layer, query,
                                  razorkv::matrix_view<float>(from_pool.data(), 4, 32));
        razorkv::decode_attention(heap, layer, query,
                                  razorkv::matrix_view<float>(from_heap.data(), 4, 32));
        EXPECT_EQ(from_pool, from_heap) << p.name << ", layer " << layer;
      }
      const razorkv::any_kv_cache<float> copy = pooled;
      EXPECT_EQ(pool.outstanding, 2 * bytes) << p.name;
    }
    EXPECT_EQ(pool.outstanding, 0) << p.name;
  }
  EXPECT_EQ(pool.smallest_alignment, 64u);
}

TEST(PolicyPlugins, AnErasedH2OCacheStillObservesDecode) {
  const random_prompt r(260);
  const razorkv::prompt_kv<float> prompt = r.prompt(256, 64);
  const razorkv::h2o_policy h2o({}, 64);
  razorkv::h2o_kv_cache<float> typed = h2o.compress(prompt, 40);
  razorkv::any_kv_cache<float> erased = razorkv::policy(h2o).compress(prompt, 40);
  for (index_t t = 256; t < 260; ++t) {
    for (index_t l = 0; l < 2; ++l) {
      const auto k = razorkv::layer_view<const float>::nhd(r.k[static_cast<std::size_t>(l)].data(),
                                                           260, 2, 32);
      const auto v = razorkv::layer_view<const float>::nhd(r.v[static_cast<std::size_t>(l)].data(),
                                                           260, 2, 32);
      const auto q = razorkv::layer_view<const float>::nhd(r.q[static_cast<std::size_t>(l)].data(),
                                                           260, 4, 32);
      typed.append(l, k.middle_tokens(t, 1), v.middle_tokens(t, 1));
      erased.append(l, k.middle_tokens(t, 1), v.middle_tokens(t, 1));
      std::vector<float> out(4 * 32);
      const auto out_view = razorkv::layer_view<float>::nhd(out.data(), 1, 4, 32);
      razorkv::attention_weights typed_weights, erased_weights;
      razorkv::decode_attention_multi(typed, l, q.middle_tokens(t, 1), out_view, typed_weights);
      razorkv::decode_attention_multi(erased, l, q.middle_tokens(t, 1), out_view, erased_weights);
      razorkv::observe_decode(typed, l, typed_weights);
      razorkv::observe_decode(erased, l, erased_weights);
    }
  }
  // Only the H2O cache asks decode for weights, typed or erased.
  EXPECT_TRUE(razorkv::observes_attention(typed));
  EXPECT_TRUE(razorkv::observes_attention(erased));
  EXPECT_FALSE(razorkv::observes_attention(
      razorkv::any_kv_cache<float>(razorkv::streaming_llm_policy{}.compress(prompt, 40))));
  EXPECT_FALSE(razorkv::observes_attention(razorkv::streaming_llm_policy{}.compress(prompt, 40)));
  const razorkv::h2o_kv_cache<float>& held = *erased.target<razorkv::h2o_kv_cache<float>>();
  for (index_t l = 0; l < 2; ++l) {
    for (index_t h = 0; h < 2; ++h) {
      EXPECT_EQ(held.positions(l, h), typed.positions(l, h));
      EXPECT_EQ(held.scores(l, h), typed.scores(l, h));
    }
  }
  // Copies are deep; a moved-from cache is an error, not a crash.
  razorkv::any_kv_cache<float> copy = erased;
  razorkv::any_kv_cache<float> moved = std::move(erased);
  EXPECT_EQ(copy.kv_bytes(), moved.kv_bytes());
  EXPECT_TRUE(erased.empty());  // NOLINT(bugprone-use-after-move): the documented state
  RAZORKV_EXPECT_ERROR(erased.num_layers(), kInvalidArgument, "any_kv_cache: the cache is empty");
}

TEST(PolicyPlugins, PromptKvHoldsOnlyTheQueriesAPolicyReads) {
  const random_prompt r(128);
  const razorkv::prompt_kv<float> no_queries = r.prompt(128, 0);
  razorkv::head_plan plan(r.shape);
  plan.set_retrieval(1, 0, true);
  const razorkv::memory_budget budget = razorkv::memory_budget::entries_per_head(64);
  // Razor, StreamingLLM and the full cache read no query.
  EXPECT_NO_THROW(
      razorkv::compress_prompt(razorkv::razor_policy("razor", plan), no_queries, budget));
  EXPECT_NO_THROW(razorkv::compress_prompt(razorkv::streaming_llm_policy(), no_queries, budget));
  EXPECT_NO_THROW(razorkv::compress_prompt(razorkv::full_policy(), no_queries, budget));
  // SnapKV needs its window's queries, H2O the ones it observes.
  RAZORKV_EXPECT_ERROR(
      razorkv::compress_prompt(razorkv::snapkv_policy(), no_queries, budget), kInvalidArgument,
      "snapkv_policy: window (32) needs that many prompt queries; the prompt_kv holds 0");
  const razorkv::prompt_kv<float> sixteen = r.prompt(128, 16);
  RAZORKV_EXPECT_ERROR(
      razorkv::compress_prompt(razorkv::h2o_policy(), sixteen, budget), kInvalidArgument,
      "h2o_policy: observed_queries (128) needs that many prompt queries; the prompt_kv holds 16");
  EXPECT_NO_THROW(razorkv::compress_prompt(razorkv::h2o_policy({}, 16), sixteen, budget));
  // The observed attention of the last queries is the same whether the prompt holds just
  // them or every prompt query.
  const razorkv::prompt_kv<float> all = r.prompt(128, 128);
  EXPECT_EQ(sixteen.observed(1, 16, "test").values, all.observed(1, 16, "test").values);

  // Shapes are checked.
  std::vector<razorkv::layer_sequence<float>> short_layers = r.layers(128, 0);
  short_layers.pop_back();
  RAZORKV_EXPECT_ERROR((razorkv::prompt_kv<float>(r.shape, short_layers)), kShapeMismatch,
                       "1 layers given, the model has 2");
  std::vector<razorkv::layer_sequence<float>> uneven = r.layers(128, 8);
  uneven[1].queries = uneven[1].queries.middle_tokens(0, 4);
  RAZORKV_EXPECT_ERROR((razorkv::prompt_kv<float>(r.shape, uneven)), kShapeMismatch,
                       "layer 1 holds 4 queries");
}

static_assert(razorkv::detail::has_memory_vocabulary<razorkv::dense_kv_cache<float>>::value);
static_assert(razorkv::detail::has_memory_vocabulary<razorkv::razor_kv_cache<float>>::value);
static_assert(razorkv::detail::has_memory_vocabulary<razorkv::selected_kv_cache<float>>::value);
static_assert(razorkv::detail::has_memory_vocabulary<razorkv::h2o_kv_cache<float>>::value);
static_assert(razorkv::detail::has_memory_vocabulary<razorkv::any_kv_cache<float>>::value);

TEST(PolicyPlugins, EveryCacheSpeaksOneMemoryVocabulary) {
  const random_prompt r(300);
  const razorkv::prompt_kv<float> prompt = r.prompt(300, 64);
  const std::vector<razorkv::policy> policies = six_policies(r.shape);
  for (const razorkv::policy& p : policies) {
    const razorkv::any_kv_cache<float> cache =
        razorkv::compress_prompt(p, prompt, razorkv::memory_budget::entries_per_head(100));
    index_t entries = 0;
    for (index_t l = 0; l < 2; ++l) {
      for (index_t h = 0; h < 2; ++h) {
        EXPECT_EQ(cache.entries(l, h), razorkv::num_entries(cache, l, h)) << p.name;
        entries += cache.entries(l, h);
      }
    }
    // K and V of every entry, float, head_dim 32; the budget holds (the full cache ignores it).
    EXPECT_EQ(cache.kv_bytes(), entries * 2 * 32 * static_cast<index_t>(sizeof(float))) << p.name;
    EXPECT_EQ(cache.kv_bytes(), razorkv::held_kv_bytes(cache)) << p.name;
    if (p.name != "full") {
      EXPECT_LE(entries, 4 * 100) << p.name;
    }
    EXPECT_GE(cache.allocated_bytes(), cache.kv_bytes()) << p.name;
  }
  // A dense cache's allocation is its capacity.
  razorkv::dense_kv_cache<float> dense(2, 2, 32, 500);
  EXPECT_EQ(dense.kv_bytes(), 0);
  EXPECT_EQ(dense.allocated_bytes(), 2 * 500 * 2 * 2 * 32 * static_cast<index_t>(sizeof(float)));
}

}  // namespace
