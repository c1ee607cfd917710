// tests/support/expect_error.hpp: EXPECT that a call throws razorkv::error with a given code
// and a message that contains a given text (the parameter and its value).
#pragma once

#include <gtest/gtest.h>

#include <razorkv/error.hpp>

#include <string>

#define RAZORKV_EXPECT_ERROR(statement, expected_code, needle)                        \
  do {                                                                                \
    try {                                                                             \
      statement;                                                                      \
      ADD_FAILURE() << "expected razorkv::error mentioning '" << (needle) << "'";     \
    } catch (const ::razorkv::error& e_) {                                            \
      EXPECT_EQ(e_.code(), ::razorkv::errc::expected_code) << e_.what();              \
      EXPECT_NE(std::string(e_.what()).find(needle), std::string::npos) << e_.what(); \
    }                                                                                 \
  } while (0)
