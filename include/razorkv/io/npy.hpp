// razorkv/io/npy.hpp: a small strict reader and writer of NumPy .npy files (C order, little
// endian; float32, float64, float16, bfloat16 stored as uint16, int32, int64) for tensor dumps.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace io {

/// Element types razorkv reads from .npy. bfloat16 has no NumPy dtype: dumps store its bits
/// as uint16 ('<u2'), and the caller says which it means with read_npy's `u2_is_bfloat16`.
enum class npy_dtype { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64 };

inline index_t npy_item_size(npy_dtype d) noexcept {
  return (d == npy_dtype::kInt64 || d == npy_dtype::kFloat64)   ? 8
         : (d == npy_dtype::kFloat32 || d == npy_dtype::kInt32) ? 4
                                                                : 2;
}

/// A parsed array: its dtype, shape and raw little-endian element bytes.
struct npy_array {
  npy_dtype dtype = npy_dtype::kFloat32;
  std::vector<index_t> shape;
  std::vector<unsigned char> bytes;  // [product(shape) * item size]

  index_t size() const noexcept {
    index_t n = 1;
    for (index_t d : shape) n *= d;
    return n;
  }

  /// The elements converted to T (float, double, Eigen::half, Eigen::bfloat16, int32, int64).
  /// Floating values read as integers must be finite and in range (kInvalidArgument otherwise).
  template <class T>
  std::vector<T> to() const {
    const index_t n = size();
    std::vector<T> out(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = element<T>(i);
    return out;
  }

 private:
  template <class Stored>
  Stored load(index_t i) const noexcept {
    Stored v;
    std::memcpy(static_cast<void*>(&v), bytes.data() + i * static_cast<index_t>(sizeof(Stored)),
                sizeof(Stored));
    return v;
  }
  // A floating value as T; for an integer T it must be finite and in T's range (a cast of
  // anything else is undefined behaviour), else the error names the element.
  template <class T>
  T from_floating(double x, index_t i) const {
    if constexpr (std::is_integral_v<T>) {
      // 2^63 and 2^31 are exact in double; the range is [-2^(bits-1), 2^(bits-1)).
      const double limit = std::ldexp(1.0, std::numeric_limits<T>::digits);
      RAZORKV_CHECK(std::isfinite(x) && x >= -limit && x < limit, kInvalidArgument,
                    "npy_array::to: element ", i, " (", x, ") is not representable as a ",
                    sizeof(T) * 8, "-bit integer");
      return static_cast<T>(x);
    } else if constexpr (std::is_same_v<T, double>) {
      return x;
    } else {
      // A double beyond float's range becomes an infinity, as NumPy's cast makes it (a plain
      // cast would be undefined behaviour); half and bfloat16 round from that float.
      constexpr double kMax = std::numeric_limits<float>::max();
      constexpr float kInf = std::numeric_limits<float>::infinity();
      const float narrowed = x > kMax ? kInf : x < -kMax ? -kInf : static_cast<float>(x);
      return static_cast<T>(narrowed);
    }
  }
  template <class T>
  T element(index_t i) const {
    switch (dtype) {
      case npy_dtype::kFloat32:
        return from_floating<T>(load<float>(i), i);
      case npy_dtype::kFloat64:  // what np.save writes by default
        return from_floating<T>(load<double>(i), i);
      case npy_dtype::kFloat16:
        return from_floating<T>(static_cast<float>(load<Eigen::half>(i)), i);
      case npy_dtype::kBFloat16:
        return from_floating<T>(static_cast<float>(load<Eigen::bfloat16>(i)), i);
      case npy_dtype::kInt32:
        return static_cast<T>(load<std::int32_t>(i));
      case npy_dtype::kInt64:
        return static_cast<T>(load<std::int64_t>(i));
    }
    return T{};
  }
};

namespace detail {

// A cursor over the header dict, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class npy_header_parser {
 public:
  explicit npy_header_parser(const std::string& text) : text_(text) {}

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n')) ++pos_;
  }
  bool consume(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c, const char* what) {
    RAZORKV_CHECK(consume(c), kParseError, "read_npy: header: expected '", c, "' ", what,
                  " at offset ", pos_, " in ", text_);
  }
  std::string quoted() {
    expect('\'', "to open a string");
    const std::size_t end = text_.find('\'', pos_);
    RAZORKV_CHECK(end != std::string::npos, kParseError,
                  "read_npy: header: unterminated string in ", text_);
    std::string s = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  bool boolean() {
    skip_space();
    for (const char* word : {"True", "False"}) {
      const std::size_t n = std::strlen(word);
      if (text_.compare(pos_, n, word) == 0) {
        pos_ += n;
        return word[0] == 'T';
      }
    }
    RAZORKV_CHECK(false, kParseError, "read_npy: header: expected True or False at offset ", pos_,
                  " in ", text_);
    return false;
  }
  std::vector<index_t> tuple() {
    expect('(', "to open the shape");
    std::vector<index_t> dims;
    while (!consume(')')) {
      skip_space();
      index_t value = 0;
      std::size_t digits = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        RAZORKV_CHECK(digits < 18, kOverflow, "read_npy: header: shape dimension too large in ",
                      text_);
        value = value * 10 + (text_[pos_++] - '0');
        ++digits;
      }
      RAZORKV_CHECK(digits > 0, kParseError, "read_npy: header: bad shape dimension at offset ",
                    pos_, " in ", text_);
      dims.push_back(value);
      if (!consume(',')) {
        expect(')', "to close the shape");
        break;
      }
    }
    return dims;
  }
  bool at_end() {
    skip_space();
    return pos_ == text_.size();
  }

