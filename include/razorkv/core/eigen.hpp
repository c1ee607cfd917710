// razorkv/core/eigen.hpp: Eigen::Map adaptors for razorkv views, for callers and tests that
// want Eigen expressions over K/V memory. The maps alias the viewed memory; nothing is copied.
#pragma once

#include <type_traits>

#include <Eigen/Core>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"

RAZORKV_BEGIN_NAMESPACE

/// Row-major dynamic matrix: KV rows are tokens, and Eigen's default is column-major.
template <class T>
using row_matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Map type of a matrix_view<T> (T may be const).
template <class T>
using matrix_map = Eigen::Map<
    std::conditional_t<std::is_const_v<T>, const row_matrix<std::remove_const_t<T>>, row_matrix<T>>,
    Eigen::Unaligned, Eigen::OuterStride<>>;

/// An Eigen view of the same memory as `view`: rows x cols with the view's row stride.
template <class T>
matrix_map<T> as_eigen(const matrix_view<T>& view) noexcept {
  return matrix_map<T>(view.data(), view.rows(), view.cols(),
                       Eigen::OuterStride<>(view.row_stride()));
}

/// A matrix_view over an Eigen row-major matrix (or map) that the caller keeps alive.
template <class Derived>
auto view_of(Eigen::PlainObjectBase<Derived>& m) {
  static_assert(Derived::IsRowMajor,
                "razorkv::view_of needs a row-major matrix (KV rows are tokens)");
  using T = typename Derived::Scalar;
  return matrix_view<T>(m.data(), m.rows(), m.cols(), m.outerStride());
}
template <class Derived>
auto view_of(const Eigen::PlainObjectBase<Derived>& m) {
  static_assert(Derived::IsRowMajor,
                "razorkv::view_of needs a row-major matrix (KV rows are tokens)");
  using T = const typename Derived::Scalar;
  return matrix_view<T>(m.data(), m.rows(), m.cols(), m.outerStride());
}

RAZORKV_END_NAMESPACE
