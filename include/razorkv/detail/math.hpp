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

}  // namespace detail
RAZORKV_END_NAMESPACE
