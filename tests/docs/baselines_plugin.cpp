// docs/baselines.md's plug-in block (baselines_plugin): a policy of one's own beside shipped ones,
// each compressing the same prompt to the same budget.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "docs/doc_data.hpp"

// @snippet

int main() {
  const doc::index_t layers = 2, kv_heads = 2, query_heads = 4, dim = 32, tokens = 300, nq = 32;
  const auto k = doc::random(layers * tokens * kv_heads * dim, 1);
  const auto v = doc::random(layers * tokens * kv_heads * dim, 2);
  const auto q = doc::random(layers * nq * query_heads * dim, 3);
  using view = razorkv::layer_view<const float>;
  std::vector<razorkv::layer_sequence<float>> sequence;
  for (doc::index_t l = 0; l < layers; ++l) {
    sequence.push_back({view::nhd(q.data() + l * nq * query_heads * dim, nq, query_heads, dim),
                        view::nhd(k.data() + l * tokens * kv_heads * dim, tokens, kv_heads, dim),
                        view::nhd(v.data() + l * tokens * kv_heads * dim, tokens, kv_heads, dim)});
  }
  const razorkv::prompt_kv<float> prompt(razorkv::model_shape{layers, query_heads, kv_heads, dim},
                                         sequence);
  const auto half = razorkv::memory_budget::fraction_of_full(0.5);
  for (const razorkv::policy& p : policies) {
    const razorkv::any_kv_cache<float> cache = razorkv::compress_prompt(p, prompt, half);
    const bool full = p.name == "full";
    if (full != (cache.kv_bytes() == 2 * layers * tokens * kv_heads * dim * 4)) return 1;
  }
  return policies.size() == 3 ? 0 : 1;
}
