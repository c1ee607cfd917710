// razorkv/cache/head_rows.hpp: head_rows<T>, the owning K/V row storage of one cache head
// (64-byte aligned, not zero-filled, from a memory resource), and row_blocks<T>, chained blocks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory_resource>
#include <optional>
#include <utility>
#include <vector>

#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"
#include "razorkv/quant/row_blocks.hpp"
#include "razorkv/quant/storage.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace detail {

// The resource a cache takes its rows from: the one it was given, or the default for null.
inline std::pmr::memory_resource* resource_or_default(
    std::pmr::memory_resource* resource) noexcept {
  return resource != nullptr ? resource : std::pmr::get_default_resource();
}

// Owning K and V rows of one head, [capacity, dim] each, 64-byte aligned, from `resource` (the
// cache's; the default resource when none is given); rows past rows() are uninitialised (the
// cache writes every row before it exposes it, and allocating without zero-filling keeps
// compression at one pass over memory). Each side stores rows of T or, as `storage` says,
// quantised rows (rotation is the cache's business: it hands rows in rotated). A copy allocates
// from the same resource.
template <class T>
class head_rows {
 public:
  head_rows() = default;
  // Delegates to the constructor that allocates nothing, so that the object exists when the
  // allocations run: if the values' allocation throws, the destructor frees the keys (no
  // try/catch, which a consumer built without exceptions could not compile).
  head_rows(index_t capacity, index_t dim,
            std::pmr::memory_resource* resource = std::pmr::get_default_resource(),
            const kv_storage& storage = {})
      : head_rows(resource, checked_capacity(capacity, dim), dim, storage) {
    if (capacity_ * dim_ > 0) {
      keys_ =
          static_cast<std::uint8_t*>(resource_->allocate(side_bytes(key_row_bytes()), kAlignment));
      values_ = static_cast<std::uint8_t*>(
          resource_->allocate(side_bytes(value_row_bytes()), kAlignment));
    }
  }
  ~head_rows() { deallocate(); }
  head_rows(const head_rows& other)
      : head_rows(other.capacity_, other.dim_, other.resource_, other.storage()) {
    copy_prefix(other);
  }
  head_rows& operator=(const head_rows& other) {
    if (this != &other) *this = head_rows(other);
    return *this;
  }
  head_rows(head_rows&& other) noexcept
      : keys_(std::exchange(other.keys_, nullptr)),
        values_(std::exchange(other.values_, nullptr)),
        rows_(std::exchange(other.rows_, 0)),
        capacity_(std::exchange(other.capacity_, 0)),
        dim_(other.dim_),
        key_format_(other.key_format_),
        value_format_(other.value_format_),
        resource_(other.resource_) {}
  head_rows& operator=(head_rows&& other) noexcept {
    if (this != &other) {
      deallocate();
      keys_ = std::exchange(other.keys_, nullptr);
      values_ = std::exchange(other.values_, nullptr);
      rows_ = std::exchange(other.rows_, 0);
      capacity_ = std::exchange(other.capacity_, 0);
      dim_ = other.dim_;
      key_format_ = other.key_format_;
      value_format_ = other.value_format_;
      resource_ = other.resource_;
    }
    return *this;
  }

  index_t rows() const noexcept { return rows_; }
  index_t capacity() const noexcept { return capacity_; }
  index_t dim() const noexcept { return dim_; }
  /// How the rows are stored (rotate_keys is false: rotation is the cache's).
  kv_storage storage() const noexcept { return kv_storage{key_format(), value_format(), false}; }
  void set_rows(index_t rows) noexcept {
    RAZORKV_DASSERT(rows >= 0 && rows <= capacity_);
    rows_ = rows;
  }
  // Row r of a side stored as T.
  T* key_row(index_t r) const noexcept {
    RAZORKV_DASSERT(key_format_ == kTyped);
    return reinterpret_cast<T*>(keys_ + r * key_row_bytes());
  }
  T* value_row(index_t r) const noexcept {
    RAZORKV_DASSERT(value_format_ == kTyped);
    return reinterpret_cast<T*>(values_ + r * value_row_bytes());
  }

