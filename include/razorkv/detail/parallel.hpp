// razorkv/detail/parallel.hpp: how kernels fan out over independent tasks (kv heads): the
// caller's parallel-for hook when given, OpenMP when the consumer compiles with it, else a
// plain loop. razorkv never starts threads of its own.
#pragma once

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

template <class Body>
void run_parallel(const parallel_for_fn& hook, index_t count, Body&& body) {
  if (count <= 0) return;
  if (hook) {
    // A reference fits in std::function's own storage: handing the body over allocates nothing.
    hook(count, std::function<void(index_t)>(std::ref(body)));
    return;
  }
#if defined(_OPENMP)
  if (count > 1) {
#pragma omp parallel for schedule(dynamic, 1)
    for (index_t i = 0; i < count; ++i) body(i);
    return;
  }
#endif
  for (index_t i = 0; i < count; ++i) body(i);
}

/// The fan-out run_parallel takes when the caller gives no hook, as a hook: OpenMP's pool when
/// the translation unit that calls it is compiled with OpenMP, else none (a plain loop). Decode
/// resolves it where decode_attention is called and hands it to the scheduler, so that a
/// scheduler compiled elsewhere (razorkv::kernels, built without OpenMP) fans out as its caller
/// was built to.
inline const parallel_for_fn& default_parallel_for() {
#if defined(_OPENMP)
  static const parallel_for_fn openmp = [](index_t count,
                                           const std::function<void(index_t)>& body) {
    if (count == 1) {  // no team to wake for one task
      body(0);
      return;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (index_t i = 0; i < count; ++i) body(i);
  };
  return openmp;
#else
  static const parallel_for_fn none;
  return none;
#endif
}

}  // namespace detail
RAZORKV_END_NAMESPACE
