// examples/engine/tasks.hpp: the evaluation tasks of the trained model (copy, needles scored per
// byte and whole, key/value retrieval, held-out likelihood), each run on one dense prefill under
// any set of cache policies.
//
// Every trial prefills a context densely, lets each policy compress it to the same memory
// budget, then feeds a continuation through decode over the compressed cache: the question of a
// retrieval trial, the second copy of a passage, or the text after a prefix is read by the
// compressed cache, never by the dense prefill.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <razorkv/razorkv.hpp>

#include "tiny_llama.hpp"

namespace tiny_llama {

/// Held-out text: examples/engine/model/heldout.txt, a frozen copy of razorkv's own public
/// headers (sorted by path) as they were when the evaluation ran. The model never saw them: it
/// trained on Python's standard library and Eigen's and libstdc++'s headers. Frozen, so that later
/// edits of the headers do not change the evaluation's trials, and stored as data
/// (.gitattributes marks it binary, so that git grep and diffs skip its stale code).
inline std::string heldout_text(const std::string& repo_root) {
  const std::string path = repo_root + "/examples/engine/model/heldout.txt";
  std::ifstream in(path, std::ios::binary);
  RAZORKV_CHECK(in.good(), kInvalidArgument, "heldout_text: cannot open \"", path,
                "\"; is repo_root (", repo_root, ") the repository's root?");
  std::ostringstream content;
  content << in.rdbuf();
  std::string text = std::move(content).str();
  RAZORKV_CHECK(text.size() > 65536, kInvalidArgument, "heldout_text: \"", path, "\" holds ",
                text.size(), " bytes, too little for the trials");
  return text;
}

/// One trial: a context the policies compress, and a continuation fed through decode.
struct trial {
  std::vector<int> context;
  std::vector<int> continuation;  ///< teacher-forced through decode
  index_t generate = 0;           ///< then this many greedy tokens (retrieval, whole needle)
  std::string answer;             ///< the expected greedy tokens, all of them right to count
  bool newline_ends = true;       ///< a generated newline ends the answer (not in a byte run)
};

/// What one policy did on one trial.
struct trial_outcome {
  double correct =
      0;  ///< copy: predictions right inside the second copy; retrieval: exact match (0/1)
  double predictions = 0;  ///< copy: predictions made
  double nll = 0;          ///< summed negative log-likelihood (nats) of continuation[1..]
  std::string generated;   ///< retrieval, whole needle: the greedy answer
  index_t kv_bytes = 0;    ///< K/V held after compressing the context
};

inline std::string slice(const std::string& text, std::mt19937_64& rng, std::size_t length) {
  const std::size_t start =
      static_cast<std::size_t>(razorkv::detail::uniform_below(rng, text.size() - length));
  return text.substr(start, length);
}

/// Copy: a 64-byte passage, held-out filler, then the passage again (the continuation); the
/// score is greedy next-token accuracy inside the second copy.
inline trial copy_trial(const std::string& text, index_t context_tokens, std::mt19937_64& rng) {
  const std::string passage = slice(text, rng, 64);
  const std::string filler =
      slice(text, rng, static_cast<std::size_t>(context_tokens) - passage.size());
  return {tokenize(passage + filler), tokenize(passage), 0, ""};
}

/// Needle: a run of 32 random bytes (ids 0..255, as the calibration probe draws them) at `depth`
/// of held-out filler (0 = start, 1 = end of the context); the continuation is the run again, and
/// the score is greedy next-token accuracy inside it: the model must find the run and copy it.
inline trial needle_trial(const std::string& text, index_t context_tokens, double depth,
                          std::mt19937_64& rng) {
  std::vector<int> run(32);
  for (int& id : run) id = static_cast<int>(razorkv::detail::uniform_below(rng, 256));
  const std::size_t filler_size = static_cast<std::size_t>(context_tokens) - run.size();
  std::vector<int> context = tokenize(slice(text, rng, filler_size));
  const auto at = static_cast<std::ptrdiff_t>(depth * static_cast<double>(filler_size));
  context.insert(context.begin() + at, run.begin(), run.end());
  return {context, run, 0, ""};
}

/// What a whole-answer needle is made of: random bytes (ids 0..255, as the calibration probe
/// draws them), digits, lowercase letters, letters and digits mixed, or a UUID (36 characters:
/// lowercase hex in 8-4-4-4-12 groups).
enum class byte_needle { kRandomBytes, kDigits, kLetters, kAlphanumeric, kUuid };

inline constexpr byte_needle kByteNeedles[] = {byte_needle::kRandomBytes, byte_needle::kDigits,
                                               byte_needle::kLetters, byte_needle::kAlphanumeric,
                                               byte_needle::kUuid};

inline const char* byte_needle_name(byte_needle kind) {
  switch (kind) {
    case byte_needle::kRandomBytes:
      return "bytes";
    case byte_needle::kDigits:
      return "digits";
    case byte_needle::kLetters:
      return "letters";
    case byte_needle::kAlphanumeric:
      return "alnum";
    case byte_needle::kUuid:
      return "uuid";
  }
  return "?";
}

/// The needle itself: 32 characters of `kind`'s alphabet, or a 36-character UUID.
inline std::string make_byte_needle(byte_needle kind, std::mt19937_64& rng) {
  const auto pick = [&](const char* alphabet, std::size_t size) {
    return alphabet[razorkv::detail::uniform_below(rng, size)];
  };
  std::string needle;
  if (kind == byte_needle::kUuid) {
    for (const int group : {8, 4, 4, 4, 12}) {
      if (!needle.empty()) needle += '-';
      for (int i = 0; i < group; ++i) needle += pick("0123456789abcdef", 16);
    }
    return needle;
  }
  for (int i = 0; i < 32; ++i) {
    switch (kind) {
      case byte_needle::kRandomBytes:
        needle += static_cast<char>(razorkv::detail::uniform_below(rng, 256));
        break;
      case byte_needle::kDigits:
        needle += pick("0123456789", 10);
        break;
      case byte_needle::kLetters:
        needle += pick("abcdefghijklmnopqrstuvwxyz", 26);
        break;
      default:
        needle += pick("abcdefghijklmnopqrstuvwxyz0123456789", 36);
        break;
    }
  }
  return needle;
}

/// Whole-answer needle: a needle of `kind` at `depth` of held-out filler (0 = start, 1 = end of
/// the context); the continuation is its first kWholeNeedleCue bytes, and the rest must be
/// generated greedily, every byte right, to count: a per-byte score hides answers that go wrong
/// halfway.
inline constexpr std::size_t kWholeNeedleCue = 8;

inline trial whole_needle_trial(const std::string& text, index_t context_tokens, double depth,
                                byte_needle kind, std::mt19937_64& rng) {
  const std::string needle = make_byte_needle(kind, rng);
  const std::size_t filler_size = static_cast<std::size_t>(context_tokens) - needle.size();
  std::string context = slice(text, rng, filler_size);
  context.insert(static_cast<std::size_t>(depth * static_cast<double>(filler_size)), needle);
  const std::string rest = needle.substr(kWholeNeedleCue);
  return {tokenize(context), tokenize(needle.substr(0, kWholeNeedleCue)),
          static_cast<index_t>(rest.size()), rest, false};
}

/// Retrieval: four "key KKKK: value VVVVV" lines in held-out filler, the asked one at `depth`
/// (0 = start, 1 = end of the context); the continuation asks "key KKKK: value ", and the
/// answer is the five digits generated greedily.
inline trial retrieval_trial(const std::string& text, index_t context_tokens, double depth,
                             std::mt19937_64& rng) {
  const auto line = [](std::uint64_t key, std::uint64_t value) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "key %04u: value %05u\n", static_cast<unsigned>(key),
                  static_cast<unsigned>(value));
    return std::string(buffer);
  };
  std::vector<std::uint64_t> keys;
  while (keys.size() < 4) {
    const std::uint64_t k = razorkv::detail::uniform_below(rng, 10000);
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  std::vector<std::string> lines;
  for (std::uint64_t k : keys)
    lines.push_back(line(k, razorkv::detail::uniform_below(rng, 100000)));
  const std::size_t filler_size = static_cast<std::size_t>(context_tokens) - 4 * lines[0].size();
  std::string filler = slice(text, rng, filler_size);
  // The asked line (lines[0]) at `depth` of the filler, the three others at random depths.
  std::vector<std::pair<std::size_t, std::string>> inserts = {
      {static_cast<std::size_t>(depth * static_cast<double>(filler_size)), lines[0]}};
  for (std::size_t i = 1; i < lines.size(); ++i) {
    inserts.emplace_back(static_cast<std::size_t>(razorkv::detail::uniform_below(rng, filler_size)),
                         lines[i]);
  }
  std::sort(inserts.begin(), inserts.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [at, text_line] : inserts) filler.insert(at, text_line);
  const std::string question = lines[0].substr(0, lines[0].size() - 6);  // "key KKKK: value "
  return {tokenize(filler), tokenize(question), 12, lines[0].substr(lines[0].size() - 6, 5)};
}

