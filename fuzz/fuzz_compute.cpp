// Fuzz target: razorkv's compute entry points driven by fuzzed shapes, parameters and values
// (NaN and infinities included, shapes kept small): scoring (from queries and keys, and from
// probabilities), selection (by ratio, by memory budget, ALiBi), the memory calculator,
// compression with every config field, append and decode on the razor cache, the baselines,
// budgets, and decode itself at the sizes the specialised kernels serve (head dims up to 256,
// 16-bit storage, several causal tokens, batches, split heads, the weights handed back). Bad
// input must be a razorkv::error; accepted finite input must decode as the scalar reference does.
#include <razorkv/eval.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "fuzz_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;
using razorkv_fuzz::byte_reader;

struct layer_data {
  index_t tokens = 0, heads = 0, dim = 0;
  std::vector<float> values;
  bool finite = true;  ///< every value finite and of ordinary size
  layer_view<const float> view() const {
    return layer_view<const float>::nhd(values.data(), tokens, heads, dim);
  }
};

layer_data make_layer(byte_reader& in, index_t tokens, index_t heads, index_t dim) {
  layer_data d{tokens, heads, dim, {}, true};
  d.values.resize(static_cast<std::size_t>(tokens * heads * dim));
  for (float& x : d.values) {
    x = in.value();
    // Values past 64 may overflow a float dot product: compare with the reference only below.
    d.finite = d.finite && std::fabs(x) <= 64.0f;
  }
  return d;
}

// Decode over `cache` with the optimised kernel and, for finite input, against the reference.
template <class Cache>
void decode_and_compare(const Cache& cache, const layer_data& queries, bool finite, index_t token) {
  const razorkv::matrix_view<const float> q = queries.view().token(token);
  std::vector<float> out(static_cast<std::size_t>(q.rows() * q.cols()));
  razorkv::decode_attention(cache, 0, q,
                            razorkv::matrix_view<float>(out.data(), q.rows(), q.cols()));
  if (!finite) return;
  const std::vector<double> want = razorkv::reference::decode_attention(cache, 0, q);
  for (std::size_t i = 0; i < out.size(); ++i) {
    razorkv_fuzz::require(std::fabs(out[i] - want[i]) <= 1e-3 * (1.0 + std::fabs(want[i])),
                          "decode == reference");
  }
}

void fuzz_razor_cache(byte_reader& in, const razorkv::model_shape& shape, const layer_data& keys,
                      const layer_data& values, const layer_data& queries, index_t prefill) {
  razorkv::head_plan plan(shape);
  for (index_t h = 0; h < shape.num_kv_heads; ++h) plan.set_retrieval(0, h, in.byte() % 3 == 0);
  if (in.byte() % 4 == 0) plan.set_buffer_override(0, 0, in.range(-1, 6));
  razorkv::razor_config config;
  config.sinks = in.range(-1, 5);
  config.s0 = in.range(-1, 8);
  config.c = in.byte() % 8 == 0 ? static_cast<double>(in.raw_float()) : 1.0 + in.range(0, 6);
  config.fixed_window = in.range(-1, 1) < 1 ? 0 : in.range(-1, 6);
  config.compensation = static_cast<razorkv::compensation_mode>(in.range(0, 3));
  config.decode = static_cast<razorkv::decode_mode>(in.range(0, 2));
  config.decode_reserve = in.range(-1, 3);
  razorkv::razor_kv_cache<float> cache(plan, config);
  cache.compress_layer(0, keys.view().middle_tokens(0, prefill),
                       values.view().middle_tokens(0, prefill));
  const bool finite = keys.finite && values.finite && queries.finite;
  for (index_t t = prefill; t < keys.tokens; ++t) {
    cache.append(0, keys.view().middle_tokens(t, 1), values.view().middle_tokens(t, 1));
    decode_and_compare(cache, queries, finite, t);
    index_t held = 0;
    for (index_t h = 0; h < shape.num_kv_heads; ++h) held += cache.entries(0, h);
    razorkv_fuzz::require(
        cache.kv_bytes() == held * 2 * shape.head_dim * static_cast<index_t>(sizeof(float)),
        "kv_bytes counts the entries held");
  }
}

