// razorkv/detail/dispatch.hpp: turns a runtime head_dim into a compile-time constant for the
// dims the kernels specialise, with a dynamic fallback (0) for every other value.
#pragma once

#include <type_traits>
#include <utility>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

/// Calls f(std::integral_constant<int, D>{}) with D == head_dim when head_dim is one of the
/// specialised dims (64, 80, 96, 128, 256), else with D == 0, meaning "read it at run time".
/// Every dim works; the listed ones get fully unrolled inner loops.
template <class F>
decltype(auto) dispatch_head_dim(index_t head_dim, F&& f) {
  switch (head_dim) {
    case 64:
      return std::forward<F>(f)(std::integral_constant<int, 64>{});
    case 80:
      return std::forward<F>(f)(std::integral_constant<int, 80>{});
    case 96:
      return std::forward<F>(f)(std::integral_constant<int, 96>{});
    case 128:
      return std::forward<F>(f)(std::integral_constant<int, 128>{});
    case 256:
      return std::forward<F>(f)(std::integral_constant<int, 256>{});
    default:
      return std::forward<F>(f)(std::integral_constant<int, 0>{});
  }
}

/// Calls f(std::integral_constant<int, N>{}) for N == n, n in {1, 2, 4, 8}.
template <class F>
decltype(auto) dispatch_pow2_upto8(index_t n, F&& f) {
  switch (n) {
    case 1:
      return std::forward<F>(f)(std::integral_constant<int, 1>{});
    case 2:
      return std::forward<F>(f)(std::integral_constant<int, 2>{});
    case 4:
      return std::forward<F>(f)(std::integral_constant<int, 4>{});
    default:
      RAZORKV_DASSERT(n == 8);
      return std::forward<F>(f)(std::integral_constant<int, 8>{});
  }
}

}  // namespace detail
RAZORKV_END_NAMESPACE
