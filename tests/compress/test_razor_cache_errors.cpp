// Bad input to razor_kv_cache: every error names the parameter and its value, and leaves both
// the source (the engine's prefill, a dense cache) and the razor cache as they were.
#include <gtest/gtest.h>

#include <razorkv/compress/razor_cache.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::compensation_mode;
using razorkv::decode_mode;
using razorkv::dense_kv_cache;
using razorkv::head_plan;
using razorkv::index_t;
using razorkv::layer_view;
using razorkv::razor_config;
using razorkv::razor_kv_cache;

using bf16 = Eigen::bfloat16;

constexpr index_t kHeads = 2, kDim = 8, kTokens = 50;

struct fixture {
  std::vector<bf16> keys, values;  // [kTokens, kHeads, kDim]
  dense_kv_cache<bf16> dense{1, kHeads, kDim};
  head_plan plan{razorkv::model_shape{1, 4, kHeads, kDim}};

  fixture() {
    std::mt19937_64 rng(1);
    keys =
        razorkv_test::random_values<bf16>(static_cast<std::size_t>(kTokens * kHeads * kDim), rng);
    values = razorkv_test::random_values<bf16>(keys.size(), rng);
    dense.append(0, key_view(), value_view());
    plan.set_retrieval(0, 1, true);
  }
  layer_view<const bf16> key_view(index_t tokens = kTokens) const {
    return layer_view<const bf16>::nhd(keys.data(), tokens, kHeads, kDim);
  }
  layer_view<const bf16> value_view(index_t tokens = kTokens) const {
    return layer_view<const bf16>::nhd(values.data(), tokens, kHeads, kDim);
  }
  std::vector<bf16> snapshot() const {
    std::vector<bf16> all(keys);
    all.insert(all.end(), values.begin(), values.end());
    for (index_t h = 0; h < kHeads; ++h) {
      const auto span = dense.span(0, h, 0);
      for (index_t t = 0; t < span.length(); ++t)
        all.insert(all.end(), span.keys.typed().row(t), span.keys.typed().row(t) + kDim);
    }
    return all;
  }
};

bool same_bits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
}

TEST(RazorkvRazorCacheErrors, BadConfigurationsNameTheField) {
  const fixture f;
  const auto with = [](auto change) {
    razor_config config;
    change(config);
    return config;
  };
  RAZORKV_EXPECT_ERROR((razor_kv_cache<bf16>(f.plan, with([](razor_config& c) {
                                               c.s0 = 0;
                                               c.c = 0.0;
                                             }))),
                       kInvalidArgument, "s0 (0) and c (0)");
  RAZORKV_EXPECT_ERROR((razor_kv_cache<bf16>(f.plan, with([](razor_config& c) { c.c = 0.5; }))),
                       kInvalidArgument, "c (0.5) must be >= 1");
  RAZORKV_EXPECT_ERROR(
      (razor_kv_cache<bf16>(f.plan, with([](razor_config& c) { c.c = std::nan(""); }))),
      kInvalidArgument, "c (nan)");
  RAZORKV_EXPECT_ERROR((razor_kv_cache<bf16>(f.plan, with([](razor_config& c) { c.sinks = -1; }))),
                       kInvalidArgument, "sinks (-1)");
  RAZORKV_EXPECT_ERROR((razor_kv_cache<bf16>(f.plan, with([](razor_config& c) { c.s0 = -5; }))),
                       kInvalidArgument, "s0 (-5)");
  RAZORKV_EXPECT_ERROR(
      (razor_kv_cache<bf16>(f.plan, with([](razor_config& c) { c.fixed_window = -2; }))),
      kInvalidArgument, "fixed_window (-2)");
  RAZORKV_EXPECT_ERROR(
      (razor_kv_cache<bf16>(f.plan, with([](razor_config& c) { c.decode_reserve = -1; }))),
      kInvalidArgument, "decode_reserve (-1)");
  RAZORKV_EXPECT_ERROR((razor_kv_cache<bf16>(f.plan, with([](razor_config& c) {
                                               c.compensation = static_cast<compensation_mode>(7);
                                             }))),
                       kInvalidArgument, "compensation (7)");
  RAZORKV_EXPECT_ERROR((razor_kv_cache<bf16>(f.plan, with([](razor_config& c) {
                                               c.decode = static_cast<decode_mode>(9);
                                             }))),
                       kInvalidArgument, "decode (9)");
  RAZORKV_EXPECT_ERROR(razor_config::fixed_capacity(5, 4), kInvalidArgument, "capacity (5)");
  // S0 = 0 is fine with C >= 1.
  EXPECT_NO_THROW((razor_kv_cache<bf16>(f.plan, with([](razor_config& c) { c.s0 = 0; }))));
}

