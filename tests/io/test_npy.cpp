// Tests of the strict .npy reader and writer: round trips, every supported dtype, and named
// errors for bad magic, versions, headers, dtypes, orders, sizes and overflowing shapes.
#include <gtest/gtest.h>

#include <razorkv/io/npy.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "support/expect_error.hpp"

namespace {

using razorkv::index_t;

// A v1.0 file with the given header dict and raw data.
std::string npy(const std::string& dict, const std::string& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string file("\x93NUMPY\x01\x00", 8);
  file += static_cast<char>(header.size() & 0xff);
  file += static_cast<char>(header.size() >> 8);
  return file + header + data;
}

template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

TEST(RazorkvNpy, RoundTripsFloatAndInt64) {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 5.0f, 6.0f};
  const auto a = razorkv::io::parse_npy(razorkv::io::format_npy(values, {2, 3}));
  EXPECT_EQ(a.dtype, razorkv::io::npy_dtype::kFloat32);
  EXPECT_EQ(a.shape, (std::vector<index_t>{2, 3}));
  EXPECT_EQ(a.to<float>(), values);
  const std::vector<std::int64_t> ids = {7, 8, 9, 10, 11};
  const auto b = razorkv::io::parse_npy(razorkv::io::format_npy(ids, {5}));
  EXPECT_EQ(b.shape, (std::vector<index_t>{5}));
  EXPECT_EQ(b.to<std::int64_t>(), ids);
}

TEST(RazorkvNpy, ReadsHalfBfloatAndInt32) {
  const std::vector<Eigen::half> h = {Eigen::half(1.0f), Eigen::half(-0.5f)};
  const auto a = razorkv::io::parse_npy(
      npy("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", raw(h)));
  EXPECT_EQ(a.to<float>(), (std::vector<float>{1.0f, -0.5f}));
  const std::vector<Eigen::bfloat16> b = {Eigen::bfloat16(2.0f), Eigen::bfloat16(0.25f),
                                          Eigen::bfloat16(-8.0f)};
  const auto c = razorkv::io::parse_npy(
      npy("{'shape': (1, 3), 'fortran_order': False, 'descr': '<u2'}", raw(b)));
  EXPECT_EQ(c.dtype, razorkv::io::npy_dtype::kBFloat16);
  EXPECT_EQ(c.to<float>(), (std::vector<float>{2.0f, 0.25f, -8.0f}));
  const std::vector<std::int32_t> i = {1, -2};
  EXPECT_EQ(razorkv::io::parse_npy(
                npy("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", raw(i)))
                .to<std::int64_t>(),
            (std::vector<std::int64_t>{1, -2}));
  // A scalar has shape () and one element.
  EXPECT_EQ(razorkv::io::parse_npy(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
                                       raw(std::vector<float>{4.0f})))
                .size(),
            1);
}

// The header alone: dtype and shape without reading (or needing) the data, so that a tool checks
// many large dumps before it reads one; the header is checked as strictly as by read_npy.
TEST(RazorkvNpy, HeaderOnlyReadsTheShapeNotTheData) {
  const std::string path = ::testing::TempDir() + "razorkv_npy_header.npy";
  const std::string file = razorkv::io::format_npy(std::vector<float>(24, 1.0f), {2, 3, 4});
  const auto write = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  };
  write(file.substr(0, file.size() - 8));  // data cut short
  const auto header = razorkv::io::read_npy_header(path);
  EXPECT_EQ(header.dtype, razorkv::io::npy_dtype::kFloat32);
  EXPECT_EQ(header.shape, (std::vector<razorkv::index_t>{2, 3, 4}));
  EXPECT_TRUE(header.bytes.empty());
  RAZORKV_EXPECT_ERROR(razorkv::io::read_npy(path), kParseError, "needs 96 data bytes");
  write(file.substr(0, 20));  // the header cut short
  RAZORKV_EXPECT_ERROR(razorkv::io::read_npy_header(path), kParseError, "header length");
  RAZORKV_EXPECT_ERROR(razorkv::io::read_npy_header(path + ".missing"), kInvalidArgument,
                       "cannot open");
}

