// razorkv/io/gguf.hpp: a strict reader of GGUF files (llama.cpp's model format: typed metadata,
// tensor infos, aligned tensor data) with dequantisation of its common tensor types to float.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "razorkv/config.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"
#include "razorkv/io/plan_files.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace io {

/// The type of a GGUF metadata value, numbered as the format numbers them.
enum class gguf_value_type : std::uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

inline const char* gguf_value_type_name(gguf_value_type t) noexcept {
  switch (t) {
    case gguf_value_type::kUint8:
      return "uint8";
    case gguf_value_type::kInt8:
      return "int8";
    case gguf_value_type::kUint16:
      return "uint16";
    case gguf_value_type::kInt16:
      return "int16";
    case gguf_value_type::kUint32:
      return "uint32";
    case gguf_value_type::kInt32:
      return "int32";
    case gguf_value_type::kFloat32:
      return "float32";
    case gguf_value_type::kBool:
      return "bool";
    case gguf_value_type::kString:
      return "string";
    case gguf_value_type::kArray:
      return "array";
    case gguf_value_type::kUint64:
      return "uint64";
    case gguf_value_type::kInt64:
      return "int64";
    case gguf_value_type::kFloat64:
      return "float64";
  }
  return "unknown";
}

/// One metadata value: a number, a bool, a string or an array of values of one type. Accessors
/// check the type and throw kInvalidArgument naming `key` and both types on a mismatch.
class gguf_value {
 public:
  gguf_value_type type() const noexcept { return type_; }
  /// An array's element type (meaningless for other values).
  gguf_value_type element_type() const noexcept { return element_type_; }

  bool is_integer() const noexcept {
    return type_ != gguf_value_type::kFloat32 && type_ != gguf_value_type::kFloat64 &&
           type_ != gguf_value_type::kBool && type_ != gguf_value_type::kString &&
           type_ != gguf_value_type::kArray;
  }
  /// An integer of any width and signedness, as int64 (a uint64 above its range is an error).
  std::int64_t as_int(const std::string& key) const {
    expect(is_integer(), key, "an integer");
    RAZORKV_CHECK(
        type_ != gguf_value_type::kUint64 || unsigned_ <= static_cast<std::uint64_t>(INT64_MAX),
        kOutOfRange, "gguf: \"", key, "\" (", unsigned_, ") does not fit int64");
    return type_ == gguf_value_type::kUint64 ? static_cast<std::int64_t>(unsigned_) : signed_;
  }
  /// A float32 or float64 (integers are not silently converted).
  double as_float(const std::string& key) const {
    expect(type_ == gguf_value_type::kFloat32 || type_ == gguf_value_type::kFloat64, key,
           "a float");
    return float_;
  }
  bool as_bool(const std::string& key) const {
    expect(type_ == gguf_value_type::kBool, key, "a bool");
    return signed_ != 0;
  }
  const std::string& as_string(const std::string& key) const {
    expect(type_ == gguf_value_type::kString, key, "a string");
    return string_;
  }
  /// An array's elements.
  const std::vector<gguf_value>& as_array(const std::string& key) const {
    expect(type_ == gguf_value_type::kArray, key, "an array");
    return array_;
  }

 private:
  friend class gguf_file;
  void expect(bool ok, const std::string& key, const char* wanted) const {
    RAZORKV_CHECK(ok, kInvalidArgument, "gguf: metadata \"", key, "\" is ",
                  gguf_value_type_name(type_), ", not ", wanted);
  }

  gguf_value_type type_ = gguf_value_type::kUint8;
  gguf_value_type element_type_ = gguf_value_type::kUint8;
  std::uint64_t unsigned_ = 0;  // kUint64's value
  std::int64_t signed_ = 0;     // every other integer type's, and bool's
  double float_ = 0;
  std::string string_;
  std::vector<gguf_value> array_;
};

/// ggml's tensor types that razorkv dequantises, numbered as ggml numbers them. Other types
/// parse (their sizes are known) but to_float rejects them by name.
enum class gguf_tensor_type : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kBF16 = 30,
};

/// Elements per block and bytes per block of ggml type `type`; {0, 0} for a type razorkv does
/// not know. (The K-quants and the rest are listed so that files using them parse.)
struct gguf_type_traits {
  const char* name;
  index_t block_elements, block_bytes;
  bool dequantised;  ///< gguf_file::to_float converts it
};

