// src/kernels_isa.cpp: every kernel (decode's, prefill's tile and compression's column sums),
// compiled once per ISA by razorkv::kernels (with -mavx512f..., -mavx2... or the baseline flags),
// exported under a name that carries the ISA.
#include "razorkv/kernels/kernel_set.hpp"

#define RAZORKV_DETAIL_CONCAT_(a, b) a##b
#define RAZORKV_DETAIL_CONCAT(a, b) RAZORKV_DETAIL_CONCAT_(a, b)

RAZORKV_BEGIN_NAMESPACE
namespace detail {

// e.g. compiled_kernels_isa_avx2(); src/kernels.cpp declares the ones it expects.
const kernel_set& RAZORKV_DETAIL_CONCAT(compiled_kernels_, RAZORKV_DETAIL_ISA)() {
  return compiled_kernels();
}

}  // namespace detail
RAZORKV_END_NAMESPACE
