// tests/openmp/fanout_unit.hpp: what a translation unit sees of razorkv's default fan-out, measured
// by the unit itself; compiled once with OpenMP (openmp_unit.cpp) and once without
// (plain_unit.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "razorkv/razorkv.hpp"

namespace razorkv_test {

struct fanout_report {
  bool openmp = false;     // razorkv::fans_out_over_openmp() as the unit sees it
  int threads = 0;         // distinct threads that ran the tasks of one hook-less call
  std::vector<float> out;  // a hook-less decode over a fixed cache
};

fanout_report fanout_of_plain_unit();
fanout_report fanout_of_openmp_unit();
void set_openmp_threads(int threads);  // in openmp_unit.cpp

// The task body each unit hands to razorkv's fan-out. One type with external linkage, so both
// units instantiate the same run_parallel<thread_probe&>, and the linker keeps one of the two:
// the hazard this test guards (two units whose copies of one inline function differ).
struct thread_probe {
  std::mutex* mutex;
  std::set<std::thread::id>* seen;
  bool wait_for_a_second_thread;

  void operator()(razorkv::index_t task) const {
    const auto count = [&] {
      std::lock_guard<std::mutex> lock(*mutex);
      seen->insert(std::this_thread::get_id());
      return seen->size();
    };
    count();
    if (task != 0 || !wait_for_a_second_thread) return;
    // Task 0 holds its thread until another thread has taken a task, so that a fan-out over two
    // threads shows two on a machine however busy (bounded, in case it never comes).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (count() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
};

// The measurement, compiled into each unit (internal linkage: each unit runs its own copy).
static inline fanout_report measure_this_unit() {
  fanout_report report;
  report.openmp = razorkv::fans_out_over_openmp();
  std::mutex mutex;
  std::set<std::thread::id> seen;
  razorkv::detail::run_parallel({}, 8, thread_probe{&mutex, &seen, report.openmp});
  report.threads = static_cast<int>(seen.size());

  const razorkv::index_t kv_heads = 4, dim = 64, tokens = 300, query_heads = 8;
  razorkv::dense_kv_cache<float> cache(1, kv_heads, dim);
  std::vector<float> keys(static_cast<std::size_t>(tokens * kv_heads * dim));
  std::vector<float> values(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    keys[i] = static_cast<float>((i * 37 % 101) - 50) / 50.0f;
    values[i] = static_cast<float>((i * 53 % 97) - 48) / 48.0f;
  }
  cache.append(0, razorkv::layer_view<const float>::nhd(keys.data(), tokens, kv_heads, dim),
               razorkv::layer_view<const float>::nhd(values.data(), tokens, kv_heads, dim));
  std::vector<float> queries(static_cast<std::size_t>(query_heads * dim));
  for (std::size_t i = 0; i < queries.size(); ++i) {
    queries[i] = static_cast<float>((i * 29 % 89) - 44) / 44.0f;
  }
  report.out.assign(queries.size(), 0.0f);
  razorkv::decode_attention(cache, 0,
                            razorkv::matrix_view<const float>(queries.data(), query_heads, dim),
                            razorkv::matrix_view<float>(report.out.data(), query_heads, dim));
  return report;
}

}  // namespace razorkv_test
