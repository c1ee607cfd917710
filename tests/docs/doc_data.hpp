// tests/docs/doc_data.hpp: what the wrappers of the documentation's code blocks give them: K/V,
// queries and plans of a small model, filled with seeded random values.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <razorkv/razorkv.hpp>

namespace doc {

using razorkv::index_t;

template <class T = float>
std::vector<T> random(index_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<T> x(static_cast<std::size_t>(n));
  for (T& e : x) e = T(normal(rng));
  return x;
}

// One pointer per layer, indexed by layer as an engine would.
template <class P>
struct per_layer {
  std::vector<P> pointers;
  P operator[](index_t layer) const { return pointers[static_cast<std::size_t>(layer)]; }
  void push_back(P p) { pointers.push_back(p); }
};

// layers x kv_heads groups, the first kv head of every other layer a retrieval head.
inline razorkv::head_plan plan(index_t layers, index_t query_heads, index_t kv_heads, index_t dim) {
  razorkv::head_plan p(razorkv::model_shape{layers, query_heads, kv_heads, dim});
  for (index_t l = 0; l < layers; l += 2) p.set_retrieval(l, 0, true);
  return p;
}

// Throws unless every value is finite: the wrappers' check that a block computed something.
inline void expect_finite(const std::vector<float>& values, const char* what) {
  for (float x : values) {
    if (!std::isfinite(x)) throw std::runtime_error(std::string(what) + ": a non-finite output");
  }
}

}  // namespace doc
