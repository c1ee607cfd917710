// The SnapKV and H2O caches in every storage dtype: the kept rows are the prompt's, bit for bit,
// and the optimised decode over them agrees with the scalar reference, through decode steps.
#include <gtest/gtest.h>

#include <razorkv/eval.hpp>

#include <vector>

#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;

template <class T>
class RazorkvPolicyCaches : public ::testing::Test {};
TYPED_TEST_SUITE(RazorkvPolicyCaches, razorkv_test::storage_dtypes);

// Every entry of `cache` (layer 0) equals the prompt row at its position, keys and values.
template <class Cache, class T>
void expect_rows_of_positions(const Cache& cache, index_t kv_head,
                              const std::vector<index_t>& positions,
                              const layer_view<const T>& keys, const layer_view<const T>& values) {
  index_t e = 0;
  for (index_t s = 0; s < cache.num_spans(0, kv_head); ++s) {
    const razorkv::kv_span<T> span = cache.span(0, kv_head, s);
    for (index_t r = 0; r < span.length(); ++r, ++e) {
      const index_t p = positions[static_cast<std::size_t>(e)];
      for (index_t c = 0; c < keys.head_dim(); ++c) {
        ASSERT_EQ(razorkv_test::to_double(span.keys(r, c)),
                  razorkv_test::to_double(keys.token(p)(kv_head, c)));
        ASSERT_EQ(razorkv_test::to_double(span.values(r, c)),
                  razorkv_test::to_double(values.token(p)(kv_head, c)));
      }
    }
  }
  EXPECT_EQ(e, static_cast<index_t>(positions.size()));
}

// decode_attention over `cache` against the reference, for the query of token t.
template <class Cache, class T>
void expect_decode_matches_reference(const Cache& cache, const layer_view<const T>& queries,
                                     index_t t) {
  const razorkv::matrix_view<const T> q = queries.token(t);
  std::vector<float> out(static_cast<std::size_t>(q.rows() * q.cols()));
  razorkv::decode_attention(cache, 0, q,
                            razorkv::matrix_view<float>(out.data(), q.rows(), q.cols()));
  const std::vector<double> want = razorkv::reference::decode_attention(cache, 0, q);
  EXPECT_LT(razorkv_test::max_abs_diff(out, want), 1e-4);
}

TYPED_TEST(RazorkvPolicyCaches, KeepThePromptsRowsAndDecodeLikeTheReference) {
  using T = TypeParam;
  const index_t prompt = 203, total = 211, kv_heads = 2, query_heads = 6, dim = 24;  // odd sizes
  std::mt19937_64 rng(21);
  // Padded rows (token stride kv_heads * dim + 5) as an engine's buffers may have.
  const index_t stride = kv_heads * dim + 5, q_stride = query_heads * dim;
  const auto keys_data =
      razorkv_test::random_values<T>(static_cast<std::size_t>(total * stride), rng);
  const auto values_data = razorkv_test::random_values<T>(keys_data.size(), rng);
  const auto queries_data =
      razorkv_test::random_values<T>(static_cast<std::size_t>(total * q_stride), rng);
  const auto keys = layer_view<const T>::nhd(keys_data.data(), total, kv_heads, dim, stride);
  const auto values = layer_view<const T>::nhd(values_data.data(), total, kv_heads, dim, stride);
  const auto queries = layer_view<const T>::nhd(queries_data.data(), total, query_heads, dim);

  razorkv::snapkv_config snap;
  snap.window = 8;
  razorkv::selected_kv_cache<T> snapkv(1, kv_heads, dim);
  razorkv::snapkv_compress_layer(snapkv, 0, queries.middle_tokens(prompt - 8, 8),
                                 keys.middle_tokens(0, prompt), values.middle_tokens(0, prompt), 40,
                                 snap);
  razorkv::h2o_kv_cache<T> h2o(1, kv_heads, dim, 40);
  h2o.compress_layer(
      0, keys.middle_tokens(0, prompt), values.middle_tokens(0, prompt),
      razorkv::observed_attention(queries.middle_tokens(0, prompt), keys.middle_tokens(0, prompt)));
  for (index_t t = prompt; t < total; ++t) {
    snapkv.append(0, keys.middle_tokens(t, 1), values.middle_tokens(t, 1));
    h2o.append(0, keys.middle_tokens(t, 1), values.middle_tokens(t, 1));
    expect_decode_matches_reference(snapkv, queries, t);
    expect_decode_matches_reference(h2o, queries, t);
    h2o.observe(0, queries.middle_tokens(t, 1));
  }
  for (index_t h = 0; h < kv_heads; ++h) {
    EXPECT_EQ(razorkv::num_entries(snapkv, 0, h), 40 + (total - prompt));
    EXPECT_EQ(razorkv::num_entries(h2o, 0, h), 40);
    expect_rows_of_positions(snapkv, h, snapkv.positions(0, h), keys, values);
    expect_rows_of_positions(h2o, h, h2o.positions(0, h), keys, values);
  }
}

}  // namespace