inline gguf_type_traits gguf_tensor_type_traits(std::uint32_t type) noexcept {
  switch (type) {
    case 0:
      return {"F32", 1, 4, true};
    case 1:
      return {"F16", 1, 2, true};
    case 2:
      return {"Q4_0", 32, 18, true};
    case 3:
      return {"Q4_1", 32, 20, true};
    case 6:
      return {"Q5_0", 32, 22, false};
    case 7:
      return {"Q5_1", 32, 24, false};
    case 8:
      return {"Q8_0", 32, 34, true};
    case 9:
      return {"Q8_1", 32, 36, false};
    case 10:
      return {"Q2_K", 256, 84, false};
    case 11:
      return {"Q3_K", 256, 110, false};
    case 12:
      return {"Q4_K", 256, 144, false};
    case 13:
      return {"Q5_K", 256, 176, false};
    case 14:
      return {"Q6_K", 256, 210, false};
    case 15:
      return {"Q8_K", 256, 292, false};
    case 24:
      return {"I8", 1, 1, false};
    case 25:
      return {"I16", 1, 2, false};
    case 26:
      return {"I32", 1, 4, false};
    case 27:
      return {"I64", 1, 8, false};
    case 28:
      return {"F64", 1, 8, false};
    case 30:
      return {"BF16", 1, 2, true};
    default:
      return {"unknown", 0, 0, false};
  }
}

/// One tensor's info: its name, ggml type, dimensions and where its bytes lie.
struct gguf_tensor {
  std::string name;
  std::uint32_t type = 0;
  /// Dimensions innermost first, as GGUF and ggml store them (ne[0] is the row length): a
  /// PyTorch weight of shape [out, in] has dims {in, out}.
  std::vector<index_t> dims;
  index_t offset = 0;  ///< from the start of the data section, a multiple of the alignment
  index_t bytes = 0;   ///< the tensor's size in the file

  index_t elements() const noexcept {
    index_t n = 1;
    for (index_t d : dims) n *= d;  // checked at parse time
    return n;
  }
  const char* type_name() const noexcept { return gguf_tensor_type_traits(type).name; }
};

/// A parsed GGUF file (version 2 or 3) held in memory. Every check happens at parse time: the
/// magic and version, counts and string lengths against the bytes left, every value type, keys
/// and tensor names unique, at most 4 dimensions each positive, sizes overflow-checked, row
/// lengths whole blocks, the alignment a power of two, each tensor's offset aligned and its bytes
/// inside the data section without overlapping another's; each a razorkv::error (kParseError)
/// naming the field and the value.
class gguf_file {
 public:
  static constexpr index_t kDefaultAlignment = 32;
  /// Nesting of arrays inside arrays that the reader follows (real files use none).
  static constexpr int kMaxArrayDepth = 4;

  /// Parses the whole file's bytes.
  static gguf_file parse(std::string bytes);
  /// Reads and parses the file at `path` (kInvalidArgument when it cannot be opened).
  static gguf_file read(const std::string& path);

  std::uint32_t version() const noexcept { return version_; }
  index_t alignment() const noexcept { return alignment_; }

  /// Metadata, by key (the keys in file order: metadata_keys()).
  const std::map<std::string, gguf_value>& metadata() const noexcept { return metadata_; }
  const std::vector<std::string>& metadata_keys() const noexcept { return keys_; }
  bool contains(const std::string& key) const { return metadata_.count(key) != 0; }
  /// The value of `key` (kOutOfRange naming it when the file has none).
  const gguf_value& value(const std::string& key) const;

  /// Tensors in file order.
  const std::vector<gguf_tensor>& tensors() const noexcept { return tensors_; }
  bool has_tensor(const std::string& name) const { return tensor_index_.count(name) != 0; }
  /// The tensor `name` (kOutOfRange naming it when the file has none).
  const gguf_tensor& tensor(const std::string& name) const;
  /// The tensor's raw bytes in the file.
  const char* tensor_data(const gguf_tensor& t) const noexcept {
    return bytes_.data() + data_start_ + static_cast<std::size_t>(t.offset);
  }

  /// The elements of `name` dequantised to float, in the file's order (innermost dimension
  /// fastest: a weight of dims {in, out} comes out as out rows of in). Checks that its dims are
  /// `expected_dims` (kShapeMismatch naming both) and that razorkv dequantises its type (F32,
  /// F16, BF16, Q8_0, Q4_0, Q4_1; kInvalidArgument naming the type otherwise). Results equal
  /// ggml's and the gguf Python package's dequantisation bit for bit.
  std::vector<float> to_float(const std::string& name,
                              const std::vector<index_t>& expected_dims) const;

