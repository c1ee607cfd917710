// Tests of the calibration probe: shape, distinct ids, platform-independent determinism, the
// duplicate-tolerant mode, and named errors for bad configs.
#include <gtest/gtest.h>

#include <razorkv/scoring/probe.hpp>

#include <algorithm>
#include <set>
#include <vector>

#include "support/expect_error.hpp"

namespace {

using razorkv::index_t;

razorkv::probe_config config(index_t p, index_t r, std::int64_t vocab, std::uint64_t seed = 1) {
  razorkv::probe_config c;
  c.num_random_tokens = p;
  c.repeats = r;
  c.max_id = vocab;
  c.seed = seed;
  return c;
}

TEST(RazorkvProbe, DefaultShapeIsRepeatedDistinctBlockAfterBos) {
  auto c = config(2500, 4, 32000, 7);
  c.bos_id = 1;
  c.min_id = 100;
  const razorkv::probe probe(c);
  ASSERT_EQ(probe.length(), 10001);
  EXPECT_EQ(probe.tokens()[0], 1);
  std::set<std::int64_t> distinct;
  for (index_t p = 0; p < 2500; ++p) {
    const std::int64_t id = probe.id_at(p);
    EXPECT_GE(id, 100);
    EXPECT_LT(id, 32000);
    distinct.insert(id);
    for (index_t copy = 1; copy < 4; ++copy) ASSERT_EQ(probe.id_at(p + copy * 2500), id);
    ASSERT_EQ(probe.same_id_slots(p), std::vector<index_t>{p});
  }
  EXPECT_EQ(distinct.size(), 2500u);
}

TEST(RazorkvProbe, SameSeedSameIdsOnEveryPlatform) {
  // mt19937_64 is fully specified and the uniform mapping is razorkv's own, so these ids are
  // the same with every standard library; a change here breaks saved calibrations.
  const razorkv::probe probe(config(6, 2, 50000, 42));
  const std::vector<std::int64_t> expected = {20406, 44824, 41450, 5662, 39381, 28428};
  EXPECT_EQ(std::vector<std::int64_t>(probe.tokens().begin(), probe.tokens().begin() + 6),
            expected);
  EXPECT_EQ(razorkv::probe(config(6, 2, 50000, 42)).tokens(), probe.tokens());
  EXPECT_NE(razorkv::probe(config(6, 2, 50000, 43)).tokens(), probe.tokens());
}

TEST(RazorkvProbe, DuplicateModeRecordsEveryOccurrence) {
  auto c = config(12, 3, 3, 5);  // 12 draws from 3 ids: duplicates are certain
  c.allow_duplicates = true;
  const razorkv::probe probe(c);
  for (index_t s = 0; s < 12; ++s) {
    std::vector<index_t> same;
    for (index_t t = 0; t < 12; ++t) {
      if (probe.id_at(t) == probe.id_at(s)) same.push_back(t);
    }
    EXPECT_EQ(probe.same_id_slots(s), same);
    EXPECT_GT(same.size(), 1u);
  }
}

TEST(RazorkvProbe, RebuiltFromItsTokens) {
  auto c = config(12, 3, 3, 5);
  c.allow_duplicates = true;
  c.bos_id = 2;
  const razorkv::probe original(c);
  const razorkv::probe rebuilt(original.tokens(), 12, 3, true);
  for (index_t s = 0; s < 12; ++s) EXPECT_EQ(rebuilt.same_id_slots(s), original.same_id_slots(s));
  std::vector<std::int64_t> broken = original.tokens();
  broken[1 + 12 + 5] += 1;
  RAZORKV_EXPECT_ERROR(razorkv::probe(broken, 12, 3, true), kInvalidArgument,
                       "position 17 holds id");
  RAZORKV_EXPECT_ERROR(razorkv::probe(original.tokens(), 12, 3, false), kShapeMismatch,
                       "37 tokens given, expected 12 x 3 = 36");
}

TEST(RazorkvProbe, BadConfigsAreNamedErrors) {
  RAZORKV_EXPECT_ERROR(razorkv::probe(config(0, 4, 100)), kInvalidArgument,
                       "num_random_tokens (0)");
  RAZORKV_EXPECT_ERROR(razorkv::probe(config(10, 1, 100)), kInvalidArgument,
                       "repeats (1) must be >= 2");
  RAZORKV_EXPECT_ERROR(razorkv::probe(config(10, 4, 0)), kInvalidArgument,
                       "id range [0, 0) is empty");
  RAZORKV_EXPECT_ERROR(razorkv::probe(config(10, 4, 5)), kInvalidArgument,
                       "holds 5 ids, fewer than num_random_tokens (10)");
  auto tight = config(10, 4, 10);
  tight.bos_id = 3;  // inside the range: one id fewer to draw from
  RAZORKV_EXPECT_ERROR(razorkv::probe{tight}, kInvalidArgument,
                       "id range [0, 10) holds 9 ids besides bos_id, fewer than num_random_tokens");
  auto only_bos = config(4, 2, 1);
  only_bos.allow_duplicates = true;
  only_bos.bos_id = 0;
  RAZORKV_EXPECT_ERROR(razorkv::probe{only_bos}, kInvalidArgument, "holds 0 ids besides bos_id");
}

// A BOS id inside the id range is never drawn: a copy of it among the random tokens would be an
// earlier copy of them, read as echo or induction. Outside the range nothing changes.
TEST(RazorkvProbe, TheRandomTokensNeverDrawTheBosId) {
  for (const bool duplicates : {false, true}) {
    auto c = config(60, 2, 64, 11);  // 60 of 63 ids: the BOS would be drawn almost surely
    c.allow_duplicates = duplicates;
    c.bos_id = 17;
    const razorkv::probe probe(c);
    EXPECT_EQ(probe.tokens().front(), 17);
    EXPECT_EQ(std::count(probe.tokens().begin(), probe.tokens().end(), 17), 1);
  }
  auto outside = config(6, 2, 50000, 42);
  outside.bos_id = 50000;
  const razorkv::probe after_bos(outside);
  const std::vector<std::int64_t> expected = {20406, 44824, 41450, 5662, 39381, 28428};
  EXPECT_EQ(
      std::vector<std::int64_t>(after_bos.tokens().begin() + 1, after_bos.tokens().begin() + 7),
      expected);
}

}  // namespace
