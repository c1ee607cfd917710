// razorkv/error.hpp: the one exception type razorkv throws at its API boundaries, its codes,
// and the check macros that build messages naming the offending parameter and value.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <utility>

#include "razorkv/config.hpp"

RAZORKV_BEGIN_NAMESPACE

/// What went wrong. Every message starts with "[razorkv.<code name>] ", then the function,
/// then the parameter and its value, e.g.
/// "[razorkv.shape_mismatch] decode_attention: queries.cols() (64) != cache.head_dim() (128)".
enum class errc {
  kInvalidArgument = 1,  ///< a value is outside its domain: zero dims, NaN scale, null data
  kShapeMismatch = 2,    ///< two extents that must agree do not
  kOutOfRange = 3,       ///< an index (layer, head, span) is past its extent
  kOverflow = 4,         ///< a size computation would overflow
  kParseError = 5,       ///< a file or document is malformed (razorkv/io readers)
};

/// The name used in messages: "invalid_argument", "shape_mismatch", ...
constexpr const char* errc_name(errc code) noexcept {
  switch (code) {
    case errc::kInvalidArgument:
      return "invalid_argument";
    case errc::kShapeMismatch:
      return "shape_mismatch";
    case errc::kOutOfRange:
      return "out_of_range";
    case errc::kOverflow:
      return "overflow";
    case errc::kParseError:
      return "parse_error";
  }
  return "unknown";
}

/// The exception razorkv throws. Nothing the caller owns has been modified when it is thrown
/// from a public entry point: every check runs before the first write.
class error : public std::exception {
 public:
  error(errc code, std::string message, const char* file, int line)
      : code_(code), message_(std::move(message)), file_(file), line_(line) {}

  errc code() const noexcept { return code_; }
  const char* what() const noexcept override { return message_.c_str(); }
  /// Where in razorkv the check failed (for bug reports, not for control flow).
  const char* file() const noexcept { return file_; }
  int line() const noexcept { return line_; }

 private:
  errc code_;
  std::string message_;
  const char* file_;
  int line_;
};

namespace detail {

template <class... Parts>
std::string format_message(errc code, const Parts&... parts) {
  std::ostringstream out;
  out << "[razorkv." << errc_name(code) << "] ";
  (out << ... << parts);
  return out.str();
}

template <class... Parts>
[[noreturn]] void raise(errc code, const char* file, int line, const Parts&... parts) {
  std::string message = format_message(code, parts...);
#if RAZORKV_NO_EXCEPTIONS
  std::fprintf(stderr, "%s (%s:%d)\n", message.c_str(), file, line);
  std::abort();
#else
  throw error(code, std::move(message), file, line);
#endif
}

}  // namespace detail

RAZORKV_END_NAMESPACE

/// Always-on precondition check at an API boundary: throws razorkv::error(code, message) where
/// the message is the concatenation of the remaining arguments (streamed with operator<<).
#define RAZORKV_CHECK(cond, code, ...)                                                  \
  do {                                                                                  \
    if (RAZORKV_UNLIKELY(!(cond))) {                                                    \
      ::razorkv::detail::raise(::razorkv::errc::code, __FILE__, __LINE__, __VA_ARGS__); \
    }                                                                                   \
  } while (0)

/// Hot-loop invariant; see RAZORKV_ENABLE_DASSERT in config.hpp.
#if RAZORKV_ENABLE_DASSERT
#define RAZORKV_DASSERT(cond)                                                                   \
  do {                                                                                          \
    if (RAZORKV_UNLIKELY(!(cond))) {                                                            \
      std::fprintf(stderr, "razorkv: internal invariant failed: %s (%s:%d)\n", #cond, __FILE__, \
                   __LINE__);                                                                   \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)
#else
#define RAZORKV_DASSERT(cond) \
  do {                        \
  } while (0)
#endif
