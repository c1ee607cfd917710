// The README's engine (the block marked readme_engine, spliced in by scripts/doc_snippets.py),
// run on the trained model's plan (4 layers, 4 query heads, 2 kv heads of dim 32) over random
// K/V: it must compress, and decode as the reference does over the same cache.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <razorkv/attention/reference.hpp>
#include <razorkv/io/plan_files.hpp>
#include <razorkv/razorkv.hpp>

#include "docs/doc_data.hpp"

int main() {
  const std::string plan_file = RAZORKV_SOURCE_DIR "/examples/engine/model/plan.json";
  const razorkv::index_t layers = 4, query_heads = 4, kv_heads = 2, dim = 32, tokens = 2048;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  const auto random = [&](razorkv::index_t n) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (float& e : x) e = normal(rng);
    return x;
  };
  std::vector<std::vector<float>> storage;
  doc::per_layer<const float*> k, v, k_new, v_new, q;
  doc::per_layer<float*> out;
  std::vector<std::vector<float>> outputs(static_cast<std::size_t>(layers),
                                          std::vector<float>(query_heads * dim));
  for (razorkv::index_t l = 0; l < layers; ++l) {
    for (auto* list : {&k, &v}) {
      storage.push_back(random(tokens * kv_heads * dim));
      list->push_back(storage.back().data());
    }
    for (auto* list : {&k_new, &v_new}) {
      storage.push_back(random(kv_heads * dim));
      list->push_back(storage.back().data());
    }
    storage.push_back(random(query_heads * dim));
    q.push_back(storage.back().data());
    out.push_back(outputs[static_cast<std::size_t>(l)].data());
  }

  // @snippet

  if (cache.dropped_tokens() == 0 || cache.compression_ratio() >= 0.5) {
    std::fprintf(stderr, "the cache kept %.3f of the bytes\n", cache.compression_ratio());
    return 1;
  }
  double worst = 0;
  for (razorkv::index_t layer = 0; layer < layers; ++layer) {
    const std::vector<double> want = razorkv::reference::decode_attention(
        cache, layer, razorkv::matrix_view<const float>(q[layer], query_heads, dim));
    for (std::size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::abs(want[i] - static_cast<double>(out[layer][i])));
    }
  }
  std::printf("%lld of %lld kv groups kept whole; %.3f of the bytes; max |error| %.2g\n",
              static_cast<long long>(plan.num_retrieval()),
              static_cast<long long>(layers * kv_heads), cache.compression_ratio(), worst);
  return worst < 1e-5 ? 0 : 1;
}
