// The strong guarantee of every cache, checked at every allocation: a copy assignment, a
// compression, a chunk or an append whose k-th allocation from the cache's memory resource fails
// throws std::bad_alloc, leaves the cache's contents and counts bit for bit as they were, gives
// back what it took, and the cache then does what a cache that never failed does.
#include <gtest/gtest.h>

#include <razorkv/eval.hpp>

#include <optional>
#include <random>
#include <vector>

#include "support/counting_resource.hpp"
#include "support/strong_guarantee.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;
using razorkv_test::counting_resource;

constexpr index_t kLayers = 2, kHeads = 3, kQueryHeads = 6, kDim = 8;

// Tokens [N, kHeads, kDim] for keys, values and queries of one layer.
struct tokens {
  std::vector<float> keys, values, queries;
  explicit tokens(index_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    keys = razorkv_test::random_values<float>(static_cast<std::size_t>(n * kHeads * kDim), rng);
    values = razorkv_test::random_values<float>(keys.size(), rng);
    queries = razorkv_test::random_values<float>(2 * keys.size(), rng);
  }
  layer_view<const float> k(index_t first, index_t count) const {
    return layer_view<const float>::nhd(keys.data() + first * kHeads * kDim, count, kHeads, kDim);
  }
  layer_view<const float> v(index_t first, index_t count) const {
    return layer_view<const float>::nhd(values.data() + first * kHeads * kDim, count, kHeads, kDim);
  }
  layer_view<const float> q(index_t first, index_t count) const {
    return layer_view<const float>::nhd(queries.data() + first * kQueryHeads * kDim, count,
                                        kQueryHeads, kDim);
  }
};

const tokens& data() {
  static const tokens t(700, 4501);
  return t;
}

// Runs check_strong_guarantee with `pool` as the allocator that fails.
template <class Build, class Step, class State>
void expect_strong(counting_resource& pool, Build build, Step step, State state,
                   long min_points = 1) {
  const long points = razorkv_test::check_strong_guarantee(
      build, step, state, [&pool](long k) { pool.limit = k < 0 ? -1 : pool.allocations + k; },
      [&pool](const auto& cache) { return pool.outstanding - cache.allocated_bytes(); });
  EXPECT_GE(points, min_points) << "the step allocates less than the test means to fail";
}

// A head plan with one retrieval head in layer 0 and a buffer override in layer 1.
razorkv::head_plan plan() {
  razorkv::head_plan p(razorkv::model_shape{kLayers, kQueryHeads, kHeads, kDim});
  p.set_retrieval(0, 1, true);
  p.set_buffer_override(1, 2, 5);
  return p;
}

std::vector<razorkv::razor_config> razor_configs() {
  std::vector<razorkv::razor_config> configs;
  for (auto [compensation, decode] :
       {std::pair{razorkv::compensation_mode::kWeighted, razorkv::decode_mode::kAppend},
        std::pair{razorkv::compensation_mode::kUnweighted, razorkv::decode_mode::kBounded},
        std::pair{razorkv::compensation_mode::kNone, razorkv::decode_mode::kAppend}}) {
    razorkv::razor_config config;
    config.sinks = 2;
    config.s0 = 16;
    config.c = 8;
    config.compensation = compensation;
    config.decode = decode;
    config.growth_rows = 7;  // appends chain blocks early
    configs.push_back(config);
  }
  return configs;
}

// Everything a razor cache holds: its saved state (counts, windows, sums, rows) and its spans.
std::vector<unsigned char> razor_state(const razorkv::razor_kv_cache<float>& cache) {
  std::vector<unsigned char> bytes = razorkv_test::source_snapshot(cache);
  const std::vector<std::uint8_t> saved = razorkv::save_state(cache);
  bytes.insert(bytes.end(), saved.begin(), saved.end());
  return bytes;
}

