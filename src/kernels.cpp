// src/kernels.cpp: the decode scheduler compiled once, for builds that link razorkv::kernels, and
// the choice, at the first call of a kernel, of the kernel set (one per ISA) that the CPU runs
// best.
#include "razorkv/attention/decode_schedule.hpp"
#include "razorkv/kernels/kernel_set.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

RAZORKV_BEGIN_NAMESPACE
namespace detail {

#define RAZORKV_DEFINE_DECODE_SCHEDULE(T, TO) template RAZORKV_DECODE_SCHEDULE_SIGNATURE(T, TO);
RAZORKV_FOR_EACH_DECODE_SCHEDULE(RAZORKV_DEFINE_DECODE_SCHEDULE)
#undef RAZORKV_DEFINE_DECODE_SCHEDULE

namespace {

// A kernel set this library holds, whether the CPU (and its operating system) runs it, and
// whether it is meant for this CPU (a set tuned for another vendor's cores runs, but is used only
// when RAZORKV_KERNEL_ISA asks for it).
struct kernel_candidate {
  const char* isa;
  bool runs;
  bool suits;
  const kernel_set& (*kernels)();
};

}  // namespace

#if defined(RAZORKV_KERNELS_X86_DISPATCH) && RAZORKV_KERNELS_X86_DISPATCH
// Compiled from src/kernels_isa.cpp with -mavx512f -mavx512bw -mavx512dq -mavx512vl
// -mavx2 -mfma -mf16c (and once more with -mtune=znver3), with -mavx2 -mfma -mf16c, and with the
// x86-64 baseline (SSE2).
#if defined(RAZORKV_KERNELS_ZEN) && RAZORKV_KERNELS_ZEN
const kernel_set& compiled_kernels_isa_avx512_zen();
#endif
const kernel_set& compiled_kernels_isa_avx512();
const kernel_set& compiled_kernels_isa_avx2();
const kernel_set& compiled_kernels_isa_sse2();
#endif

namespace {

const kernel_set& choose_kernels() {
#if defined(RAZORKV_KERNELS_X86_DISPATCH) && RAZORKV_KERNELS_X86_DISPATCH
  const x86_features cpu = detect_x86_features();
  const bool v3 = cpu.avx2 && cpu.fma && cpu.f16c;
  const kernel_candidate candidates[] = {
#if defined(RAZORKV_KERNELS_ZEN) && RAZORKV_KERNELS_ZEN
    {"avx512_zen", v3 && cpu.avx512, cpu.amd, &compiled_kernels_isa_avx512_zen},
#endif
    {"avx512", v3 && cpu.avx512, true, &compiled_kernels_isa_avx512},
    {"avx2", v3, true, &compiled_kernels_isa_avx2},
    {"sse2", true, true, &compiled_kernels_isa_sse2}
  };
#else
  // No run-time choice on this target: the kernels of the flags the library was built with.
  const kernel_candidate candidates[] = {
      {RAZORKV_DETAIL_ISA_NAME, true, true,
       []() -> const kernel_set& { return compiled_kernels(); }}};
#endif
  // RAZORKV_KERNEL_ISA names the set to use instead of the best one (to test or time each).
  const char* wanted = std::getenv("RAZORKV_KERNEL_ISA");
  std::string names;
  for (const kernel_candidate& candidate : candidates) {
    if (wanted == nullptr || *wanted == '\0') {
      if (candidate.runs && candidate.suits) return candidate.kernels();
      continue;
    }
    if (std::strcmp(wanted, candidate.isa) == 0) {
      RAZORKV_CHECK(candidate.runs, kInvalidArgument, "razorkv::kernels: RAZORKV_KERNEL_ISA (",
                    wanted, ") names kernels this CPU cannot run");
      return candidate.kernels();
    }
    names += names.empty() ? "" : ", ";
    names += candidate.isa;
  }
  RAZORKV_CHECK(false, kInvalidArgument, "razorkv::kernels: RAZORKV_KERNEL_ISA (", wanted,
                ") names no kernel set of this build (", names, ")");
  return candidates[0].kernels();  // not reached
}

}  // namespace

const kernel_set& dispatched_kernels() {
  // Chosen once; a throw leaves it unchosen, to be tried again by the next call.
  static const kernel_set& chosen = choose_kernels();
  return chosen;
}

}  // namespace detail
RAZORKV_END_NAMESPACE
