// tests/support/counting_resource.hpp: counting_resource, an engine's KV pool as a memory
// resource for the tests that check where a cache's rows come from and that they go back.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory_resource>
#include <new>

namespace razorkv_test {

// The heap, with the bytes it has out, the calls, and the alignments asked for.
class counting_resource final : public std::pmr::memory_resource {
 public:
  long outstanding = 0, allocations = 0;
  long limit = -1;  // when >= 0, allocation number `limit` (from 0) throws std::bad_alloc
  std::size_t smallest_alignment = 4096;

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    if (allocations == limit) throw std::bad_alloc();
    outstanding += static_cast<long>(bytes);
    ++allocations;
    smallest_alignment = std::min(smallest_alignment, alignment);
    return std::pmr::new_delete_resource()->allocate(bytes, alignment);
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override {
    outstanding -= static_cast<long>(bytes);
    std::pmr::new_delete_resource()->deallocate(p, bytes, alignment);
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }
};

}  // namespace razorkv_test
