// Tests of the strict GGUF reader: every metadata value type, each dequantised tensor type
// against values worked out by hand, a named error for each way a file can be malformed, the
// plan carried as metadata, and (when the build knows where SmolLM2's file is) the real model's
// every tensor against the gguf Python package's dequantisation, bit for bit.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <razorkv/io/gguf.hpp>
#include <razorkv/io/json.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/expect_error.hpp"
#include "support/gguf_builder.hpp"

namespace {

using razorkv::index_t;
using razorkv::io::gguf_file;
using razorkv::io::gguf_value_type;
using razorkv_test::gguf_builder;

template <class T>
std::string raw(const std::vector<T>& v) {
  std::string out(v.size() * sizeof(T), '\0');
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::string half_bytes(float x) { return raw(std::vector<Eigen::half>{Eigen::half(x)}); }

TEST(RazorkvGguf, ReadsEveryMetadataType) {
  gguf_builder b;
  std::string v;
  b.raw_kv("u8", 0, std::string(1, '\xfe'));
  b.raw_kv("i8", 1, std::string(1, '\xfe'));
  gguf_builder::put<std::uint16_t>(v, 65000);
  b.raw_kv("u16", 2, v);
  v.clear();
  gguf_builder::put<std::int16_t>(v, -300);
  b.raw_kv("i16", 3, v);
  b.kv_u32("u32", 4000000000u);
  v.clear();
  gguf_builder::put<std::int32_t>(v, -7);
  b.raw_kv("i32", 5, v);
  b.kv_f32("f32", 0.25f);
  b.raw_kv("bool", 7, std::string(1, '\1'));
  b.kv_string("str", "hello");
  v.clear();
  gguf_builder::put<std::uint64_t>(v, 1ull << 40);
  b.raw_kv("u64", 10, v);
  v.clear();
  gguf_builder::put<std::int64_t>(v, -(1ll << 40));
  b.raw_kv("i64", 11, v);
  v.clear();
  gguf_builder::put<double>(v, -1.5);
  b.raw_kv("f64", 12, v);
  b.kv_strings("list", {"a", "", "ccc"});
  // An array of arrays of int32.
  v.clear();
  gguf_builder::put<std::uint32_t>(v, 9);
  gguf_builder::put<std::uint64_t>(v, 2);
  for (int row = 0; row < 2; ++row) {
    gguf_builder::put<std::uint32_t>(v, 5);
    gguf_builder::put<std::uint64_t>(v, 1);
    gguf_builder::put<std::int32_t>(v, row + 10);
  }
  b.raw_kv("nested", 9, v);

  const gguf_file f = gguf_file::parse(b.bytes());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.value("u8").as_int("u8"), 254);
  EXPECT_EQ(f.value("i8").as_int("i8"), -2);
  EXPECT_EQ(f.value("u16").as_int("u16"), 65000);
  EXPECT_EQ(f.value("i16").as_int("i16"), -300);
  EXPECT_EQ(f.value("u32").as_int("u32"), 4000000000ll);
  EXPECT_EQ(f.value("i32").as_int("i32"), -7);
  EXPECT_EQ(f.value("f32").as_float("f32"), 0.25);
  EXPECT_TRUE(f.value("bool").as_bool("bool"));
  EXPECT_EQ(f.value("str").as_string("str"), "hello");
  EXPECT_EQ(f.value("u64").as_int("u64"), 1ll << 40);
  EXPECT_EQ(f.value("i64").as_int("i64"), -(1ll << 40));
  EXPECT_EQ(f.value("f64").as_float("f64"), -1.5);
  const auto& list = f.value("list").as_array("list");
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(f.value("list").element_type(), gguf_value_type::kString);
  EXPECT_EQ(list[2].as_string("list"), "ccc");
  const auto& nested = f.value("nested").as_array("nested");
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested[1].as_array("nested")[0].as_int("nested"), 11);
  EXPECT_EQ(f.metadata_keys().front(), "u8");
  EXPECT_EQ(f.metadata_keys().back(), "nested");

  RAZORKV_EXPECT_ERROR(f.value("str").as_int("str"), kInvalidArgument,
                       "\"str\" is string, not an integer");
  RAZORKV_EXPECT_ERROR(f.value("u32").as_float("u32"), kInvalidArgument, "not a float");
  RAZORKV_EXPECT_ERROR(f.value("absent"), kOutOfRange, "no metadata key \"absent\"");
}