/// Likelihood: a held-out prefix (the context) and the next 128 bytes (the continuation).
inline trial likelihood_trial(const std::string& text, index_t context_tokens,
                              std::mt19937_64& rng) {
  const std::string passage = slice(text, rng, static_cast<std::size_t>(context_tokens) + 128);
  return {tokenize(passage.substr(0, static_cast<std::size_t>(context_tokens))),
          tokenize(passage.substr(static_cast<std::size_t>(context_tokens))), 0, ""};
}

inline int argmax(const Eigen::VectorXf& logits) {
  Eigen::Index best = 0;
  logits.maxCoeff(&best);
  return static_cast<int>(best);
}

inline double log_softmax_at(const Eigen::VectorXf& logits, int token) {
  const float top = logits.maxCoeff();
  return static_cast<double>(logits[token] - top) -
         std::log(static_cast<double>((logits.array() - top).exp().sum()));
}

/// Runs `t`'s continuation (and generation) through decode over `cache`, which holds the
/// compressed context; fills `outcome`.
template <class Cache>
void run_continuation(const model& m, Cache& cache, const trial& t, trial_outcome& outcome) {
  index_t position = static_cast<index_t>(t.context.size());
  Eigen::VectorXf logits;
  for (std::size_t i = 0; i < t.continuation.size(); ++i) {
    if (i > 0) {  // the prediction of continuation[i] was made over the compressed cache
      outcome.nll -= log_softmax_at(logits, t.continuation[i]);
      outcome.correct += argmax(logits) == t.continuation[i] ? 1 : 0;
      outcome.predictions += 1;
    }
    logits = m.decode(cache, t.continuation[i], position++);
  }
  if (t.generate == 0) return;
  outcome.correct = 0;
  for (index_t g = 0; g < t.generate; ++g) {
    const int next = argmax(logits);
    if (next == '\n' && t.newline_ends) break;
    outcome.generated += static_cast<char>(next);
    if (g + 1 < t.generate) logits = m.decode(cache, next, position++);
  }
  outcome.correct = outcome.generated.substr(0, t.answer.size()) == t.answer ? 1 : 0;
}

