// fuzz/fuzz_support.hpp: what razorkv's libFuzzer targets share: the rule that a razorkv::error
// is the only acceptable failure, and a reader that turns fuzz bytes into shapes and values.
#pragma once

#include <razorkv/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace razorkv_fuzz {

/// Runs f; a razorkv::error is the expected way to reject input, anything else (another
/// exception, a crash, a sanitizer report) is a finding.
template <class F>
void reject_only_with_razorkv_errors(F&& f) {
  try {
    f();
  } catch (const razorkv::error&) {
  }
}

/// Aborts (a finding) unless `ok`: for properties checked on accepted input.
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "razorkv fuzz property violated: %s\n", what);
    std::abort();
  }
}

/// Consumes fuzz bytes front to back; past the end every read returns 0.
class byte_reader {
 public:
  byte_reader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  /// An integer in [lo, hi].
  long range(long lo, long hi) {
    return lo + static_cast<long>(byte() % static_cast<unsigned>(hi - lo + 1));
  }
  /// Any float bit pattern, NaN and infinities included.
  float raw_float() {
    std::uint32_t bits = 0;
    for (int i = 0; i < 4; ++i) bits = (bits << 8) | byte();
    float x;
    std::memcpy(&x, &bits, sizeof(x));
    return x;
  }
  /// A float of ordinary size in [-8, 8], or (1 in 64) any bit pattern.
  float value() {
    if (byte() % 64 == 0) return raw_float();
    return (static_cast<float>(byte()) - 128.0f) / 16.0f;
  }
  /// The bytes not consumed yet.
  std::string rest() {
    std::string out(reinterpret_cast<const char*>(data_ + pos_), size_ - pos_);
    pos_ = size_;
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

}  // namespace razorkv_fuzz
