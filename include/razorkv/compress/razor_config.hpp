// razorkv/compress/razor_config.hpp: how razor_kv_cache compresses a non-retrieval head (sinks,
// recent window, compensation token) and how it behaves during decode (docs/method.md, section 4).
#pragma once

#include <optional>

#include "razorkv/compress/kv_memory.hpp"
#include "razorkv/compress/window_rule.hpp"
#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/error.hpp"
#include "razorkv/quant/storage.hpp"

RAZORKV_BEGIN_NAMESPACE

/// What becomes of the tokens a non-retrieval head drops.
enum class compensation_mode {
  kWeighted,    ///< one mean token whose logit gets + ln(count): the paper (default)
  kUnweighted,  ///< one mean token with weight 1: what one public deployment does (ablation)
  kNone,        ///< nothing: plain truncation to sinks + window, StreamingLLM-like (ablation)
};

/// What decode does with the tokens it appends.
enum class decode_mode {
  kAppend,   ///< the paper: every head keeps every generated token, windows grow
  kBounded,  ///< a non-retrieval head's window slides; what leaves it is folded into the
             ///< compensation token, so the head never holds more than sinks + 1 + window
};

inline const char* compensation_mode_name(compensation_mode m) noexcept {
  switch (m) {
    case compensation_mode::kWeighted:
      return "weighted";
    case compensation_mode::kUnweighted:
      return "unweighted";
    case compensation_mode::kNone:
      return "none";
  }
  return "unknown";
}

inline const char* decode_mode_name(decode_mode m) noexcept {
  switch (m) {
    case decode_mode::kAppend:
      return "append";
    case decode_mode::kBounded:
      return "bounded";
  }
  return "unknown";
}

/// Parameters of razor_kv_cache: the window rule (sinks, s0, c, fixed_window; the paper's
/// defaults), and what becomes of the tokens a non-retrieval head drops.
struct razor_config : window_rule {
  compensation_mode compensation = compensation_mode::kWeighted;
  decode_mode decode = decode_mode::kAppend;
  /// Extra rows reserved at compression for tokens appended later, per growing head (every
  /// retrieval head; every head in append mode), so that the first decode steps never
  /// reallocate. Beyond it a head grows by half its size at a time.
  index_t decode_reserve = 0;
  /// Rows per block that a growing head chains on once its room is used: blocks are spans of
  /// their own, so growing never copies what the head holds (and never stalls a decode step on
  /// a copy of the whole head). Must be >= 1; whatever its value, a retrieval head decodes bit
  /// for bit as the dense cache (decode's blocks do not depend on spans).
  index_t growth_rows = 256;
  /// The checked mode: compression and append read every key and value they are handed and
  /// name the first NaN or infinity as an error (one extra pass over the prompt). Unchecked,
  /// the default, a non-finite token that is dropped poisons its head's compensation token, so
  /// that head's attention output is NaN for the rest of the sequence, silently.
  bool check_finite = false;
  /// How the rows of windows and retrieval heads are stored (quant/storage.hpp): as T (default)
  /// or in 8-/4-bit blocks, keys optionally rotated. Sinks and compensation tokens stay T (each
  /// weighs as much as many tokens), rotated with the rest when rotate_keys is set.
  kv_storage storage;
  /// When set, how retrieval heads' rows are stored instead (e.g. 8-bit retrieval heads beside
  /// 4-bit windows: a retrieval head reads every token by its key, so its keys may need more
  /// precision than a window's). Its rotate_keys must equal storage.rotate_keys (the cache's
  /// keys are all rotated or none).
  std::optional<kv_storage> retrieval_storage;

  /// The rows a head stores as config'd: retrieval_storage (else storage) for a retrieval head.
  const kv_storage& storage_for(bool retrieval) const noexcept {
    return retrieval && retrieval_storage ? *retrieval_storage : storage;
  }

  /// The public deployment's fixed-capacity local heads: `capacity` entries = `sinks` sinks +
  /// 1 mean token + (capacity - sinks - 1) recent tokens, with bounded decode and an
  /// unweighted mean token, as that deployment does. 256 = 4 + 1 + 251 by default.
  static razor_config fixed_capacity(
      index_t capacity = 256, index_t sinks = 4,
      compensation_mode compensation = compensation_mode::kUnweighted) {
    RAZORKV_CHECK(sinks >= 0 && capacity >= sinks + 2, kInvalidArgument,
                  "razor_config::fixed_capacity: capacity (", capacity, ") must be >= sinks (",
                  sinks, ") + 2");
    razor_config config;
    config.sinks = sinks;
    config.fixed_window = capacity - sinks - 1;
    config.compensation = compensation;
    config.decode = decode_mode::kBounded;
    return config;
  }

  /// The sizing rule as the memory calculator (compress/kv_memory.hpp) takes it.
  razor_budget budget() const noexcept {
    razor_budget b;
    static_cast<window_rule&>(b) = *this;
    b.compensation_token = compensation != compensation_mode::kNone;
    b.storage = storage;
    b.retrieval_storage = retrieval_storage;
    return b;
  }
};

/// Throws errc::kInvalidArgument naming the first bad field of `config`.
inline void check_config(const razor_config& config, const char* where) {
  check_budget(config.budget(), where);
  RAZORKV_CHECK(config.decode_reserve >= 0, kInvalidArgument, where, ": decode_reserve (",
                config.decode_reserve, ") must be >= 0");
  RAZORKV_CHECK(config.growth_rows >= 1, kInvalidArgument, where, ": growth_rows (",
                config.growth_rows, ") must be >= 1");
  RAZORKV_CHECK(config.compensation == compensation_mode::kWeighted ||
                    config.compensation == compensation_mode::kUnweighted ||
                    config.compensation == compensation_mode::kNone,
                kInvalidArgument, where, ": compensation (", static_cast<int>(config.compensation),
                ") is not a compensation_mode");
  RAZORKV_CHECK(config.decode == decode_mode::kAppend || config.decode == decode_mode::kBounded,
                kInvalidArgument, where, ": decode (", static_cast<int>(config.decode),
                ") is not a decode_mode");
}

RAZORKV_END_NAMESPACE
