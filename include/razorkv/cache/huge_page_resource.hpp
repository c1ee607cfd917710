// razorkv/cache/huge_page_resource.hpp: a memory resource for K/V storage that maps its large
// blocks on 2 MiB boundaries, asks Linux to back them with huge pages, and can keep freed ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory_resource>
#include <mutex>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "razorkv/config.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// Why: a cache filled into fresh memory pays the OS for every page it touches first. With 4 KiB
/// pages that is one fault (and, in a virtual machine, often one exit to the hypervisor) per
/// 4 KiB: compressing a long prefill into a new cache measured up to 10x slower than into a
/// reused one. Mapped on 2 MiB boundaries with madvise(MADV_HUGEPAGE), a block faults in 2 MiB
/// at a time where the system has transparent huge pages enabled ("always" or "madvise" in
/// /sys/kernel/mm/transparent_hugepage/enabled), and its TLB misses during decode drop too.
///
/// Blocks of at least `min_bytes` are mapped on their own; smaller ones, and every block on
/// systems without mmap, come from `upstream`. A freed block is kept mapped, its pages already
/// faulted in, while the blocks kept total at most `keep_bytes`, and serves the next block of the
/// same mapped size: an engine that builds a new cache per request on one long-lived resource then
/// pays the OS for its pages once, not per request. Beyond that (and for keep_bytes = 0) freed
/// blocks go back to the OS. Thread-safe where upstream is. Pass it to razor_kv_cache (or any
/// std::pmr container); it must outlive what it allocated, and unmaps what it keeps when it goes.
/// Allocation failure throws std::bad_alloc, as memory resources do (aborts, saying so, in a build
/// without exceptions).
class huge_page_resource final : public std::pmr::memory_resource {
 public:
  /// The huge page size the blocks are aligned to (x86-64 and aarch64 with 4 KiB base pages).
  static constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

  /// \param upstream  where small blocks go; null means std::pmr::get_default_resource()
  /// \param min_bytes blocks at least this large are mapped on huge-page boundaries (default:
  ///                  one huge page; smaller blocks would waste most of one)
  /// \param keep_bytes freed mapped blocks kept for reuse, in bytes of mappings (0: none)
  explicit huge_page_resource(std::pmr::memory_resource* upstream = nullptr,
                              std::size_t min_bytes = kHugePageBytes, std::size_t keep_bytes = 0)
      : upstream_(upstream != nullptr ? upstream : std::pmr::get_default_resource()),
        min_bytes_(min_bytes),
        keep_bytes_(keep_bytes) {
    RAZORKV_CHECK(min_bytes > 0, kInvalidArgument, "huge_page_resource: min_bytes (", min_bytes,
                  ") must be > 0");
  }

  ~huge_page_resource() override {
#if defined(__linux__)
    while (kept_ != nullptr) {
      kept_block* next = kept_->next;
      munmap(kept_, kept_->length);
      kept_ = next;
    }
#endif
  }

  huge_page_resource(const huge_page_resource&) = delete;
  huge_page_resource& operator=(const huge_page_resource&) = delete;

  /// Whether this build maps blocks itself (Linux); elsewhere every block comes from upstream.
  static constexpr bool maps_blocks() noexcept {
#if defined(__linux__)
    return true;
#else
    return false;
#endif
  }

  std::pmr::memory_resource* upstream() const noexcept { return upstream_; }
  std::size_t min_bytes() const noexcept { return min_bytes_; }
  std::size_t keep_bytes() const noexcept { return keep_bytes_; }
  /// Bytes of freed blocks kept mapped for reuse now.
  std::size_t kept_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return kept_total_;
  }

 private:
  // The mapping a block of `bytes` takes: whole huge pages.
  static std::size_t mapped_bytes(std::size_t bytes) noexcept {
    return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  }

  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
#if defined(__linux__)
    if (bytes >= min_bytes_ && alignment <= kHugePageBytes) {
      const std::size_t length = mapped_bytes(bytes);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (kept_block** link = &kept_; *link != nullptr; link = &(*link)->next) {
          if ((*link)->length == length) {
            kept_block* block = *link;
            *link = block->next;
            kept_total_ -= length;
            return block;
          }
        }
      }
      // Map one huge page more than needed, then trim the unaligned head and the tail, so that
      // the block starts on a 2 MiB boundary (mmap itself only promises 4 KiB).
      const std::size_t padded = length + kHugePageBytes;
      void* raw = mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (raw == MAP_FAILED) {
#if RAZORKV_NO_EXCEPTIONS
        std::fprintf(stderr, "razorkv: huge_page_resource: mapping %zu bytes failed\n", padded);
        std::abort();
#else
        throw std::bad_alloc();
#endif
      }
      const auto start = reinterpret_cast<std::uintptr_t>(raw);
      const std::uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
      if (aligned > start) munmap(raw, aligned - start);
      const std::uintptr_t end = start + padded, block_end = aligned + length;
      if (end > block_end) munmap(reinterpret_cast<void*>(block_end), end - block_end);
      // Advice only: without transparent huge pages the block is ordinary memory.
      madvise(reinterpret_cast<void*>(aligned), length, MADV_HUGEPAGE);
      return reinterpret_cast<void*>(aligned);
    }
#endif
    return upstream_->allocate(bytes, alignment);
  }

  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override {
#if defined(__linux__)
    if (bytes >= min_bytes_ && alignment <= kHugePageBytes) {
      const std::size_t length = mapped_bytes(bytes);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (kept_total_ + length <= keep_bytes_) {
          // The list of kept blocks lives in their own first bytes: keeping one allocates nothing.
          kept_ = ::new (p) kept_block{kept_, length};
          kept_total_ += length;
          return;
        }
      }
      munmap(p, length);
      return;
    }
#endif
    upstream_->deallocate(p, bytes, alignment);
  }

  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

  // A freed block kept for reuse, written over its first bytes.
  struct kept_block {
    kept_block* next;
    std::size_t length;  // of its mapping
  };

  std::pmr::memory_resource* upstream_;
  std::size_t min_bytes_, keep_bytes_;
  mutable std::mutex mutex_;    // guards the blocks kept
  kept_block* kept_ = nullptr;  // most recently freed first
  std::size_t kept_total_ = 0;
};

RAZORKV_END_NAMESPACE
