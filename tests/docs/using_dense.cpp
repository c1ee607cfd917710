// docs/using.md's first block (using_dense): a dense bfloat16 cache and one decode step.
#include "docs/doc_data.hpp"

int main() {
  const doc::index_t num_layers = 2, kv_heads = 2, query_heads = 8, head_dim = 64, tokens = 300;
  const doc::index_t layer = 1;
  const auto k = doc::random<Eigen::bfloat16>(tokens * kv_heads * head_dim, 1);
  const auto v = doc::random<Eigen::bfloat16>(tokens * kv_heads * head_dim, 2);
  const auto q = doc::random(query_heads * head_dim, 3);
  std::vector<float> out(q.size());
  const Eigen::bfloat16* k_ptr = k.data();
  const Eigen::bfloat16* v_ptr = v.data();
  const float* q_ptr = q.data();
  float* out_ptr = out.data();

  // @snippet

  doc::expect_finite(out, "using_dense");
  return 0;
}
