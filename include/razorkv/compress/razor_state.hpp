// razorkv/compress/razor_state.hpp: save_state and restore_state, one sequence's razor_kv_cache
// as bytes (swap-out, offload, prefix reuse): a versioned format and a strict loader.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <memory_resource>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/compress/razor_cache.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/error.hpp"
#include "razorkv/quant/storage.hpp"

RAZORKV_BEGIN_NAMESPACE

/// The format version save_state writes. restore_state reads it and version 1, which predates
/// quantised storage (its rows are all of the cache's dtype).
inline constexpr std::uint32_t kRazorStateVersion = 2;

namespace detail {

// The format, little-endian, fields in this order (i64: int64, u8/u32: unsigned):
//   "RZKVSTAT" | u32 version | u32 dtype | i64 num_layers, num_query_heads, num_kv_heads,
//   head_dim | storage (version 2): u8 key format, u8 value format (0: rows of the dtype, else
//   the row_format), u8 rotate_keys, u8 has retrieval storage, and if so its two formats |
//   config: i64 sinks, s0, fixed_window, decode_reserve, growth_rows, f64 c,
//   u32 compensation, u32 decode, u8 check_finite | plan, per (layer, kv head): u8 retrieval,
//   i64 buffer override (0: none) | per layer: u8 compressed, i64 tokens, prompt_tokens, and
//   if compressed per kv head: i64 window, dropped, sinks, ring capacity, ring start, ring rows,
//   u8 mean rows, then rows as [rows, head_dim] keys then values: the sinks, the ring's rows
//   oldest first, the mean; the exact sums (2 * head_dim f64) unless compensation is none;
//   i64 blocks, and per block i64 capacity, rows, then its rows. Rows are as the cache stores
//   them: the ring's and the blocks' in the head's storage (quantised rows as their blocks'
//   bytes, rotated keys rotated), the sinks' and the mean's of the dtype.
inline constexpr char kRazorStateMagic[8] = {'R', 'Z', 'K', 'V', 'S', 'T', 'A', 'T'};

inline bool host_is_little_endian() noexcept {
  const std::uint16_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

class state_writer {
 public:
  template <class V>
  void scalar(V value) {
    static_assert(std::is_trivially_copyable_v<V>, "razorkv: state scalars are plain values");
    append(&value, sizeof value);
  }
  template <class T>
  void rows(const kv_rows<T>& rows) {
    if (rows.is_quantised()) {
      const quantised_rows& q = rows.quantised();
      const auto bytes = static_cast<std::size_t>(quantised_row_bytes(q.format, q.cols));
      for (index_t r = 0; r < q.rows; ++r) append(q.row(r), bytes);
      return;
    }
    const matrix_view<const T>& m = rows.typed();
    for (index_t r = 0; r < m.rows(); ++r)
      append(m.row(r), static_cast<std::size_t>(m.cols()) * sizeof(T));
  }
  void append(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const std::uint8_t*>(data);
    out.insert(out.end(), p, p + bytes);
  }
  std::vector<std::uint8_t> out;
};

class state_reader {
 public:
  state_reader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  template <class V>
  V scalar(const char* what) {
    need(sizeof(V), what);
    V value;
    std::memcpy(&value, data_ + at_, sizeof value);
    at_ += sizeof value;
    return value;
  }
  // An i64 in [lo, hi]; anything else is an error naming the field, the value and the range.
  index_t count(const char* what, index_t lo, index_t hi) {
    const auto value = scalar<std::int64_t>(what);
    RAZORKV_CHECK(value >= lo && value <= hi, kInvalidArgument, "restore_state: ", what, " (",
                  value, ") outside [", lo, ", ", hi, "] at byte ", at_ - sizeof value);
    return static_cast<index_t>(value);
  }
  // A u8 that must be 0 or 1.
  bool flag(const char* what) {
    const auto value = scalar<std::uint8_t>(what);
    RAZORKV_CHECK(value <= 1, kInvalidArgument, "restore_state: ", what, " (",
                  static_cast<int>(value), ") is not 0 or 1 at byte ", at_ - 1);
    return value == 1;
  }
  // Copies `bytes` bytes out, after checking the data holds them.
  void copy(void* dst, std::size_t bytes, const char* what) {
    need(bytes, what);
    if (bytes > 0) std::memcpy(dst, data_ + at_, bytes);
    at_ += bytes;
  }
  // Throws unless the data holds `bytes` more bytes.
  void need(std::size_t bytes, const char* what) const {
    RAZORKV_CHECK(bytes <= size_ - at_, kInvalidArgument, "restore_state: the data (", size_,
                  " bytes) ends inside ", what, " at byte ", at_);
  }
  std::size_t remaining() const noexcept { return size_ - at_; }
  std::size_t position() const noexcept { return at_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_, at_ = 0;
};

// save_state and restore_state, with the cache's internals (a friend of razor_kv_cache).
struct razor_state_access {
  template <class T>
  static void save(const razor_kv_cache<T>& cache, state_writer& w) {
    const index_t dim = cache.head_dim();
    for (const auto& l : cache.layers_) {
      w.scalar<std::uint8_t>(l.compressed ? 1 : 0);
      w.scalar<std::int64_t>(l.tokens);
      w.scalar<std::int64_t>(l.prompt_tokens);
      if (!l.compressed) continue;
      for (const auto& head : l.heads) {
        for (const index_t field : {head.window, head.dropped, head.sinks.rows(),
                                    head.recent.capacity(), head.ring_start, head.ring_rows})
          w.scalar<std::int64_t>(field);
        w.scalar<std::uint8_t>(static_cast<std::uint8_t>(head.mean.rows()));
        // Rows [first, first + count) of keys (values: of values); nothing for count 0 (a
        // head without sinks or mean has no storage at all).
        const auto write = [&](const head_rows<T>& rows, index_t first, index_t count,
                               bool values) {
          if (count > 0) w.rows(values ? rows.values(first, count) : rows.keys(first, count));
        };
        const auto both = [&](const head_rows<T>& rows, index_t count) {
          write(rows, 0, count, false);
          write(rows, 0, count, true);
        };
        both(head.sinks, head.sinks.rows());
        const index_t first_part =
            std::min(head.ring_rows, head.recent.capacity() - head.ring_start);
        for (const bool values : {false, true}) {
          write(head.recent, head.ring_start, first_part, values);
          write(head.recent, 0, head.ring_rows - first_part, values);
        }
        both(head.mean, head.mean.rows());
        if (head.sums.rows() > 0) {  // the key sums, then the value sums
          w.append(head.sums.key_row(0), static_cast<std::size_t>(dim) * sizeof(double));
          w.append(head.sums.value_row(0), static_cast<std::size_t>(dim) * sizeof(double));
        }
        index_t blocks = 0;
        head.appended.for_each_block([&](const head_rows<T>&, index_t) { ++blocks; });
        w.scalar<std::int64_t>(blocks);
        head.appended.for_each_block([&](const head_rows<T>& block, index_t rows) {
          w.scalar<std::int64_t>(block.capacity());
          w.scalar<std::int64_t>(rows);
          both(block, rows);
        });
      }
    }
  }

  // Restores the layers of `cache` (built from the saved plan and config) from `r`, checking
  // every count against the rules that made it and every allocation against `max_bytes`.
  template <class T>
  static void restore(razor_kv_cache<T>& cache, state_reader& r, index_t max_bytes) {
    constexpr const char* kWhere = "restore_state";
    using head_state = razor_head<T>;
    const razor_config& config = cache.config_;
    const head_plan& plan = *cache.plan_;
    const index_t dim = cache.head_dim();
    const bool compensate = config.compensation != compensation_mode::kNone;
    const bool bounded = config.decode == decode_mode::kBounded;
    const index_t row_bytes =
        checked_mul(2 * dim, static_cast<index_t>(sizeof(T)), "restore_state: row bytes");
    // K/V bytes allocated so far, checked against max_bytes before each allocation (entries of
    // entry_bytes each: rows of T unless a head's storage says otherwise).
    index_t allocated = 0;
    const auto charge = [&](index_t rows, const char* what, index_t entry_bytes = 0) {
      allocated = checked_add(
          allocated, checked_mul(rows, entry_bytes > 0 ? entry_bytes : row_bytes, kWhere), kWhere);
      RAZORKV_CHECK(allocated <= max_bytes, kInvalidArgument, kWhere, ": ", what,
                    " would bring the restored cache to ", allocated, " bytes, over max_bytes (",
                    max_bytes, ")");
    };
    const auto allocate = [&](index_t rows, const char* what) {
      charge(rows, what);
      return head_rows<T>(rows, dim, cache.memory_resource());
    };
    // Reads `rows` rows of keys, then of values, into the scratch vectors.
    const auto read_rows = [&](index_t rows, std::vector<T>& keys, std::vector<T>& values,
                               const char* what) {
      const auto bytes = static_cast<std::size_t>(checked_mul(rows, dim, kWhere)) * sizeof(T);
      r.need(2 * bytes, what);
      keys.resize(static_cast<std::size_t>(rows * dim));
      values.resize(keys.size());
      r.copy(keys.data(), bytes, what);
      r.copy(values.data(), bytes, what);
    };
    std::vector<T> keys, values;
    const auto view = [&](const std::vector<T>& data, index_t rows) {
      return rows == 0 ? matrix_view<const T>(nullptr, 0, dim)
                       : matrix_view<const T>(data.data(), rows, dim);
    };
    // Reads `rows` rows of one side as `format` stores them: rows of T into `typed`, or
    // quantised rows (their blocks' bytes, taken as they are) into `bytes`.
    std::vector<T> typed_keys, typed_values;
    std::vector<std::uint8_t> key_bytes, value_bytes;
    const auto read_side = [&](index_t rows, const std::optional<row_format>& format,
                               std::vector<T>& typed, std::vector<std::uint8_t>& bytes,
                               const char* what) -> kv_rows<T> {
      if (!format) {
        const auto size = static_cast<std::size_t>(checked_mul(rows, dim, kWhere)) * sizeof(T);
        r.need(size, what);
        typed.resize(static_cast<std::size_t>(rows * dim));
        r.copy(typed.data(), size, what);
        return view(typed, rows);
      }
      const index_t stored = quantised_row_bytes(*format, dim);
      const auto size = static_cast<std::size_t>(checked_mul(rows, stored, kWhere));
      r.need(size, what);
      bytes.resize(size);
      r.copy(bytes.data(), size, what);
      return kv_rows<T>(
          quantised_rows{rows == 0 ? nullptr : bytes.data(), rows, dim, stored, *format});
    };
    for (index_t layer = 0; layer < cache.num_layers(); ++layer) {
      auto& l = cache.layers_[static_cast<std::size_t>(layer)];
      const bool compressed = r.flag("a layer's compressed flag");
      const index_t max_tokens = std::numeric_limits<std::int64_t>::max();
      l.tokens = r.count("a layer's tokens", compressed ? 1 : 0, compressed ? max_tokens : 0);
      l.prompt_tokens = r.count("a layer's prompt tokens", compressed ? 1 : 0, l.tokens);
      if (!compressed) continue;
      l.heads.resize(static_cast<std::size_t>(cache.num_kv_heads()));
      for (index_t h = 0; h < cache.num_kv_heads(); ++h) {
        head_state& head = l.heads[static_cast<std::size_t>(h)];
        head.retrieval = plan.is_retrieval(layer, h);
        // The window and the sinks are what compression gives for the prompt: nothing else.
        index_t window = 0, sinks = 0;
        if (!head.retrieval) {
          window = recent_window(l.prompt_tokens, config.budget(), plan.buffer_override(layer, h));
          if (bounded) window = std::max<index_t>(window, 1);
          sinks = std::min(config.sinks, l.prompt_tokens);
        }
        head.window = r.count("a head's window", window, window);
        // What the head dropped follows from its window: the prompt's tokens before the window
        // (and, when the window slides in bounded mode, every token before it). So a state whose
        // decode mode was flipped, or whose counts were edited, is refused here.
        const index_t dropped =
            head.retrieval
                ? 0
                : std::max<index_t>(0, (bounded ? l.tokens : l.prompt_tokens) - sinks - window);
        head.dropped = r.count("a head's dropped tokens", dropped, dropped);
        const index_t sink_rows = r.count("a head's sinks", sinks, sinks);
        const index_t capacity =
            r.count("a head's ring capacity", bounded && !head.retrieval ? window : 0, max_tokens);
        head.ring_start = r.count("a head's ring start", 0, std::max<index_t>(capacity - 1, 0));
        const index_t ring_rows =
            r.count("a head's ring rows", 0, bounded && !head.retrieval ? window : capacity);
        const index_t mean_rows = r.scalar<std::uint8_t>("a head's mean rows");
        RAZORKV_CHECK(mean_rows == (compensate && head.dropped > 0 ? 1 : 0), kInvalidArgument,
                      kWhere, ": layer ", layer, " kv head ", h, " has ", mean_rows,
                      " mean rows for ", head.dropped, " dropped tokens under compensation ",
                      compensation_mode_name(config.compensation));

        if (!head.retrieval) head.sinks = allocate(config.sinks, "the sinks");
        read_rows(sink_rows, keys, values, "a head's sinks");
        head.sinks.write(0, view(keys, sink_rows), view(values, sink_rows));
        head.sinks.set_rows(sink_rows);
        // The ring and the blocks hold rows as the head's storage says, restored byte for byte.
        const kv_storage& storage = config.storage_for(head.retrieval);
        const index_t entry_bytes =
            storage.key_row_bytes(dim, sizeof(T)) + storage.value_row_bytes(dim, sizeof(T));
        const auto read_stored = [&](index_t rows, const char* what) {
          const kv_rows<T> stored_keys = read_side(rows, storage.keys, typed_keys, key_bytes, what);
          const kv_rows<T> stored_values =
              read_side(rows, storage.values, typed_values, value_bytes, what);
          return std::pair{stored_keys, stored_values};
        };
        charge(capacity, "a head's ring", entry_bytes);
        head.recent = head_rows<T>(capacity, dim, cache.memory_resource(), storage);
        const auto [ring_keys, ring_values] = read_stored(ring_rows, "a head's ring");
        head.push_ring(ring_keys, ring_values);
        if (compensate && !head.retrieval) {
          head.mean = allocate(1, "a head's mean");
          read_rows(mean_rows, keys, values, "a head's mean");
          head.mean.write(0, view(keys, mean_rows), view(values, mean_rows));
          head.sums = head_rows<double>(1, dim, cache.memory_resource());
          r.copy(head.sums.key_row(0), static_cast<std::size_t>(dim) * sizeof(double),
                 "a head's sums");
          r.copy(head.sums.value_row(0), static_cast<std::size_t>(dim) * sizeof(double),
                 "a head's sums");
          head.sums.set_rows(1);
          if (head.dropped == 0) {
            // Nothing folded yet: the sums are zero, or the first dropped token would be folded
            // into whatever they hold.
            const double* sums = head.sums.key_row(0);
            const double* value_sums = head.sums.value_row(0);
            for (index_t c = 0; c < dim; ++c) {
              RAZORKV_CHECK(sums[c] == 0.0 && value_sums[c] == 0.0, kInvalidArgument, kWhere,
                            ": layer ", layer, " kv head ", h,
                            " dropped no token but its compensation sums are not zero");
            }
          }
          if (mean_rows == 1) {
            // The stored mean is the sums' mean rounded to T: anything else was not saved.
            head_state check;
            check.mean = head_rows<T>(1, dim);
            check.sums = head.sums;
            check.dropped = head.dropped;
            check.refresh_mean();
            RAZORKV_CHECK(std::memcmp(check.mean.key_row(0), keys.data(),
                                      static_cast<std::size_t>(dim) * sizeof(T)) == 0 &&
                              std::memcmp(check.mean.value_row(0), values.data(),
                                          static_cast<std::size_t>(dim) * sizeof(T)) == 0,
                          kInvalidArgument, kWhere, ": layer ", layer, " kv head ", h,
                          ": the mean token is not the mean of its sums");
            head.mean.set_rows(1);
          }
        } else {
          RAZORKV_CHECK(mean_rows == 0, kInvalidArgument, kWhere, ": mean rows without sums");
        }
        const bool grows = head.retrieval || !bounded;
        const index_t blocks =
            r.count("a head's blocks", 0,
                    grows && ring_rows == capacity ? static_cast<index_t>(r.remaining()) : 0);
        index_t block_rows = 0;
        for (index_t b = 0; b < blocks; ++b) {
          const index_t block_capacity =
              r.count("a block's capacity", 1, checked_add(l.tokens, config.growth_rows, kWhere));
          const index_t rows =
              r.count("a block's rows", b + 1 < blocks ? block_capacity : 1, block_capacity);
          charge(block_capacity, "a block", entry_bytes);
          // One block of that capacity.
          head.appended.reserve_more(rows, block_capacity, dim, cache.memory_resource(), storage);
          const auto [block_keys, block_values] = read_stored(rows, "a block");
          head.appended.append(block_keys, block_values);
          block_rows += rows;
        }
        // Every token is an entry or was folded: a state that lost or invented one is corrupt.
        const index_t held = checked_add(sink_rows + ring_rows + block_rows, head.dropped, kWhere);
        RAZORKV_CHECK(held == l.tokens, kInvalidArgument, kWhere, ": layer ", layer, " kv head ", h,
                      " accounts for ", held,
                      " tokens (sinks, ring, blocks, dropped), the layer has ", l.tokens);
      }
      l.compressed = true;
    }
  }
};

}  // namespace detail

/// One sequence's razor_kv_cache as bytes: its plan (decisions and buffer overrides; not the
/// plan's provenance), config and every layer's state, so that restore_state gives back a cache
/// that holds, and decodes, bit for bit what this one does. Reserved room and spare blocks are
/// kept as capacities, not bytes. The format is versioned (kRazorStateVersion), little-endian.
template <class T>
std::vector<std::uint8_t> save_state(const razor_kv_cache<T>& cache) {
  RAZORKV_CHECK(detail::host_is_little_endian(), kInvalidArgument,
                "save_state: the format is little-endian and this machine is not");
  detail::state_writer w;
  w.append(detail::kRazorStateMagic, sizeof detail::kRazorStateMagic);
  w.scalar<std::uint32_t>(kRazorStateVersion);
  w.scalar<std::uint32_t>(static_cast<std::uint32_t>(dtype_of<T>()));
  const model_shape& shape = cache.plan().shape();
  for (const index_t n :
       {shape.num_layers, shape.num_query_heads, shape.num_kv_heads, shape.head_dim})
    w.scalar<std::int64_t>(n);
  const razor_config& config = cache.config();
  const auto formats = [&](const kv_storage& storage) {
    for (const std::optional<row_format>& f : {storage.keys, storage.values})
      w.scalar<std::uint8_t>(f ? static_cast<std::uint8_t>(*f) : 0);
  };
  formats(config.storage);
  w.scalar<std::uint8_t>(config.storage.rotate_keys ? 1 : 0);
  w.scalar<std::uint8_t>(config.retrieval_storage ? 1 : 0);
  if (config.retrieval_storage) formats(*config.retrieval_storage);
  for (const index_t n :
       {config.sinks, config.s0, config.fixed_window, config.decode_reserve, config.growth_rows})
    w.scalar<std::int64_t>(n);
  w.scalar<double>(config.c);
  w.scalar<std::uint32_t>(static_cast<std::uint32_t>(config.compensation));
  w.scalar<std::uint32_t>(static_cast<std::uint32_t>(config.decode));
  w.scalar<std::uint8_t>(config.check_finite ? 1 : 0);
  for (index_t l = 0; l < shape.num_layers; ++l) {
    for (index_t h = 0; h < shape.num_kv_heads; ++h) {
      w.scalar<std::uint8_t>(cache.plan().is_retrieval(l, h) ? 1 : 0);
      w.scalar<std::int64_t>(cache.plan().buffer_override(l, h).value_or(0));
    }
  }
  detail::razor_state_access::save(cache, w);
  return std::move(w.out);
}

/// How restore_state builds the cache.
struct restore_options {
  /// K/V bytes the restored cache may allocate (its rows, the room it reserves, the blocks a
  /// growing head chains on next); a state asking for more is an error before the allocation.
  /// Unset: default_max_bytes(state size), so that a small state cannot demand gigabytes.
  std::optional<index_t> max_bytes;
  /// Where its K/V rows come from (see razor_kv_cache); null: std::pmr::get_default_resource().
  std::pmr::memory_resource* resource = nullptr;
  /// When set, the cache shares this plan, and the saved plan must make the same decisions
  /// (shape, retrieval heads, buffer overrides); else it is an error. An engine restoring many
  /// sequences of one model keeps one plan. When null, the cache holds the saved plan.
  std::shared_ptr<const head_plan> plan;
};

/// What restore_state lets a state of `state_bytes` bytes allocate when restore_options sets no
/// max_bytes: 64 MiB more than 8 times its size. A saved cache's rows are in its bytes; the rest
/// is room it reserved (decode_reserve, spare blocks, buffers a cleared layer kept), which this
/// bounds. Pass a larger max_bytes to restore a cache that kept more room than that.
constexpr index_t default_max_bytes(std::size_t state_bytes) noexcept {
  constexpr index_t kFloor = index_t{64} << 20;
  const auto cap = static_cast<std::size_t>((std::numeric_limits<index_t>::max() - kFloor) / 8);
  return state_bytes >= cap ? std::numeric_limits<index_t>::max()
                            : kFloor + 8 * static_cast<index_t>(state_bytes);
}

/// The cache save_state wrote into `data` (`size` bytes), checked throughout: a wrong magic,
/// version or dtype, a count the method could not have produced (a window or sinks other than
/// the rule's for the prompt, tokens lost or invented, a mean token that is not the mean of its
/// sums, dropped tokens other than its window leaves, compensation sums on a head that dropped
/// nothing), data that ends early or runs on are each a kInvalidArgument error naming the field
/// and the byte. It allocates what the saved cache had (reserved room included) and never more
/// than options.max_bytes of K/V (default_max_bytes(size) when unset).
template <class T>
razor_kv_cache<T> restore_state(const std::uint8_t* data, std::size_t size,
                                const restore_options& options = {}) {
  constexpr const char* kWhere = "restore_state";
  RAZORKV_CHECK(detail::host_is_little_endian(), kInvalidArgument, kWhere,
                ": the format is little-endian and this machine is not");
  RAZORKV_CHECK(data != nullptr || size == 0, kInvalidArgument, kWhere, ": data is null");
  const index_t max_bytes = options.max_bytes.value_or(default_max_bytes(size));
  RAZORKV_CHECK(max_bytes >= 0, kInvalidArgument, kWhere, ": max_bytes (", max_bytes,
                ") must be >= 0");
  detail::state_reader r(data, size);
  char magic[sizeof detail::kRazorStateMagic];
  r.copy(magic, sizeof magic, "the magic");
  RAZORKV_CHECK(std::memcmp(magic, detail::kRazorStateMagic, sizeof magic) == 0, kInvalidArgument,
                kWhere, ": the data does not start with \"RZKVSTAT\"; it is not a razorkv state");
  const auto version = r.scalar<std::uint32_t>("the version");
  RAZORKV_CHECK(version == 1 || version == kRazorStateVersion, kInvalidArgument, kWhere,
                ": version (", version, ") is not a version this razorkv reads (1 to ",
                kRazorStateVersion, ")");
  const auto saved_dtype = r.scalar<std::uint32_t>("the dtype");
  RAZORKV_CHECK(saved_dtype == static_cast<std::uint32_t>(dtype_of<T>()), kInvalidArgument, kWhere,
                ": the state holds dtype ", saved_dtype, " (",
                saved_dtype <= 3 ? dtype_name(static_cast<dtype>(saved_dtype)) : "unknown",
                "), the cache stores ", dtype_name<T>());
  // Each (layer, kv head) takes at least 9 bytes of plan: bound the shape by the data.
  const auto limit = static_cast<index_t>(std::min<std::size_t>(r.remaining(), 1u << 30));
  model_shape shape;
  shape.num_layers = r.count("num_layers", 1, limit);
  shape.num_query_heads = r.count("num_query_heads", 1, limit);
  shape.num_kv_heads = r.count("num_kv_heads", 1, limit);
  shape.head_dim = r.count("head_dim", 1, limit);
  const index_t max_index = std::numeric_limits<std::int64_t>::max();
  razor_config config;
  if (version >= 2) {
    const auto format = [&](const char* what) -> std::optional<row_format> {
      const auto code = r.scalar<std::uint8_t>(what);
      RAZORKV_CHECK(code <= static_cast<std::uint8_t>(row_format::kQ4), kInvalidArgument, kWhere,
                    ": ", what, " (", static_cast<int>(code),
                    ") is not 0 (rows of the dtype), 1 (q8) or 2 (q4)");
      if (code == 0) return std::nullopt;
      return static_cast<row_format>(code);
    };
    config.storage.keys = format("config.storage.keys");
    config.storage.values = format("config.storage.values");
    config.storage.rotate_keys = r.flag("config.storage.rotate_keys");
    if (r.flag("config.retrieval_storage's presence")) {
      kv_storage retrieval;
      retrieval.keys = format("config.retrieval_storage.keys");
      retrieval.values = format("config.retrieval_storage.values");
      retrieval.rotate_keys = config.storage.rotate_keys;
      config.retrieval_storage = retrieval;
    }
    check_storage(config.storage, shape.head_dim, "restore_state: config.storage");
    if (config.retrieval_storage) {
      check_storage(*config.retrieval_storage, shape.head_dim,
                    "restore_state: config.retrieval_storage");
    }
  }
  config.sinks = r.count("config.sinks", 0, max_index);
  config.s0 = r.count("config.s0", 0, max_index);
  config.fixed_window = r.count("config.fixed_window", 0, max_index);
  // The room a head reserves when a layer is compressed again, and one block a growing head
  // chains on at its next append, must fit in max_bytes: a call after restore_state must not ask
  // for memory the loader's budget would have refused.
  index_t block_row_bytes = 0;
  for (const bool retrieval : {false, true}) {
    const kv_storage& storage = config.storage_for(retrieval);
    block_row_bytes =
        std::max(block_row_bytes, storage.key_row_bytes(shape.head_dim, sizeof(T)) +
                                      storage.value_row_bytes(shape.head_dim, sizeof(T)));
  }
  const index_t budget_rows = max_bytes / block_row_bytes;
  config.decode_reserve = r.count("config.decode_reserve", 0, budget_rows);
  config.growth_rows = r.count("config.growth_rows", 1, std::max<index_t>(1, budget_rows));
  config.c = r.scalar<double>("config.c");
  config.compensation =
      static_cast<compensation_mode>(r.scalar<std::uint32_t>("config.compensation"));
  config.decode = static_cast<decode_mode>(r.scalar<std::uint32_t>("config.decode"));
  config.check_finite = r.flag("config.check_finite");
  check_config(config, kWhere);
  r.need(static_cast<std::size_t>(detail::checked_mul(
             detail::checked_mul(shape.num_layers, shape.num_kv_heads, kWhere), 9, kWhere)),
         "the plan");
  head_plan plan(shape);
  for (index_t l = 0; l < shape.num_layers; ++l) {
    for (index_t h = 0; h < shape.num_kv_heads; ++h) {
      plan.set_retrieval(l, h, r.flag("a plan's retrieval flag"));
      const index_t buffer = r.count("a plan's buffer override", 0, max_index);
      if (buffer > 0) plan.set_buffer_override(l, h, buffer);
    }
  }
  std::shared_ptr<const head_plan> shared = options.plan;
  if (shared != nullptr) {
    const model_shape& given = shared->shape();
    RAZORKV_CHECK(given.num_layers == shape.num_layers &&
                      given.num_query_heads == shape.num_query_heads &&
                      given.num_kv_heads == shape.num_kv_heads && given.head_dim == shape.head_dim,
                  kInvalidArgument, kWhere, ": options.plan is for [", given.num_layers,
                  " layers, ", given.num_query_heads, " query heads, ", given.num_kv_heads,
                  " kv heads, dim ", given.head_dim, "], the state for [", shape.num_layers, ", ",
                  shape.num_query_heads, ", ", shape.num_kv_heads, ", ", shape.head_dim, "]");
    for (index_t l = 0; l < shape.num_layers; ++l) {
      for (index_t h = 0; h < shape.num_kv_heads; ++h) {
        RAZORKV_CHECK(shared->is_retrieval(l, h) == plan.is_retrieval(l, h) &&
                          shared->buffer_override(l, h) == plan.buffer_override(l, h),
                      kInvalidArgument, kWhere,
                      ": options.plan differs from the saved plan at layer ", l, " kv head ", h);
      }
    }
  } else {
    shared = std::make_shared<const head_plan>(std::move(plan));
  }
  razor_kv_cache<T> cache(std::move(shared), config, options.resource);
  detail::razor_state_access::restore(cache, r, max_bytes);
  RAZORKV_CHECK(r.remaining() == 0, kInvalidArgument, kWhere, ": ", r.remaining(),
                " bytes follow the state's end at byte ", r.position());
  return cache;
}
/// The same over the bytes save_state returned.
template <class T>
razor_kv_cache<T> restore_state(const std::vector<std::uint8_t>& bytes,
                                const restore_options& options = {}) {
  return restore_state<T>(bytes.data(), bytes.size(), options);
}
/// restore_state with only a bound on the K/V bytes it may allocate.
template <class T>
razor_kv_cache<T> restore_state(const std::uint8_t* data, std::size_t size, index_t max_bytes) {
  restore_options options;
  options.max_bytes = max_bytes;
  return restore_state<T>(data, size, options);
}
template <class T>
razor_kv_cache<T> restore_state(const std::vector<std::uint8_t>& bytes, index_t max_bytes) {
  return restore_state<T>(bytes.data(), bytes.size(), max_bytes);
}

RAZORKV_END_NAMESPACE
