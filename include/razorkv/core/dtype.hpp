// razorkv/core/dtype.hpp: the storage types razorkv reads (float, double, Eigen::half,
// Eigen::bfloat16) and the type each one accumulates in (float, or double for double).
#pragma once

#include <type_traits>

#include "razorkv/config.hpp"

// Declared as Eigen declares them, so that the contract headers name the 16-bit types without
// pulling in Eigen/Core; the headers that compute with them include it.
namespace Eigen {
struct half;
struct bfloat16;
}  // namespace Eigen

RAZORKV_BEGIN_NAMESPACE

/// True for the storage dtypes razorkv supports.
template <class T>
inline constexpr bool is_storage_dtype_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Eigen::half> ||
    std::is_same_v<T, Eigen::bfloat16>;

/// The accumulation type for a storage type: float for the 32- and 16-bit types, double for
/// double (so that a double cache is a faithful high-precision path, not a widened float one).
template <class T>
using accum_t = std::conditional_t<std::is_same_v<std::remove_cv_t<T>, double>, double, float>;

/// Human-readable dtype name, for messages and benchmark labels.
template <class T>
constexpr const char* dtype_name() noexcept {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) {
    return "float";
  } else if constexpr (std::is_same_v<U, double>) {
    return "double";
  } else if constexpr (std::is_same_v<U, Eigen::half>) {
    return "half";
  } else if constexpr (std::is_same_v<U, Eigen::bfloat16>) {
    return "bfloat16";
  } else {
    static_assert(is_storage_dtype_v<U>, "razorkv: unsupported storage dtype");
    return "";
  }
}

/// A storage dtype named at run time, for memory whose element type the caller knows only
/// then (an engine's tensor with a dtype field); see any_layer_view.
enum class dtype { kFloat32, kFloat64, kFloat16, kBFloat16 };

/// The run-time dtype of a storage type.
template <class T>
constexpr dtype dtype_of() noexcept {
  using U = std::remove_cv_t<T>;
  static_assert(is_storage_dtype_v<U>, "razorkv: unsupported storage dtype");
  if constexpr (std::is_same_v<U, float>) {
    return dtype::kFloat32;
  } else if constexpr (std::is_same_v<U, double>) {
    return dtype::kFloat64;
  } else if constexpr (std::is_same_v<U, Eigen::half>) {
    return dtype::kFloat16;
  } else {
    return dtype::kBFloat16;
  }
}

/// The same names as dtype_name<T>(): "float", "double", "half", "bfloat16".
constexpr const char* dtype_name(dtype d) noexcept {
  switch (d) {
    case dtype::kFloat32:
      return "float";
    case dtype::kFloat64:
      return "double";
    case dtype::kFloat16:
      return "half";
    case dtype::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

namespace detail {
/// Exact widening of one stored element to double (16-bit types go through float, exactly).
/// For references, validation and scoring sums; hot loops widen rows with widen_row.
template <class T>
inline double to_double(T x) noexcept {
  if constexpr (std::is_same_v<T, double>) {
    return x;
  } else {
    return static_cast<double>(static_cast<float>(x));
  }
}
}  // namespace detail

RAZORKV_END_NAMESPACE
