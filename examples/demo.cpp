// razorkv demo: RazorAttention end to end on a synthetic model whose retrieval heads are known:
// probe -> head scores -> plan -> prefill -> compress -> decode, with the memory saved and the
// attention-output error of each compensation mode against the full cache.
//
//   razorkv_demo [prompt tokens]      (default 16384)
#include <razorkv/eval.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

namespace {

using razorkv::index_t;
using bf16 = Eigen::bfloat16;
using clock_type = std::chrono::steady_clock;

constexpr index_t kLayers = 4, kQueryHeads = 32, kKvHeads = 8, kHeadDim = 128, kDecodeSteps = 8;
constexpr index_t kGroup = kQueryHeads / kKvHeads;
// 5 of the 32 GQA groups read the whole context: the paper's 15%.
constexpr index_t kPlantedRetrievalGroups = 5;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

razorkv::probe make_probe(index_t period, std::uint64_t seed) {
  razorkv::probe_config config;
  config.num_random_tokens = period;
  config.max_id = 128256;
  config.bos_id = 128000;
  config.seed = seed;
  return razorkv::probe(config);
}

std::vector<bf16> to_bf16(const float* data, std::size_t n) {
  std::vector<bf16> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16(data[i]);
  return out;
}

// The prompt as an engine holds it after prefill: per layer, K/V of the first `prefill` tokens
// in bfloat16, and the Q/K/V of the tokens decoded after it.
struct prompt_state {
  index_t prefill = 0;
  razorkv::dense_kv_cache<bf16> full{kLayers, kKvHeads, kHeadDim};
  std::vector<std::vector<float>> step_queries;           // [layers][steps * query_heads * dim]
  std::vector<std::vector<bf16>> step_keys, step_values;  // [layers][steps * kv_heads * dim]
};

prompt_state prefill_prompt(const std::vector<razorkv::planted_layer_config>& model,
                            index_t tokens) {
  const razorkv::probe prompt = make_probe(tokens / 4, 2026);  // 4 copies of a random block + BOS
  prompt_state state;
  state.prefill = prompt.length() - kDecodeSteps;
  const std::size_t kv_token = static_cast<std::size_t>(kKvHeads * kHeadDim);
  const std::size_t q_token = static_cast<std::size_t>(kQueryHeads * kHeadDim);
  for (index_t l = 0; l < kLayers; ++l) {
    const razorkv::planted_layer layer =
        razorkv::make_planted_layer(prompt, model[static_cast<std::size_t>(l)]);
    const auto keys = to_bf16(layer.keys.data(), layer.keys.size());
    const auto values = to_bf16(layer.values.data(), layer.values.size());
    state.full.append(
        l, razorkv::layer_view<const bf16>::nhd(keys.data(), state.prefill, kKvHeads, kHeadDim),
        razorkv::layer_view<const bf16>::nhd(values.data(), state.prefill, kKvHeads, kHeadDim));
    const std::size_t first = static_cast<std::size_t>(state.prefill);
    state.step_keys.emplace_back(keys.begin() + static_cast<std::ptrdiff_t>(first * kv_token),
                                 keys.end());
    state.step_values.emplace_back(values.begin() + static_cast<std::ptrdiff_t>(first * kv_token),
                                   values.end());
    state.step_queries.emplace_back(
        layer.queries.begin() + static_cast<std::ptrdiff_t>(first * q_token), layer.queries.end());
  }
  return state;
}

// Decodes kDecodeSteps tokens on `cache`, appending each token's K/V first; returns the
// attention outputs [steps][layers][query_heads * dim].
template <class Cache>
std::vector<std::vector<std::vector<float>>> decode_steps(Cache& cache,
                                                          const prompt_state& prompt) {
  std::vector<std::vector<std::vector<float>>> outputs(static_cast<std::size_t>(kDecodeSteps));
  for (index_t s = 0; s < kDecodeSteps; ++s) {
    for (index_t l = 0; l < kLayers; ++l) {
      const std::size_t layer = static_cast<std::size_t>(l);
      const auto step = [&](const std::vector<bf16>& data) {
        return razorkv::layer_view<const bf16>::nhd(data.data() + s * kKvHeads * kHeadDim, 1,
                                                    kKvHeads, kHeadDim);
      };
      cache.append(l, step(prompt.step_keys[layer]), step(prompt.step_values[layer]));
      std::vector<float> out(static_cast<std::size_t>(kQueryHeads * kHeadDim));
      razorkv::decode_attention(cache, l,
                                razorkv::matrix_view<const float>(
                                    prompt.step_queries[layer].data() + s * kQueryHeads * kHeadDim,
                                    kQueryHeads, kHeadDim),
                                razorkv::matrix_view<float>(out.data(), kQueryHeads, kHeadDim));
      outputs[static_cast<std::size_t>(s)].push_back(std::move(out));
    }
  }
  return outputs;
}

// Median seconds of one decode call over every layer (the model's attention for one token).
template <class Cache>
double median_step_seconds(const Cache& cache, const prompt_state& prompt) {
  std::vector<float> out(static_cast<std::size_t>(kQueryHeads * kHeadDim));
  std::vector<double> times;
  for (int rep = 0; rep < 15; ++rep) {
    const auto start = clock_type::now();
    for (index_t l = 0; l < kLayers; ++l) {
      razorkv::decode_attention(
          cache, l,
          razorkv::matrix_view<const float>(prompt.step_queries[static_cast<std::size_t>(l)].data(),
                                            kQueryHeads, kHeadDim),
          razorkv::matrix_view<float>(out.data(), kQueryHeads, kHeadDim));
    }
    times.push_back(seconds_since(start));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double error = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    error += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(error / norm);
}

double mebibytes(index_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  const index_t tokens = argc > 1 ? std::atol(argv[1]) : 16384;
  if (tokens < 256) {
    std::fprintf(stderr, "razorkv_demo: prompt tokens (%ld) must be >= 256\n",
                 static_cast<long>(tokens));
    return 2;
  }
  std::printf(
      "razorkv %d.%d.%d demo: RazorAttention on a synthetic model of %ld layers x %ld query heads "
      "(%ld kv heads, GQA group %ld), head_dim %ld; %ld of its %ld groups hold planted retrieval "
      "heads\n\n",
      RAZORKV_VERSION_MAJOR, RAZORKV_VERSION_MINOR, RAZORKV_VERSION_PATCH,
      static_cast<long>(kLayers), static_cast<long>(kQueryHeads), static_cast<long>(kKvHeads),
      static_cast<long>(kGroup), static_cast<long>(kHeadDim),
      static_cast<long>(kPlantedRetrievalGroups), static_cast<long>(kLayers * kKvHeads));
  const auto model = razorkv::sparse_retrieval_model({kLayers, kQueryHeads, kKvHeads, kHeadDim},
                                                     kPlantedRetrievalGroups, 11);

  // 1. Offline calibration: the probe through every layer, echo and induction scores.
  const razorkv::probe probe = make_probe(1000, 0);
  razorkv::head_scores scores(kLayers, kQueryHeads, kKvHeads);
  auto start = clock_type::now();
  for (index_t l = 0; l < kLayers; ++l) {
    const auto layer = razorkv::make_planted_layer(probe, model[static_cast<std::size_t>(l)]);
    scores.set_layer(l,
                     razorkv::score_from_queries_keys(probe, layer.query_view(), layer.key_view()));
  }
  std::printf(
      "1. probe: %ld random tokens x %ld copies + BOS = %ld tokens; scored %ld heads in %.2f s\n",
      static_cast<long>(probe.num_random_tokens()), static_cast<long>(probe.repeats()),
      static_cast<long>(probe.length()), static_cast<long>(kLayers * kQueryHeads),
      seconds_since(start));

  // 2. The plan: top 14% of groups by induction + top 1% by echo, over all layers.
  const razorkv::head_plan plan = razorkv::select_retrieval_heads(scores, kHeadDim);
  index_t found = 0;
  std::printf("2. plan: %ld retrieval groups:", static_cast<long>(plan.num_retrieval()));
  for (index_t l = 0; l < kLayers; ++l) {
    for (index_t g : plan.retrieval_heads(l)) {
      const auto& head =
          model[static_cast<std::size_t>(l)].query_heads[static_cast<std::size_t>(g * kGroup)];
      const bool planted = head.components[0].first == razorkv::head_kind::kInduction;
      found += planted ? 1 : 0;
      std::printf(" L%ld/kv%ld%s", static_cast<long>(l), static_cast<long>(g),
                  planted ? "" : " (not planted)");
    }
  }
  std::printf("; %ld of them planted\n", static_cast<long>(found));

  // 3. Prefill: the engine's full bfloat16 cache of a long prompt with repeated content.
  start = clock_type::now();
  const prompt_state prompt = prefill_prompt(model, tokens);
  std::printf("3. prefill: %ld tokens (synthesised in %.1f s), full cache %.1f MiB\n",
              static_cast<long>(prompt.prefill), seconds_since(start),
              mebibytes(prompt.full.kv_bytes()));

  // 4. Compress with the paper's defaults (N0 = 4, S0 = 4000, C = 5).
  const razorkv::razor_config config;
  start = clock_type::now();
  const razorkv::razor_kv_cache<bf16> compressed =
      razorkv::compress_cache(prompt.full, plan, config);
  const double compress_seconds = seconds_since(start);
  const index_t calculator =
      razorkv::compressed_kv_bytes(plan, prompt.prefill, config.budget(), sizeof(bf16));
  std::printf(
      "4. compress: %.1f MiB -> %.1f MiB (ratio %.3f, %.2fx smaller; the calculator says %.1f MiB) "
      "in %.0f ms\n"
      "   non-retrieval heads keep 4 sinks + 1 compensation token + the last %ld tokens\n",
      mebibytes(compressed.dense_kv_bytes()), mebibytes(compressed.kv_bytes()),
      compressed.compression_ratio(), 1.0 / compressed.compression_ratio(), mebibytes(calculator),
      compress_seconds * 1e3,
      static_cast<long>(razorkv::recent_window(prompt.prefill, config.budget())));

  // 5. Decode: the same steps on the full cache and on each compensation mode.
  razorkv::dense_kv_cache<bf16> full = prompt.full;
  const auto want = decode_steps(full, prompt);
  std::printf(
      "5. decode %ld tokens; relative L2 error of each layer's attention output vs the full "
      "cache:\n",
      static_cast<long>(kDecodeSteps));
  std::printf("   compensation   ");
  for (index_t l = 0; l < kLayers; ++l) std::printf("  layer %ld", static_cast<long>(l));
  std::printf("     all   held\n");
  for (razorkv::compensation_mode mode :
       {razorkv::compensation_mode::kWeighted, razorkv::compensation_mode::kUnweighted,
        razorkv::compensation_mode::kNone}) {
    razorkv::razor_config variant = config;
    variant.compensation = mode;
    razorkv::razor_kv_cache<bf16> cache = razorkv::compress_cache(prompt.full, plan, variant);
    const auto got = decode_steps(cache, prompt);
    std::printf("   %-15s", razorkv::compensation_mode_name(mode));
    std::vector<float> all_got, all_want;
    for (index_t l = 0; l < kLayers; ++l) {
      std::vector<float> layer_got, layer_want;
      for (index_t s = 0; s < kDecodeSteps; ++s) {
        const auto& g = got[static_cast<std::size_t>(s)][static_cast<std::size_t>(l)];
        const auto& w = want[static_cast<std::size_t>(s)][static_cast<std::size_t>(l)];
        layer_got.insert(layer_got.end(), g.begin(), g.end());
        layer_want.insert(layer_want.end(), w.begin(), w.end());
      }
      std::printf("  %7.4f", relative_l2(layer_got, layer_want));
      all_got.insert(all_got.end(), layer_got.begin(), layer_got.end());
      all_want.insert(all_want.end(), layer_want.begin(), layer_want.end());
    }
    std::printf("  %6.4f  %.1f MiB\n", relative_l2(all_got, all_want), mebibytes(cache.kv_bytes()));
  }

  const double dense_step = median_step_seconds(prompt.full, prompt);
  const double razor_step = median_step_seconds(compressed, prompt);
  std::printf(
      "\n   decode attention for one token over all %ld layers (median of 15): full %.2f ms, razor "
      "%.2f ms (%.2fx)\n",
      static_cast<long>(kLayers), dense_step * 1e3, razor_step * 1e3, dense_step / razor_step);
  std::printf(
      "\nweighted is the paper's compensation token (its logit gets + ln count); unweighted is the "
      "mean token\n"
      "alone; none drops the middle of the context (StreamingLLM-like). See README.md for the "
      "API.\n");
  return 0;
}
