// Tests of the ALiBi branch: standard slopes (powers of two and not), spans, and plans by
// sequence length or by ratio, with buffer overrides for the short-span heads.
#include <gtest/gtest.h>

#include <razorkv/select/alibi.hpp>

#include <cmath>

#include "support/expect_error.hpp"

namespace {

TEST(RazorkvAlibi, StandardSlopes) {
  const auto eight = razorkv::alibi_slopes(8);
  ASSERT_EQ(eight.size(), 8u);
  for (int i = 0; i < 8; ++i)
    EXPECT_DOUBLE_EQ(eight[static_cast<std::size_t>(i)], std::pow(2.0, -(i + 1)));
  // 12 heads: the 8 slopes of 8, then slopes 1, 3, 5, 7 (0-based 0, 2, 4, 6) of 16.
  const auto twelve = razorkv::alibi_slopes(12);
  ASSERT_EQ(twelve.size(), 12u);
  for (int i = 0; i < 8; ++i)
    EXPECT_DOUBLE_EQ(twelve[static_cast<std::size_t>(i)], eight[static_cast<std::size_t>(i)]);
  for (int i = 0; i < 4; ++i)
    EXPECT_DOUBLE_EQ(twelve[static_cast<std::size_t>(8 + i)], std::pow(2.0, -0.5 * (2 * i + 1)));
  EXPECT_EQ(razorkv::alibi_slopes(1), std::vector<double>{1.0 / 256.0});
  RAZORKV_EXPECT_ERROR(razorkv::alibi_slopes(0), kInvalidArgument, "num_heads (0)");
}

TEST(RazorkvAlibi, SpansAndPlans) {
  EXPECT_DOUBLE_EQ(razorkv::alibi_span(0.5, 2.0, 1e-3), (4.0 - std::log(1e-3)) / 0.5);
  EXPECT_DOUBLE_EQ(razorkv::alibi_logit_bound(3.0, 2.0, 0.125), 1.5);
  const razorkv::model_shape shape{2, 8, 8, 64};
  const auto slopes = razorkv::alibi_slopes(8);
  razorkv::alibi_selection options;
  options.bound = 1.0;
  options.seq_len =
      2000;  // spans: (2 + 6.9078) / 2^-(i+1) -> head 7 (slope 1/256) is ~2280, head 6 ~1140
  const auto plan = razorkv::select_alibi_heads(shape, slopes, options);
  EXPECT_EQ(plan.retrieval_heads(0), (std::vector<razorkv::index_t>{7}));
  EXPECT_EQ(plan.retrieval_heads(1), (std::vector<razorkv::index_t>{7}));
  EXPECT_EQ(plan.buffer_override(0, 0),
            static_cast<razorkv::index_t>(std::ceil(razorkv::alibi_span(0.5, 1.0))));
  EXPECT_FALSE(plan.buffer_override(0, 7).has_value());
  options.seq_len = 0;
  options.ratio = 0.25;  // 4 of 16 groups: heads 7 and 6 of both layers
  const auto by_ratio = razorkv::select_alibi_heads(shape, slopes, options);
  EXPECT_EQ(by_ratio.retrieval_heads(0), (std::vector<razorkv::index_t>{6, 7}));
  EXPECT_EQ(by_ratio.retrieval_heads(1), (std::vector<razorkv::index_t>{6, 7}));
  // A slope so small that the span exceeds any length (found by fuzzing: the conversion to a
  // token count overflowed): the head keeps everything, its buffer capped at 2^62 tokens.
  std::vector<double> tiny(8, 1e-30);
  tiny[0] = 1.0;
  options.ratio = 0.0;
  const auto capped = razorkv::select_alibi_heads(shape, tiny, options);
  EXPECT_EQ(capped.buffer_override(0, 3), razorkv::index_t{1} << 62);
  RAZORKV_EXPECT_ERROR(razorkv::alibi_span(0.0, 1.0), kInvalidArgument, "slope (0)");
}

// Exactly one of seq_len and ratio decides; every other combination names what it got. (A ratio
// once doubled as the switch, negative meaning "by seq_len", so a NaN ratio selected by seq_len.)
TEST(RazorkvAlibi, SelectionNeedsExactlyOneOfSeqLenAndRatio) {
  const razorkv::model_shape shape{2, 8, 8, 64};
  const auto slopes = razorkv::alibi_slopes(8);
  razorkv::alibi_selection options;
  RAZORKV_EXPECT_ERROR(razorkv::select_alibi_heads(shape, slopes, options), kInvalidArgument,
                       "seq_len (0) must be > 0 unless a ratio is given");
  options.seq_len = -4;
  RAZORKV_EXPECT_ERROR(razorkv::select_alibi_heads(shape, slopes, options), kInvalidArgument,
                       "seq_len (-4) must be > 0");
  options.seq_len = 2000;
  options.ratio = 0.5;
  RAZORKV_EXPECT_ERROR(razorkv::select_alibi_heads(shape, slopes, options), kInvalidArgument,
                       "give seq_len or ratio, not both (seq_len 2000, ratio 0.5)");
  options.seq_len = 0;
  for (const double bad : {-0.5, 1.5, std::nan("")}) {
    options.ratio = bad;
    RAZORKV_EXPECT_ERROR(razorkv::select_alibi_heads(shape, slopes, options), kInvalidArgument,
                         "must be in [0, 1]");
  }
  options.ratio = std::nan("");
  RAZORKV_EXPECT_ERROR(razorkv::select_alibi_heads(shape, slopes, options), kInvalidArgument,
                       "ratio (nan)");
  options.ratio = 1.0;  // every group
  const auto all = razorkv::select_alibi_heads(shape, slopes, options);
  EXPECT_EQ(all.retrieval_heads(1).size(), 8U);
  RAZORKV_EXPECT_ERROR(razorkv::select_alibi_heads(shape, {1.0}, options), kShapeMismatch,
                       "1 slopes for 8 query heads");
}

}  // namespace