TEST(RazorkvGguf, DequantisesEveryTypeItReads) {
  gguf_builder b;
  b.tensor("f32", 0, {2, 1}, raw(std::vector<float>{1.5f, -2.0f}));
  b.tensor(
      "f16", 1, {3},
      raw(std::vector<Eigen::half>{Eigen::half(0.5f), Eigen::half(-1.25f), Eigen::half(2048.0f)}));
  b.tensor("bf16", 30, {2},
           raw(std::vector<Eigen::bfloat16>{Eigen::bfloat16(3.0f), Eigen::bfloat16(-0.5f)}));
  // Q8_0: scale 0.5, quants -128..-97.
  std::string q8 = half_bytes(0.5f);
  for (int j = 0; j < 32; ++j) q8 += static_cast<char>(static_cast<std::int8_t>(-128 + j));
  b.tensor("q8_0", 8, {32}, q8);
  // Q4_0: scale 2, byte j holds quant j in its low nibble and 15 - j in its high one.
  std::string q40 = half_bytes(2.0f);
  for (int j = 0; j < 16; ++j) q40 += static_cast<char>(j | ((15 - j) << 4));
  b.tensor("q4_0", 2, {32}, q40);
  // Q4_1: scale 0.25, minimum -1, the same quants; two blocks in a row, the second scaled by 1.
  std::string q41 = half_bytes(0.25f) + half_bytes(-1.0f);
  for (int j = 0; j < 16; ++j) q41 += static_cast<char>(j | ((15 - j) << 4));
  q41 += half_bytes(1.0f) + half_bytes(0.0f) + q41.substr(4, 16);
  b.tensor("q4_1", 3, {64}, q41);

  const gguf_file f = gguf_file::parse(b.bytes());
  ASSERT_EQ(f.tensors().size(), 6u);
  EXPECT_EQ(f.to_float("f32", {2, 1}), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(f.to_float("f16", {3}), (std::vector<float>{0.5f, -1.25f, 2048.0f}));
  EXPECT_EQ(f.to_float("bf16", {2}), (std::vector<float>{3.0f, -0.5f}));
  const std::vector<float> x8 = f.to_float("q8_0", {32});
  const std::vector<float> x40 = f.to_float("q4_0", {32});
  const std::vector<float> x41 = f.to_float("q4_1", {64});
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(x8[static_cast<std::size_t>(j)], 0.5f * static_cast<float>(-128 + j)) << j;
    const int q = j < 16 ? j : 15 - (j - 16);
    EXPECT_EQ(x40[static_cast<std::size_t>(j)], 2.0f * static_cast<float>(q - 8)) << j;
    EXPECT_EQ(x41[static_cast<std::size_t>(j)], 0.25f * static_cast<float>(q) - 1.0f) << j;
    EXPECT_EQ(x41[static_cast<std::size_t>(32 + j)], static_cast<float>(q)) << j;
  }
  EXPECT_EQ(f.tensor("q4_1").bytes, 40);
  EXPECT_EQ(f.tensor("q4_1").offset % 32, 0);
  RAZORKV_EXPECT_ERROR(f.to_float("q4_1", {32, 2}), kShapeMismatch,
                       "has dims {64} (innermost first), expected {32, 2}");
  RAZORKV_EXPECT_ERROR(f.tensor("nope"), kOutOfRange, "no tensor named \"nope\"");
}

TEST(RazorkvGguf, RejectsATypeItDoesNotDequantiseByName) {
  gguf_builder b;
  b.tensor("k", 14, {256}, std::string(210, '\0'));  // Q6_K: parses, is not dequantised
  const gguf_file f = gguf_file::parse(b.bytes());
  EXPECT_STREQ(f.tensor("k").type_name(), "Q6_K");
  RAZORKV_EXPECT_ERROR(f.to_float("k", {256}), kInvalidArgument, "\"k\" is Q6_K, which razorkv");
}

TEST(RazorkvGguf, HonoursTheAlignmentKey) {
  gguf_builder b;
  b.alignment = 64;
  b.kv_u32("general.alignment", 64);
  b.tensor("a", 0, {3}, raw(std::vector<float>{1, 2, 3}));
  b.tensor("b", 0, {1}, raw(std::vector<float>{4}));
  const gguf_file f = gguf_file::parse(b.bytes());
  EXPECT_EQ(f.alignment(), 64);
  EXPECT_EQ(f.tensor("b").offset, 64);
  EXPECT_EQ(f.to_float("b", {1}), (std::vector<float>{4}));
}

