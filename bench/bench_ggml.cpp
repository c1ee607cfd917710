// The bar razorkv's decode is held to: ggml's CPU flash attention (ggml_flash_attn_ext, the kernel
// llama.cpp decodes with), run on the very K/V memory BM_Decode_Razorkv reads, same shapes.
// Built into razorkv_bench only when RAZORKV_GGML_SOURCE_DIR names ggml's sources; see
// bench/fetch_ggml.sh (llama.cpp's ggml, as llama-cpp-python vendors it).
#include <benchmark/benchmark.h>

#include <razorkv/razorkv.hpp>

#include "bench_support.hpp"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ggml-cpu.h>
#include <ggml.h>

namespace {

using razorkv::index_t;
using namespace razorkv_bench;

template <class T>
constexpr ggml_type ggml_type_of() {
  if constexpr (std::is_same_v<T, float>) return GGML_TYPE_F32;
  if constexpr (std::is_same_v<T, Eigen::half>) return GGML_TYPE_F16;
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) return GGML_TYPE_BF16;
}

// A head's keys or values as ggml sees them: its first byte, rows, bytes from row to row.
struct head_memory {
  const std::uint8_t* data;
  index_t rows, row_bytes;
};

template <class T>
head_memory head_of(const razorkv::kv_rows<T>& rows) {
  if (rows.is_quantised()) {
    const razorkv::quantised_rows& q = rows.quantised();
    return {q.data, q.rows, q.stride};
  }
  const razorkv::matrix_view<const T>& typed = rows.typed();
  return {reinterpret_cast<const std::uint8_t*>(typed.data()), typed.rows(),
          typed.row_stride() * static_cast<index_t>(sizeof(T))};
}

// ggml's [head_dim, tokens, kv_heads] view of the cache's keys or values, over the cache's own
// memory (no copy, so both kernels read the same pages; razorkv's q8 and q4 blocks are ggml's
// Q8_0 and Q4_0 byte for byte). Null when the heads are not one equally strided block, which
// ggml's tensors need.
template <class T>
ggml_tensor* wrap_cache(ggml_context* ctx, const razorkv::dense_kv_cache<T>& cache, bool keys) {
  const auto head = [&](index_t h) {
    const razorkv::kv_span<T> span = cache.span(0, h, 0);
    return head_of(keys ? span.keys : span.values);
  };
  const head_memory first = head(0);
  const index_t head_stride = kKvHeads > 1 ? head(1).data - first.data : 0;
  for (index_t h = 0; h < kKvHeads; ++h) {
    if (cache.num_spans(0, h) != 1 || head(h).data != first.data + h * head_stride ||
        head(h).row_bytes != first.row_bytes)
      return nullptr;
  }
  const std::optional<razorkv::row_format> format =
      keys ? cache.storage().keys : cache.storage().values;
  const ggml_type type = !format                               ? ggml_type_of<T>()
                         : *format == razorkv::row_format::kQ8 ? GGML_TYPE_Q8_0
                                                               : GGML_TYPE_Q4_0;
  ggml_tensor* t = ggml_new_tensor_3d(ctx, type, kHeadDim, first.rows, kKvHeads);
  t->nb[1] = static_cast<std::size_t>(first.row_bytes);
  t->nb[2] = static_cast<std::size_t>(head_stride);
  t->nb[3] = t->nb[2] * kKvHeads;
  t->data = const_cast<std::uint8_t*>(first.data);
  return t;
}