void fuzz_policies(byte_reader& in, const razorkv::model_shape& shape, const layer_data& keys,
                   const layer_data& values, const layer_data& queries, index_t prefill) {
  const bool finite = keys.finite && values.finite && queries.finite;
  const index_t budget = in.range(-1, 12);
  const auto k = keys.view().middle_tokens(0, prefill), v = values.view().middle_tokens(0, prefill);
  switch (in.byte() % 3) {
    case 0: {
      razorkv::snapkv_config config;
      config.window = in.range(0, 6);
      config.kernel = in.range(0, 5);
      config.pooling = static_cast<razorkv::snapkv_pooling>(in.range(0, 2));
      razorkv::selected_kv_cache<float> cache(1, shape.num_kv_heads, shape.head_dim);
      razorkv::snapkv_compress_layer(
          cache, 0, queries.view().middle_tokens(prefill - config.window, config.window), k, v,
          budget, config);
      for (index_t t = prefill; t < keys.tokens; ++t) {
        cache.append(0, keys.view().middle_tokens(t, 1), values.view().middle_tokens(t, 1));
        decode_and_compare(cache, queries, finite, t);
      }
      break;
    }
    case 1: {
      razorkv::h2o_config config;
      config.recent = in.range(-1, 6);
      razorkv::h2o_kv_cache<float> cache(1, shape.num_kv_heads, shape.head_dim, budget, config);
      const index_t observed = in.range(0, prefill);
      cache.compress_layer(0, k, v,
                           razorkv::observed_attention(
                               queries.view().middle_tokens(prefill - observed, observed), k));
      for (index_t t = prefill; t < keys.tokens; ++t) {
        cache.append(0, keys.view().middle_tokens(t, 1), values.view().middle_tokens(t, 1));
        decode_and_compare(cache, queries, finite, t);
        cache.observe(0, queries.view().middle_tokens(t, 1));
        razorkv_fuzz::require(razorkv::num_entries(cache, 0, 0) <= budget,
                              "h2o stays within its budget");
      }
      break;
    }
    default: {
      razorkv::memory_budget b{static_cast<razorkv::budget_unit>(in.range(0, 3)),
                               static_cast<double>(in.raw_float())};
      const index_t entries = razorkv::entries_per_head(b, shape, prefill, 4);
      razorkv_fuzz::require(entries >= 1, "a budget gives at least one entry per head");
      razorkv::head_plan plan(shape);
      plan.set_retrieval(0, 0, true);
      razorkv::razor_kv_cache<float> cache(
          plan, razorkv::razor_config_for_budget(plan, prefill, entries));
      cache.compress_layer(0, k, v);
      razorkv_fuzz::require(
          cache.kv_bytes() <= entries * shape.num_kv_heads * 2 * shape.head_dim * 4,
          "razor at a budget holds at most the budget");
      break;
    }
  }
}