 private:
  const std::string& text_;
  std::size_t pos_ = 0;
};

// parse_npy, or with header_only the header alone (file may end where the header does): the
// array's dtype and shape, no bytes.
inline npy_array parse_npy(const std::string& file, bool u2_is_bfloat16, bool header_only) {
  static const char kMagic[] = "\x93NUMPY";
  RAZORKV_CHECK(file.size() >= 10 && file.compare(0, 6, kMagic, 6) == 0, kParseError,
                "read_npy: not a .npy file (bad magic)");
  const unsigned major = static_cast<unsigned char>(file[6]);
  RAZORKV_CHECK(major >= 1 && major <= 3, kParseError, "read_npy: unsupported format version ",
                major, ".", static_cast<unsigned>(static_cast<unsigned char>(file[7])));
  std::size_t header_length = 0, header_start = 0;
  if (major == 1) {
    header_length = static_cast<unsigned char>(file[8]) |
                    (static_cast<std::size_t>(static_cast<unsigned char>(file[9])) << 8);
    header_start = 10;
  } else {
    RAZORKV_CHECK(file.size() >= 12, kParseError, "read_npy: truncated header");
    for (std::size_t b = 0; b < 4; ++b) {
      header_length |= static_cast<std::size_t>(static_cast<unsigned char>(file[8 + b])) << (8 * b);
    }
    header_start = 12;
  }
  RAZORKV_CHECK(header_length <= file.size() - header_start, kParseError,
                "read_npy: header length ", header_length, " runs past the end of the file (",
                file.size(), " bytes)");
  const std::string header = file.substr(header_start, header_length);

  detail::npy_header_parser p(header);
  std::string descr;
  bool fortran = false, have_descr = false, have_order = false, have_shape = false;
  std::vector<index_t> shape;
  p.expect('{', "to open the header dict");
  while (!p.consume('}')) {
    const std::string key = p.quoted();
    p.expect(':', "after a key");
    if (key == "descr") {
      descr = p.quoted();
      have_descr = true;
    } else if (key == "fortran_order") {
      fortran = p.boolean();
      have_order = true;
    } else if (key == "shape") {
      shape = p.tuple();
      have_shape = true;
    } else {
      RAZORKV_CHECK(false, kParseError, "read_npy: unknown header key '", key, "'");
    }
    if (!p.consume(',')) {
      p.expect('}', "to close the header dict");
      break;
    }
  }
  RAZORKV_CHECK(p.at_end(), kParseError,
                "read_npy: trailing characters after the header dict: ", header);
  RAZORKV_CHECK(have_descr && have_order && have_shape, kParseError,
                "read_npy: header must have 'descr', 'fortran_order' and 'shape': ", header);
  RAZORKV_CHECK(!fortran, kParseError,
                "read_npy: fortran_order arrays are not supported (need C order)");

  npy_array array;
  if (descr == "<f4")
    array.dtype = npy_dtype::kFloat32;
  else if (descr == "<f8")
    array.dtype = npy_dtype::kFloat64;
  else if (descr == "<f2")
    array.dtype = npy_dtype::kFloat16;
  else if (descr == "<u2" && u2_is_bfloat16)
    array.dtype = npy_dtype::kBFloat16;
  else if (descr == "<i4")
    array.dtype = npy_dtype::kInt32;
  else if (descr == "<i8")
    array.dtype = npy_dtype::kInt64;
  else
    RAZORKV_CHECK(false, kParseError, "read_npy: unsupported dtype '", descr,
                  "' (float32 '<f4', float64 '<f8', float16 '<f2', bfloat16 as '<u2', int32 '<i4', "
                  "int64 '<i8'; "
                  "little endian)");
  array.shape = shape;
  index_t count = 1;
  for (index_t d : shape) count = ::razorkv::detail::checked_mul(count, d, "read_npy: shape");
  const index_t bytes =
      ::razorkv::detail::checked_mul(count, npy_item_size(array.dtype), "read_npy: data size");
  if (header_only) return array;
  const std::size_t data_start = header_start + header_length;
  RAZORKV_CHECK(static_cast<std::size_t>(bytes) == file.size() - data_start, kParseError,
                "read_npy: shape ", header, " needs ", bytes, " data bytes, the file has ",
                file.size() - data_start);
  array.bytes.assign(file.begin() + static_cast<std::ptrdiff_t>(data_start), file.end());
  return array;
}

}  // namespace detail