TEST(RazorkvRazorCacheErrors, PlanForAnotherModelIsRejected) {
  const fixture f;
  const auto before = f.snapshot();
  for (const razorkv::model_shape& other :
       {razorkv::model_shape{2, 4, kHeads, kDim}, razorkv::model_shape{1, 4, 4, kDim},
        razorkv::model_shape{1, 4, kHeads, 16}}) {
    const head_plan plan(other);
    RAZORKV_EXPECT_ERROR(razorkv::compress_cache(f.dense, plan, razor_config{}), kShapeMismatch,
                         "compress_cache: the plan has");
  }
  RAZORKV_EXPECT_ERROR(razorkv::compress_cache(
                           f.dense, head_plan(razorkv::model_shape{1, 4, 4, kDim}), razor_config{}),
                       kShapeMismatch, "num_kv_heads 4, the dense cache has 2");
  EXPECT_TRUE(same_bits(before, f.snapshot()));
}

TEST(RazorkvRazorCacheErrors, EmptyPrefill) {
  const fixture f;
  const auto before = f.snapshot();
  razor_kv_cache<bf16> cache(f.plan, razor_config{});
  RAZORKV_EXPECT_ERROR(cache.compress_layer(0, f.key_view(0), f.value_view(0)), kInvalidArgument,
                       "razor_kv_cache::compress_layer: the prefill of layer 0 has no tokens");
  RAZORKV_EXPECT_ERROR(cache.compress_chunk(0, f.key_view(0), f.value_view(0)), kInvalidArgument,
                       "has no tokens");
  EXPECT_FALSE(cache.is_compressed(0));
  EXPECT_EQ(cache.num_spans(0, 0), 0);
  EXPECT_TRUE(same_bits(before, f.snapshot()));
}

TEST(RazorkvRazorCacheErrors, ViewsOfTheWrongShapeOrDtype) {
  const fixture f;
  razor_kv_cache<bf16> cache(f.plan, razor_config{});
  const std::vector<Eigen::half> halves(f.keys.size());
  const auto half_view = layer_view<const Eigen::half>::nhd(halves.data(), kTokens, kHeads, kDim);
  RAZORKV_EXPECT_ERROR(cache.compress_layer(0, half_view, half_view), kInvalidArgument,
                       "keys has dtype half, expected bfloat16");
  RAZORKV_EXPECT_ERROR(
      cache.compress_layer(0, razorkv::any_layer_view(f.key_view()),
                           razorkv::any_layer_view::nhd(f.values.data(), razorkv::dtype::kFloat32,
                                                        kTokens, kHeads, kDim)),
      kInvalidArgument, "values has dtype float, expected bfloat16");
  RAZORKV_EXPECT_ERROR(
      cache.compress_layer(0, layer_view<const bf16>::nhd(f.keys.data(), 25, 4, kDim),
                           f.value_view(25)),
      kShapeMismatch, "keys.heads() (4) != num_kv_heads (2)");
  RAZORKV_EXPECT_ERROR(
      cache.compress_layer(0, layer_view<const bf16>::nhd(f.keys.data(), 50, kHeads, 4),
                           f.value_view()),
      kShapeMismatch, "keys.head_dim() (4) != head_dim (8)");
  RAZORKV_EXPECT_ERROR(cache.compress_layer(0, f.key_view(), f.value_view(40)), kShapeMismatch,
                       "keys.tokens() (50) != values.tokens() (40)");
  RAZORKV_EXPECT_ERROR(cache.compress_layer(3, f.key_view(), f.value_view()), kOutOfRange,
                       "layer (3) outside [0, 1)");
  EXPECT_FALSE(cache.is_compressed(0));
}

TEST(RazorkvRazorCacheErrors, AppendBeforeCompressionAndCompressingTwice) {
  const fixture f;
  razor_kv_cache<bf16> cache(f.plan, razor_config{});
  RAZORKV_EXPECT_ERROR(cache.append(0, f.key_view(1), f.value_view(1)), kInvalidArgument,
                       "layer (0) has not been compressed yet");
  cache.compress_layer(0, f.key_view(), f.value_view());
  const index_t bytes = cache.kv_bytes();
  RAZORKV_EXPECT_ERROR(cache.compress_layer(0, f.key_view(), f.value_view()), kInvalidArgument,
                       "layer (0) is already compressed");
  RAZORKV_EXPECT_ERROR(cache.append(0, f.key_view(2), f.value_view(1)), kShapeMismatch,
                       "keys.tokens() (2) != values.tokens() (1)");
  RAZORKV_EXPECT_ERROR(
      cache.append(0, layer_view<const bf16>::nhd(f.keys.data(), 1, 1, kDim), f.value_view(1)),
      kShapeMismatch, "keys.heads() (1)");
  EXPECT_EQ(cache.kv_bytes(), bytes);
  EXPECT_EQ(cache.num_tokens(0), kTokens);
  RAZORKV_EXPECT_ERROR(cache.span(0, 0, 9), kOutOfRange, "span (9) outside");
  RAZORKV_EXPECT_ERROR(cache.entries(0, 2), kOutOfRange, "kv_head (2) outside [0, 2)");
}

}  // namespace
