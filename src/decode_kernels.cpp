// src/decode_kernels.cpp: the decode kernels and scheduler compiled once, for builds that link
// razorkv::kernels (their other translation units only declare them: RAZORKV_SEPARATE_KERNELS).
#include "razorkv/detail/decode_kernels.hpp"
#include "razorkv/detail/decode_schedule.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

#define RAZORKV_DEFINE_DECODE_KERNEL(T, Q, D) template RAZORKV_DECODE_KERNEL_SIGNATURE(T, Q, D);
RAZORKV_FOR_EACH_DECODE_KERNEL(RAZORKV_DEFINE_DECODE_KERNEL)
#undef RAZORKV_DEFINE_DECODE_KERNEL

#define RAZORKV_DEFINE_DECODE_SCHEDULE(T, TO) template RAZORKV_DECODE_SCHEDULE_SIGNATURE(T, TO);
RAZORKV_FOR_EACH_DECODE_SCHEDULE(RAZORKV_DEFINE_DECODE_SCHEDULE)
#undef RAZORKV_DEFINE_DECODE_SCHEDULE

}  // namespace detail
RAZORKV_END_NAMESPACE
