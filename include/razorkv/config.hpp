// razorkv/config.hpp: the library's version, its configuration macros and its namespace macros.
// Every RAZORKV_* macro can be defined by the consumer before the first include to override it.
#pragma once

#define RAZORKV_VERSION_MAJOR 0
#define RAZORKV_VERSION_MINOR 1
#define RAZORKV_VERSION_PATCH 0
#define RAZORKV_VERSION \
  (RAZORKV_VERSION_MAJOR * 10000 + RAZORKV_VERSION_MINOR * 100 + RAZORKV_VERSION_PATCH)

// The public API lives in an inline namespace tagged with the major version, so that two
// translation units built against incompatible razorkv versions fail to link instead of
// silently mixing layouts.
#define RAZORKV_BEGIN_NAMESPACE \
  namespace razorkv {           \
  inline namespace v0 {
#define RAZORKV_END_NAMESPACE \
  }                           \
  }

// Exceptions are used unless the compiler was told not to; then errors print and abort.
#ifndef RAZORKV_NO_EXCEPTIONS
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
#define RAZORKV_NO_EXCEPTIONS 0
#else
#define RAZORKV_NO_EXCEPTIONS 1
#endif
#endif

// RAZORKV_DASSERT guards hot-loop invariants. It is on in debug builds and in sanitizer
// builds, off under NDEBUG; define RAZORKV_ENABLE_DASSERT to 0 or 1 to force it.
#if defined(__SANITIZE_ADDRESS__)
#define RAZORKV_DETAIL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RAZORKV_DETAIL_ASAN 1
#endif
#endif

#ifndef RAZORKV_ENABLE_DASSERT
#if !defined(NDEBUG) || defined(RAZORKV_DETAIL_ASAN)
#define RAZORKV_ENABLE_DASSERT 1
#else
#define RAZORKV_ENABLE_DASSERT 0
#endif
#endif

#if defined(__GNUC__) || defined(__clang__)
#define RAZORKV_RESTRICT __restrict__
#define RAZORKV_LIKELY(x) __builtin_expect(!!(x), 1)
#define RAZORKV_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define RAZORKV_RESTRICT
#define RAZORKV_LIKELY(x) (x)
#define RAZORKV_UNLIKELY(x) (x)
#endif

// RAZORKV_UNROLL, before a loop whose trip count is a compile-time constant: unroll it whole.
// RAZORKV_UNROLL_BY(n), before a loop over a head's columns: unroll it n times (whole, when it
// has at most n steps). The kernels keep their accumulators in small arrays indexed by such
// loops' counters, which become registers only once the loops are unrolled. GCC does that by
// itself at -O3 but not at -O2 (CMake's RelWithDebInfo, Debian's package builds, Bazel's opt
// mode), where it left the arrays in memory: without these macros, decode with the layer in
// cache ran 1.5-2.7x slower at -O2 than at -O3 (Zen 4, GCC 12; bench/report.py's -O2 table
// measures the kernels as they are). Clang unrolls them at -O2 unasked (as fast as at -O3), and
// asking it made a sanitizer build's decode test compile 2.7x slower, so only GCC is asked.
#if defined(__GNUC__) && !defined(__clang__)
#define RAZORKV_DETAIL_PRAGMA(text) _Pragma(#text)
#define RAZORKV_UNROLL _Pragma("GCC unroll 64")
#define RAZORKV_UNROLL_BY(n) RAZORKV_DETAIL_PRAGMA(GCC unroll n)
#else
#define RAZORKV_UNROLL
#define RAZORKV_UNROLL_BY(n)
#endif