 private:
  std::string bytes_;
  std::uint32_t version_ = 0;
  index_t alignment_ = kDefaultAlignment;
  std::size_t data_start_ = 0;
  std::map<std::string, gguf_value> metadata_;
  std::vector<std::string> keys_;
  std::vector<gguf_tensor> tensors_;
  std::map<std::string, std::size_t> tensor_index_;
};

/// The metadata key under which a calibrated plan travels inside a model's GGUF file: a string
/// holding the plan in razorkv's JSON (head_plan_to_json), so that it reads back with the
/// plan's own parser and any GGUF tool shows it as text.
inline constexpr const char* kGgufPlanKey = "razorkv.plan";

/// The plan a GGUF file carries under kGgufPlanKey, or nothing when it carries none (a value
/// that is not a string or not a valid plan is an error naming the key).
inline std::optional<head_plan> plan_from_gguf(const gguf_file& file) {
  if (!file.contains(kGgufPlanKey)) return std::nullopt;
  return parse_head_plan(file.value(kGgufPlanKey).as_string(kGgufPlanKey));
}

namespace detail {

// A cursor over the header's bytes: every read checks that its bytes are there.
class gguf_cursor {
 public:
  explicit gguf_cursor(const std::string& bytes) : bytes_(bytes) {}

  std::size_t position() const noexcept { return at_; }
  std::size_t left() const noexcept { return bytes_.size() - at_; }

  template <class T>
  T scalar(const char* field) {
    RAZORKV_CHECK(left() >= sizeof(T), kParseError, "read_gguf: ", field, " at byte ", at_,
                  " runs past the end of the file (", bytes_.size(), " bytes)");
    T x;
    std::memcpy(&x, bytes_.data() + at_, sizeof(T));  // little-endian, as the format is
    at_ += sizeof(T);
    return x;
  }

  // A count that announces `unit` bytes or more per item: it cannot exceed the bytes left, so
  // a corrupt count fails here instead of asking for gigabytes.
  index_t count(const char* field, std::size_t unit) {
    const auto n = scalar<std::uint64_t>(field);
    RAZORKV_CHECK(n <= left() / unit, kParseError, "read_gguf: ", field, " (", n,
                  ") exceeds what the ", left(), " bytes left can hold");
    return static_cast<index_t>(n);
  }

  std::string string(const char* field) {
    const index_t n = count(field, 1);
    std::string s = bytes_.substr(at_, static_cast<std::size_t>(n));
    at_ += static_cast<std::size_t>(n);
    return s;
  }

 private:
  const std::string& bytes_;
  std::size_t at_ = 0;
};

// The smallest encoding of a value of type t (arrays: type and count), bounding array counts.
inline std::size_t gguf_min_value_bytes(gguf_value_type t) noexcept {
  switch (t) {
    case gguf_value_type::kUint8:
    case gguf_value_type::kInt8:
    case gguf_value_type::kBool:
      return 1;
    case gguf_value_type::kUint16:
    case gguf_value_type::kInt16:
      return 2;
    case gguf_value_type::kUint32:
    case gguf_value_type::kInt32:
    case gguf_value_type::kFloat32:
      return 4;
    case gguf_value_type::kString:  // its length
    case gguf_value_type::kUint64:
    case gguf_value_type::kInt64:
    case gguf_value_type::kFloat64:
      return 8;
    case gguf_value_type::kArray:  // element type and count
      return 12;
  }
  return 1;
}

inline gguf_value_type gguf_read_value_type(gguf_cursor& in, const std::string& key) {
  const auto t = in.scalar<std::uint32_t>("value type");
  RAZORKV_CHECK(t <= static_cast<std::uint32_t>(gguf_value_type::kFloat64), kParseError,
                "read_gguf: metadata \"", key, "\": value type ", t, " is not one of GGUF's 0-12");
  return static_cast<gguf_value_type>(t);
}

}  // namespace detail

