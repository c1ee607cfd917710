// razorkv/scoring/probe.hpp: the calibration probe of docs/method.md, section 2: P random token ids
// repeated R times (optionally after one BOS id), drawn deterministically on every platform.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "razorkv/config.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/detail/math.hpp"
#include "razorkv/detail/random.hpp"
#include "razorkv/error.hpp"

RAZORKV_BEGIN_NAMESPACE

/// How to build a probe. Ids are drawn from [min_id, max_id) with std::mt19937_64 seeded with
/// `seed` and razorkv's own uniform mapping, so the same config gives the same ids everywhere
/// (std::uniform_int_distribution differs between standard libraries).
struct probe_config {
  index_t num_random_tokens = 2500;    ///< P: distinct positions in one copy
  index_t repeats = 4;                 ///< R: copies of the random block (>= 2)
  std::int64_t min_id = 0;             ///< smallest id drawn
  std::int64_t max_id = 0;             ///< one past the largest id drawn (the vocabulary size)
  std::optional<std::int64_t> bos_id;  ///< prepended once when set; never drawn
  std::uint64_t seed = 0;
  /// false (default): the P ids of a copy are distinct, so every score mask is exact.
  /// true: ids are drawn with replacement, as the reference implementation does; the scorers
  /// then count every earlier occurrence of the same id.
  bool allow_duplicates = false;
};

/// The probe token sequence and the positions the scorers read. Positions exclude the BOS:
/// position 0 is the first random token, and sequence index = position + (has_bos ? 1 : 0).
class probe {
 public:
  /// Checks the config and draws the ids; throws razorkv::error naming a bad field.
  explicit probe(const probe_config& config);
  /// A probe the engine already has (e.g. read back from probe.npy): `tokens` must be
  /// [bos,] then R identical copies of P ids; throws naming the first position that differs.
  probe(std::vector<std::int64_t> tokens, index_t num_random_tokens, index_t repeats, bool has_bos);

  /// The whole sequence to prefill: [bos,] copy 1, ..., copy R. Length length().
  const std::vector<std::int64_t>& tokens() const noexcept { return tokens_; }
  index_t num_random_tokens() const noexcept { return num_random_; }
  index_t repeats() const noexcept { return repeats_; }
  bool has_bos() const noexcept { return has_bos_; }
  /// Sequence length L = P * R (+ 1 with BOS).
  index_t length() const noexcept { return static_cast<index_t>(tokens_.size()); }
  /// Id at position p (BOS excluded), p in [0, P * R).
  std::int64_t id_at(index_t position) const noexcept {
    return tokens_[static_cast<std::size_t>(position + (has_bos_ ? 1 : 0))];
  }
  /// Positions in the first copy that hold the same id as slot s (s in [0, P)), s included.
  /// Exactly {s} unless duplicates were allowed.
  const std::vector<index_t>& same_id_slots(index_t slot) const noexcept {
    return same_id_slots_[static_cast<std::size_t>(slot)];
  }

 private:
  void index_slots();

  std::vector<std::int64_t> tokens_;
  std::vector<std::vector<index_t>> same_id_slots_;  // [P][occurrences]
  index_t num_random_ = 0;
  index_t repeats_ = 0;
  bool has_bos_ = false;
};

