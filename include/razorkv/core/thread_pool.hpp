// razorkv/core/thread_pool.hpp: a small pool of worker threads that an engine may create and hand
// to razorkv as its parallel_for hook, built to degrade to serial speed when cores are contended.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "razorkv/config.hpp"
#include "razorkv/core/parallel_for.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// Workers that run a parallel_for together with the thread that calls it. razorkv starts no
/// threads of its own; an engine that has no pool of its own creates one of these (one per
/// process, or per socket) and passes pool.parallel_for() wherever razorkv takes a parallel_for
/// hook: attention_options::parallel_for (decode), compress_layer's last argument, the policies'
/// and the scorer's options.
///
/// Why not OpenMP's pool (razorkv's default when the program is built with -fopenmp): an OpenMP
/// parallel loop returns only when every thread of its team has reached the loop's end, even one
/// that found no work left. When another process holds one of the cores, that thread may not run
/// for a whole scheduler time slice, and every decode step waits for it: measured on two cores
/// with one of them busy, two OpenMP threads took 2.5x as long as one. Here a call returns as soon
/// as its last task is done: the caller claims tasks itself, one at a time, from a shared
/// counter, and a worker that wakes too late finds none and goes back to sleep. So a call is
/// never slower than the caller alone by more than the one task a descheduled worker may hold;
/// decode's tasks are kv heads, or runs of at most attention_options::max_entries_per_task
/// entries.
///
/// One call runs at a time; a second thread that calls while the pool is busy runs its own tasks
/// by itself rather than wait. The body must not throw (razorkv's never do: they are checked
/// before the fan-out) and must not call the same pool.
class thread_pool {
 public:
  /// \param workers threads started besides the callers (0: every call runs on its caller)
  explicit thread_pool(int workers) {
    RAZORKV_CHECK(workers >= 0, kInvalidArgument, "thread_pool: workers (", workers,
                  ") must be >= 0");
    threads_.reserve(static_cast<std::size_t>(workers));
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { work(); });
  }

  /// Stops and joins the workers; no call may be running.
  ~thread_pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int workers() const noexcept { return static_cast<int>(threads_.size()); }

  /// Calls body(i) once for every i in [0, count), on the calling thread and the workers, and
  /// returns when all have returned.
  void run(index_t count, const std::function<void(index_t)>& body) {
    if (count <= 0) return;
    std::unique_lock<std::mutex> turn(run_mutex_, std::try_to_lock);
    if (!turn.owns_lock() || threads_.empty() || count == 1 || count > kMaxTasks) {
      for (index_t i = 0; i < count; ++i) body(i);
      return;
    }
    std::uint64_t generation;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      do {
        generation = ++generation_ & kGenerationMask;
      } while (generation == 0);  // 0 is "no call yet" to the workers
      body_ = &body;
      count_ = count;
      done_.store(0, std::memory_order_relaxed);
      claims_.store(generation << kIndexBits, std::memory_order_release);
    }
    wake_.notify_all();
    const index_t ran = run_claimed(generation, &body, count);
    done_.fetch_add(ran, std::memory_order_acq_rel);
    // Workers still running a task they claimed: wait for those, not for workers that claimed none.
    while (done_.load(std::memory_order_acquire) < count) std::this_thread::yield();
  }

  /// This pool as razorkv's hook (attention_options::parallel_for and the like). The pool must
  /// outlive every call made through it.
  parallel_for_fn parallel_for() {
    return [this](index_t count, const std::function<void(index_t)>& body) { run(count, body); };
  }

 private:
  // claims_ holds (generation << kIndexBits) | next index: a claim made for a finished call's
  // generation fails, so a worker that slept through a call can never take a task of the next.
  static constexpr int kIndexBits = 32;
  static constexpr index_t kMaxTasks = index_t{1} << 31;
  static constexpr std::uint64_t kGenerationMask = (std::uint64_t{1} << 32) - 1;

  // Claims tasks of `generation` until none is left; returns how many it ran.
  index_t run_claimed(std::uint64_t generation, const std::function<void(index_t)>* body,
                      index_t count) {
    index_t ran = 0;
    std::uint64_t claim = claims_.load(std::memory_order_acquire);
    while ((claim >> kIndexBits) == generation) {
      const auto index = static_cast<index_t>(claim & ((std::uint64_t{1} << kIndexBits) - 1));
      if (index >= count) break;
      if (claims_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel)) {
        (*body)(index);
        ++ran;
        claim = claims_.load(std::memory_order_acquire);
      }
    }
    return ran;
  }

  void work() {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || (generation_ & kGenerationMask) != seen; });
      if (stopping_) return;
      seen = generation_ & kGenerationMask;
      const std::function<void(index_t)>* body = body_;
      const index_t count = count_;
      lock.unlock();
      // *body is alive while a task of this generation is unfinished, which a successful claim
      // guarantees; a late worker's claims fail and it never touches *body.
      const index_t ran = run_claimed(seen, body, count);
      if (ran > 0) done_.fetch_add(ran, std::memory_order_acq_rel);
      lock.lock();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex run_mutex_;  // held by the call in progress
  std::mutex mutex_;      // guards the fields below but the atomics
  std::condition_variable wake_;
  bool stopping_ = false;
  std::uint64_t generation_ = 0;
  const std::function<void(index_t)>* body_ = nullptr;
  index_t count_ = 0;
  std::atomic<std::uint64_t> claims_{0};
  std::atomic<index_t> done_{0};
};

RAZORKV_END_NAMESPACE
