// razorkv/io/safetensors.hpp: a small strict reader of safetensors files (an 8-byte header size,
// a JSON header, raw little-endian tensors), for engines that load model weights beside razorkv.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include "razorkv/config.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace io {

/// Element types of a safetensors tensor that razorkv converts to floating point.
enum class safetensors_dtype { kFloat64, kFloat32, kFloat16, kBFloat16 };

/// Bytes of one element.
inline index_t safetensors_item_size(safetensors_dtype d) noexcept {
  return d == safetensors_dtype::kFloat64 ? 8 : d == safetensors_dtype::kFloat32 ? 4 : 2;
}

/// One tensor of the file: its dtype, shape and where its bytes lie in the data section.
struct safetensors_tensor {
  safetensors_dtype dtype = safetensors_dtype::kFloat32;
  std::vector<index_t> shape;
  index_t begin = 0;  ///< offset of the first byte in the data section
  index_t end = 0;    ///< one past the last byte

  index_t size() const noexcept {
    index_t n = 1;
    for (index_t d : shape) n *= d;
    return n;
  }
};

/// A parsed safetensors file held in memory. Every check happens at parse time: a header that is
/// not a JSON object of tensors, an unknown dtype, a shape whose byte size is not its offsets'
/// span, offsets that overlap, leave holes or run past the file; each a razorkv::error
/// (kParseError) naming the tensor and the value.
class safetensors_file {
 public:
  /// Parses the whole file's bytes.
  static safetensors_file parse(std::string bytes);
  /// Reads and parses the file at `path` (kInvalidArgument when it cannot be opened).
  static safetensors_file read(const std::string& path);

  /// The tensors' names, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : tensors_) out.push_back(entry.first);
    return out;
  }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  /// The tensor `name` (kOutOfRange when the file has none of that name).
  const safetensors_tensor& tensor(const std::string& name) const;
  /// The string-to-string "__metadata__" entries (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }

  /// The elements of `name` converted to float, checking that its shape is `expected_shape`
  /// (kShapeMismatch naming both otherwise).
  std::vector<float> to_float(const std::string& name,
                              const std::vector<index_t>& expected_shape) const;

 private:
  std::string bytes_;
  std::size_t data_start_ = 0;
  std::map<std::string, safetensors_tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