inline gguf_file gguf_file::parse(std::string bytes) {
  constexpr const char* kWhere = "read_gguf";
  detail::gguf_cursor in(bytes);
  RAZORKV_CHECK(bytes.size() >= 4 && bytes.compare(0, 4, "GGUF") == 0, kParseError, kWhere,
                ": the file does not start with the magic \"GGUF\"");
  in.scalar<std::uint32_t>("magic");
  gguf_file file;
  file.version_ = in.scalar<std::uint32_t>("version");
  RAZORKV_CHECK(file.version_ == 2 || file.version_ == 3, kParseError, kWhere, ": version (",
                file.version_, ") is not 2 or 3 (version 1's 32-bit counts are not read)");
  // A tensor info is at least a name's length, a dimension count, one dimension, a type and an
  // offset (32 bytes); a metadata entry at least a key's length, a type and a byte.
  const index_t tensor_count = in.count("tensor_count", 32);
  const index_t kv_count = in.count("metadata_kv_count", 13);

  // Metadata: values are read by a recursive function for arrays of arrays.
  const auto read_value = [&](auto& self, gguf_value_type type, const std::string& key,
                              int depth) -> gguf_value {
    gguf_value v;
    v.type_ = type;
    switch (type) {
      case gguf_value_type::kUint8:
        v.signed_ = in.scalar<std::uint8_t>("uint8 value");
        break;
      case gguf_value_type::kInt8:
        v.signed_ = in.scalar<std::int8_t>("int8 value");
        break;
      case gguf_value_type::kUint16:
        v.signed_ = in.scalar<std::uint16_t>("uint16 value");
        break;
      case gguf_value_type::kInt16:
        v.signed_ = in.scalar<std::int16_t>("int16 value");
        break;
      case gguf_value_type::kUint32:
        v.signed_ = in.scalar<std::uint32_t>("uint32 value");
        break;
      case gguf_value_type::kInt32:
        v.signed_ = in.scalar<std::int32_t>("int32 value");
        break;
      case gguf_value_type::kUint64:
        v.unsigned_ = in.scalar<std::uint64_t>("uint64 value");
        break;
      case gguf_value_type::kInt64:
        v.signed_ = in.scalar<std::int64_t>("int64 value");
        break;
      case gguf_value_type::kFloat32:
        v.float_ = in.scalar<float>("float32 value");
        break;
      case gguf_value_type::kFloat64:
        v.float_ = in.scalar<double>("float64 value");
        break;
      case gguf_value_type::kBool: {
        const auto b = in.scalar<std::uint8_t>("bool value");
        RAZORKV_CHECK(b <= 1, kParseError, kWhere, ": metadata \"", key, "\": bool value ",
                      static_cast<int>(b), " is not 0 or 1");
        v.signed_ = b;
        break;
      }
      case gguf_value_type::kString:
        v.string_ = in.string("string length");
        break;
      case gguf_value_type::kArray: {
        RAZORKV_CHECK(depth < kMaxArrayDepth, kParseError, kWhere, ": metadata \"", key,
                      "\": arrays nested deeper than ", kMaxArrayDepth);
        v.element_type_ = detail::gguf_read_value_type(in, key);
        const index_t n = in.count("array length", detail::gguf_min_value_bytes(v.element_type_));
        v.array_.reserve(static_cast<std::size_t>(n));
        for (index_t i = 0; i < n; ++i)
          v.array_.push_back(self(self, v.element_type_, key, depth + 1));
        break;
      }
    }
    return v;
  };
  for (index_t i = 0; i < kv_count; ++i) {
    std::string key = in.string("metadata key length");
    RAZORKV_CHECK(!key.empty(), kParseError, kWhere, ": metadata entry ", i, " has an empty key");
    RAZORKV_CHECK(file.metadata_.count(key) == 0, kParseError, kWhere, ": metadata key \"", key,
                  "\" appears twice");
    const gguf_value_type type = detail::gguf_read_value_type(in, key);
    gguf_value v = read_value(read_value, type, key, 0);
    file.keys_.push_back(key);
    file.metadata_.emplace(std::move(key), std::move(v));
  }
  if (const auto it = file.metadata_.find("general.alignment"); it != file.metadata_.end()) {
    RAZORKV_CHECK(it->second.type() == gguf_value_type::kUint32, kParseError, kWhere,
                  ": \"general.alignment\" is ", gguf_value_type_name(it->second.type()),
                  ", not uint32");
    const std::int64_t a = it->second.as_int("general.alignment");
    RAZORKV_CHECK(a > 0 && (a & (a - 1)) == 0, kParseError, kWhere, ": \"general.alignment\" (", a,
                  ") is not a power of two");
    file.alignment_ = static_cast<index_t>(a);
  }

  // Tensor infos.
  for (index_t i = 0; i < tensor_count; ++i) {
    gguf_tensor t;
    t.name = in.string("tensor name length");
    RAZORKV_CHECK(!t.name.empty(), kParseError, kWhere, ": tensor ", i, " has an empty name");
    RAZORKV_CHECK(file.tensor_index_.count(t.name) == 0, kParseError, kWhere, ": tensor \"", t.name,
                  "\" appears twice");
    const auto n_dims = in.scalar<std::uint32_t>("tensor n_dims");
    RAZORKV_CHECK(n_dims >= 1 && n_dims <= 4, kParseError, kWhere, ": tensor \"", t.name,
                  "\": n_dims (", n_dims, ") outside [1, 4]");
    index_t elements = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto extent = in.scalar<std::uint64_t>("tensor dimension");
      RAZORKV_CHECK(extent >= 1 && extent <= static_cast<std::uint64_t>(INT64_MAX), kParseError,
                    kWhere, ": tensor \"", t.name, "\": dimension ", d, " (", extent,
                    ") must be positive");
      t.dims.push_back(static_cast<index_t>(extent));
      elements = ::razorkv::detail::checked_mul(elements, t.dims.back(), "read_gguf: tensor size");
    }
    t.type = in.scalar<std::uint32_t>("tensor type");
    const gguf_type_traits traits = gguf_tensor_type_traits(t.type);
    RAZORKV_CHECK(traits.block_elements > 0, kParseError, kWhere, ": tensor \"", t.name,
                  "\": type ", t.type, " is not a ggml type razorkv knows");
    RAZORKV_CHECK(t.dims[0] % traits.block_elements == 0, kParseError, kWhere, ": tensor \"",
                  t.name, "\": row length ", t.dims[0], " is not a whole number of ", traits.name,
                  " blocks of ", traits.block_elements);
    t.bytes = ::razorkv::detail::checked_mul(elements / traits.block_elements, traits.block_bytes,
                                             "read_gguf: tensor bytes");
    const auto offset = in.scalar<std::uint64_t>("tensor offset");
    RAZORKV_CHECK(offset % static_cast<std::uint64_t>(file.alignment_) == 0, kParseError, kWhere,
                  ": tensor \"", t.name, "\": offset ", offset, " is not a multiple of the ",
                  "alignment ", file.alignment_);
    RAZORKV_CHECK(offset <= bytes.size(), kParseError, kWhere, ": tensor \"", t.name, "\": offset ",
                  offset, " lies past the end of the file");
    t.offset = static_cast<index_t>(offset);
    file.tensor_index_.emplace(t.name, file.tensors_.size());
    file.tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment (and may be empty).
  const std::size_t align = static_cast<std::size_t>(file.alignment_);
  const std::size_t header_end = in.position();
  file.data_start_ = (header_end + align - 1) / align * align;
  const std::size_t data_size =
      bytes.size() >= file.data_start_ ? bytes.size() - file.data_start_ : 0;
  RAZORKV_CHECK(file.tensors_.empty() || bytes.size() >= file.data_start_, kParseError, kWhere,
                ": the header ends at byte ", header_end, " and the file (", bytes.size(),
                " bytes) has no data section");
  std::vector<const gguf_tensor*> order;
  for (const gguf_tensor& t : file.tensors_) {
    RAZORKV_CHECK(
        static_cast<std::uint64_t>(t.bytes) <= data_size &&
            static_cast<std::uint64_t>(t.offset) <= data_size - static_cast<std::size_t>(t.bytes),
        kParseError, kWhere, ": tensor \"", t.name, "\": bytes [", t.offset, ", ", t.offset, " + ",
        t.bytes, ") run past the data section of ", data_size, " bytes");
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(),
            [](const gguf_tensor* a, const gguf_tensor* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < order.size(); ++i) {
    RAZORKV_CHECK(order[i]->offset >= order[i - 1]->offset + order[i - 1]->bytes, kParseError,
                  kWhere, ": tensor \"", order[i]->name, "\" (at ", order[i]->offset,
                  ") overlaps tensor \"", order[i - 1]->name, "\" (bytes [", order[i - 1]->offset,
                  ", ", order[i - 1]->offset + order[i - 1]->bytes, "))");
  }
  file.bytes_ = std::move(bytes);
  return file;
}

inline gguf_file gguf_file::read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RAZORKV_CHECK(in.good(), kInvalidArgument, "read_gguf: cannot open \"", path, "\"");
  std::ostringstream content;
  content << in.rdbuf();
  return parse(std::move(content).str());
}

