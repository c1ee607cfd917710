// examples/engine/bpe_tokenizer.hpp: the byte-level BPE tokenizer of a GGUF model (GPT-2's byte
// mapping, the file's merges, SmolLM2's pre-tokenizer), so that the engine takes text.
//
// How a text becomes ids, as llama.cpp does it for tokenizer.ggml.pre = "smollm":
//  1. (optionally) the control tokens' texts (<|im_start|>, ...) are cut out as their own ids;
//  2. pre-tokenization: every number code point (\p{N}) is a piece of its own, then each piece is
//     split as GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
//     \s+(?!\S)|\s+ splits it;
//  3. each piece's UTF-8 bytes are mapped one to one onto printable code points (GPT-2's
//     bytes_to_unicode), and the adjacent pair of symbols with the lowest merge rank is merged
//     until no pair has one; each symbol is then a vocabulary entry.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <razorkv/error.hpp>
#include <razorkv/io/gguf.hpp>

#include "unicode_classes.hpp"

namespace tiny_llama {

class bpe_tokenizer {
 public:
  /// Reads tokenizer.ggml.{model, pre, tokens, token_type, merges} from a GGUF file; a model
  /// other than "gpt2" or a pre-tokenizer other than "smollm" is an error naming it.
  static bpe_tokenizer from_gguf(const razorkv::io::gguf_file& file);

  int vocab_size() const noexcept { return static_cast<int>(tokens_.size()); }
  /// The ids of `text` (UTF-8). With `parse_special`, the control tokens' texts in it become
  /// their ids; without, they are tokenized as any other text (llama.cpp's special = false).
  std::vector<int> tokenize(const std::string& text, bool parse_special = false) const;
  /// The text of `ids` (control tokens as their text); kInvalidArgument for an id outside the
  /// vocabulary.
  std::string detokenize(const std::vector<int>& ids) const;
  /// True for ids that are control tokens (the calibration probe leaves them out).
  bool is_control(int id) const { return control_.at(static_cast<std::size_t>(id)); }

 private:
  static std::uint32_t next_code_point(const std::string& s, std::size_t& at);
  static void append_utf8(std::string& out, std::uint32_t cp);
  static bool in(const code_point_range* first, const code_point_range* last, std::uint32_t cp);
  // The pieces of step 2, as [begin, end) byte offsets into text.
  static void pre_tokenize(const std::string& text,
                           std::vector<std::pair<std::size_t, std::size_t>>& out);
  void encode_piece(const std::string& piece, std::vector<int>& ids) const;

  std::vector<std::string> tokens_;  // as the file stores them (byte-mapped)
  std::vector<bool> control_;
  std::vector<int> control_ids_;
  std::unordered_map<std::string, int> ids_;
  std::unordered_map<std::string, int> merge_rank_;  // "left right" -> rank
  std::string byte_symbol_[256];                     // GPT-2's byte -> code point, UTF-8
  std::unordered_map<std::uint32_t, unsigned char> symbol_byte_;
};

// ---------------------------------------------------------------------------------------------

inline bpe_tokenizer bpe_tokenizer::from_gguf(const razorkv::io::gguf_file& file) {
  const auto text = [&](const char* key) { return file.value(key).as_string(key); };
  RAZORKV_CHECK(text("tokenizer.ggml.model") == "gpt2", kInvalidArgument,
                "bpe_tokenizer: tokenizer.ggml.model \"", text("tokenizer.ggml.model"),
                "\" is not the byte-level BPE (\"gpt2\") this tokenizer reads");
  RAZORKV_CHECK(text("tokenizer.ggml.pre") == "smollm", kInvalidArgument,
                "bpe_tokenizer: tokenizer.ggml.pre \"", text("tokenizer.ggml.pre"),
                "\" is not the pre-tokenizer this tokenizer implements (\"smollm\")");
  bpe_tokenizer t;
  const auto& tokens = file.value("tokenizer.ggml.tokens").as_array("tokenizer.ggml.tokens");
  const auto& types = file.value("tokenizer.ggml.token_type").as_array("tokenizer.ggml.token_type");
  RAZORKV_CHECK(!tokens.empty() && types.size() == tokens.size(), kShapeMismatch,
                "bpe_tokenizer: ", tokens.size(), " tokens but ", types.size(), " token types");
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    t.tokens_.push_back(tokens[i].as_string("tokenizer.ggml.tokens"));
    t.control_.push_back(types[i].as_int("tokenizer.ggml.token_type") == 3);  // CONTROL
    t.ids_.emplace(t.tokens_.back(), static_cast<int>(i));
    if (t.control_.back()) t.control_ids_.push_back(static_cast<int>(i));
  }
  const auto& merges = file.value("tokenizer.ggml.merges").as_array("tokenizer.ggml.merges");
  for (std::size_t i = 0; i < merges.size(); ++i)
    t.merge_rank_.emplace(merges[i].as_string("tokenizer.ggml.merges"), static_cast<int>(i));
  // GPT-2's byte mapping: printable Latin-1 bytes stand for themselves, the other 68 bytes for
  // the code points 256, 257, ... in byte order.
  std::uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const std::uint32_t cp = printable ? static_cast<std::uint32_t>(b) : next++;
    append_utf8(t.byte_symbol_[b], cp);
    t.symbol_byte_.emplace(cp, static_cast<unsigned char>(b));
  }
  return t;
}

