// examples/engine/smollm2.hpp: SmolLM2-135M-Instruct on the engine: the model and its tokenizer
// from one GGUF file, a passphrase hidden in held-out text, and the answer generated over any
// razorkv cache (the demo's task, and the real model's tests').
#pragma once

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <razorkv/io/gguf.hpp>
#include <razorkv/io/plan_files.hpp>
#include <razorkv/razorkv.hpp>

#include "bpe_tokenizer.hpp"
#include "tiny_llama.hpp"

namespace tiny_llama {

/// A GGUF model and its tokenizer, read from one file.
struct gguf_model {
  model weights;
  bpe_tokenizer tokenizer;

  static gguf_model load(const std::string& path) {
    const razorkv::io::gguf_file file = razorkv::io::gguf_file::read(path);
    return {model::load_gguf(file), bpe_tokenizer::from_gguf(file)};
  }
};

/// The plan calibrated offline for SmolLM2 (razorkv_smollm2_calibrate wrote it), committed as
/// examples/engine/smollm2/plan.json beside its scores.json.
inline razorkv::head_plan smollm2_plan(const std::string& repo_root) {
  return razorkv::io::parse_head_plan(
      razorkv::io::read_text_file(repo_root + "/examples/engine/smollm2/plan.json"));
}

/// The held-out text of the real model's tests and demo: Debian's license texts (GPL-3,
/// LGPL-2.1, GFDL-1.3, MPL-2.0, Apache-2.0, Artistic, CC0), about 27,500 tokens, stored in
/// examples/engine/smollm2/heldout.txt so that every machine reads the same bytes.
inline std::string smollm2_heldout_text(const std::string& repo_root) {
  const std::string path = repo_root + "/examples/engine/smollm2/heldout.txt";
  std::ifstream in(path, std::ios::binary);
  RAZORKV_CHECK(in.good(), kInvalidArgument, "smollm2_heldout_text: cannot open \"", path,
                "\"; is repo_root (", repo_root, ") the repository's root?");
  std::ostringstream content;
  content << in.rdbuf();
  return std::move(content).str();
}

/// A passphrase hidden in a document: the prompt up to the question (what the policies
/// compress), the question (decoded over the compressed cache), and the expected answer.
struct passphrase_trial {
  std::vector<int> document;  ///< chat prompt: the document with the fact at `depth`
  std::vector<int> question;  ///< the rest of the chat turn, ending where the answer starts
  std::string passphrase;
};

/// What the hidden passphrase is made of.
enum class passphrase_kind {
  kWordsAndNumber,  ///< WORD-WORD-NNNN, e.g. "velvet-harbor-7291" (the demo's)
  kNumber,          ///< five digits, e.g. "48213"
  kWord,            ///< one word of 15, e.g. "lantern"
};

/// A `tokens`-token document of held-out text (starting at a token chosen by `rng`) with the
/// sentence "The secret passphrase is ...." at `depth` (0 = start, 1 = end), as the user turn
/// of SmolLM2's chat template, then the question asking for it.
inline passphrase_trial make_passphrase_trial(
    const gguf_model& m, const std::string& text, index_t tokens, double depth,
    std::mt19937_64& rng, passphrase_kind kind = passphrase_kind::kWordsAndNumber) {
  static const char* const kWords[] = {"amber",  "falcon", "granite", "harbor", "lantern",
                                       "meadow", "orchid", "pepper",  "quartz", "river",
                                       "saddle", "timber", "velvet",  "walnut", "willow"};
  const auto pick = [&](std::uint64_t n) { return razorkv::detail::uniform_below(rng, n); };
  std::string passphrase;
  switch (kind) {
    case passphrase_kind::kWordsAndNumber:
      passphrase = std::string(kWords[pick(15)]) + "-" + kWords[pick(15)] + "-" +
                   std::to_string(1000 + pick(9000));
      break;
    case passphrase_kind::kNumber:
      passphrase = std::to_string(10000 + pick(90000));
      break;
    case passphrase_kind::kWord:
      passphrase = kWords[pick(15)];
      break;
  }
  const std::string fact = "\nThe secret passphrase is " + passphrase + ".\n";
  const std::vector<int> all = m.tokenizer.tokenize(text);
  const std::vector<int> head = m.tokenizer.tokenize("<|im_start|>user\n", true);
  const std::vector<int> fact_ids = m.tokenizer.tokenize(fact);
  const std::vector<int> tail = m.tokenizer.tokenize(
      "\n<|im_end|>\n<|im_start|>user\nWhat is the secret passphrase in the text above?<|im_end|>\n"
      "<|im_start|>assistant\nThe secret passphrase is",
      true);
  const index_t filler = tokens - static_cast<index_t>(head.size() + fact_ids.size());
  RAZORKV_CHECK(filler > 0 && filler < static_cast<index_t>(all.size()), kInvalidArgument,
                "make_passphrase_trial: tokens (", tokens,
                ") outside what the held-out text holds");
  const auto start = static_cast<std::ptrdiff_t>(
      pick(static_cast<std::uint64_t>(static_cast<index_t>(all.size()) - filler)));
  std::vector<int> body(all.begin() + start, all.begin() + start + filler);
  const auto at = static_cast<std::ptrdiff_t>(depth * static_cast<double>(filler));
  body.insert(body.begin() + at, fact_ids.begin(), fact_ids.end());
  passphrase_trial t;
  t.document = head;
  t.document.insert(t.document.end(), body.begin(), body.end());
  t.question = tail;
  t.passphrase = passphrase;
  return t;
}

/// Feeds `t.question` through decode over `cache` (which holds the compressed document), then
/// generates up to `max_tokens` greedily, stopping at a control token or a newline; returns the
/// generated text.
template <class Cache>
std::string answer_passphrase(const gguf_model& m, Cache& cache, const passphrase_trial& t,
                              index_t max_tokens = 16) {
  index_t position = static_cast<index_t>(t.document.size());
  Eigen::VectorXf logits;
  for (int id : t.question) logits = m.weights.decode(cache, id, position++);
  std::vector<int> generated;
  for (index_t g = 0; g < max_tokens; ++g) {
    Eigen::Index best = 0;
    logits.maxCoeff(&best);
    const int next = static_cast<int>(best);
    if (m.tokenizer.is_control(next)) break;
    generated.push_back(next);
    if (m.tokenizer.detokenize({next}).find('\n') != std::string::npos) break;
    logits = m.weights.decode(cache, next, position++);
  }
  return m.tokenizer.detokenize(generated);
}

/// Whether `answer` states the passphrase whole (spaces and a final period aside).
inline bool recalls_passphrase(const std::string& answer, const std::string& passphrase) {
  return answer.find(passphrase) != std::string::npos;
}

}  // namespace tiny_llama
