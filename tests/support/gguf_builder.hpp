// tests/support/gguf_builder.hpp: writes small GGUF files byte by byte for the reader's tests
// and the fuzz corpus, with hooks to break any field (counts, types, offsets, alignment).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace razorkv_test {

class gguf_builder {
 public:
  std::uint32_t version = 3;
  std::uint32_t alignment = 32;  // what the data section is padded to (general.alignment's value)

  template <class T>
  static void put(std::string& out, T x) {
    char b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    out.append(b, sizeof(T));
  }
  static void put_string(std::string& out, const std::string& s) {
    put<std::uint64_t>(out, s.size());
    out += s;
  }

  /// A metadata entry whose value bytes (after key and type) the caller encodes.
  void raw_kv(const std::string& key, std::uint32_t type, const std::string& value_bytes) {
    put_string(kv_, key);
    put<std::uint32_t>(kv_, type);
    kv_ += value_bytes;
    ++kv_count_;
  }
  void kv_u32(const std::string& key, std::uint32_t v) {
    std::string b;
    put(b, v);
    raw_kv(key, 4, b);
  }
  void kv_f32(const std::string& key, float v) {
    std::string b;
    put(b, v);
    raw_kv(key, 6, b);
  }
  void kv_string(const std::string& key, const std::string& v) {
    std::string b;
    put_string(b, v);
    raw_kv(key, 8, b);
  }
  void kv_strings(const std::string& key, const std::vector<std::string>& v) {
    std::string b;
    put<std::uint32_t>(b, 8);
    put<std::uint64_t>(b, v.size());
    for (const std::string& s : v) put_string(b, s);
    raw_kv(key, 9, b);
  }

  /// A tensor of ggml type `type` with `dims` (innermost first) and its data bytes, placed at
  /// the next aligned offset (or at `offset` when it is given).
  void tensor(const std::string& name, std::uint32_t type, const std::vector<std::uint64_t>& dims,
              const std::string& data, std::int64_t offset = -1) {
    while (data_.size() % alignment != 0) data_ += '\0';
    const std::uint64_t at = offset >= 0 ? static_cast<std::uint64_t>(offset) : data_.size();
    put_string(infos_, name);
    put<std::uint32_t>(infos_, static_cast<std::uint32_t>(dims.size()));
    for (std::uint64_t d : dims) put<std::uint64_t>(infos_, d);
    put<std::uint32_t>(infos_, type);
    put<std::uint64_t>(infos_, at);
    if (offset < 0) data_ += data;
    ++tensor_count_;
  }

  std::string bytes() const {
    std::string out = "GGUF";
    put<std::uint32_t>(out, version);
    put<std::uint64_t>(out, tensor_count_);
    put<std::uint64_t>(out, kv_count_);
    out += kv_ + infos_;
    while (out.size() % alignment != 0) out += '\0';
    return out + data_;
  }

 private:
  std::string kv_, infos_, data_;
  std::uint64_t kv_count_ = 0, tensor_count_ = 0;
};

}  // namespace razorkv_test
