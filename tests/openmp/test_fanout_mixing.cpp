// tests/openmp/test_fanout_mixing.cpp: a program whose units are compiled some with OpenMP and some
// without fans out the same way in every unit: the program's fan-out, never one the linker picked.
#include <gtest/gtest.h>

#include "openmp/fanout_unit.hpp"

namespace {

using razorkv_test::fanout_of_plain_unit;

#if defined(RAZORKV_TEST_WITH_OPENMP_UNIT)
using razorkv_test::fanout_of_openmp_unit;

TEST(FanoutMixing, EveryUnitFansOutOverOpenMPWhenOneUnitIsBuiltWithIt) {
  razorkv_test::set_openmp_threads(2);
  const auto plain = fanout_of_plain_unit();
  const auto openmp = fanout_of_openmp_unit();
  EXPECT_TRUE(plain.openmp);
  EXPECT_TRUE(openmp.openmp);
  EXPECT_EQ(plain.threads, 2) << "the plain unit's hook-less call ran on one thread";
  EXPECT_EQ(openmp.threads, 2) << "the OpenMP unit's hook-less call ran on one thread";
}

TEST(FanoutMixing, UnitsDecodeTheSameBits) {
  const auto plain = fanout_of_plain_unit();
  const auto openmp = fanout_of_openmp_unit();
  ASSERT_EQ(plain.out.size(), openmp.out.size());
  EXPECT_EQ(plain.out, openmp.out);
}
#else
TEST(FanoutMixing, WithoutAnOpenMPUnitCallsRunOnTheCallingThread) {
  const auto plain = fanout_of_plain_unit();
  EXPECT_FALSE(plain.openmp);
  EXPECT_EQ(plain.threads, 1);
  EXPECT_EQ(plain.out.size(), 8u * 64u);
}
#endif

}  // namespace