inline const gguf_value& gguf_file::value(const std::string& key) const {
  const auto it = metadata_.find(key);
  RAZORKV_CHECK(it != metadata_.end(), kOutOfRange, "gguf_file: no metadata key \"", key, "\"");
  return it->second;
}

inline const gguf_tensor& gguf_file::tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  RAZORKV_CHECK(it != tensor_index_.end(), kOutOfRange, "gguf_file: no tensor named \"", name,
                "\"");
  return tensors_[it->second];
}

namespace detail {

inline float gguf_half(const char* p) {
  Eigen::half h;
  std::memcpy(static_cast<void*>(&h), p, 2);
  return static_cast<float>(h);
}

// One block of a block-quantised type into 32 floats. Each product of a quant and a 16-bit
// scale is exact in float (at most 8 + 11 significant bits), so whether the compiler fuses the
// multiply and add or not, the results equal ggml's bit for bit.
inline void gguf_dequantise_block(std::uint32_t type, const unsigned char* b, float* out) {
  switch (type) {
    case 8: {  // Q8_0: a half scale, 32 int8 quants
      const float d = gguf_half(reinterpret_cast<const char*>(b));
      for (int j = 0; j < 32; ++j)
        out[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
      break;
    }
    case 2: {  // Q4_0: a half scale, 16 bytes of two 4-bit quants, offset by 8
      const float d = gguf_half(reinterpret_cast<const char*>(b));
      for (int j = 0; j < 16; ++j) {
        out[j] = static_cast<float>((b[2 + j] & 0x0F) - 8) * d;
        out[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
      }
      break;
    }
    case 3: {  // Q4_1: a half scale, a half minimum, 16 bytes of two 4-bit quants
      const float d = gguf_half(reinterpret_cast<const char*>(b));
      const float m = gguf_half(reinterpret_cast<const char*>(b) + 2);
      for (int j = 0; j < 16; ++j) {
        out[j] = static_cast<float>(b[4 + j] & 0x0F) * d + m;
        out[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
      }
      break;
    }
    default:
      RAZORKV_DASSERT(false);
  }
}

}  // namespace detail

inline std::vector<float> gguf_file::to_float(const std::string& name,
                                              const std::vector<index_t>& expected_dims) const {
  const gguf_tensor& t = tensor(name);
  const auto dims_text = [](const std::vector<index_t>& dims) {
    std::ostringstream out;
    out << '{';
    for (std::size_t i = 0; i < dims.size(); ++i) out << (i ? ", " : "") << dims[i];
    out << '}';
    return out.str();
  };
  RAZORKV_CHECK(t.dims == expected_dims, kShapeMismatch, "gguf_file: tensor \"", name,
                "\" has dims ", dims_text(t.dims), " (innermost first), expected ",
                dims_text(expected_dims));
  const gguf_type_traits traits = gguf_tensor_type_traits(t.type);
  RAZORKV_CHECK(traits.dequantised, kInvalidArgument, "gguf_file: tensor \"", name, "\" is ",
                traits.name,
                ", which razorkv does not dequantise (F32, F16, BF16, Q8_0, Q4_0, Q4_1)");
  const index_t n = t.elements();
  std::vector<float> out(static_cast<std::size_t>(n));
  const char* data = tensor_data(t);
  switch (t.type) {
    case 0:
      std::memcpy(out.data(), data, static_cast<std::size_t>(n) * 4);
      break;
    case 1:
      for (index_t i = 0; i < n; ++i)
        out[static_cast<std::size_t>(i)] = detail::gguf_half(data + 2 * i);
      break;
    case 30:
      for (index_t i = 0; i < n; ++i) {
        Eigen::bfloat16 b;
        std::memcpy(static_cast<void*>(&b), data + 2 * i, 2);
        out[static_cast<std::size_t>(i)] = static_cast<float>(b);
      }
      break;
    default:
      for (index_t b = 0; b < n / traits.block_elements; ++b) {
        detail::gguf_dequantise_block(
            t.type, reinterpret_cast<const unsigned char*>(data + b * traits.block_bytes),
            out.data() + b * traits.block_elements);
      }
  }
  return out;
}

}  // namespace io
RAZORKV_END_NAMESPACE