inline probe::probe(const probe_config& config) {
  RAZORKV_CHECK(config.num_random_tokens > 0, kInvalidArgument, "probe: num_random_tokens (",
                config.num_random_tokens, ") must be > 0");
  RAZORKV_CHECK(config.repeats >= 2, kInvalidArgument, "probe: repeats (", config.repeats,
                ") must be >= 2 (scores read copies 2..R)");
  RAZORKV_CHECK(config.max_id > config.min_id, kInvalidArgument, "probe: id range [", config.min_id,
                ", ", config.max_id, ") is empty");
  // The range size, computed without signed overflow.
  const std::uint64_t range =
      static_cast<std::uint64_t>(config.max_id) - static_cast<std::uint64_t>(config.min_id);
  // The random tokens never draw the BOS id: a copy of it among them would be an earlier copy of
  // some of them, and the masks would count attention to the BOS as echo or induction.
  const bool bos_in_range =
      config.bos_id && *config.bos_id >= config.min_id && *config.bos_id < config.max_id;
  const std::uint64_t drawable = range - (bos_in_range ? 1 : 0);
  RAZORKV_CHECK(drawable >= 1 && (config.allow_duplicates ||
                                  drawable >= static_cast<std::uint64_t>(config.num_random_tokens)),
                kInvalidArgument, "probe: id range [", config.min_id, ", ", config.max_id,
                ") holds ", drawable, " ids", bos_in_range ? " besides bos_id" : "",
                ", fewer than num_random_tokens (", config.num_random_tokens, ") distinct ids");
  const index_t length = detail::checked_add(
      detail::checked_mul(config.num_random_tokens, config.repeats, "probe: length"),
      config.bos_id ? 1 : 0, "probe: length");

  num_random_ = config.num_random_tokens;
  repeats_ = config.repeats;
  has_bos_ = config.bos_id.has_value();

  std::mt19937_64 rng(config.seed);
  std::vector<std::int64_t> block(static_cast<std::size_t>(num_random_));
  std::unordered_set<std::int64_t> used;
  for (auto& id : block) {
    do {
      id = static_cast<std::int64_t>(static_cast<std::uint64_t>(config.min_id) +
                                     detail::uniform_below(rng, range));
    } while ((bos_in_range && id == *config.bos_id) ||
             (!config.allow_duplicates && !used.insert(id).second));
  }

  tokens_.reserve(static_cast<std::size_t>(length));
  if (has_bos_) tokens_.push_back(*config.bos_id);
  for (index_t r = 0; r < repeats_; ++r) tokens_.insert(tokens_.end(), block.begin(), block.end());

  index_slots();
}

inline probe::probe(std::vector<std::int64_t> tokens, index_t num_random_tokens, index_t repeats,
                    bool has_bos)
    : tokens_(std::move(tokens)),
      num_random_(num_random_tokens),
      repeats_(repeats),
      has_bos_(has_bos) {
  RAZORKV_CHECK(num_random_tokens > 0, kInvalidArgument, "probe: num_random_tokens (",
                num_random_tokens, ") must be > 0");
  RAZORKV_CHECK(repeats >= 2, kInvalidArgument, "probe: repeats (", repeats,
                ") must be >= 2 (scores read copies 2..R)");
  const index_t expected =
      detail::checked_add(detail::checked_mul(num_random_tokens, repeats, "probe: length"),
                          has_bos ? 1 : 0, "probe: length");
  RAZORKV_CHECK(static_cast<index_t>(tokens_.size()) == expected, kShapeMismatch,
                "probe: ", tokens_.size(), " tokens given, expected ", num_random_tokens, " x ",
                repeats, has_bos ? " + 1 BOS" : "", " = ", expected);
  for (index_t p = num_random_tokens; p < num_random_tokens * repeats; ++p) {
    RAZORKV_CHECK(id_at(p) == id_at(p % num_random_tokens), kInvalidArgument, "probe: position ", p,
                  " holds id ", id_at(p), ", but the copy of position ", p % num_random_tokens,
                  " holds ", id_at(p % num_random_tokens));
  }
  index_slots();
}

// same_id_slots_[s]: every slot of the first copy with the id of slot s (duplicates counted).
inline void probe::index_slots() {
  std::unordered_map<std::int64_t, std::vector<index_t>> slots_of;
  for (index_t s = 0; s < num_random_; ++s) slots_of[id_at(s)].push_back(s);
  same_id_slots_.resize(static_cast<std::size_t>(num_random_));
  for (index_t s = 0; s < num_random_; ++s)
    same_id_slots_[static_cast<std::size_t>(s)] = slots_of[id_at(s)];
}

RAZORKV_END_NAMESPACE
