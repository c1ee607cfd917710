// razorkv demo: exact GQA decode attention over a synthetic Llama-3-8B-like layer, and a preview
// of RazorAttention's compensation token through the generic KV-cache interface.
//
//   razorkv_demo [tokens]      (default 16384)
#include <razorkv/razorkv.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

using razorkv::index_t;
using bf16 = Eigen::bfloat16;

constexpr index_t kQueryHeads = 32, kKvHeads = 8, kHeadDim = 128;

// Keys and values that drift slowly per head (nearby tokens look alike, as in real models),
// plus noise; rounded to bfloat16 like an engine's cache.
razorkv::dense_kv_cache<bf16> synthetic_layer(index_t tokens, std::mt19937_64& rng) {
  razorkv::dense_kv_cache<bf16> cache(1, kKvHeads, kHeadDim, tokens);
  std::normal_distribution<float> normal;
  std::vector<float> key_drift(static_cast<std::size_t>(kKvHeads * kHeadDim)), value_drift(key_drift.size());
  for (auto& x : key_drift) x = normal(rng);
  for (auto& x : value_drift) x = normal(rng);
  std::vector<bf16> keys(key_drift.size()), values(key_drift.size());
  for (index_t t = 0; t < tokens; ++t) {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      key_drift[i] = 0.999f * key_drift[i] + 0.045f * normal(rng);
      value_drift[i] = 0.999f * value_drift[i] + 0.045f * normal(rng);
      keys[i] = bf16(key_drift[i] + 0.5f * normal(rng));
      values[i] = bf16(value_drift[i] + 0.5f * normal(rng));
    }
    cache.append(0, razorkv::layer_view<const bf16>::nhd(keys.data(), 1, kKvHeads, kHeadDim),
                 razorkv::layer_view<const bf16>::nhd(values.data(), 1, kKvHeads, kHeadDim));
  }
  return cache;
}

// A cache adapter written against the generic interface, the way an engine would: it reads the
// dense cache's rows in place and shows each head as [sinks | one mean token | recent window].
// The mean token's span carries log-weight ln(count) ("weighted"), 0 ("unweighted"), or is left
// out ("none"). razorkv's own compressed cache (razor_kv_cache) is built on this idea.
class windowed_view {
 public:
  using value_type = bf16;
  enum class compensation { kWeighted, kUnweighted, kNone };

  windowed_view(const razorkv::dense_kv_cache<bf16>& full, index_t sinks, index_t window, compensation mode)
      : full_(full), sinks_(sinks), window_(window), mode_(mode) {
    const index_t tokens = full.num_tokens(0);
    dropped_ = tokens - sinks - window;
    means_.resize(static_cast<std::size_t>(2 * kKvHeads * kHeadDim));
    for (index_t h = 0; h < kKvHeads; ++h) {
      const auto keys = full.keys(0).head(h), values = full.values(0).head(h);
      for (index_t c = 0; c < kHeadDim; ++c) {
        double k = 0, v = 0;
        for (index_t t = sinks; t < sinks + dropped_; ++t) {
          k += static_cast<float>(keys(t, c));
          v += static_cast<float>(values(t, c));
        }
        means_[static_cast<std::size_t>((2 * h) * kHeadDim + c)] = bf16(static_cast<float>(k / static_cast<double>(dropped_)));
        means_[static_cast<std::size_t>((2 * h + 1) * kHeadDim + c)] = bf16(static_cast<float>(v / static_cast<double>(dropped_)));
      }
    }
  }

  index_t num_layers() const { return 1; }
  index_t num_kv_heads() const { return kKvHeads; }
  index_t head_dim() const { return kHeadDim; }
  index_t num_spans(index_t, index_t) const { return mode_ == compensation::kNone ? 2 : 3; }
  razorkv::kv_span<bf16> span(index_t layer, index_t h, index_t i) const {
    const auto keys = full_.keys(layer).head(h), values = full_.values(layer).head(h);
    const index_t tokens = keys.rows();
    if (i == 0) return {keys.middle_rows(0, sinks_), values.middle_rows(0, sinks_), 0.0f};
    if (i == 1 && mode_ != compensation::kNone) {
      const bf16* mean = means_.data() + 2 * h * kHeadDim;
      const float log_weight = mode_ == compensation::kWeighted ? std::log(static_cast<float>(dropped_)) : 0.0f;
      return {razorkv::matrix_view<const bf16>(mean, 1, kHeadDim),
              razorkv::matrix_view<const bf16>(mean + kHeadDim, 1, kHeadDim), log_weight};
    }
    return {keys.middle_rows(tokens - window_, window_), values.middle_rows(tokens - window_, window_), 0.0f};
  }
  void append(index_t, razorkv::layer_view<const bf16>, razorkv::layer_view<const bf16>) {
    razorkv::detail::raise(razorkv::errc::kInvalidArgument, __FILE__, __LINE__, "windowed_view is read-only");
  }
  index_t entries() const { return sinks_ + window_ + (mode_ == compensation::kNone ? 0 : 1); }

