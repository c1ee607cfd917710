// razorkv/detail/parallel.hpp: how kernels fan out over independent tasks (kv heads): the
// caller's parallel-for hook when given, else the program's fan-out (core/parallel_for.hpp).
// razorkv never starts threads of its own.
#pragma once

#include <functional>

#include "razorkv/config.hpp"
#include "razorkv/core/parallel_for.hpp"
#include "razorkv/core/tensor_view.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

template <class Body>
void run_parallel(const parallel_for_fn& hook, index_t count, Body&& body) {
  if (count <= 0) return;
  // A reference fits in std::function's own storage: handing the body over allocates nothing.
  if (hook) {
    hook(count, std::function<void(index_t)>(std::ref(body)));
    return;
  }
  if (count > 1) {
    if (const fanout_fn fanout = registered_fanout.load(std::memory_order_relaxed)) {
      fanout(count, std::function<void(index_t)>(std::ref(body)));
      return;
    }
  }
  for (index_t i = 0; i < count; ++i) body(i);
}

}  // namespace detail
RAZORKV_END_NAMESPACE