void fuzz_scoring_and_selection(byte_reader& in, const razorkv::model_shape& shape) {
  razorkv::probe_config config;
  config.num_random_tokens = in.range(0, 6);
  config.repeats = in.range(1, 3);
  config.max_id = in.range(0, 40);
  if (in.byte() % 2 == 0) config.bos_id = 1;
  config.allow_duplicates = in.byte() % 2 == 0;
  config.seed = in.byte();
  const razorkv::probe the_probe(config);
  const layer_data q = make_layer(in, the_probe.length(), shape.num_query_heads, shape.head_dim);
  const layer_data k = make_layer(in, the_probe.length(), shape.num_kv_heads, shape.head_dim);
  razorkv::qk_scoring_options options;
  options.row_step = in.range(0, 3);
  if (in.byte() % 4 == 0) options.scale = static_cast<double>(in.raw_float());
  const razorkv::layer_scores scores =
      razorkv::score_from_queries_keys(the_probe, q.view(), k.view(), options);
  for (double x : scores.echo)
    razorkv_fuzz::require(std::isfinite(x) && x >= 0.0 && x <= 1.0 + 1e-6, "echo in [0, 1]");
  for (double x : scores.induction)
    razorkv_fuzz::require(std::isfinite(x) && x >= 0.0 && x <= 1.0 + 1e-6, "induction in [0, 1]");
  razorkv::head_scores all(1, shape.num_query_heads, shape.num_kv_heads);
  all.set_layer(0, scores);
  razorkv::selection_config selection;
  selection.induction_ratio = static_cast<double>(in.value()) / 8.0;
  selection.echo_ratio = static_cast<double>(in.value()) / 8.0;
  selection.aggregation = static_cast<razorkv::gqa_aggregation>(in.range(0, 3));
  selection.min_groups_per_layer = in.range(-1, 3);
  const razorkv::head_plan plan = razorkv::select_retrieval_heads(all, shape.head_dim, selection);
  razorkv_fuzz::require(plan.num_retrieval() <= shape.num_kv_heads, "selection within the model");
}

// The remaining selection paths: scores from attention probabilities, the memory-budget
// selector, the ALiBi selector and the memory calculator.
void fuzz_other_selectors(byte_reader& in, const razorkv::model_shape& shape) {
  switch (in.byte() % 4) {
    case 0: {
      razorkv::probe_config config;
      config.num_random_tokens = in.range(1, 5);
      config.repeats = in.range(1, 3);
      config.max_id = 64;
      config.seed = in.byte();
      const razorkv::probe the_probe(config);
      const index_t length = the_probe.length() + in.range(-1, 1);
      const index_t heads = in.range(0, 3);
      std::vector<float> probabilities(
          static_cast<std::size_t>(std::max<index_t>(0, heads * length * length)));
      for (float& p : probabilities) p = in.value() / 8.0f;
      if (in.byte() % 4 != 0 && length == the_probe.length()) {  // mostly valid causal softmax rows
        for (index_t r = 0; r < heads * length; ++r) {
          float* row = probabilities.data() + r * length;
          const index_t i = r % length;
          float sum = 0.0f;
          for (index_t j = 0; j < length; ++j)
            sum += (row[j] = j <= i ? std::fabs(row[j]) + 1e-3f : 0.0f);
          if (std::isfinite(sum)) {
            for (index_t j = 0; j < length; ++j) row[j] /= sum;
          }
        }
      }
      razorkv::scoring_options options;
      options.row_step = in.range(0, 2);
      razorkv::score_from_probabilities(the_probe, probabilities.data(), heads, length, options);
      break;
    }
    case 1: {
      razorkv::head_scores scores(shape.num_layers, shape.num_query_heads, shape.num_kv_heads);
      razorkv::layer_scores layer;
      for (index_t q = 0; q < shape.num_query_heads; ++q) {
        layer.echo.push_back(static_cast<double>(in.value()));
        layer.induction.push_back(static_cast<double>(in.value()));
      }
      scores.set_layer(0, layer);
      razorkv::memory_target target;
      target.budget_bytes = static_cast<index_t>(in.range(-1, 200)) * 1024;
      target.seq_len = in.range(-1, 5000);
      target.dtype_bytes = in.range(0, 4);
      target.budget.sinks = in.range(-1, 8);
      target.budget.s0 = in.range(-1, 64);
      target.budget.c = 1.0 + in.range(-1, 8);
      const razorkv::head_plan plan = razorkv::select_for_budget(scores, shape.head_dim, target);
      razorkv_fuzz::require(razorkv::compressed_kv_bytes(plan, target.seq_len, target.budget,
                                                         target.dtype_bytes) <= target.budget_bytes,
                            "select_for_budget fits its target");
      break;
    }
    case 2: {
      std::vector<double> slopes;
      for (index_t q = 0; q < shape.num_query_heads + in.range(-1, 1); ++q)
        slopes.push_back(static_cast<double>(in.value()) / 8.0);
      razorkv::alibi_selection options;
      options.bound = static_cast<double>(in.value());
      options.eps = in.byte() % 8 == 0 ? static_cast<double>(in.raw_float()) : 1e-3;
      options.seq_len = in.range(-1, 4000);
      if (in.byte() % 2 != 0) options.ratio = static_cast<double>(in.value()) / 4.0;
      razorkv::select_alibi_heads(shape, slopes, options);
      break;
    }
    default: {
      razorkv::razor_budget budget;
      budget.sinks = in.range(-1, 8);
      budget.s0 = in.range(-1, 64);
      budget.c = in.byte() % 8 == 0 ? static_cast<double>(in.raw_float()) : 1.0 + in.range(-1, 8);
      budget.fixed_window = in.range(-1, 1) < 1 ? 0 : in.range(-1, 64);
      budget.compensation_token = in.byte() % 2 == 0;
      const index_t tokens = in.range(-1, 200) * in.range(1, 100);
      const index_t entries = razorkv::compressed_entries(tokens, budget);
      razorkv_fuzz::require(entries >= 0 && entries <= tokens,
                            "compressed_entries within the prompt");
      razorkv::compressed_kv_bytes(shape, static_cast<double>(in.value()) / 8.0, tokens, budget,
                                   in.range(0, 4));
      break;
    }
  }
}