 private:
  const razorkv::dense_kv_cache<bf16>& full_;
  index_t sinks_, window_, dropped_;
  compensation mode_;
  std::vector<bf16> means_;  // [kv_heads][key, value][head_dim]
};
static_assert(razorkv::is_kv_cache_v<windowed_view>);

double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

template <class Cache>
std::vector<float> decode(const Cache& cache, const std::vector<float>& queries) {
  std::vector<float> out(queries.size());
  razorkv::decode_attention(cache, 0, razorkv::matrix_view<const float>(queries.data(), kQueryHeads, kHeadDim),
                            razorkv::matrix_view<float>(out.data(), kQueryHeads, kHeadDim));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const index_t tokens = argc > 1 ? std::atol(argv[1]) : 16384;
  if (tokens < 64) {
    std::fprintf(stderr, "razorkv_demo: tokens (%ld) must be >= 64\n", static_cast<long>(tokens));
    return 2;
  }
  std::mt19937_64 rng(2026);
  std::printf("razorkv %d.%d.%d demo: one layer, %ld query heads, %ld kv heads (GQA group %ld), head_dim %ld, %ld tokens, bfloat16\n\n",
              RAZORKV_VERSION_MAJOR, RAZORKV_VERSION_MINOR, RAZORKV_VERSION_PATCH, static_cast<long>(kQueryHeads),
              static_cast<long>(kKvHeads), static_cast<long>(kQueryHeads / kKvHeads), static_cast<long>(kHeadDim),
              static_cast<long>(tokens));
  const auto cache = synthetic_layer(tokens, rng);
  // Queries look like recent keys of their kv head (what makes local heads local).
  std::vector<float> queries(static_cast<std::size_t>(kQueryHeads * kHeadDim));
  std::normal_distribution<float> normal;
  for (index_t qh = 0; qh < kQueryHeads; ++qh) {
    const auto keys = cache.keys(0).head(qh / (kQueryHeads / kKvHeads));
    for (index_t c = 0; c < kHeadDim; ++c) {
      queries[static_cast<std::size_t>(qh * kHeadDim + c)] = 0.3f * static_cast<float>(keys(tokens - 1, c)) + normal(rng);
    }
  }

  // 1. Exact decode over the dense cache, checked against the double-precision reference.
  std::vector<float> full = decode(cache, queries);
  const std::vector<double> reference = razorkv::reference::decode_attention(
      cache, 0, razorkv::matrix_view<const float>(queries.data(), kQueryHeads, kHeadDim));
  double worst = 0;
  for (std::size_t i = 0; i < full.size(); ++i) worst = std::max(worst, std::fabs(full[i] - reference[i]));
  std::vector<double> times;
  for (int rep = 0; rep < 25; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    full = decode(cache, queries);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  std::printf("dense decode: %.3f ms per token (median of %zu), reads %.1f MB of K/V at %.1f GB/s; "
              "max |error| vs double reference %.2e\n\n",
              median * 1e3, times.size(), static_cast<double>(cache.size_bytes()) / 1e6,
              static_cast<double>(cache.size_bytes()) / median / 1e9, worst);

  // 2. The same kernel over a windowed view of the cache: 4 sinks + last N/5 tokens, with the
  // dropped middle folded into one mean token, weighted by its count (RazorAttention),
  // unweighted, or left out (StreamingLLM-like).
  const index_t sinks = 4, window = std::max<index_t>(16, tokens / 5);
  std::printf("non-retrieval head view: %ld sinks + 1 compensation token + %ld recent tokens = %ld of %ld entries (%.1f%%)\n",
              static_cast<long>(sinks), static_cast<long>(window), static_cast<long>(sinks + 1 + window),
              static_cast<long>(tokens), 100.0 * static_cast<double>(sinks + 1 + window) / static_cast<double>(tokens));
  struct variant {
    const char* name;
    windowed_view::compensation mode;
  };
  for (const variant& v : {variant{"weighted (ln count)", windowed_view::compensation::kWeighted},
                           variant{"unweighted mean", windowed_view::compensation::kUnweighted},
                           variant{"none (dropped)", windowed_view::compensation::kNone}}) {
    const windowed_view view(cache, sinks, window, v.mode);
    std::printf("  compensation %-20s relative L2 error of the attention output vs full: %.4f\n", v.name,
                relative_l2(decode(view, queries), full));
  }
  std::printf("\nWhich heads keep their full cache is decided offline: see razorkv_calibrate_synthetic and the razorkv CLI.\n");
  return 0;
}
