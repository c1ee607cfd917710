// Tests of razorkv::error: codes, names and the message format every check produces.
#include <gtest/gtest.h>

#include <razorkv/error.hpp>

#include <string>

namespace {

TEST(RazorkvCore, ErrorCarriesCodeMessageAndLocation) {
  try {
    RAZORKV_CHECK(1 + 1 == 3, kShapeMismatch, "f: x (", 2, ") != y (", 3, ")");
    FAIL() << "RAZORKV_CHECK did not throw";
  } catch (const razorkv::error& e) {
    EXPECT_EQ(e.code(), razorkv::errc::kShapeMismatch);
    EXPECT_STREQ(e.what(), "[razorkv.shape_mismatch] f: x (2) != y (3)");
    EXPECT_NE(std::string(e.file()).find("test_error.cpp"), std::string::npos);
    EXPECT_GT(e.line(), 0);
  }
}

TEST(RazorkvCore, PassingCheckDoesNothing) {
  EXPECT_NO_THROW(RAZORKV_CHECK(true, kInvalidArgument, "never"));
}

TEST(RazorkvCore, EveryCodeHasAName) {
  EXPECT_STREQ(razorkv::errc_name(razorkv::errc::kInvalidArgument), "invalid_argument");
  EXPECT_STREQ(razorkv::errc_name(razorkv::errc::kShapeMismatch), "shape_mismatch");
  EXPECT_STREQ(razorkv::errc_name(razorkv::errc::kOutOfRange), "out_of_range");
  EXPECT_STREQ(razorkv::errc_name(razorkv::errc::kOverflow), "overflow");
  EXPECT_STREQ(razorkv::errc_name(razorkv::errc::kParseError), "parse_error");
}

TEST(RazorkvCore, ErrorIsAStdException) {
  try {
    RAZORKV_CHECK(false, kOverflow, "n (", -1, ")");
    FAIL() << "RAZORKV_CHECK did not throw";
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(), "[razorkv.overflow] n (-1)");
  }
}

}  // namespace
