// Tests of the strict safetensors reader: every float dtype, metadata, and a named error for
// each way a file can be malformed (sizes, JSON, dtypes, shapes, offsets that overlap or leave
// gaps).
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <razorkv/io/safetensors.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/expect_error.hpp"

namespace {

using razorkv::index_t;
using razorkv::io::safetensors_file;

// A file with the given JSON header and data section (the header size written little-endian).
std::string file_of(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

template <class T>
std::string raw(const std::vector<T>& v) {
  std::string out(v.size() * sizeof(T), '\0');
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::string two_tensor_file() {
  const std::string header = R"({"__metadata__":{"config":"{\"d\":2}"},)"
                             R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"F16","shape":[3],"data_offsets":[16,22]}})";
  const std::vector<Eigen::half> b = {Eigen::half(0.5f), Eigen::half(-1.25f), Eigen::half(2048.0f)};
  return file_of(header, raw(std::vector<float>{1, 2, 3, 4}) + raw(b));
}

TEST(RazorkvSafetensors, ReadsTensorsAndMetadata) {
  const safetensors_file f = safetensors_file::parse(two_tensor_file());
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.metadata().at("config"), "{\"d\":2}");
  EXPECT_EQ(f.to_float("a", {2, 2}), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(f.to_float("b", {3}), (std::vector<float>{0.5f, -1.25f, 2048.0f}));
  EXPECT_EQ(f.tensor("b").begin, 16);
  EXPECT_EQ(f.tensor("b").end, 22);
}

TEST(RazorkvSafetensors, ConvertsBFloat16AndFloat64) {
  const std::vector<Eigen::bfloat16> b = {Eigen::bfloat16(3.0f), Eigen::bfloat16(-0.5f)};
  const std::string header = R"({"x":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
                             R"("y":{"dtype":"F64","shape":[1,1],"data_offsets":[4,12]}})";
  const safetensors_file f =
      safetensors_file::parse(file_of(header, raw(b) + raw(std::vector<double>{0.125})));
  EXPECT_EQ(f.to_float("x", {2}), (std::vector<float>{3.0f, -0.5f}));
  EXPECT_EQ(f.to_float("y", {1, 1}), (std::vector<float>{0.125f}));
  EXPECT_TRUE(f.metadata().empty());
}

TEST(RazorkvSafetensors, AcceptsAnEmptyTensorAndAPaddedHeader) {
  const std::string header = R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]}}    )";
  const safetensors_file f = safetensors_file::parse(file_of(header, ""));
  EXPECT_TRUE(f.to_float("e", {0, 4}).empty());
}

TEST(RazorkvSafetensors, RejectsWrongLookups) {
  const safetensors_file f = safetensors_file::parse(two_tensor_file());
  RAZORKV_EXPECT_ERROR(f.tensor("c"), kOutOfRange, "no tensor named \"c\"");
  RAZORKV_EXPECT_ERROR(f.to_float("a", {4}), kShapeMismatch, "has shape [2, 2], expected [4]");
  RAZORKV_EXPECT_ERROR(safetensors_file::read("/nonexistent/model.safetensors"), kInvalidArgument,
                       "cannot open \"/nonexistent/model.safetensors\"");
}

TEST(RazorkvSafetensors, RejectsBadSizes) {
  RAZORKV_EXPECT_ERROR(safetensors_file::parse("abc"), kParseError,
                       "shorter than the 8-byte header size");
  std::string huge(8, '\xff');
  RAZORKV_EXPECT_ERROR(safetensors_file::parse(huge + "{}"), kParseError,
                       "header size (18446744073709551615)");
  std::string past = file_of("{}", "");
  past[0] = 40;
  RAZORKV_EXPECT_ERROR(safetensors_file::parse(past), kParseError, "runs past the end of the file");
}

TEST(RazorkvSafetensors, RejectsBadHeaders) {
  const auto bad = [](const std::string& header, const std::string& data = "") {
    return safetensors_file::parse(file_of(header, data));
  };
  RAZORKV_EXPECT_ERROR(bad("[1, 2]"), kParseError, "must start with '{'");
  RAZORKV_EXPECT_ERROR(bad("{\"a\": "), kParseError, "not valid JSON");
  RAZORKV_EXPECT_ERROR(bad(R"({"__metadata__":{"k":1}})"), kParseError,
                       "metadata \"k\" must be a string");
  RAZORKV_EXPECT_ERROR(bad(R"({"a":{"dtype":"F32","shape":[1]}})", "abcd"), kParseError,
                       "tensor \"a\" must be an object of exactly");
  RAZORKV_EXPECT_ERROR(
      bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", "abcd"), kParseError,
      "must be an object of exactly");
  RAZORKV_EXPECT_ERROR(bad(R"({"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", "abcd"),
                       kParseError, "dtype \"I32\" is not one razorkv reads");
  RAZORKV_EXPECT_ERROR(bad(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd"),
                       kParseError, "shape entry -1 is not a non-negative 64-bit integer");
  RAZORKV_EXPECT_ERROR(bad(R"({"a":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", "abcd"),
                       kParseError, "shape must be an array");
  RAZORKV_EXPECT_ERROR(bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4]}})", "abcd"),
                       kParseError, "data_offsets must be two unsigned integers");
  RAZORKV_EXPECT_ERROR(bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "abcd"),
                       kParseError, "data_offsets [4, 0] outside the data section of 4 bytes");
  RAZORKV_EXPECT_ERROR(bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", "abcd"),
                       kParseError, "outside the data section");
  RAZORKV_EXPECT_ERROR(bad(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd"),
                       kParseError, "shape [2] holds 8 bytes, its data_offsets span 4");
}

TEST(RazorkvSafetensors, RejectsOverlapsGapsAndTrailingBytes) {
  const auto bad = [](const std::string& header, const std::string& data) {
    return safetensors_file::parse(file_of(header, data));
  };
  const std::string eight(8, 'x');
  RAZORKV_EXPECT_ERROR(bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"F16","shape":[2],"data_offsets":[2,6]}})",
                           eight),
                       kParseError, "inside the tensor before it");
  RAZORKV_EXPECT_ERROR(bad(R"({"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},)"
                           R"("b":{"dtype":"F16","shape":[1],"data_offsets":[4,6]}})",
                           eight),
                       kParseError, "after a gap");
  RAZORKV_EXPECT_ERROR(bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
                       kParseError, "the tensors cover 4 bytes of a data section of 8");
  // A duplicate key: JSON keeps one of the two, and the bytes of the other are a hole.
  RAZORKV_EXPECT_ERROR(bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           eight),
                       kParseError, "tensor \"a\" starts at byte 4, after a gap");
}

}  // namespace