  // Row r of each side as stored bytes, and the bytes of one row: for a cache that lays several
  // heads out in one head_rows (dense_kv_cache) and so tracks their rows itself.
  std::uint8_t* key_bytes(index_t r) const noexcept { return keys_ + r * key_row_bytes(); }
  std::uint8_t* value_bytes(index_t r) const noexcept { return values_ + r * value_row_bytes(); }
  index_t key_row_bytes() const noexcept { return row_bytes(key_format_); }
  index_t value_row_bytes() const noexcept { return row_bytes(value_format_); }
  std::optional<row_format> key_format() const noexcept { return format_of(key_format_); }
  std::optional<row_format> value_format() const noexcept { return format_of(value_format_); }

  /// Rows [first, first + count) as views (count may be 0).
  kv_rows<T> keys(index_t first, index_t count) const {
    return view(keys_, key_format(), key_row_bytes(), first, count);
  }
  kv_rows<T> values(index_t first, index_t count) const {
    return view(values_, value_format(), value_row_bytes(), first, count);
  }

  /// Writes the rows of src_keys/src_values ([count, dim], any stride) at row `first`,
  /// quantising a side stored in blocks.
  void write(index_t first, const matrix_view<const T>& src_keys,
             const matrix_view<const T>& src_values) noexcept {
    RAZORKV_DASSERT(first >= 0 && first + src_keys.rows() <= capacity_);
    store_rows(src_keys, key_format(), key_row_bytes(), key_bytes(first));
    store_rows(src_values, value_format(), value_row_bytes(), value_bytes(first));
  }
  /// The same from rows as another head stores them: typed rows are written as above, quantised
  /// rows (of this side's format) are copied as they are, never quantised twice.
  void write(index_t first, const kv_rows<T>& src_keys, const kv_rows<T>& src_values) noexcept {
    RAZORKV_DASSERT(first >= 0 && first + src_keys.rows() <= capacity_);
    copy_side(src_keys, key_format(), key_row_bytes(), key_bytes(first));
    copy_side(src_values, value_format(), value_row_bytes(), value_bytes(first));
  }

  index_t allocated_bytes() const noexcept { return capacity_ * entry_bytes(); }
  /// Bytes of one key row plus one value row.
  index_t entry_bytes() const noexcept { return key_row_bytes() + value_row_bytes(); }
  std::pmr::memory_resource* resource() const noexcept { return resource_; }

