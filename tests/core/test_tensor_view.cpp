// Tests of matrix_view and layer_view: NHD, HND and padded layouts read in place, for every
// storage dtype, and the errors for malformed extents.
#include <gtest/gtest.h>

#include <razorkv/core/eigen.hpp>
#include <razorkv/core/tensor_view.hpp>

#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::layer_view;
using razorkv::matrix_view;

// A value that identifies (token, head, dim) and is exact in every dtype (< 256).
float tag(index_t t, index_t h, index_t d) { return static_cast<float>((t * 7 + h * 3 + d) % 251); }

template <class T>
class RazorkvViews : public ::testing::Test {};
TYPED_TEST_SUITE(RazorkvViews, razorkv_test::storage_dtypes);

TYPED_TEST(RazorkvViews, NhdWithPaddedTokenStrideReadsInPlace) {
  using T = TypeParam;
  const index_t tokens = 5, heads = 3, dim = 4, token_stride = heads * dim + 2;
  std::vector<T> buffer(static_cast<std::size_t>(tokens * token_stride), T(-1.0f));
  for (index_t t = 0; t < tokens; ++t)
    for (index_t h = 0; h < heads; ++h)
      for (index_t d = 0; d < dim; ++d)
        buffer[static_cast<std::size_t>(t * token_stride + h * dim + d)] = T(tag(t, h, d));

  const auto view = layer_view<const T>::nhd(buffer.data(), tokens, heads, dim, token_stride);
  for (index_t h = 0; h < heads; ++h) {
    const matrix_view<const T> head = view.head(h);
    ASSERT_EQ(head.rows(), tokens);
    ASSERT_EQ(head.cols(), dim);
    EXPECT_EQ(head.row_stride(), token_stride);
    for (index_t t = 0; t < tokens; ++t) {
      for (index_t d = 0; d < dim; ++d) {
        EXPECT_EQ(&head(t, d), buffer.data() + t * token_stride + h * dim + d)
            << "a view must not copy";
        EXPECT_EQ(static_cast<float>(head(t, d)), tag(t, h, d));
      }
    }
  }
  const matrix_view<const T> token = view.token(2);
  EXPECT_EQ(token.rows(), heads);
  EXPECT_EQ(&token(1, 3), buffer.data() + 2 * token_stride + 1 * dim + 3);
}

TYPED_TEST(RazorkvViews, HndWithCapacityReadsInPlace) {
  using T = TypeParam;
  const index_t tokens = 6, heads = 2, dim = 3, capacity = 9;
  std::vector<T> buffer(static_cast<std::size_t>(heads * capacity * dim), T(-1.0f));
  for (index_t h = 0; h < heads; ++h)
    for (index_t t = 0; t < tokens; ++t)
      for (index_t d = 0; d < dim; ++d)
        buffer[static_cast<std::size_t>((h * capacity + t) * dim + d)] = T(tag(t, h, d));

  const auto view = layer_view<const T>::hnd(buffer.data(), tokens, heads, dim, capacity);
  EXPECT_EQ(view.head_stride(), capacity * dim);
  for (index_t h = 0; h < heads; ++h)
    for (index_t t = 0; t < tokens; ++t)
      for (index_t d = 0; d < dim; ++d) {
        EXPECT_EQ(&view.head(h)(t, d), buffer.data() + (h * capacity + t) * dim + d);
        EXPECT_EQ(static_cast<float>(view.token(t)(h, d)), tag(t, h, d));
      }
}

TYPED_TEST(RazorkvViews, MiddleRowsAndConstConversionAlias) {
  using T = TypeParam;
  std::vector<T> buffer(40, T(2.0f));
  matrix_view<T> mutable_view(buffer.data(), 4, 8, 10);
  matrix_view<const T> const_view = mutable_view;
  const auto middle = const_view.middle_rows(1, 2);
  EXPECT_EQ(middle.rows(), 2);
  EXPECT_EQ(middle.data(), buffer.data() + 10);
  mutable_view(2, 7) = T(5.0f);
  EXPECT_EQ(static_cast<float>(middle(1, 7)), 5.0f);
  EXPECT_TRUE(const_view.middle_rows(4, 0).empty());
  EXPECT_THROW(const_view.middle_rows(3, 2), razorkv::error);
}