TEST(RazorkvGguf, CarriesAPlanAsMetadata) {
  razorkv::head_plan plan(razorkv::model_shape{2, 4, 2, 8});
  plan.set_retrieval(1, 0, true);
  gguf_builder b;
  b.kv_string(razorkv::io::kGgufPlanKey, razorkv::io::head_plan_to_json(plan));
  const auto read = razorkv::io::plan_from_gguf(gguf_file::parse(b.bytes()));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->retrieval_heads(1), plan.retrieval_heads(1));
  EXPECT_TRUE(read->retrieval_heads(0).empty());
  EXPECT_FALSE(razorkv::io::plan_from_gguf(gguf_file::parse(gguf_builder{}.bytes())).has_value());
  gguf_builder wrong;
  wrong.kv_u32(razorkv::io::kGgufPlanKey, 3);
  RAZORKV_EXPECT_ERROR(razorkv::io::plan_from_gguf(gguf_file::parse(wrong.bytes())),
                       kInvalidArgument, "\"razorkv.plan\" is uint32, not a string");
}

// Each malformed file is a kParseError whose message names the field.
TEST(RazorkvGguf, RejectsMalformedFilesNamingTheField) {
  const auto rejects = [](const std::string& bytes, const std::string& needle) {
    RAZORKV_EXPECT_ERROR(gguf_file::parse(bytes), kParseError, needle);
  };
  rejects("", "magic \"GGUF\"");
  rejects("GGML\3\0\0\0", "magic \"GGUF\"");
  {
    gguf_builder b;
    b.version = 1;
    rejects(b.bytes(), "version (1) is not 2 or 3");
  }
  rejects(gguf_builder{}.bytes().substr(0, 12), "tensor_count at byte 8 runs past the end");
  {
    std::string bytes = gguf_builder{}.bytes();
    bytes[8] = '\x7f';  // a tensor count no file this size can hold
    rejects(bytes, "tensor_count (127) exceeds what the");
  }
  {
    std::string bytes = gguf_builder{}.bytes();
    bytes[16 + 7] = '\x40';  // 2^62 metadata entries
    rejects(bytes, "metadata_kv_count (4611686018427387904) exceeds");
  }
  {
    gguf_builder b;
    b.raw_kv("k", 13, "");
    rejects(b.bytes(), "metadata \"k\": value type 13 is not one of GGUF's 0-12");
  }
  {
    gguf_builder b;
    b.raw_kv("k", 7, std::string(1, '\2'));
    rejects(b.bytes(), "metadata \"k\": bool value 2 is not 0 or 1");
  }
  {
    gguf_builder b;
    std::string v;
    gguf_builder::put<std::uint64_t>(v, 1000);  // a string longer than the file
    b.raw_kv("k", 8, v + "abc");
    rejects(b.bytes(), "string length (1000) exceeds what the");
  }
  {
    gguf_builder b;
    std::string v;
    gguf_builder::put<std::uint32_t>(v, 12);
    gguf_builder::put<std::uint64_t>(v, 1ull << 60);  // an array of 2^60 float64
    b.raw_kv("k", 9, v);
    rejects(b.bytes(), "array length (1152921504606846976) exceeds");
  }
  {
    gguf_builder b;
    std::string v;
    for (int depth = 0; depth < 5; ++depth) {
      gguf_builder::put<std::uint32_t>(v, 9);
      gguf_builder::put<std::uint64_t>(v, 1);
    }
    gguf_builder::put<std::uint32_t>(v, 0);
    gguf_builder::put<std::uint64_t>(v, 0);
    b.raw_kv("deep", 9, v);
    rejects(b.bytes(), "metadata \"deep\": arrays nested deeper than 4");
  }
  {
    gguf_builder b;
    b.kv_u32("k", 1);
    b.kv_u32("k", 2);
    rejects(b.bytes(), "metadata key \"k\" appears twice");
  }
  {
    gguf_builder b;
    b.kv_string("general.alignment", "32");
    rejects(b.bytes(), "\"general.alignment\" is string, not uint32");
  }
  {
    gguf_builder b;
    b.kv_u32("general.alignment", 24);
    rejects(b.bytes(), "\"general.alignment\" (24) is not a power of two");
  }
  {
    gguf_builder b;
    b.tensor("t", 0, {1, 1, 1, 1, 1}, raw(std::vector<float>{1}));
    rejects(b.bytes(), "tensor \"t\": n_dims (5) outside [1, 4]");
  }
  {
    gguf_builder b;
    b.tensor("t", 0, {4, 0}, "");
    rejects(b.bytes(), "tensor \"t\": dimension 1 (0) must be positive");
  }
  {
    gguf_builder b;
    b.tensor("t", 0, {1ull << 32, 1ull << 32}, "");
    RAZORKV_EXPECT_ERROR(gguf_file::parse(b.bytes()), kOverflow, "read_gguf: tensor");
  }
  {
    gguf_builder b;
    b.tensor("t", 99, {4}, std::string(16, '\0'));
    rejects(b.bytes(), "tensor \"t\": type 99 is not a ggml type razorkv knows");
  }
  {
    gguf_builder b;
    b.tensor("t", 3, {48}, std::string(40, '\0'));
    rejects(b.bytes(), "tensor \"t\": row length 48 is not a whole number of Q4_1 blocks of 32");
  }
  {
    gguf_builder b;
    b.tensor("t", 0, {4}, raw(std::vector<float>{1, 2, 3, 4}));
    b.tensor("t", 0, {1}, raw(std::vector<float>{1}));
    rejects(b.bytes(), "tensor \"t\" appears twice");
  }
  {
    gguf_builder b;
    b.tensor("a", 0, {4}, raw(std::vector<float>{1, 2, 3, 4}));
    b.tensor("b", 0, {4}, "", 8);
    rejects(b.bytes(), "tensor \"b\": offset 8 is not a multiple of the alignment 32");
  }
  {
    gguf_builder b;
    b.tensor("a", 0, {16}, std::string(64, '\0'));
    b.tensor("b", 0, {4}, "", 32);
    rejects(b.bytes(), "tensor \"b\" (at 32) overlaps tensor \"a\" (bytes [0, 64))");
  }
  {
    gguf_builder b;
    b.tensor("a", 0, {16}, std::string(60, '\0'));
    rejects(b.bytes(), "tensor \"a\": bytes [0, 0 + 64) run past the data section of 60 bytes");
  }
  {
    gguf_builder b;
    b.tensor("a", 0, {4}, "", 1ull << 62);
    rejects(b.bytes(), "tensor \"a\": offset 4611686018427387904 lies past the end of the file");
  }
  RAZORKV_EXPECT_ERROR(gguf_file::read("/nonexistent/model.gguf"), kInvalidArgument,
                       "cannot open \"/nonexistent/model.gguf\"");
}