// A razor cache on `pool` holding `prompt` tokens in every layer (two chunks) and `decoded` more.
razorkv::razor_kv_cache<float> razor_cache(const razorkv::razor_config& config,
                                           counting_resource* pool, index_t prompt, index_t decoded,
                                           index_t offset = 0) {
  razorkv::razor_kv_cache<float> cache(plan(), config, pool);
  const tokens& t = data();
  for (index_t l = 0; l < kLayers; ++l) {
    if (prompt == 0) continue;
    const index_t half = prompt / 2;
    cache.compress_chunk(l, t.k(offset, half), t.v(offset, half));
    cache.compress_chunk(l, t.k(offset + half, prompt - half), t.v(offset + half, prompt - half));
    for (index_t i = 0; i < decoded; ++i)
      cache.append(l, t.k(offset + prompt + i, 1), t.v(offset + prompt + i, 1));
  }
  return cache;
}

TEST(RazorkvStrongGuarantee, RazorCacheAtEveryAllocation) {
  const tokens& t = data();
  for (const razorkv::razor_config& config : razor_configs()) {
    SCOPED_TRACE(razorkv::decode_mode_name(config.decode));
    counting_resource pool;
    // Compression, one shot and by chunks, of a layer with sinks, windows and a retrieval head.
    expect_strong(
        pool, [&] { return razorkv::razor_kv_cache<float>(plan(), config, &pool); },
        [&](razorkv::razor_kv_cache<float>& c) { c.compress_layer(0, t.k(0, 300), t.v(0, 300)); },
        razor_state, 4);
    expect_strong(
        pool, [&] { return razor_cache(config, &pool, 120, 0); },
        [&](razorkv::razor_kv_cache<float>& c) {
          c.compress_chunk(1, t.k(120, 200), t.v(120, 200));
        },
        razor_state);
    // Appends that chain blocks past the reserve: one token, and more tokens than a block holds
    // (a bounded cache's windows slide in place: it allocates nothing to fail).
    const long grows = config.decode == razorkv::decode_mode::kAppend ? 1 : 0;
    expect_strong(
        pool, [&] { return razor_cache(config, &pool, 200, 14); },
        [&](razorkv::razor_kv_cache<float>& c) { c.append(0, t.k(214, 1), t.v(214, 1)); },
        razor_state, grows);
    expect_strong(
        pool, [&] { return razor_cache(config, &pool, 200, 12); },
        [&](razorkv::razor_kv_cache<float>& c) { c.append(1, t.k(212, 5), t.v(212, 5)); },
        razor_state, grows);
    // Copy assignment over a cache of another length: the copy allocates from the source's pool.
    std::optional<razorkv::razor_kv_cache<float>> source;
    expect_strong(
        pool,
        [&] {
          source.emplace(razor_cache(config, &pool, 260, 30, 100));
          return razor_cache(config, &pool, 150, 9);
        },
        [&](razorkv::razor_kv_cache<float>& c) { c = *source; }, razor_state, 8);
  }
}

TEST(RazorkvStrongGuarantee, DenseCacheAtEveryAllocation) {
  const tokens& t = data();
  counting_resource pool;
  const auto state = [](const razorkv::dense_kv_cache<float>& c) {
    std::vector<unsigned char> bytes = razorkv_test::source_snapshot(c);
    for (index_t l = 0; l < c.num_layers(); ++l) bytes.push_back(c.capacity(l) > 0 ? 1 : 0);
    return bytes;
  };
  const auto build = [&](index_t n, index_t offset) {
    razorkv::dense_kv_cache<float> c(kLayers, kHeads, kDim, 0, &pool);
    for (index_t l = 0; l < kLayers; ++l) c.append(l, t.k(offset, n), t.v(offset, n));
    return c;
  };
  expect_strong(
      pool, [&] { return build(40, 0); },
      [&](razorkv::dense_kv_cache<float>& c) { c.append(1, t.k(40, 300), t.v(40, 300)); }, state);
  std::optional<razorkv::dense_kv_cache<float>> source;
  expect_strong(
      pool,
      [&] {
        source.emplace(build(90, 50));
        return build(30, 0);
      },
      [&](razorkv::dense_kv_cache<float>& c) { c = *source; }, state, kLayers);
}

