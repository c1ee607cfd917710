// Tests of which decode kernels run: the set the build chose (at run time, or its flags' one set),
// the set RAZORKV_KERNEL_ISA forces, and the named error for a set no build has.
#include <gtest/gtest.h>

#include <razorkv/attention/decode.hpp>
#include <razorkv/attention/prefill.hpp>
#include <razorkv/cache/dense_cache.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "support/expect_error.hpp"

namespace {

using razorkv::matrix_view;

// ctest runs razorkv::kernels' suite once per kernel set of the build (RAZORKV_KERNEL_ISA); on a
// CPU that cannot run the set asked for, that run is skipped rather than failed.
class requested_kernels_runnable : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* wanted = std::getenv("RAZORKV_KERNEL_ISA");
    if (wanted == nullptr || *wanted == '\0') return;
    try {
      (void)razorkv::kernel_isa();
    } catch (const razorkv::error& e) {
      // Any other error (a name no build has) is for UnknownKernelSetIsANamedError to check.
      if (std::string(e.what()).find("cannot run") != std::string::npos) GTEST_SKIP() << e.what();
    }
  }
};
[[maybe_unused]] ::testing::Environment* const requested_kernels =
    ::testing::AddGlobalTestEnvironment(new requested_kernels_runnable);

// The kernel set decode runs: the one RAZORKV_KERNEL_ISA asks for when it is set (ctest runs the
// razorkv::kernels suite once per set the CPU runs), else the best this build and CPU have.
TEST(RazorkvDecodeKernels, RunTheRequestedInstructionSet) {
  const char* wanted = std::getenv("RAZORKV_KERNEL_ISA");
  const std::string isa = razorkv::kernel_isa();
  if (wanted != nullptr && *wanted != '\0') {
    EXPECT_EQ(isa, wanted);
    return;
  }
  EXPECT_FALSE(isa.empty());
#if defined(RAZORKV_TEST_KERNELS_DISPATCH) && RAZORKV_TEST_KERNELS_DISPATCH
  // Compiled for the baseline or not, razorkv::kernels runs the widest kernels the CPU has, and
  // on an AMD CPU the AVX-512 ones tuned for its cores (where the compiler could tune for them).
  const std::string widest = __builtin_cpu_supports("avx512bw") ? "avx512"
                             : __builtin_cpu_supports("avx2")   ? "avx2"
                                                                : "sse2";
  const bool zen_tuned = RAZORKV_TEST_KERNELS_ZEN && widest == "avx512" && __builtin_cpu_is("amd");
  EXPECT_EQ(isa, zen_tuned ? "avx512_zen" : widest);
#else
  EXPECT_EQ(isa, RAZORKV_DETAIL_ISA_NAME);
#endif
}

// Run by ctest with RAZORKV_KERNEL_ISA=avx9 (razorkv_kernels_unknown_isa): decode, prefill and
// kernel_isa() name the variable, the value and the sets there are.
TEST(RazorkvDecodeKernels, UnknownKernelSetIsANamedError) {
  const char* wanted = std::getenv("RAZORKV_KERNEL_ISA");
  if (wanted == nullptr || std::string(wanted) != "avx9")
    GTEST_SKIP() << "RAZORKV_KERNEL_ISA is not avx9";
  RAZORKV_EXPECT_ERROR(
      (void)razorkv::kernel_isa(), kInvalidArgument,
      "razorkv::kernels: RAZORKV_KERNEL_ISA (avx9) names no kernel set of this build (");
  razorkv::dense_kv_cache<float> cache(1, 1, 8);
  const std::vector<float> row(8, 1.0f);
  cache.append(0, razorkv::layer_view<const float>::nhd(row.data(), 1, 1, 8),
               razorkv::layer_view<const float>::nhd(row.data(), 1, 1, 8));
  std::vector<float> out(8, -1.0f);
  RAZORKV_EXPECT_ERROR(
      razorkv::decode_attention(cache, 0, matrix_view<const float>(row.data(), 1, 8),
                                matrix_view<float>(out.data(), 1, 8)),
      kInvalidArgument, "RAZORKV_KERNEL_ISA (avx9)");
  EXPECT_EQ(out, std::vector<float>(8, -1.0f));  // nothing written
  razorkv::attention_weights weights;            // nor the caller's weights
  weights.reset(2, 1, {5});
  weights.kv_head(0)(1, 4) = 0.5f;
  RAZORKV_EXPECT_ERROR(
      razorkv::decode_attention(cache, 0, matrix_view<const float>(row.data(), 1, 8),
                                matrix_view<float>(out.data(), 1, 8), weights),
      kInvalidArgument, "RAZORKV_KERNEL_ISA (avx9)");
  EXPECT_EQ(weights.tokens(), 2);
  EXPECT_EQ(weights.entries(0), 5);
  EXPECT_EQ(weights.kv_head(0)(1, 4), 0.5f);
  // Prefill, with a chunk long enough for its own tile rather than the decode kernel.
  constexpr razorkv::index_t kChunk = razorkv::kPrefillDecodeVectors + 1;
  const std::vector<float> chunk(8 * kChunk, 1.0f);
  cache.append(0, razorkv::layer_view<const float>::nhd(chunk.data(), kChunk, 1, 8),
               razorkv::layer_view<const float>::nhd(chunk.data(), kChunk, 1, 8));
  std::vector<float> chunk_out(chunk.size(), -1.0f);
  RAZORKV_EXPECT_ERROR(
      razorkv::prefill_attention(cache, 0,
                                 razorkv::layer_view<const float>::nhd(chunk.data(), kChunk, 1, 8),
                                 razorkv::layer_view<float>::nhd(chunk_out.data(), kChunk, 1, 8)),
      kInvalidArgument, "RAZORKV_KERNEL_ISA (avx9)");
  EXPECT_EQ(chunk_out, std::vector<float>(chunk.size(), -1.0f));
}

}  // namespace