 private:
  static constexpr std::size_t kAlignment = 64;
  // Bytes of one side: an allocation of its own, 64-byte aligned.
  std::size_t side_bytes(index_t row_bytes) const noexcept {
    return static_cast<std::size_t>(capacity_ * row_bytes);
  }
  head_rows(std::pmr::memory_resource* resource, index_t capacity, index_t dim,
            const kv_storage& storage)
      : capacity_(capacity),
        dim_(static_cast<std::int32_t>(dim)),
        key_format_(code_of(storage.keys)),
        value_format_(code_of(storage.values)),
        resource_(resource) {}
  static index_t checked_capacity(index_t capacity, index_t dim) {
    RAZORKV_CHECK(dim >= 0 && dim <= std::numeric_limits<std::int32_t>::max(), kInvalidArgument,
                  "head_rows: head_dim (", dim, ") outside [0, 2^31)");
    const index_t elements = checked_mul(capacity, dim, "head_rows: rows * head_dim");
    checked_block_bytes(elements, static_cast<index_t>(sizeof(T)), "head_rows: bytes of one head");
    return capacity;
  }
  void deallocate() noexcept {
    if (keys_ != nullptr) resource_->deallocate(keys_, side_bytes(key_row_bytes()), kAlignment);
    if (values_ != nullptr)
      resource_->deallocate(values_, side_bytes(value_row_bytes()), kAlignment);
    keys_ = values_ = nullptr;
  }
  kv_rows<T> view(const std::uint8_t* base, const std::optional<row_format>& format,
                  index_t row_bytes, index_t first, index_t count) const {
    RAZORKV_DASSERT(first >= 0 && count >= 0 && first + count <= rows_);
    const std::uint8_t* data = count == 0 ? nullptr : base + first * row_bytes;
    if (format) return kv_rows<T>(quantised_rows{data, count, dim_, row_bytes, *format});
    return count == 0 ? matrix_view<const T>(nullptr, 0, dim_)
                      : matrix_view<const T>(reinterpret_cast<const T*>(data), count, dim_);
  }
  // Rows of T into one side: copied, or quantised block by block (through float).
  void store_rows(const matrix_view<const T>& src, const std::optional<row_format>& format,
                  index_t row_bytes, std::uint8_t* dst) const noexcept {
    if (src.rows() == 0) return;
    if (!format) {
      if (src.row_stride() == dim_) {
        std::memcpy(dst, src.data(), static_cast<std::size_t>(row_bytes * src.rows()));
        return;
      }
      for (index_t r = 0; r < src.rows(); ++r)
        std::memcpy(dst + r * row_bytes, src.row(r), static_cast<std::size_t>(row_bytes));
      return;
    }
    for (index_t r = 0; r < src.rows(); ++r) {
      const T* row = src.row(r);
      for (index_t b = 0; b < dim_ / kQuantBlock; ++b) {
        float block[kQuantBlock];
        for (index_t i = 0; i < kQuantBlock; ++i)
          block[i] = static_cast<float>(row[b * kQuantBlock + i]);
        quantise_block(*format, block, dst + r * row_bytes + b * block_bytes(*format));
      }
    }
  }
  void copy_side(const kv_rows<T>& src, const std::optional<row_format>& format, index_t row_bytes,
                 std::uint8_t* dst) const noexcept {
    if (!src.is_quantised()) {
      store_rows(src.typed(), format, row_bytes, dst);
      return;
    }
    const quantised_rows& q = src.quantised();
    RAZORKV_DASSERT(format && *format == q.format);
    for (index_t r = 0; r < q.rows; ++r)
      std::memcpy(dst + r * row_bytes, q.row(r), static_cast<std::size_t>(row_bytes));
  }
  void copy_prefix(const head_rows& other) noexcept {
    if (other.rows_ == 0) return;
    std::memcpy(keys_, other.keys_, static_cast<std::size_t>(other.rows_ * key_row_bytes()));
    std::memcpy(values_, other.values_, static_cast<std::size_t>(other.rows_ * value_row_bytes()));
    rows_ = other.rows_;
  }

  // A side's format as one byte, kTyped for rows of T, so that dim and both formats share one
  // word: a cache keeps several of these per kv head, and its bookkeeping is held to a few
  // hundred bytes per kv head.
  static constexpr std::uint8_t kTyped = 0;
  static std::uint8_t code_of(const std::optional<row_format>& f) noexcept {
    return f ? static_cast<std::uint8_t>(*f) : kTyped;
  }
  static std::optional<row_format> format_of(std::uint8_t code) noexcept {
    if (code == kTyped) return std::nullopt;
    return static_cast<row_format>(code);
  }
  index_t row_bytes(std::uint8_t code) const noexcept {
    return code == kTyped ? dim_ * static_cast<index_t>(sizeof(T))
                          : dim_ / kQuantBlock * block_bytes(static_cast<row_format>(code));
  }

  std::uint8_t* keys_ = nullptr;    // [capacity] rows of key_row_bytes(), owned
  std::uint8_t* values_ = nullptr;  // [capacity] rows of value_row_bytes(), owned
  index_t rows_ = 0;                // rows written, from row 0
  index_t capacity_ = 0;
  std::int32_t dim_ = 0;
  std::uint8_t key_format_ = kTyped, value_format_ = kTyped;
  std::pmr::memory_resource* resource_ = std::pmr::get_default_resource();
};

