// docs/calibration.md's block (calibration_scores), compiled: at the default probe (L = 10,001)
// its probabilities alone would take 1.6 GB. The scorers' arithmetic is tested in tests/scoring/.
#include <cstdint>

#include "docs/doc_data.hpp"

void documented_calibration(std::int64_t vocab_size, std::int64_t bos, doc::index_t num_layers,
                            doc::index_t query_heads, doc::index_t kv_heads, doc::index_t layer,
                            razorkv::layer_view<const float> queries_view,
                            razorkv::layer_view<const Eigen::half> keys_view, const float* probs,
                            doc::index_t L) {
  // @snippet
}

int main() { return 0; }