TEST(RazorkvViews, EigenMapAliasesTheView) {
  std::vector<float> buffer(30);
  std::iota(buffer.begin(), buffer.end(), 0.0f);
  matrix_view<const float> view(buffer.data(), 3, 4, 10);
  const auto map = razorkv::as_eigen(view);
  EXPECT_EQ(map.rows(), 3);
  EXPECT_EQ(map.cols(), 4);
  EXPECT_EQ(map.data(), buffer.data());
  EXPECT_EQ(map.outerStride(), 10);
  EXPECT_EQ(map(1, 2), 12.0f);

  razorkv::row_matrix<float> owned(2, 5);
  owned.setConstant(1.5f);
  const auto owned_view = razorkv::view_of(owned);
  EXPECT_EQ(owned_view.data(), owned.data());
  EXPECT_EQ(owned_view.row_stride(), 5);
}

// Every malformed view is an error whose message names the parameter and the value.
void expect_error(const std::function<void()>& f, razorkv::errc code, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected razorkv::error mentioning '" << needle << "'";
  } catch (const razorkv::error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(RazorkvViews, BadExtentsAreNamedErrors) {
  float x[16] = {};
  using razorkv::errc;
  expect_error([&] { matrix_view<float>(x, -1, 4); }, errc::kInvalidArgument, "rows (-1)");
  expect_error([&] { matrix_view<float>(x, 2, 0); }, errc::kInvalidArgument, "cols (0)");
  expect_error([&] { matrix_view<float>(x, 2, -3); }, errc::kInvalidArgument, "cols (-3)");
  expect_error([&] { matrix_view<float>(nullptr, 2, 4); }, errc::kInvalidArgument,
               "data is null with rows (2)");
  expect_error([&] { matrix_view<float>(x, 2, 4, 3); }, errc::kInvalidArgument, "row_stride (3)");
  expect_error([&] { layer_view<float>::nhd(x, 2, 0, 4); }, errc::kInvalidArgument, "heads (0)");
  expect_error([&] { layer_view<float>::nhd(x, 2, 2, -4); }, errc::kInvalidArgument,
               "head_dim (-4)");
  expect_error([&] { layer_view<float>::nhd(nullptr, 1, 2, 4); }, errc::kInvalidArgument,
               "data is null with tokens (1)");
  expect_error([&] { layer_view<float>::hnd(x, 3, 2, 2, 2); }, errc::kInvalidArgument,
               "token_capacity (2)");
  expect_error([&] { layer_view<float>::nhd(x, 2, 2, 4).head(2); }, errc::kOutOfRange, "head (2)");
  expect_error([&] { layer_view<float>::nhd(x, 2, 2, 4).token(-1); }, errc::kOutOfRange,
               "token (-1)");
  // Extents whose products or last offset do not fit index_t are overflow errors, not views
  // that index past what they claim.
  constexpr razorkv::index_t kHuge = razorkv::index_t{1} << 40;
  expect_error([&] { layer_view<float>::nhd(x, 1, kHuge, kHuge); }, errc::kOverflow,
               "layer_view::nhd: heads * head_dim");
  expect_error([&] { layer_view<float>::hnd(x, 1, 2, kHuge, kHuge); }, errc::kOverflow,
               "layer_view::hnd: token_capacity * head_dim");
  expect_error([&] { layer_view<float>::nhd(x, kHuge, 2, 4, kHuge); }, errc::kOverflow,
               "layer_view: (tokens - 1) * token_stride");
  expect_error([&] { layer_view<float>(x, 2, kHuge, 4, 4, kHuge); }, errc::kOverflow,
               "layer_view: (heads - 1) * head_stride");
  const razorkv::index_t max = std::numeric_limits<razorkv::index_t>::max();
  expect_error([&] { layer_view<float>(x, 2, 1, 8, max - 4, 8); }, errc::kOverflow,
               "layer_view: the last element's offset");
  // Empty views with null data are fine.
  EXPECT_NO_THROW(matrix_view<float>(nullptr, 0, 4));
  EXPECT_NO_THROW(layer_view<float>::nhd(nullptr, 0, 2, 4).head(1));
}

}  // namespace
