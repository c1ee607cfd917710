// Scoring benchmarks: the streaming scorer on the default probe (L = 10,001) for one layer of
// 32 query heads / 8 kv heads / head dim 128, next to an Eigen SGEMM of the same shape. Both
// report FLOP/s counted as the dense scorer's work, 2 * L * L * head_dim per query head.
#include <benchmark/benchmark.h>

#include <razorkv/eval.hpp>

#include <sys/resource.h>

#include <memory>
#include <vector>

namespace {

using razorkv::index_t;

constexpr index_t kQueryHeads = 32, kKvHeads = 8, kHeadDim = 128;

const razorkv::probe& default_probe() {
  static const razorkv::probe probe = [] {
    razorkv::probe_config c;
    c.max_id = 128000;
    c.bos_id = 1;
    c.seed = 1;
    return razorkv::probe(c);
  }();
  return probe;
}

// A planted layer (4 echo, 4 induction, the rest local / sink / uniform) in float.
const razorkv::planted_layer& planted() {
  static const razorkv::planted_layer layer = [] {
    razorkv::planted_layer_config config;
    config.num_kv_heads = kKvHeads;
    config.head_dim = kHeadDim;
    const razorkv::head_kind kinds[] = {
        razorkv::head_kind::kEcho,  razorkv::head_kind::kInduction,
        razorkv::head_kind::kLocal, razorkv::head_kind::kSink,
        razorkv::head_kind::kLocal, razorkv::head_kind::kPreviousToken,
        razorkv::head_kind::kLocal, razorkv::head_kind::kUniform};
    for (index_t h = 0; h < kQueryHeads; ++h)
      config.query_heads.push_back({{{kinds[h % 8], 10.0}}, 0.1});
    return razorkv::make_planted_layer(default_probe(), config);
  }();
  return layer;
}

template <class T>
std::vector<T> narrowed(const std::vector<float>& x) {
  return std::vector<T>(x.begin(), x.end());
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

double dense_flops() {
  const double length = static_cast<double>(default_probe().length());
  return 2.0 * length * length * static_cast<double>(kHeadDim) * static_cast<double>(kQueryHeads);
}

template <class T>
void BM_Scoring_Streaming(benchmark::State& state) {
  const auto& layer = planted();
  const std::vector<T> queries = narrowed<T>(layer.queries), keys = narrowed<T>(layer.keys);
  const index_t length = layer.length;
  const auto q = razorkv::layer_view<const T>::nhd(queries.data(), length, kQueryHeads, kHeadDim);
  const auto k = razorkv::layer_view<const T>::nhd(keys.data(), length, kKvHeads, kHeadDim);
  const double rss_before = peak_rss_mib();
  for (auto _ : state) {
    auto scores = razorkv::score_from_queries_keys(default_probe(), q, k);
    benchmark::DoNotOptimize(scores.echo.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      dense_flops() * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  // High-water mark the scorer added on top of its inputs (valid when run in its own process).
  state.counters["peak_extra_MiB"] = peak_rss_mib() - rss_before;
}

// Baseline: Eigen SGEMM of the same shape (L x d times d x L per query head), in 512-row
// slabs so that the output fits in memory; the FLOP count is the same as above.
void BM_Scoring_EigenSgemm(benchmark::State& state) {
  const auto& layer = planted();
  const index_t length = layer.length, slab = 512;
  using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  matrix q = matrix::Random(length, kHeadDim), k = matrix::Random(length, kHeadDim),
         out(slab, length);
  for (auto _ : state) {
    for (index_t head = 0; head < kQueryHeads; ++head) {
      for (index_t first = 0; first < length; first += slab) {
        const index_t rows = std::min(slab, length - first);
        out.topRows(rows).noalias() = q.middleRows(first, rows) * k.transpose();
      }
      benchmark::DoNotOptimize(out.data());
    }
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      dense_flops() * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_Scoring_EigenSgemm)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1);
BENCHMARK_TEMPLATE(BM_Scoring_Streaming, float)
    ->Unit(benchmark::kSecond)
    ->UseRealTime()
    ->Iterations(1);
BENCHMARK_TEMPLATE(BM_Scoring_Streaming, Eigen::bfloat16)
    ->Unit(benchmark::kSecond)
    ->UseRealTime()
    ->Iterations(1);