/// One dense prefill of the trial's context, then every policy at `budget`.
inline std::vector<trial_outcome> run_trial(const model& m, const trial& t,
                                            const std::vector<razorkv::policy>& policies,
                                            const razorkv::memory_budget& budget) {
  const prefill_state state = m.prefill(t.context, false);
  const razorkv::prompt_kv<float> prompt = m.prompt_of(state);
  std::vector<trial_outcome> outcomes;
  for (const razorkv::policy& p : policies) {
    razorkv::any_kv_cache<float> cache = razorkv::compress_prompt(p, prompt, budget);
    trial_outcome outcome;
    outcome.kv_bytes = cache.kv_bytes();
    run_continuation(m, cache, t, outcome);
    outcomes.push_back(std::move(outcome));
  }
  return outcomes;
}

/// RazorAttention with chunked prefill: the context goes in `chunk`-token chunks straight into a
/// razor cache sized to `budget` (the dense K/V never exists, and a later chunk's non-retrieval
/// heads read the compressed past), then the same continuation as run_trial's.
inline trial_outcome run_chunked_trial(const model& m, const trial& t,
                                       const razorkv::head_plan& plan,
                                       const razorkv::memory_budget& budget, index_t chunk) {
  const auto tokens = static_cast<index_t>(t.context.size());
  const index_t entries =
      razorkv::entries_per_head(budget, m.shape(), tokens, static_cast<index_t>(sizeof(float)));
  razorkv::razor_kv_cache<float> cache(plan,
                                       razorkv::razor_config_for_budget(plan, tokens, entries));
  m.prefill_chunked(cache, t.context, chunk);
  trial_outcome outcome;
  outcome.kv_bytes = cache.kv_bytes();
  run_continuation(m, cache, t, outcome);
  return outcome;
}

}  // namespace tiny_llama
