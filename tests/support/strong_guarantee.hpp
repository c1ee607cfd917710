// tests/support/strong_guarantee.hpp: check_strong_guarantee, which makes every allocation of a
// cache operation fail in turn and checks that each failure leaves the cache as it was.
#pragma once

#include <gtest/gtest.h>

#include <new>

namespace razorkv_test {

/// Checks the strong exception guarantee of `step` at every allocation it makes. For k = 0, 1, ...
/// a fresh cache from `build()` runs `step(cache)` with its k-th allocation failing
/// (`fail_at(k)` arms the allocator, relative to what it has handed out so far; `fail_at(-1)`
/// disarms it). A step (one call) that throws std::bad_alloc must leave `state(cache)` as it was
/// and keep no byte the cache does not account for (`unowned(cache)`, what the allocator has out
/// beyond what the cache says it holds, as before: spare capacity a cache keeps is its own); run
/// again unarmed, it must leave the state a cache that never failed has. Stops at the first k the
/// step survives and returns k: the number of allocation points tested.
template <class Build, class Step, class State, class FailAt, class Unowned>
long check_strong_guarantee(Build build, Step step, State state, FailAt fail_at, Unowned unowned) {
  const auto expected = [&] {
    auto cache = build();
    step(cache);
    return state(cache);
  }();
  for (long k = 0;; ++k) {
    SCOPED_TRACE(::testing::Message() << "allocation " << k << " fails");
    auto cache = build();
    const auto before = state(cache);
    const long held = unowned(cache);
    bool threw = false;
    fail_at(k);
    try {
      step(cache);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    fail_at(-1);
    if (!threw) {
      EXPECT_EQ(state(cache), expected);
      return k;
    }
    EXPECT_EQ(unowned(cache), held) << "the failed step kept memory";
    if (state(cache) != before) {
      ADD_FAILURE() << "the failed step changed the cache";
      return k;
    }
    step(cache);
    EXPECT_EQ(state(cache), expected) << "after a failure the step gives another result";
    if (k > 100000) {
      ADD_FAILURE() << "the step never completes";
      return k;
    }
  }
}

}  // namespace razorkv_test