inline std::uint32_t bpe_tokenizer::next_code_point(const std::string& s, std::size_t& at) {
  // Invalid UTF-8 is read byte by byte (as U+FFFD's class: neither letter, number nor space).
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = byte(at);
  const int extra = c < 0x80           ? 0
                    : (c >> 5) == 0x6  ? 1
                    : (c >> 4) == 0xE  ? 2
                    : (c >> 3) == 0x1E ? 3
                                       : -1;
  if (extra <= 0 || at + static_cast<std::size_t>(extra) >= s.size()) {
    ++at;
    return extra == 0 ? c : 0xFFFD;
  }
  std::uint32_t cp = c & (0x3Fu >> extra);
  for (int k = 1; k <= extra; ++k) {
    const unsigned char cont = byte(at + static_cast<std::size_t>(k));
    if ((cont >> 6) != 0x2) {
      ++at;
      return 0xFFFD;
    }
    cp = (cp << 6) | (cont & 0x3Fu);
  }
  at += static_cast<std::size_t>(extra) + 1;
  return cp;
}

inline void bpe_tokenizer::append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

inline bool bpe_tokenizer::in(const code_point_range* first, const code_point_range* last,
                              std::uint32_t cp) {
  const code_point_range* r = std::upper_bound(
      first, last, cp,
      [](std::uint32_t c, const code_point_range& range) { return c < range.first; });
  return r != first && cp <= (r - 1)->last;
}

inline void bpe_tokenizer::pre_tokenize(const std::string& text,
                                        std::vector<std::pair<std::size_t, std::size_t>>& out) {
  struct code_point {
    std::uint32_t cp;
    std::size_t begin;  // byte offset
    bool letter, number, space;
  };
  std::vector<code_point> cps;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t begin = at;
    const std::uint32_t cp = next_code_point(text, at);
    cps.push_back({cp, begin, in(std::begin(kLetterRanges), std::end(kLetterRanges), cp),
                   in(std::begin(kNumberRanges), std::end(kNumberRanges), cp),
                   in(std::begin(kWhitespaceRanges), std::end(kWhitespaceRanges), cp)});
  }
  const std::size_t n = cps.size();
  const auto byte_at = [&](std::size_t i) { return i < n ? cps[i].begin : text.size(); };
  // Step 2a: each number code point is a piece; the runs between them are pieces too. Step 2b
  // splits each piece on its own, never across a piece's end.
  std::size_t piece_begin = 0;
  const auto split = [&](std::size_t begin, std::size_t end) {
    std::size_t last = begin;
    const auto emit = [&](std::size_t to) {
      if (to > last) out.emplace_back(byte_at(last), byte_at(to));
      last = to;
    };
    const auto letter = [&](std::size_t i) { return i < end && cps[i].letter; };
    const auto number = [&](std::size_t i) { return i < end && cps[i].number; };
    const auto space = [&](std::size_t i) { return i < end && cps[i].space; };
    const auto other = [&](std::size_t i) {
      return i < end && !cps[i].letter && !cps[i].number && !cps[i].space;
    };
    for (std::size_t pos = begin; pos < end;) {
      const std::uint32_t c = cps[pos].cp;
      if (c == '\'' && pos + 1 < end) {  // 's 't 'm 'd 're 've 'll (lowercase only)
        const std::uint32_t c1 = cps[pos + 1].cp, c2 = pos + 2 < end ? cps[pos + 2].cp : 0;
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
          emit(pos += 2);
          continue;
        }
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
          emit(pos += 3);
          continue;
        }
      }
      // An optional space, then a run of one class.
      const std::size_t head = c == ' ' ? pos + 1 : pos;
      if (letter(head) || number(head) || other(head)) {
        const bool l = letter(head), d = number(head);
        pos = head;
        while (l ? letter(pos) : d ? number(pos) : other(pos)) ++pos;
        emit(pos);
        continue;
      }
      // Whitespace: a run that a non-space follows leaves its last space to the next piece.
      std::size_t run = 0;
      while (space(pos + run)) ++run;
      if (run > 1 && pos + run < end) {
        emit(pos += run - 1);
      } else if (run > 0) {
        emit(pos += run);
      } else {
        emit(++pos);
      }
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (!cps[i].number) continue;
    split(piece_begin, i);
    split(i, i + 1);
    piece_begin = i + 1;
  }
  split(piece_begin, n);
}

