// examples/engine/long_context_tasks.hpp: long-context retrieval prompts in the spirit of RULER
// (needles, multi-key, multi-value, variable tracking, passage copy) over any tokenizer.
//
// A prompt is a chat turn of exactly `length` tokens: the document (held-out text with the
// task's sentences inserted at sentence boundaries), then the question and the start of the
// answer. Policies compress the document; the question is decoded over the compressed cache, so
// a policy cannot know what will be asked (query-agnostic) unless the caller compresses both.
// An answer counts only when the generated text holds every expected string whole.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <razorkv/razorkv.hpp>

namespace tiny_llama {

using razorkv::index_t;

/// What a prompt asks.
enum class task_kind {
  kSingleNeedle,      ///< one "special magic" value for a key, find it
  kMultiKey,          ///< four values for four keys, find the asked key's
  kMultiValue,        ///< four values for one key, find all four
  kVariableTracking,  ///< VAR A = 12345, VAR B = VAR A, ...: name every variable holding the value
  kPassageCopy,       ///< a quote of 16 random words, repeat it word for word
};

/// What a needle's value is made of.
enum class needle_kind {
  kNumber,        ///< seven digits, "4819203"
  kWord,          ///< one word, "lantern"
  kAlphanumeric,  ///< ten upper-case letters and digits, "K7QX2M9PLA"
  kUuid,          ///< a UUID, 36 characters: the long needle that must be copied whole
};

inline const char* task_name(task_kind t) {
  switch (t) {
    case task_kind::kSingleNeedle:
      return "single";
    case task_kind::kMultiKey:
      return "multikey";
    case task_kind::kMultiValue:
      return "multivalue";
    case task_kind::kVariableTracking:
      return "vartrack";
    case task_kind::kPassageCopy:
      return "copy";
  }
  return "unknown";
}

inline const char* needle_name(needle_kind n) {
  switch (n) {
    case needle_kind::kNumber:
      return "number";
    case needle_kind::kWord:
      return "word";
    case needle_kind::kAlphanumeric:
      return "alnum";
    case needle_kind::kUuid:
      return "uuid";
  }
  return "unknown";
}

/// One prompt to generate.
struct task_spec {
  task_kind task = task_kind::kSingleNeedle;
  needle_kind needle = needle_kind::kNumber;  ///< values' kind (single, multi-key, multi-value)
  index_t length = 1024;                      ///< document + question, in tokens
  double depth = 0.5;  ///< where the asked sentence goes: 0 = start of the text, 1 = its end
};

/// The chat template around the task's text; SmolLM2's (ChatML) by default.
struct chat_format {
  std::string user = "<|im_start|>user\n";
  std::string assistant = "<|im_end|>\n<|im_start|>assistant\n";
};

/// A generated prompt: what the policies compress, what is decoded over the compressed cache,
/// and the strings a whole answer holds.
struct task_prompt {
  task_spec spec;
  std::vector<int> document;          ///< chat start + held-out text with the inserted sentences
  std::vector<int> question;          ///< question, end of turn and the start of the answer
  std::vector<std::string> expected;  ///< every one must appear in the generated text
  index_t max_answer_tokens = 0;      ///< generation stops here at the latest
  bool single_line = true;  ///< a newline ends the answer (not for lists: multi-value, tracking)
  std::vector<index_t> inserted_at;        ///< document token where each inserted sentence starts
  std::vector<std::vector<int>> inserted;  ///< each inserted sentence's tokens, as placed

