// razorkv/quant/storage.hpp: how a cache stores its K/V rows (as the cache's dtype, or 8-/4-bit
// row blocks, keys optionally rotated), and quantised_rows, the view of rows stored in blocks.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"
#include "razorkv/quant/hadamard.hpp"
#include "razorkv/quant/row_blocks.hpp"

RAZORKV_BEGIN_NAMESPACE

/// How a cache stores the rows it keeps. Each of keys and values is either the cache's dtype T
/// (empty, the default) or a row_format; rotate_keys stores every key of the cache rotated by the
/// Walsh-Hadamard transform (quant/hadamard.hpp), and decode rotates each query once to match, so
/// that an outlier channel no longer sets the scale of every block it sits in. Where a cache keeps
/// rows that must stay exact (razor_kv_cache's sinks and compensation token), they stay T, rotated
/// with the rest when rotate_keys is set.
struct kv_storage {
  std::optional<row_format> keys;
  std::optional<row_format> values;
  bool rotate_keys = false;

  /// Both sides as `format`, keys rotated when `rotate`.
  static kv_storage both(row_format format, bool rotate = false) {
    return kv_storage{format, format, rotate};
  }
  /// True when either side is stored in blocks.
  bool is_quantised() const noexcept { return keys.has_value() || values.has_value(); }
  /// True when nothing differs from T rows.
  bool is_plain() const noexcept { return !is_quantised() && !rotate_keys; }
  /// Bytes of one key row (value row) of `head_dim` values whose plain dtype is `element_bytes`.
  index_t key_row_bytes(index_t head_dim, index_t element_bytes) const {
    return keys ? quantised_row_bytes(*keys, head_dim) : head_dim * element_bytes;
  }
  index_t value_row_bytes(index_t head_dim, index_t element_bytes) const {
    return values ? quantised_row_bytes(*values, head_dim) : head_dim * element_bytes;
  }

  friend bool operator==(const kv_storage& a, const kv_storage& b) noexcept {
    return a.keys == b.keys && a.values == b.values && a.rotate_keys == b.rotate_keys;
  }
  friend bool operator!=(const kv_storage& a, const kv_storage& b) noexcept { return !(a == b); }
};

/// "keys q8 (rotated), values q4", "keys T, values q8", ... for messages and table labels.
inline std::string describe(const kv_storage& s) {
  std::string text = "keys ";
  text += s.keys ? row_format_name(*s.keys) : "T";
  if (s.rotate_keys) text += " (rotated)";
  text += ", values ";
  text += s.values ? row_format_name(*s.values) : "T";
  return text;
}

/// Throws kInvalidArgument naming the field unless a cache of `head_dim` can store rows as `s`
/// says: a quantised side needs head_dim a multiple of kQuantBlock, a format must be q8 or q4, and
/// rotate_keys a power-of-two head_dim.
inline void check_storage(const kv_storage& s, index_t head_dim, const char* where) {
  for (const std::optional<row_format>* side : {&s.keys, &s.values}) {
    if (!side->has_value()) continue;
    const char* name = side == &s.keys ? "keys" : "values";
    RAZORKV_CHECK(**side == row_format::kQ8 || **side == row_format::kQ4, kInvalidArgument, where,
                  ": storage.", name, " (", static_cast<int>(**side), ") is not q8 or q4");
    RAZORKV_CHECK(head_dim % kQuantBlock == 0, kInvalidArgument, where, ": storage.", name, " is ",
                  row_format_name(**side), ", which needs head_dim (", head_dim, ") a multiple of ",
                  kQuantBlock);
  }
  RAZORKV_CHECK(!s.rotate_keys || is_power_of_two(head_dim), kInvalidArgument, where,
                ": storage.rotate_keys needs a power-of-two head_dim, not ", head_dim);
}

/// A non-owning view of `rows` quantised rows of `cols` values each, row r at data + r * stride
/// bytes (stride >= quantised_row_bytes(format, cols)). data may be null only when rows == 0.
struct quantised_rows {
  const std::uint8_t* data = nullptr;
  index_t rows = 0;
  index_t cols = 0;
  index_t stride = 0;  // bytes
  row_format format = row_format::kQ8;

  const std::uint8_t* row(index_t r) const noexcept {
    RAZORKV_DASSERT(r >= 0 && r < rows);
    return data + r * stride;
  }
  /// Throws kInvalidArgument naming `what` and the field unless the view is well formed: a q8 or
  /// q4 format, cols a positive multiple of kQuantBlock, rows >= 0, a stride of at least one row's
  /// bytes, and data non-null when it has rows. What a reader of a source it did not build checks.
  void check(const char* where, const char* what) const {
    RAZORKV_CHECK(format == row_format::kQ8 || format == row_format::kQ4, kInvalidArgument, where,
                  ": ", what, " has row format ", static_cast<int>(format), ", not q8 or q4");
    RAZORKV_CHECK(cols > 0 && cols % kQuantBlock == 0 && rows >= 0, kInvalidArgument, where, ": ",
                  what, " is [", rows, ", ", cols, "]; cols must be a positive multiple of ",
                  kQuantBlock);
    const index_t row_bytes = quantised_row_bytes(format, cols);
    RAZORKV_CHECK(stride >= row_bytes || rows <= 1, kInvalidArgument, where, ": ", what,
                  " has a stride of ", stride, " bytes, less than a row's ", row_bytes);
    RAZORKV_CHECK(data != nullptr || rows == 0, kInvalidArgument, where, ": ", what, " has ", rows,
                  " rows and no data");
  }

  /// Rows [first, first + count).
  quantised_rows middle_rows(index_t first, index_t count) const {
    RAZORKV_CHECK(first >= 0 && count >= 0 && first <= rows && count <= rows - first, kOutOfRange,
                  "quantised_rows::middle_rows: rows [", first, ", ", first, " + ", count,
                  ") outside a view of ", rows, " rows");
    return {count == 0 ? nullptr : data + first * stride, count, cols, stride, format};
  }
};

RAZORKV_END_NAMESPACE