inline void bpe_tokenizer::encode_piece(const std::string& piece, std::vector<int>& ids) const {
  std::vector<std::string> symbols;
  for (char byte : piece) symbols.push_back(byte_symbol_[static_cast<unsigned char>(byte)]);
  // Merge the pair of lowest rank (the leftmost among equals) until none is in the merges.
  std::string key;
  while (symbols.size() > 1) {
    int best_rank = std::numeric_limits<int>::max();
    std::size_t best = 0;
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      key.assign(symbols[i]).append(" ").append(symbols[i + 1]);
      const auto it = merge_rank_.find(key);
      if (it != merge_rank_.end() && it->second < best_rank) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best_rank == std::numeric_limits<int>::max()) break;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  for (const std::string& s : symbols) {
    const auto it = ids_.find(s);
    if (it != ids_.end()) {
      ids.push_back(it->second);
      continue;
    }
    // A merge result missing from the vocabulary: its symbols one by one, as llama.cpp does.
    for (std::size_t at = 0; at < s.size();) {
      const std::size_t begin = at;
      next_code_point(s, at);
      const auto single = ids_.find(s.substr(begin, at - begin));
      RAZORKV_CHECK(single != ids_.end(), kInvalidArgument,
                    "bpe_tokenizer: the vocabulary has no token for a byte of \"", piece, "\"");
      ids.push_back(single->second);
    }
  }
}

inline std::vector<int> bpe_tokenizer::tokenize(const std::string& text, bool parse_special) const {
  std::vector<int> ids;
  const auto encode_text = [&](const std::string& part) {
    std::vector<std::pair<std::size_t, std::size_t>> pieces;
    pre_tokenize(part, pieces);
    for (const auto& [begin, end] : pieces) encode_piece(part.substr(begin, end - begin), ids);
  };
  if (!parse_special) {
    encode_text(text);
    return ids;
  }
  std::size_t from = 0;
  for (std::size_t at = 0; at < text.size();) {
    // The longest control token's text starting here, if any.
    int found = -1;
    std::size_t length = 0;
    for (int id : control_ids_) {
      const std::string& token = tokens_[static_cast<std::size_t>(id)];
      if (token.size() > length && text.compare(at, token.size(), token) == 0) {
        found = id;
        length = token.size();
      }
    }
    if (found < 0) {
      ++at;
      continue;
    }
    encode_text(text.substr(from, at - from));
    ids.push_back(found);
    at += length;
    from = at;
  }
  encode_text(text.substr(from));
  return ids;
}

inline std::string bpe_tokenizer::detokenize(const std::vector<int>& ids) const {
  std::string out;
  for (int id : ids) {
    RAZORKV_CHECK(id >= 0 && id < vocab_size(), kInvalidArgument, "bpe_tokenizer::detokenize: id ",
                  id, " outside [0, ", vocab_size(), ")");
    const std::string& token = tokens_[static_cast<std::size_t>(id)];
    if (control_[static_cast<std::size_t>(id)]) {
      out += token;
      continue;
    }
    for (std::size_t at = 0; at < token.size();) {
      const std::uint32_t cp = next_code_point(token, at);
      const auto it = symbol_byte_.find(cp);
      if (it != symbol_byte_.end()) out += static_cast<char>(it->second);
    }
  }
  return out;
}

}  // namespace tiny_llama