namespace detail {

inline safetensors_dtype parse_safetensors_dtype(const std::string& code, const std::string& name) {
  if (code == "F64") return safetensors_dtype::kFloat64;
  if (code == "F32") return safetensors_dtype::kFloat32;
  if (code == "F16") return safetensors_dtype::kFloat16;
  if (code == "BF16") return safetensors_dtype::kBFloat16;
  RAZORKV_CHECK(false, kParseError, "read_safetensors: tensor \"", name, "\": dtype \"", code,
                "\" is not one razorkv reads (F64, F32, F16, BF16)");
  return safetensors_dtype::kFloat32;
}

inline std::string shape_text(const std::vector<index_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

}  // namespace detail

inline safetensors_file safetensors_file::parse(std::string bytes) {
  constexpr const char* kWhere = "read_safetensors";
  // The header is JSON text; a real one is kilobytes. The cap keeps a corrupt size from asking
  // for gigabytes before anything is checked.
  constexpr std::uint64_t kMaxHeader = std::uint64_t{100} << 20;
  RAZORKV_CHECK(bytes.size() >= 8, kParseError, kWhere, ": file of ", bytes.size(),
                " bytes is shorter than the 8-byte header size");
  std::uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i)
    header_size =
        (header_size << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  RAZORKV_CHECK(header_size >= 2 && header_size <= kMaxHeader, kParseError, kWhere,
                ": header size (", header_size, ") outside [2, ", kMaxHeader, "]");
  RAZORKV_CHECK(header_size <= bytes.size() - 8, kParseError, kWhere, ": header size (",
                header_size, ") runs past the end of the file (", bytes.size(), " bytes)");
  const std::string header_text = bytes.substr(8, static_cast<std::size_t>(header_size));
  RAZORKV_CHECK(header_text[0] == '{', kParseError, kWhere, ": the header must start with '{'");

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_text);
  } catch (const nlohmann::json::exception& e) {
    ::razorkv::detail::raise(errc::kParseError, __FILE__, __LINE__, kWhere,
                             ": header is not valid JSON: ", e.what());
  }
  RAZORKV_CHECK(header.is_object(), kParseError, kWhere, ": the header must be a JSON object");

  safetensors_file file;
  file.data_start_ = 8 + static_cast<std::size_t>(header_size);
  const index_t data_size = static_cast<index_t>(bytes.size() - file.data_start_);
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      RAZORKV_CHECK(entry.is_object(), kParseError, kWhere,
                    ": \"__metadata__\" must be an object of strings");
      for (const auto& [key, value] : entry.items()) {
        RAZORKV_CHECK(value.is_string(), kParseError, kWhere, ": metadata \"", key,
                      "\" must be a string, got ", value.dump());
        file.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    RAZORKV_CHECK(entry.is_object() && entry.size() == 3 && entry.contains("dtype") &&
                      entry.contains("shape") && entry.contains("data_offsets"),
                  kParseError, kWhere, ": tensor \"", name,
                  "\" must be an object of exactly \"dtype\", \"shape\" and \"data_offsets\", got ",
                  entry.dump());
    RAZORKV_CHECK(entry["dtype"].is_string(), kParseError, kWhere, ": tensor \"", name,
                  "\": dtype must be a string");
    safetensors_tensor tensor;
    tensor.dtype = detail::parse_safetensors_dtype(entry["dtype"].get<std::string>(), name);
    const nlohmann::json& shape = entry["shape"];
    RAZORKV_CHECK(shape.is_array(), kParseError, kWhere, ": tensor \"", name,
                  "\": shape must be an array");
    index_t elements = 1;
    for (const nlohmann::json& d : shape) {
      // Each entry must fit index_t; their product is checked for overflow below (a zero
      // entry makes an empty tensor, whatever the others are).
      constexpr auto kMaxEntry = static_cast<std::uint64_t>(std::numeric_limits<index_t>::max());
      RAZORKV_CHECK(d.is_number_unsigned() && d.get<std::uint64_t>() <= kMaxEntry, kParseError,
                    kWhere, ": tensor \"", name, "\": shape entry ", d.dump(),
                    " is not a non-negative 64-bit integer");
      tensor.shape.push_back(static_cast<index_t>(d.get<std::uint64_t>()));
      elements = ::razorkv::detail::checked_mul(elements, tensor.shape.back(),
                                                "read_safetensors: tensor size");
    }
    const nlohmann::json& offsets = entry["data_offsets"];
    RAZORKV_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                      offsets[1].is_number_unsigned(),
                  kParseError, kWhere, ": tensor \"", name,
                  "\": data_offsets must be two unsigned integers, got ", offsets.dump());
    const auto begin = offsets[0].get<std::uint64_t>(), end = offsets[1].get<std::uint64_t>();
    RAZORKV_CHECK(begin <= end && end <= static_cast<std::uint64_t>(data_size), kParseError, kWhere,
                  ": tensor \"", name, "\": data_offsets [", begin, ", ", end,
                  "] outside the data section of ", data_size, " bytes");
    tensor.begin = static_cast<index_t>(begin);
    tensor.end = static_cast<index_t>(end);
    const index_t expected = ::razorkv::detail::checked_mul(
        elements, safetensors_item_size(tensor.dtype), "read_safetensors: tensor bytes");
    RAZORKV_CHECK(expected == tensor.end - tensor.begin, kParseError, kWhere, ": tensor \"", name,
                  "\": shape ", detail::shape_text(tensor.shape), " holds ", expected,
                  " bytes, its data_offsets span ", tensor.end - tensor.begin);
    file.tensors_.emplace(name, std::move(tensor));
  }

  // The tensors must tile the data section: no overlap (two names for one byte), no hole (bytes
  // no tensor owns, e.g. a tensor lost to a duplicate JSON key), nothing after the last one.
  std::vector<std::pair<index_t, const std::string*>> order;
  for (const auto& [name, tensor] : file.tensors_) order.emplace_back(tensor.begin, &name);
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first
                              : file.tensors_.at(*a.second).end < file.tensors_.at(*b.second).end;
  });
  index_t covered = 0;
  for (const auto& [begin, name] : order) {
    RAZORKV_CHECK(begin == covered, kParseError, kWhere, ": tensor \"", *name, "\" starts at byte ",
                  begin, ", ", begin < covered ? "inside the tensor before it" : "after a gap",
                  " (the previous one ends at ", covered, ")");
    covered = file.tensors_.at(*name).end;
  }
  RAZORKV_CHECK(covered == data_size, kParseError, kWhere, ": the tensors cover ", covered,
                " bytes of a data section of ", data_size);
  file.bytes_ = std::move(bytes);
  return file;
}

inline safetensors_file safetensors_file::read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RAZORKV_CHECK(in.good(), kInvalidArgument, "read_safetensors: cannot open \"", path, "\"");
  std::ostringstream content;
  content << in.rdbuf();
  return parse(std::move(content).str());
}

inline const safetensors_tensor& safetensors_file::tensor(const std::string& name) const {
  const auto it = tensors_.find(name);
  RAZORKV_CHECK(it != tensors_.end(), kOutOfRange, "safetensors_file: no tensor named \"", name,
                "\"");
  return it->second;
}

inline std::vector<float> safetensors_file::to_float(
    const std::string& name, const std::vector<index_t>& expected_shape) const {
  const safetensors_tensor& t = tensor(name);
  RAZORKV_CHECK(t.shape == expected_shape, kShapeMismatch, "safetensors_file: tensor \"", name,
                "\" has shape ", detail::shape_text(t.shape), ", expected ",
                detail::shape_text(expected_shape));
  const char* data = bytes_.data() + data_start_ + t.begin;
  // Elements are little-endian (as on every platform razorkv targets) and may be unaligned.
  const auto load = [data](auto zero, index_t i) {
    std::memcpy(static_cast<void*>(&zero), data + i * static_cast<index_t>(sizeof(zero)),
                sizeof(zero));
    return static_cast<float>(zero);
  };
  const index_t n = t.size();
  std::vector<float> out(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) {
    float& x = out[static_cast<std::size_t>(i)];
    switch (t.dtype) {
      case safetensors_dtype::kFloat64:
        x = load(double{}, i);
        break;
      case safetensors_dtype::kFloat32:
        x = load(float{}, i);
        break;
      case safetensors_dtype::kFloat16:
        x = load(Eigen::half{}, i);
        break;
      case safetensors_dtype::kBFloat16:
        x = load(Eigen::bfloat16{}, i);
        break;
    }
  }
  return out;
}

}  // namespace io
RAZORKV_END_NAMESPACE
