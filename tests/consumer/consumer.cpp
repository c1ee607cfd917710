// A minimal engine-side program: fills a dense cache, decodes one token and checks the result
// against the reference. Built by both consumer projects to prove the package works.
#include <razorkv/attention/reference.hpp>
#include <razorkv/razorkv.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  using razorkv::index_t;
  const index_t layers = 2, kv_heads = 2, query_heads = 8, dim = 64, tokens = 100;
  razorkv::dense_kv_cache<float> cache(layers, kv_heads, dim);
  std::vector<float> keys(static_cast<std::size_t>(tokens * kv_heads * dim));
  std::vector<float> values(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    keys[i] = std::sin(0.37f * static_cast<float>(i));
    values[i] = std::cos(0.11f * static_cast<float>(i));
  }
  for (index_t layer = 0; layer < layers; ++layer) {
    cache.append(layer, razorkv::layer_view<const float>::nhd(keys.data(), tokens, kv_heads, dim),
                 razorkv::layer_view<const float>::nhd(values.data(), tokens, kv_heads, dim));
  }
  std::vector<float> queries(static_cast<std::size_t>(query_heads * dim), 0.5f);
  std::vector<float> out(queries.size());
  razorkv::matrix_view<const float> q(queries.data(), query_heads, dim);
  razorkv::decode_attention(cache, 1, q, razorkv::matrix_view<float>(out.data(), query_heads, dim));
  const std::vector<double> expected = razorkv::reference::decode_attention(cache, 1, q);
  double worst = 0.0;
  for (std::size_t i = 0; i < out.size(); ++i)
    worst = std::fmax(worst, std::fabs(out[i] - expected[i]));
#if defined(RAZORKV_SEPARATE_KERNELS) && RAZORKV_SEPARATE_KERNELS
  const char* kernels = "razorkv::kernels";
#else
  const char* kernels = "header-only";
#endif
  const bool ok = worst < 1e-5;
  std::printf("razorkv %d.%d.%d consumer (%s): max |error| = %.3g, %s\n", RAZORKV_VERSION_MAJOR,
              RAZORKV_VERSION_MINOR, RAZORKV_VERSION_PATCH, kernels, worst, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
