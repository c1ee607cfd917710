// razorkv/core/parallel_for.hpp: the hook through which razorkv's work fans out over the caller's
// threads, and the fan-out of calls that give none (OpenMP's, when the program is built with it).
#pragma once

#include <atomic>
#include <functional>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"

RAZORKV_BEGIN_NAMESPACE

/// A caller-supplied parallel loop: must call body(i) exactly once for every i in [0, count),
/// in any order and on any threads, and return when all calls have returned. body never
/// throws (all checks happen before work is fanned out).
using parallel_for_fn =
    std::function<void(index_t count, const std::function<void(index_t)>& body)>;

namespace detail {

using fanout_fn = void (*)(index_t count, const std::function<void(index_t)>& body);

// The fan-out of calls that give no parallel_for, one for the whole program. A unit compiled with
// OpenMP registers OpenMP's pool here as the program starts. The choice must not live in the body
// of an inline function that reads _OPENMP: an engine that compiles some units with -fopenmp and
// some without would hold two definitions of it, and the linker would keep either one for all.
// Constant-initialised, so that a call made during some unit's dynamic initialisation, before
// the registration, reads null and runs its tasks on the calling thread.
inline std::atomic<fanout_fn> registered_fanout{nullptr};

#if defined(_OPENMP)
inline void openmp_fanout(index_t count, const std::function<void(index_t)>& body) {
  if (count == 1) {  // no team to wake for one task
    body(0);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (index_t i = 0; i < count; ++i) body(i);
}
// Defined (identically) in the units compiled with OpenMP only, and initialised once.
inline const bool openmp_fanout_registered =
    (registered_fanout.store(&openmp_fanout, std::memory_order_relaxed), true);
#endif

}  // namespace detail

/// Whether calls that give no parallel_for fan out over OpenMP's threads: true when any
/// translation unit of the program that includes razorkv was compiled with OpenMP (-fopenmp),
/// else they run their tasks in a plain loop on the calling thread. A call chooses otherwise by
/// giving a parallel_for (razorkv::thread_pool's, or one that runs a plain loop).
inline bool fans_out_over_openmp() noexcept {
  return detail::registered_fanout.load(std::memory_order_relaxed) != nullptr;
}

RAZORKV_END_NAMESPACE