// np.save writes float64 unless told otherwise: read at full precision, narrowed on request.
TEST(RazorkvNpy, Float64IsReadAsWritten) {
  const std::vector<double> values = {0.1, -1e300, 3.0};
  std::string data(values.size() * sizeof(double), '\0');
  std::memcpy(data.data(), values.data(), data.size());
  const auto a = razorkv::io::parse_npy(
      npy("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", data));
  EXPECT_EQ(a.dtype, razorkv::io::npy_dtype::kFloat64);
  EXPECT_EQ(a.to<double>(), values);
  // Narrowed like NumPy's cast: rounded, and beyond float's range an infinity.
  EXPECT_EQ(a.to<float>(),
            (std::vector<float>{0.1f, -std::numeric_limits<float>::infinity(), 3.0f}));
  EXPECT_EQ(static_cast<float>(a.to<Eigen::half>()[1]), -std::numeric_limits<float>::infinity());
  RAZORKV_EXPECT_ERROR(a.to<std::int64_t>(), kInvalidArgument,
                       "element 1 (-1e+300) is not representable as a 64-bit integer");
}

TEST(RazorkvNpy, FloatsReadAsIntegersMustFit) {
  const std::vector<float> values = {1.0f, -3.0f, std::numeric_limits<float>::infinity(), 5e9f};
  const auto a = razorkv::io::parse_npy(razorkv::io::format_npy(values, {4}));
  EXPECT_EQ(a.to<float>()[2], std::numeric_limits<float>::infinity());
  RAZORKV_EXPECT_ERROR(a.to<std::int64_t>(), kInvalidArgument,
                       "element 2 (inf) is not representable as a 64-bit integer");
  RAZORKV_EXPECT_ERROR(a.to<std::int32_t>(), kInvalidArgument,
                       "is not representable as a 32-bit integer");
  const auto fits =
      razorkv::io::parse_npy(razorkv::io::format_npy(std::vector<float>{1.0f, -3.0f}, {2}));
  EXPECT_EQ(fits.to<std::int64_t>(), (std::vector<std::int64_t>{1, -3}));
}

TEST(RazorkvNpy, MalformedFilesAreNamedErrors) {
  using razorkv::io::parse_npy;
  const std::string four = raw(std::vector<float>{1, 2, 3, 4});
  RAZORKV_EXPECT_ERROR(parse_npy("PK\x03\x04 not numpy"), kParseError, "bad magic");
  std::string v9 = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", four);
  v9[6] = 9;
  RAZORKV_EXPECT_ERROR(parse_npy(v9), kParseError, "unsupported format version 9");
  RAZORKV_EXPECT_ERROR(
      parse_npy(npy("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", four)),
      kParseError, "unsupported dtype '>f4'");
  RAZORKV_EXPECT_ERROR(
      parse_npy(npy("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", four)),
      kParseError, "unsupported dtype '<c8'");
  RAZORKV_EXPECT_ERROR(
      parse_npy(npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", four)),
      kParseError, "fortran_order");
  RAZORKV_EXPECT_ERROR(
      parse_npy(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", four)),
      kParseError, "needs 20 data bytes, the file has 16");
  RAZORKV_EXPECT_ERROR(
      parse_npy(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", four)),
      kParseError, "needs 12 data bytes");
  RAZORKV_EXPECT_ERROR(parse_npy(npy("{'descr': '<f4', 'fortran_order': False}", four)),
                       kParseError, "must have 'descr', 'fortran_order' and 'shape'");
  RAZORKV_EXPECT_ERROR(
      parse_npy(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", four)),
      kParseError, "unknown header key 'x'");
  RAZORKV_EXPECT_ERROR(
      parse_npy(npy("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (4,)}", four)), kParseError,
      "expected True or False");
  RAZORKV_EXPECT_ERROR(
      parse_npy(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,)}", four)), kParseError,
      "bad shape dimension");
  RAZORKV_EXPECT_ERROR(
      parse_npy(npy(
          "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}",
          four)),
      kOverflow, "overflows");
  std::string truncated = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", four);
  RAZORKV_EXPECT_ERROR(parse_npy(truncated.substr(0, 40)), kParseError,
                       "runs past the end of the file");
  RAZORKV_EXPECT_ERROR(razorkv::io::read_npy("/nonexistent.npy"), kInvalidArgument,
                       "cannot open \"/nonexistent.npy\"");
}

}  // namespace