/// Parses a whole .npy file held in memory; every header field is checked, and the data must
/// have exactly the size the shape and dtype say.
inline npy_array parse_npy(const std::string& file, bool u2_is_bfloat16 = true) {
  return detail::parse_npy(file, u2_is_bfloat16, /*header_only=*/false);
}

/// Reads and parses a .npy file; errors name the path.
inline npy_array read_npy(const std::string& path, bool u2_is_bfloat16 = true) {
  std::ifstream in(path, std::ios::binary);
  RAZORKV_CHECK(in.good(), kInvalidArgument, "read_npy: cannot open \"", path, "\"");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return parse_npy(bytes.str(), u2_is_bfloat16);
}

/// The dtype and shape of a .npy file (bytes left empty), reading only its header: what a tool
/// checks of many large files before it reads any of them. Errors name the path.
inline npy_array read_npy_header(const std::string& path, bool u2_is_bfloat16 = true) {
  std::ifstream in(path, std::ios::binary);
  RAZORKV_CHECK(in.good(), kInvalidArgument, "read_npy: cannot open \"", path, "\"");
  std::string prefix(12, '\0');
  in.read(prefix.data(), 12);
  prefix.resize(static_cast<std::size_t>(in.gcount()));
  if (prefix.size() >= 10) {  // else parse_npy names what is wrong
    const bool v1 = static_cast<unsigned char>(prefix[6]) == 1;
    std::size_t length = 0;
    for (std::size_t b = 0; b < (v1 ? 2u : 4u) && 8 + b < prefix.size(); ++b)
      length |= static_cast<std::size_t>(static_cast<unsigned char>(prefix[8 + b])) << (8 * b);
    const std::size_t start = v1 ? 10 : 12;
    std::string rest(std::min<std::size_t>(length, std::size_t{1} << 20), '\0');
    in.seekg(static_cast<std::streamoff>(start));
    in.read(rest.data(), static_cast<std::streamsize>(rest.size()));
    rest.resize(static_cast<std::size_t>(in.gcount()));
    prefix = prefix.substr(0, start) + rest;
  }
  return detail::parse_npy(prefix, u2_is_bfloat16, /*header_only=*/true);
}

/// A version 1.0 .npy file of `values` (float -> '<f4', int64 -> '<i8', int32 -> '<i4') with
/// the given C-order shape.
template <class T>
std::string format_npy(const std::vector<T>& values, const std::vector<index_t>& shape) {
  const char* descr = std::is_same_v<T, float>          ? "<f4"
                      : std::is_same_v<T, std::int64_t> ? "<i8"
                                                        : "<i4";
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, std::int64_t> ||
                    std::is_same_v<T, std::int32_t>,
                "razorkv::io::format_npy writes float, int32 or int64");
  index_t count = 1;
  std::string dims;  // "2, 3", or "5," for one dimension (a Python 1-tuple)
  for (std::size_t i = 0; i < shape.size(); ++i) {
    count *= shape[i];
    dims += (i ? ", " : "") + std::to_string(shape[i]);
  }
  if (shape.size() == 1) dims += ",";
  RAZORKV_CHECK(count == static_cast<index_t>(values.size()), kShapeMismatch,
                "format_npy: shape holds ", count, " elements, values has ", values.size());
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string file("\x93NUMPY\x01\x00", 8);
  file += static_cast<char>(header.size() & 0xff);
  file += static_cast<char>((header.size() >> 8) & 0xff);
  file += header;
  file.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  return file;
}

}  // namespace io
RAZORKV_END_NAMESPACE