// ggml's decode of one token over the layer: q [head_dim, 1, query_heads] in float, K and V
// the cache's, no mask (a decoded token sees the whole cache), scale 1/sqrt(head_dim); on ggml's
// own thread pool, with as many threads as razorkv's cases use (OMP_NUM_THREADS). The first
// iteration's output is checked against razorkv's decode of the same queries, so that the two
// figures time the same attention.
// With a row format, the layer's rows are all in its blocks (ggml's Q8_0 or Q4_0).
template <class T>
void time_ggml_decode(benchmark::State& state, std::optional<razorkv::row_format> format) {
  const index_t tokens = state.range(0), group = state.range(1);
  const index_t query_heads = kKvHeads * group;
  const auto& cache = layer_cache<T>(tokens, format);
  std::vector<float> queries = make_queries(query_heads);

  ggml_init_params params{};
  params.mem_size = 16 * ggml_tensor_overhead() + ggml_graph_overhead();
  params.no_alloc = true;
  ggml_context* ctx = ggml_init(params);
  ggml_tensor* k = wrap_cache(ctx, cache, true);
  ggml_tensor* v = wrap_cache(ctx, cache, false);
  if (k == nullptr || v == nullptr) {
    ggml_free(ctx);
    state.SkipWithError("the cache's heads are not one strided block");
    return;
  }
  ggml_tensor* q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, kHeadDim, 1, query_heads);
  q->data = queries.data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  ggml_tensor* attention = ggml_flash_attn_ext(ctx, q, k, v, nullptr, scale, 0.0f, 0.0f);
  if (!ggml_prec_set_acc(attention, GGML_PREC_F32)) {
    ggml_free(ctx);
    state.SkipWithError("ggml does not accumulate its flash attention in float");
    return;
  }
  std::vector<float> out(static_cast<std::size_t>(query_heads * kHeadDim));
  attention->data = out.data();
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, attention);

  ggml_threadpool_params pool_params = ggml_threadpool_params_default(threads());
  ggml_threadpool* pool = ggml_threadpool_new(&pool_params);
  ggml_cplan plan = ggml_graph_plan(graph, threads(), pool);
  std::vector<std::uint8_t> work(plan.work_size);
  plan.work_data = work.data();

  // The same attention through razorkv: the largest difference, relative to the largest output.
  ggml_graph_compute(graph, &plan);
  std::vector<float> expected(out.size());
  razorkv::decode_attention(
      cache, 0, razorkv::matrix_view<const float>(queries.data(), query_heads, kHeadDim),
      razorkv::matrix_view<float>(expected.data(), query_heads, kHeadDim));
  float largest = 0.0f, difference = 0.0f;
  for (std::size_t i = 0; i < out.size(); ++i) {
    largest = std::max(largest, std::abs(expected[i]));
    difference = std::max(difference, std::abs(out[i] - expected[i]));
  }
  // ggml rounds the queries to the cache's 16-bit type before its dot products, and sums half
  // values in half (its VKQ16 accumulator): measured 5e-4 of the largest output in bfloat16 and up
  // to 4e-2 in half. A wrong layout or head mapping is off by the whole output.
  // With Q8_0 or Q4_0 keys it rounds the queries to Q8_0 blocks too.
  const float tolerance = format                           ? 1e-1f
                          : std::is_same_v<T, float>       ? 1e-4f
                          : std::is_same_v<T, Eigen::half> ? 1e-1f
                                                           : 1e-2f;
  if (!(difference <= tolerance * largest)) {
    state.SkipWithError(("ggml's output differs from razorkv's by " + std::to_string(difference) +
                         " (largest output " + std::to_string(largest) + ")")
                            .c_str());
  } else {
    for (auto _ : state) {
      ggml_graph_compute(graph, &plan);
      benchmark::DoNotOptimize(out.data());
      benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * cache.kv_bytes());
    state.counters["threads"] = threads();
    state.counters["relative_difference"] = difference / largest;
  }
  ggml_threadpool_free(pool);
  ggml_free(ctx);
}

template <class T>
void BM_Decode_Ggml(benchmark::State& state) {
  time_ggml_decode<T>(state, std::nullopt);
}

// ggml's flash attention over llama.cpp's own q8_0 and q4_0 caches: the memory of
// BM_Decode_Razorkv_Quantised's layer, whose blocks are ggml's.
template <razorkv::row_format F>
void BM_Decode_Ggml_Quantised(benchmark::State& state) {
  time_ggml_decode<Eigen::half>(state, F);
}

BENCHMARK_TEMPLATE(BM_Decode_Ggml, float)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Ggml, Eigen::half)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Ggml, Eigen::bfloat16)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Ggml_Quantised, razorkv::row_format::kQ8)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode_Ggml_Quantised, razorkv::row_format::kQ4)->Apply(decode_shapes);

}  // namespace
