// Tests of the compensation token's column sums: the vectorised kernel against the scalar
// reference over awkward dims, row counts, strides and dtypes (bit-identical: same order, same
// double additions), and independence from how the rows are split into calls. Built header-only
// and against razorkv::kernels, whose suite ctest runs once per instruction set.
#include <gtest/gtest.h>

#include <razorkv/compress/column_sums.hpp>
#include <razorkv/compress/razor_cache.hpp>

#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using razorkv::index_t;
using razorkv::matrix_view;

template <class T>
class RazorkvColumnSums : public ::testing::Test {};
TYPED_TEST_SUITE(RazorkvColumnSums, razorkv_test::storage_dtypes);

TYPED_TEST(RazorkvColumnSums, KernelMatchesReferenceBitForBit) {
  using T = TypeParam;
  std::mt19937_64 rng(11);
  for (index_t dim : {1, 3, 7, 8, 16, 17, 64, 128, 255, 256, 300, 520}) {
    for (index_t rows : {0, 1, 3, 16, 17, 40}) {
      for (index_t padding : {0, 5}) {
        const index_t stride = dim + padding;
        std::vector<T> data = razorkv_test::random_values<T>(
            static_cast<std::size_t>(std::max<index_t>(rows, 1) * stride), rng, 3.0);
        // Padding is NaN: the kernel must never read it.
        for (index_t r = 0; r < rows; ++r)
          for (index_t c = dim; c < stride; ++c)
            data[static_cast<std::size_t>(r * stride + c)] =
                T(std::numeric_limits<float>::quiet_NaN());
        const matrix_view<const T> view =
            rows == 0 ? matrix_view<const T>(nullptr, 0, dim)
                      : matrix_view<const T>(data.data(), rows, dim, stride);
        std::vector<double> fast(static_cast<std::size_t>(dim), 0.5), slow(fast);
        razorkv::detail::add_rows_to_sums(view, fast.data());
        razorkv::reference::add_rows_to_sums(view, slow.data());
        for (index_t c = 0; c < dim; ++c) {
          ASSERT_EQ(fast[static_cast<std::size_t>(c)], slow[static_cast<std::size_t>(c)])
              << "dim " << dim << " rows " << rows << " padding " << padding << " column " << c;
        }
      }
    }
  }
}

TYPED_TEST(RazorkvColumnSums, SplittingRowsIntoCallsGivesTheSameBits) {
  using T = TypeParam;
  std::mt19937_64 rng(12);
  const index_t dim = 37, rows = 101;
  const std::vector<T> data =
      razorkv_test::random_values<T>(static_cast<std::size_t>(rows * dim), rng);
  const matrix_view<const T> all(data.data(), rows, dim);
  std::vector<double> at_once(static_cast<std::size_t>(dim), 0.0), one_by_one(at_once),
      in_chunks(at_once);
  razorkv::detail::add_rows_to_sums(all, at_once.data());
  for (index_t r = 0; r < rows; ++r)
    razorkv::detail::add_rows_to_sums(all.middle_rows(r, 1), one_by_one.data());
  for (index_t r = 0; r < rows; r += 13) {
    razorkv::detail::add_rows_to_sums(all.middle_rows(r, std::min<index_t>(13, rows - r)),
                                      in_chunks.data());
  }
  EXPECT_EQ(at_once, one_by_one);
  EXPECT_EQ(at_once, in_chunks);
}

TYPED_TEST(RazorkvColumnSums, MeanIsRoundedFromTheDoubleSums) {
  using T = TypeParam;
  const std::vector<double> sums = {3.0, -7.5, 1e-3};
  std::vector<T> mean(3);
  razorkv::detail::store_mean(sums.data(), 3, 3, mean.data());
  EXPECT_EQ(razorkv::detail::to_double(mean[0]), razorkv::detail::to_double(T(1.0f)));
  EXPECT_EQ(razorkv::detail::to_double(mean[1]), razorkv::detail::to_double(T(-2.5f)));
  EXPECT_NEAR(razorkv::detail::to_double(mean[2]), 1e-3 / 3.0, 1e-3 / 3.0 * 4e-3);
}

// Run by ctest with RAZORKV_KERNEL_ISA=avx9 (razorkv_kernels_unknown_isa): compression and a
// bounded append, which fold rows with the column-sum kernel, name the variable and change nothing.
TEST(RazorkvCompressKernels, UnknownKernelSetIsANamedError) {
  const char* wanted = std::getenv("RAZORKV_KERNEL_ISA");
  if (wanted == nullptr || std::string(wanted) != "avx9")
    GTEST_SKIP() << "RAZORKV_KERNEL_ISA is not avx9";
  const index_t tokens = 40, dim = 8;
  std::mt19937_64 rng(13);
  const std::vector<float> keys =
      razorkv_test::random_values<float>(static_cast<std::size_t>(tokens * dim), rng);
  const auto prefill = razorkv::layer_view<const float>::nhd(keys.data(), tokens, 1, dim);
  const auto plan = std::make_shared<razorkv::head_plan>(razorkv::model_shape{1, 1, 1, dim});
  razorkv::razor_config config;
  config.sinks = 2;
  config.s0 = 4;
  config.c = 10.0;
  razorkv::razor_kv_cache<float> cache(plan, config);
  RAZORKV_EXPECT_ERROR(cache.compress_layer(0, prefill, prefill), kInvalidArgument,
                       "RAZORKV_KERNEL_ISA (avx9)");
  EXPECT_FALSE(cache.is_compressed(0));
  std::vector<double> sums(static_cast<std::size_t>(dim), 0.0);
  RAZORKV_EXPECT_ERROR(razorkv::detail::add_rows_to_sums(prefill.head(0), sums.data()),
                       kInvalidArgument, "RAZORKV_KERNEL_ISA (avx9)");
  EXPECT_EQ(sums, std::vector<double>(static_cast<std::size_t>(dim), 0.0));
}

}  // namespace
