// razorkv/detail/math.hpp: small checked-arithmetic helpers used by size computations at API
// boundaries, so that an absurd shape is an error instead of a wrapped-around allocation.
#pragma once

#include <limits>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

/// a * b for non-negative a, b; throws errc::kOverflow naming `what` when it does not fit.
inline index_t checked_mul(index_t a, index_t b, const char* what) {
  RAZORKV_DASSERT(a >= 0 && b >= 0);
  RAZORKV_CHECK(b == 0 || a <= std::numeric_limits<index_t>::max() / b, kOverflow, what, ": ", a,
                " * ", b, " overflows");
  return a * b;
}

/// a + b for non-negative a, b; throws errc::kOverflow naming `what` when it does not fit.
inline index_t checked_add(index_t a, index_t b, const char* what) {
  RAZORKV_DASSERT(a >= 0 && b >= 0);
  RAZORKV_CHECK(a <= std::numeric_limits<index_t>::max() - b, kOverflow, what, ": ", a, " + ", b,
                " overflows");
  return a + b;
}

/// The largest block razorkv asks for: 2^57 bytes, what a 64-bit machine with 5-level paging can
/// address at all. Beyond it a size is an error (kOverflow), not std::bad_alloc, which stays the
/// answer of a machine that lacks the memory for a size some machine could hold.
inline constexpr index_t kMaxBlockBytes = index_t{1} << 57;

/// count * element_bytes, the bytes of one block; throws errc::kOverflow naming `what` when it
/// overflows or exceeds kMaxBlockBytes.
inline index_t checked_block_bytes(index_t count, index_t element_bytes, const char* what) {
  const index_t bytes = checked_mul(count, element_bytes, what);
  RAZORKV_CHECK(bytes <= kMaxBlockBytes, kOverflow, what, ": ", count, " * ", element_bytes,
                " bytes exceeds 2^57 bytes, more than a 64-bit machine can address");
  return bytes;
}

}  // namespace detail
RAZORKV_END_NAMESPACE