TEST(RazorkvStrongGuarantee, SnapKvAndH2oCachesAtEveryAllocation) {
  const tokens& t = data();
  counting_resource pool;
  const auto keep = [](index_t n) {
    std::vector<std::vector<index_t>> lists(kHeads);
    for (index_t h = 0; h < kHeads; ++h) {
      for (index_t p = h; p < n; p += 3) lists[static_cast<std::size_t>(h)].push_back(p);
    }
    return lists;
  };
  const auto selected_state = [](const razorkv::selected_kv_cache<float>& c) {
    std::vector<unsigned char> bytes = razorkv_test::source_snapshot(c);
    for (index_t l = 0; l < c.num_layers(); ++l) {
      bytes.push_back(static_cast<unsigned char>(c.num_tokens(l)));
      for (index_t h = 0; h < c.num_kv_heads(); ++h) {
        for (index_t p : c.positions(l, h)) bytes.push_back(static_cast<unsigned char>(p));
      }
    }
    return bytes;
  };
  const auto selected = [&](index_t n, index_t appended) {
    razorkv::selected_kv_cache<float> c(kLayers, kHeads, kDim, &pool);
    c.compress_layer(0, t.k(0, n), t.v(0, n), keep(n));
    for (index_t i = 0; i < appended; ++i) c.append(0, t.k(n + i, 1), t.v(n + i, 1));
    return c;
  };
  expect_strong(
      pool, [&] { return selected(30, 0); },
      [&](razorkv::selected_kv_cache<float>& c) {
        c.compress_layer(1, t.k(0, 200), t.v(0, 200), keep(200));
      },
      selected_state, kHeads);
  expect_strong(
      pool, [&] { return selected(90, 250); },
      [&](razorkv::selected_kv_cache<float>& c) { c.append(0, t.k(400, 20), t.v(400, 20)); },
      selected_state, kHeads);
  std::optional<razorkv::selected_kv_cache<float>> selected_source;
  expect_strong(
      pool,
      [&] {
        selected_source.emplace(selected(150, 300));
        return selected(60, 5);
      },
      [&](razorkv::selected_kv_cache<float>& c) { c = *selected_source; }, selected_state, kHeads);

  const auto h2o_state = [](const razorkv::h2o_kv_cache<float>& c) {
    std::vector<unsigned char> bytes = razorkv_test::source_snapshot(c);
    for (index_t l = 0; l < c.num_layers(); ++l) {
      for (index_t h = 0; h < c.num_kv_heads(); ++h) {
        for (double s : c.scores(l, h)) {
          const auto* b = reinterpret_cast<const unsigned char*>(&s);
          bytes.insert(bytes.end(), b, b + sizeof s);
        }
      }
    }
    return bytes;
  };
  const auto h2o = [&](index_t n, index_t offset) {
    razorkv::h2o_kv_cache<float> c(kLayers, kHeads, kDim, 24, {}, &pool);
    c.compress_layer(0, t.k(offset, n), t.v(offset, n),
                     razorkv::observed_attention(t.q(offset, n), t.k(offset, n)));
    return c;
  };
  expect_strong(
      pool, [&] { return h2o(50, 0); },
      [&](razorkv::h2o_kv_cache<float>& c) {
        c.compress_layer(1, t.k(0, 100), t.v(0, 100),
                         razorkv::observed_attention(t.q(0, 100), t.k(0, 100)));
      },
      h2o_state, 1);
  std::optional<razorkv::h2o_kv_cache<float>> h2o_source;
  expect_strong(
      pool,
      [&] {
        h2o_source.emplace(h2o(120, 30));
        return h2o(40, 0);
      },
      [&](razorkv::h2o_kv_cache<float>& c) { c = *h2o_source; }, h2o_state, kHeads);
}

}  // namespace