// Rows a head gains after compression, in blocks of rows_per_block rows chained one after the
// other instead of one buffer reallocated and copied: a row never moves once written, so an
// append costs at most one block's allocation, never a copy of the head (on the first token
// after a prompt of 32K tokens that copy was a 115 ms stall). Each block is one span. Blocks a
// clear() empties stay allocated and are filled again first.
template <class T>
class row_blocks {
 public:
  row_blocks() = default;

  index_t rows() const noexcept { return rows_; }
  /// Rows that fit before another block is needed.
  index_t free_rows() const noexcept {
    index_t free = 0;
    for (std::size_t b = static_cast<std::size_t>(filled_); b < blocks_.size(); ++b)
      free += blocks_[b].capacity() - blocks_[b].rows();
    return free;
  }
  /// Blocks of `rows_per_block` rows that `added` more rows would allocate.
  index_t blocks_needed(index_t added, index_t rows_per_block) const noexcept {
    const index_t missing = added - free_rows();
    return missing <= 0 ? 0 : (missing + rows_per_block - 1) / rows_per_block;
  }

  /// Phase 1 of an append, which may throw: allocates the blocks that `added` more rows need.
  /// Nothing visible changes (the new blocks are spare capacity).
  void reserve_more(index_t added, index_t rows_per_block, index_t dim,
                    std::pmr::memory_resource* resource, const kv_storage& storage = {}) {
    const index_t needed = blocks_needed(added, rows_per_block);
    if (needed == 0) return;
    blocks_.reserve(blocks_.size() + static_cast<std::size_t>(needed));
    for (index_t b = 0; b < needed; ++b)
      blocks_.emplace_back(rows_per_block, dim, resource, storage);
  }
  /// Phase 2: appends the rows ([count, dim], any stride; or rows as another head stores them,
  /// see head_rows::write); reserve_more(count, ...) ran first.
  template <class Rows>
  void append(const Rows& keys, const Rows& values) noexcept {
    index_t done = 0;
    while (done < keys.rows()) {
      head_rows<T>& block = blocks_[static_cast<std::size_t>(filled_)];
      const index_t take = std::min(keys.rows() - done, block.capacity() - block.rows());
      block.write(block.rows(), keys.middle_rows(done, take), values.middle_rows(done, take));
      block.set_rows(block.rows() + take);
      done += take;
      if (block.rows() == block.capacity()) ++filled_;
    }
    rows_ += done;
  }

  /// Blocks holding rows: they are the first ones (blocks fill in order; spares follow).
  index_t blocks_in_use() const noexcept {
    const bool partial = static_cast<std::size_t>(filled_) < blocks_.size() &&
                         blocks_[static_cast<std::size_t>(filled_)].rows() > 0;
    return filled_ + (partial ? 1 : 0);
  }
  /// Block b as a span of the head (log-weight 0), b < blocks_in_use(): a cache finds its i-th
  /// span without walking the blocks before it.
  kv_span<T> span(index_t b) const {
    RAZORKV_DASSERT(b >= 0 && b < blocks_in_use());
    const head_rows<T>& block = blocks_[static_cast<std::size_t>(b)];
    return {block.keys(0, block.rows()), block.values(0, block.rows()), 0.0f};
  }

  /// Calls f(block, rows) for every block holding rows, oldest first.
  template <class F>
  void for_each_block(F&& f) const {
    for (const head_rows<T>& block : blocks_) {
      if (block.rows() > 0) f(block, block.rows());
    }
  }
  /// Empties every block, keeping them allocated.
  void clear() noexcept {
    for (head_rows<T>& block : blocks_) block.set_rows(0);
    filled_ = rows_ = 0;
  }
  index_t allocated_bytes() const noexcept {
    index_t total = 0;
    for (const head_rows<T>& block : blocks_) total += block.allocated_bytes();
    return total;
  }

 private:
  std::vector<head_rows<T>> blocks_;  // full ones, the one being filled, then spares
  index_t filled_ = 0;                // blocks that are full
  index_t rows_ = 0;
};

}  // namespace detail

RAZORKV_END_NAMESPACE