// Every proper prefix of a valid file is rejected with a razorkv error, never read past.
TEST(RazorkvGguf, EveryTruncationIsAnError) {
  gguf_builder b;
  b.kv_strings("names", {"x", "yy"});
  b.kv_f32("f", 1.0f);
  b.tensor("t", 8, {32}, half_bytes(1.0f) + std::string(32, '\1'));
  const std::string bytes = b.bytes();
  ASSERT_NO_THROW(gguf_file::parse(bytes));
  for (std::size_t n = 0; n < bytes.size(); ++n)
    EXPECT_THROW(gguf_file::parse(bytes.substr(0, n)), razorkv::error) << n;
}

#ifdef RAZORKV_SMOLLM2_GGUF
// The hash of tools/smollm2/gguf_hashes.py over a tensor's float values.
std::uint64_t value_hash(const std::vector<float>& values) {
  std::vector<std::uint32_t> bits(values.size() + values.size() % 2, 0);
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  std::uint64_t h = 0;
  for (std::size_t i = 0; i < bits.size() / 2; ++i) {
    const std::uint64_t w = bits[2 * i] | (std::uint64_t{bits[2 * i + 1]} << 32);
    h += (w ^ (w >> 29)) * (0x9E3779B97F4A7C15ull + 2 * static_cast<std::uint64_t>(i));
  }
  return h;
}

TEST(RazorkvGgufSmolLM2, EveryTensorEqualsTheGgufPackagesDequantisation) {
  const gguf_file f = gguf_file::read(RAZORKV_SMOLLM2_GGUF);
  EXPECT_EQ(f.value("general.architecture").as_string("general.architecture"), "llama");
  EXPECT_EQ(f.value("llama.block_count").as_int("llama.block_count"), 30);
  EXPECT_EQ(f.value("tokenizer.ggml.tokens").as_array("tokenizer.ggml.tokens").size(), 49152u);
  std::ifstream in(RAZORKV_SMOLLM2_TENSORS);
  ASSERT_TRUE(in.good()) << RAZORKV_SMOLLM2_TENSORS;
  std::string line;
  std::size_t checked = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name, type, dims_text, hash_text;
    ASSERT_TRUE(std::getline(fields, name, '\t') && std::getline(fields, type, '\t') &&
                std::getline(fields, dims_text, '\t') && std::getline(fields, hash_text))
        << line;
    std::vector<index_t> dims;
    std::istringstream dim_stream(dims_text);
    for (std::string d; std::getline(dim_stream, d, ',');) dims.push_back(std::stoll(d));
    const razorkv::io::gguf_tensor& t = f.tensor(name);
    EXPECT_EQ(t.type_name(), type) << name;
    EXPECT_EQ(value_hash(f.to_float(name, dims)), std::stoull(hash_text, nullptr, 16)) << name;
    ++checked;
  }
  EXPECT_EQ(checked, f.tensors().size());
}
#endif

}  // namespace