// Values for a decode source: a seeded stream in [-4, 4] (the fuzzer's bytes would not fill
// 256-wide heads), with a few fuzzed values (NaN, infinities, huge ones) at fuzzed places.
template <class T>
std::vector<T> decode_values(byte_reader& in, std::size_t count, bool& finite) {
  const std::uint64_t low = in.byte(), high = in.byte();  // in this order
  std::uint64_t state = 0x9e3779b97f4a7c15ULL ^ (low | high << 8);
  std::vector<T> out(count);
  for (T& x : out) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;  // xorshift64
    x = static_cast<T>(static_cast<float>(state >> 40) / static_cast<float>(1 << 24) * 8.0f - 4.0f);
  }
  for (long special = in.byte() % 4 == 0 ? in.range(1, 2) : 0; special > 0 && count > 0;
       --special) {
    const float v = in.value();
    const std::size_t high_byte = in.byte(), low_byte = in.byte();  // in this order
    out[(high_byte * 256 + low_byte) % count] = static_cast<T>(v);
    finite = finite && std::fabs(v) <= 64.0f;
  }
  return out;
}

template <class T>
void fuzz_decode_typed(byte_reader& in) {
  static constexpr index_t kDims[] = {1, 3, 16, 64, 80, 96, 128, 256, 130};
  const index_t dim = kDims[in.byte() % 9];
  const index_t kv_heads = in.range(1, 2), query_heads = kv_heads * in.range(1, 4);
  const index_t batch = in.range(1, 3), tokens = batch > 1 ? 1 : in.range(1, 4);
  razorkv::attention_options options;
  options.max_entries_per_task = in.range(0, 3) == 0 ? 0 : in.range(1, 80);
  const bool want_weights = in.byte() % 2 == 0;
  bool finite = true;
  std::vector<razorkv::dense_kv_cache<T>> caches;
  for (index_t b = 0; b < batch; ++b) {
    const index_t length = tokens + in.range(0, 255) + in.range(0, 255);
    const auto n = static_cast<std::size_t>(length * kv_heads * dim);
    const std::vector<T> k = decode_values<T>(in, n, finite), v = decode_values<T>(in, n, finite);
    caches.emplace_back(1, kv_heads, dim);
    caches.back().append(0, layer_view<const T>::nhd(k.data(), length, kv_heads, dim),
                         layer_view<const T>::nhd(v.data(), length, kv_heads, dim));
  }
  const std::vector<float> queries = decode_values<float>(
      in, static_cast<std::size_t>(batch * tokens * query_heads * dim), finite);
  std::vector<float> out(queries.size());
  std::vector<razorkv::attention_weights> weights(static_cast<std::size_t>(batch));
  const auto q = layer_view<const float>::nhd(queries.data(), batch * tokens, query_heads, dim);
  const auto o = layer_view<float>::nhd(out.data(), batch * tokens, query_heads, dim);
  if (batch == 1) {
    if (want_weights) {
      razorkv::decode_attention_multi(caches[0], 0, q, o, weights[0], options);
    } else {
      razorkv::decode_attention_multi(caches[0], 0, q, o, options);
    }
  } else {
    std::vector<const razorkv::dense_kv_cache<T>*> sources;
    std::vector<razorkv::attention_weights*> wanted;
    for (std::size_t b = 0; b < caches.size(); ++b) {
      sources.push_back(&caches[b]);
      wanted.push_back(want_weights ? &weights[b] : nullptr);
    }
    razorkv::decode_attention_batch(sources.data(), batch, 0, q, o, wanted.data(), options);
  }
  if (!finite) return;
  for (index_t b = 0; b < batch; ++b) {
    const auto qb = q.middle_tokens(b * tokens, tokens);
    const std::vector<double> want =
        razorkv::reference::decode_attention_multi(caches[static_cast<std::size_t>(b)], 0, qb);
    for (std::size_t i = 0; i < want.size(); ++i) {
      const float got = out[static_cast<std::size_t>(b * tokens * query_heads * dim) + i];
      razorkv_fuzz::require(std::fabs(got - want[i]) <= 1e-3 * (1.0 + std::fabs(want[i])),
                            "decode == reference");
    }
    if (!want_weights) continue;
    const auto reference =
        razorkv::reference::attention_weights_multi(caches[static_cast<std::size_t>(b)], 0, qb);
    for (index_t t = 0; t < tokens; ++t) {
      for (index_t h = 0; h < query_heads; ++h) {
        const std::vector<double>& row = reference[static_cast<std::size_t>(t * query_heads + h)];
        const float* got = weights[static_cast<std::size_t>(b)].query(t, h);
        for (std::size_t e = 0; e < row.size(); ++e) {
          razorkv_fuzz::require(std::fabs(got[e] - row[e]) <= 1e-4, "weights == reference");
        }
      }
    }
  }
}

