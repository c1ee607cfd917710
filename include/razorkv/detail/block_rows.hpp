// razorkv/detail/block_rows.hpp: the rows decode reads per online-softmax step, to which the caches
// align the storage a head grows in, so that a head split into spans decodes as one contiguous
// head.
#pragma once

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

// Rows of K/V per online-softmax step. The kernel reads a block of K, then the same block of
// V: 64 rows (32 KB of float K at dim 128) per stream switch keep the hardware prefetchers
// streaming, and amortise the accumulator rescale and the vectorised exp. A span restarts the
// blocking, so a head whose spans (all but its last) are whole blocks is read in exactly the
// blocks of one contiguous head, with the same rounding.
inline constexpr index_t kBlockRows = 64;

// n rounded up to whole blocks.
constexpr index_t whole_blocks(index_t n) noexcept {
  return (n + kBlockRows - 1) / kBlockRows * kBlockRows;
}

}  // namespace detail
RAZORKV_END_NAMESPACE