  index_t length() const { return static_cast<index_t>(document.size() + question.size()); }
};

/// Whether `answer` holds every expected string whole.
inline bool answer_is_correct(const std::string& answer, const std::vector<std::string>& expected) {
  return std::all_of(expected.begin(), expected.end(),
                     [&](const std::string& e) { return answer.find(e) != std::string::npos; });
}

namespace task_detail {

inline const std::vector<std::string>& words() {
  static const std::vector<std::string> kWords = {
      "amber",  "anchor",  "apple",   "arrow",  "autumn",  "badger",  "basket", "beacon",
      "birch",  "blanket", "bridge",  "bronze", "cabin",   "candle",  "canyon", "carpet",
      "castle", "cedar",   "chalk",   "cherry", "cobalt",  "comet",   "copper", "coral",
      "cotton", "crystal", "dolphin", "ember",  "falcon",  "feather", "fern",   "fiddle",
      "garden", "glacier", "granite", "harbor", "hazel",   "helmet",  "island", "jasmine",
      "kettle", "lantern", "lemon",   "marble", "meadow",  "mirror",  "nectar", "needle",
      "orchid", "otter",   "paddle",  "pebble", "pepper",  "pillow",  "quartz", "raven",
      "ribbon", "river",   "saddle",  "salmon", "thistle", "timber",  "velvet", "walnut"};
  return kWords;
}

inline std::uint64_t pick(std::mt19937_64& rng, std::uint64_t n) {
  return razorkv::detail::uniform_below(rng, n);
}

inline std::string word(std::mt19937_64& rng) { return words()[pick(rng, words().size())]; }

inline std::string value(needle_kind kind, std::mt19937_64& rng) {
  static const char kAlnum[] = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
  static const char kHex[] = "0123456789abcdef";
  std::string v;
  switch (kind) {
    case needle_kind::kNumber:
      v = std::to_string(1000000 + pick(rng, 9000000));
      break;
    case needle_kind::kWord:
      v = word(rng);
      break;
    case needle_kind::kAlphanumeric:
      // At least one letter and one digit, so that the value is neither a word nor a number.
      while (v.empty() || v.find_first_of("0123456789") == std::string::npos ||
             v.find_first_not_of("0123456789") == std::string::npos) {
        v.clear();
        for (int i = 0; i < 10; ++i) v += kAlnum[pick(rng, 32)];
      }
      break;
    case needle_kind::kUuid:
      for (int i = 0; i < 32; ++i) {
        if (i == 8 || i == 12 || i == 16 || i == 20) v += '-';
        v += kHex[pick(rng, 16)];
      }
      break;
  }
  return v;
}

inline const char* noun(needle_kind kind) {
  switch (kind) {
    case needle_kind::kNumber:
      return "number";
    case needle_kind::kWord:
      return "word";
    case needle_kind::kAlphanumeric:
      return "code";
    case needle_kind::kUuid:
      return "uuid";
  }
  return "value";
}

// `count` distinct values drawn by `draw`.
template <class Draw>
std::vector<std::string> distinct(std::size_t count, Draw draw) {
  std::vector<std::string> out;
  while (out.size() < count) {
    std::string v = draw();
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(std::move(v));
  }
  return out;
}

inline std::string variable_name(std::mt19937_64& rng) {
  std::string name;
  for (int i = 0; i < 5; ++i) name += static_cast<char>('A' + pick(rng, 26));
  return name;
}

// The first index >= at (and <= limit) that starts a sentence of `filler`: after a token whose
// text ends a sentence or a line. `at` itself when none does within 64 tokens, so that a needle
// never waits for a boundary a text without full stops does not have.
template <class Tokenizer>
index_t sentence_start(const Tokenizer& tok, const std::vector<int>& filler, index_t at) {
  const index_t limit = std::min<index_t>(static_cast<index_t>(filler.size()), at + 64);
  for (index_t i = at; i < limit; ++i) {
    if (i == 0) return 0;
    const std::string previous = tok.detokenize({filler[static_cast<std::size_t>(i - 1)]});
    if (!previous.empty() && (previous.back() == '.' || previous.back() == '\n')) return i;
  }
  return at;
}

}  // namespace task_detail

/// The prompt `spec` asks for, its filler drawn from `haystack` (held-out text already
/// tokenized by `tok`) and its values from `rng`. The sentence asked about goes to the first
/// sentence boundary at or after spec.depth of the filler; the other sentences of multi-key,
/// multi-value and variable tracking go to random depths (variable tracking's in chain order).
/// Throws kInvalidArgument naming spec.length when the length cannot hold the task's sentences
/// and question, or exceeds what the haystack holds.
template <class Tokenizer>
task_prompt make_task_prompt(const Tokenizer& tok, const std::vector<int>& haystack,
                             const task_spec& spec, std::mt19937_64& rng,
                             const chat_format& format = {}) {
  using namespace task_detail;
  RAZORKV_CHECK(spec.depth >= 0.0 && spec.depth <= 1.0, kInvalidArgument,
                "make_task_prompt: depth (", spec.depth, ") outside [0, 1]");
  task_prompt p;
  p.spec = spec;
  std::vector<std::string> sentences;  // sentences[0] is the one at spec.depth
  std::string question, lead;
  const std::string n = noun(spec.needle);
  switch (spec.task) {
    case task_kind::kSingleNeedle:
    case task_kind::kMultiKey: {
      const std::size_t count = spec.task == task_kind::kSingleNeedle ? 1 : 4;
      const auto keys = distinct(count, [&] { return word(rng) + "-" + word(rng); });
      const auto values = distinct(count, [&] { return value(spec.needle, rng); });
      for (std::size_t i = 0; i < count; ++i) {
        sentences.push_back("One of the special magic " + n + "s for " + keys[i] +
                            " is: " + values[i] + ".");
      }
      question =
          "What is the special magic " + n + " for " + keys[0] + " mentioned in the provided text?";
      lead = "The special magic " + n + " for " + keys[0] + " mentioned in the provided text is";
      p.expected = {values[0]};
      break;
    }
    case task_kind::kMultiValue: {
      const std::string key = word(rng) + "-" + word(rng);
      p.expected = distinct(4, [&] { return value(spec.needle, rng); });
      for (const std::string& v : p.expected) {
        sentences.push_back("One of the special magic " + n + "s for " + key + " is: " + v + ".");
      }
      question = "What are all the special magic " + n + "s for " + key +
                 " mentioned in the provided text?";
      lead = "The special magic " + n + "s for " + key + " mentioned in the provided text are";
      p.single_line = false;  // models list several values one per line
      break;
    }
    case task_kind::kVariableTracking: {
      const std::string start = std::to_string(10000 + pick(rng, 90000));
      p.expected = distinct(4, [&] { return variable_name(rng); });
      sentences.push_back("VAR " + p.expected[0] + " = " + start + ".");
      for (std::size_t i = 1; i < p.expected.size(); ++i) {
        sentences.push_back("VAR " + p.expected[i] + " = VAR " + p.expected[i - 1] + ".");
      }
      question = "Find all variables that are assigned the value " + start + " in the text above.";
      lead =
          "Answer: According to the chain of variable assignments in the text above, 4 "
          "variables are assigned the value " +
          start + ", they are:";
      p.single_line = false;
      break;
    }
    case task_kind::kPassageCopy: {
      std::string quote;
      for (int i = 0; i < 16; ++i) quote += (i ? " " : "") + word(rng);
      sentences.push_back("Here is a quote to remember: \"" + quote + "\".");
      question = "Repeat the quote to remember from the text above, word for word.";
      lead = "The quote is: \"";
      p.expected = {quote};
      break;
    }
  }
  const std::vector<int> head = tok.tokenize(format.user, true);
  p.question = tok.tokenize("\n\n" + question + format.assistant + lead, true);
  std::vector<std::vector<int>> ids;
  index_t inserted = 0;
  for (const std::string& s : sentences) {
    ids.push_back(tok.tokenize("\n" + s + "\n"));
    inserted += static_cast<index_t>(ids.back().size());
  }
  // Room for each value and what surrounds it (a list's "2. " and newline), and a preamble.
  index_t answer_tokens = 8;
  for (const std::string& e : p.expected) {
    answer_tokens += static_cast<index_t>(tok.tokenize(" " + e).size()) + (p.single_line ? 2 : 6);
  }
  p.max_answer_tokens = answer_tokens;

  const index_t fixed = static_cast<index_t>(head.size() + p.question.size()) + inserted;
  const index_t filler = spec.length - fixed;
  RAZORKV_CHECK(filler >= 64 && filler < static_cast<index_t>(haystack.size()), kInvalidArgument,
                "make_task_prompt: length (", spec.length, ") must leave 64 to ", haystack.size(),
                " tokens of filler beside the ", fixed, " tokens of ", task_name(spec.task),
                "'s sentences and question");
  const auto first = static_cast<std::ptrdiff_t>(
      pick(rng, static_cast<std::uint64_t>(static_cast<index_t>(haystack.size()) - filler)));
  std::vector<int> text(haystack.begin() + first, haystack.begin() + first + filler);

  // Filler positions of the sentences: the asked one at spec.depth, the others at random
  // depths; variable tracking's chain in order, so that each assignment follows the one it reads.
  std::vector<index_t> at(ids.size());
  at[0] = static_cast<index_t>(spec.depth * static_cast<double>(filler));
  for (std::size_t i = 1; i < ids.size(); ++i) {
    at[i] = static_cast<index_t>(pick(rng, static_cast<std::uint64_t>(filler) + 1));
  }
  if (spec.task == task_kind::kVariableTracking) {
    std::sort(at.begin() + 1, at.end());
    // The chain starts at spec.depth; the later links spread over what follows it.
    for (std::size_t i = 1; i < at.size(); ++i) {
      at[i] =
          at[0] + static_cast<index_t>(static_cast<double>(at[i]) / static_cast<double>(filler) *
                                       static_cast<double>(filler - at[0]));
    }
  }
  for (index_t& a : at) a = sentence_start(tok, text, a);

  // Insert from the back so that earlier positions stay valid; sentences at one position keep
  // their order (the later one inserted first, the earlier one in front of it).
  std::vector<std::size_t> order(ids.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return at[a] > at[b] || (at[a] == at[b] && a > b);
  });
  for (const std::size_t i : order) text.insert(text.begin() + at[i], ids[i].begin(), ids[i].end());
  // Where each sentence ended up: its filler position plus the sentences inserted before it.
  p.inserted_at.resize(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    index_t before = 0;
    for (std::size_t j = 0; j < ids.size(); ++j) {
      const bool earlier = at[j] < at[i] || (at[j] == at[i] && j < i);
      if (j != i && earlier) before += static_cast<index_t>(ids[j].size());
    }
    p.inserted_at[i] = static_cast<index_t>(head.size()) + at[i] + before;
  }
  p.inserted = std::move(ids);
  p.document = head;
  p.document.insert(p.document.end(), text.begin(), text.end());
  return p;
}

}  // namespace tiny_llama