void fuzz_decode(byte_reader& in) {
  switch (in.byte() % 4) {
    case 0:
      return fuzz_decode_typed<float>(in);
    case 1:
      return fuzz_decode_typed<double>(in);
    case 2:
      return fuzz_decode_typed<Eigen::half>(in);
    default:
      return fuzz_decode_typed<Eigen::bfloat16>(in);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  byte_reader in(data, size);
  const int operation = in.byte() % 5;
  razorkv::model_shape shape;
  shape.num_layers = 1;
  shape.num_kv_heads = in.range(1, 3);
  shape.num_query_heads = shape.num_kv_heads * in.range(1, 3);
  shape.head_dim = in.range(1, 20);
  const index_t tokens = in.range(1, 40);
  const index_t prefill = in.range(0, tokens);
  razorkv_fuzz::reject_only_with_razorkv_errors([&] {
    if (operation == 2) {
      fuzz_scoring_and_selection(in, shape);
      return;
    }
    if (operation == 3) {
      fuzz_other_selectors(in, shape);
      return;
    }
    if (operation == 4) {
      fuzz_decode(in);
      return;
    }
    const layer_data keys = make_layer(in, tokens, shape.num_kv_heads, shape.head_dim);
    const layer_data values = make_layer(in, tokens, shape.num_kv_heads, shape.head_dim);
    const layer_data queries = make_layer(in, tokens, shape.num_query_heads, shape.head_dim);
    if (operation == 0) {
      fuzz_razor_cache(in, shape, keys, values, queries, prefill);
    } else {
      fuzz_policies(in, shape, keys, values, queries, prefill);
    }
  });
  return 0;
}
