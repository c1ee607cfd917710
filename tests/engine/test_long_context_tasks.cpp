// Tests of the long-context task generators (examples/engine/long_context_tasks.hpp) over a byte
// tokenizer and the real model's held-out text: prompts are deterministic, exactly as long as
// asked, hold their sentences where they say, and state answers that are whole and unambiguous.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/long_context_tasks.hpp"
#include "engine/tiny_llama.hpp"
#include "support/expect_error.hpp"

namespace {

using razorkv::index_t;
using tiny_llama::needle_kind;
using tiny_llama::task_kind;

// Bytes as tokens: tokenizer-agnostic generators must work with the simplest tokenizer too.
struct byte_tokenizer {
  std::vector<int> tokenize(const std::string& text, bool = false) const {
    return tiny_llama::tokenize(text);
  }
  std::string detokenize(const std::vector<int>& ids) const { return tiny_llama::detokenize(ids); }
};

const std::vector<int>& haystack() {
  static const std::vector<int> ids = [] {
    std::ifstream in(std::string(RAZORKV_SOURCE_DIR) + "/examples/engine/smollm2/heldout.txt",
                     std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return tiny_llama::tokenize(text.str());
  }();
  return ids;
}

tiny_llama::task_prompt make(task_kind task, needle_kind needle, index_t length, double depth,
                             std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  return tiny_llama::make_task_prompt(byte_tokenizer{}, haystack(), {task, needle, length, depth},
                                      rng);
}

const task_kind kTasks[] = {task_kind::kSingleNeedle, task_kind::kMultiKey, task_kind::kMultiValue,
                            task_kind::kVariableTracking, task_kind::kPassageCopy};
const needle_kind kNeedles[] = {needle_kind::kNumber, needle_kind::kWord,
                                needle_kind::kAlphanumeric, needle_kind::kUuid};

TEST(LongContextTasks, TheSameSeedGivesTheSamePromptAndAnotherSeedAnother) {
  for (task_kind task : kTasks) {
    const auto a = make(task, needle_kind::kNumber, 2048, 0.5, 7);
    const auto b = make(task, needle_kind::kNumber, 2048, 0.5, 7);
    const auto c = make(task, needle_kind::kNumber, 2048, 0.5, 8);
    EXPECT_EQ(a.document, b.document) << tiny_llama::task_name(task);
    EXPECT_EQ(a.question, b.question);
    EXPECT_EQ(a.expected, b.expected);
    EXPECT_NE(a.expected, c.expected) << tiny_llama::task_name(task);
  }
}

TEST(LongContextTasks, PromptsAreExactlyAsLongAsAsked) {
  for (task_kind task : kTasks) {
    for (index_t length : {700, 1024, 3001, 8128}) {
      for (double depth : {0.0, 0.33, 1.0}) {
        const auto p = make(task, needle_kind::kUuid, length, depth, 3);
        EXPECT_EQ(p.length(), length) << tiny_llama::task_name(task) << " " << depth;
      }
    }
  }
}

TEST(LongContextTasks, SentencesAreWhereThePromptSaysAtTheAskedDepth) {
  const byte_tokenizer tok;
  for (task_kind task : kTasks) {
    for (needle_kind needle : kNeedles) {
      for (double depth : {0.0, 0.25, 0.5, 0.75, 1.0}) {
        const auto p = make(task, needle, 4096, depth, 11);
        const std::string what = std::string(tiny_llama::task_name(task)) + " " +
                                 tiny_llama::needle_name(needle) + " " + std::to_string(depth);
        ASSERT_EQ(p.inserted.size(), p.inserted_at.size()) << what;
        index_t inserted = 0;
        for (std::size_t i = 0; i < p.inserted.size(); ++i) {
          const auto at = static_cast<std::size_t>(p.inserted_at[i]);
          ASSERT_LE(at + p.inserted[i].size(), p.document.size()) << what;
          EXPECT_TRUE(std::equal(p.inserted[i].begin(), p.inserted[i].end(),
                                 p.document.begin() + static_cast<std::ptrdiff_t>(at)))
              << what << ": sentence " << i;
          inserted += static_cast<index_t>(p.inserted[i].size());
        }
        // The asked sentence starts at the first sentence boundary at or after `depth` of the
        // filler: count the filler tokens before it.
        const index_t head = static_cast<index_t>(tok.tokenize("<|im_start|>user\n").size());
        const index_t filler = static_cast<index_t>(p.document.size()) - head - inserted;
        index_t before = p.inserted_at[0] - head;
        for (std::size_t j = 1; j < p.inserted.size(); ++j) {
          if (p.inserted_at[j] < p.inserted_at[0]) {
            before -= static_cast<index_t>(p.inserted[j].size());
          }
        }
        const auto target = static_cast<index_t>(depth * static_cast<double>(filler));
        EXPECT_GE(before, target) << what;
        EXPECT_LE(before, target + 64) << what;
        if (before > target) {  // moved to the boundary after the target
          const int previous = p.document[static_cast<std::size_t>(p.inserted_at[0] - 1)];
          EXPECT_TRUE(previous == '.' || previous == '\n')
              << what << ": the sentence does not start a sentence";
        }
        // Each expected answer is written in the document, in its sentence.
        const std::string document = tok.detokenize(p.document);
        for (const std::string& e : p.expected) {
          EXPECT_NE(document.find(e), std::string::npos) << what << ": " << e;
        }
      }
    }
  }
}

TEST(LongContextTasks, AnswersAreUnambiguousAndOfTheirKind) {
  const byte_tokenizer tok;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    const auto number = make(task_kind::kSingleNeedle, needle_kind::kNumber, 1024, 0.5, seed);
    ASSERT_EQ(number.expected.size(), 1u);
    EXPECT_EQ(number.expected[0].size(), 7u);
    EXPECT_EQ(number.expected[0].find_first_not_of("0123456789"), std::string::npos);
    const auto code = make(task_kind::kSingleNeedle, needle_kind::kAlphanumeric, 1024, 0.5, seed);
    EXPECT_EQ(code.expected[0].size(), 10u);
    EXPECT_NE(code.expected[0].find_first_of("0123456789"), std::string::npos);
    EXPECT_NE(code.expected[0].find_first_not_of("0123456789"), std::string::npos);
    const auto uuid = make(task_kind::kSingleNeedle, needle_kind::kUuid, 1024, 0.5, seed);
    EXPECT_EQ(uuid.expected[0].size(), 36u);
    EXPECT_EQ(uuid.expected[0][8], '-');

    // Multi-key: four different keys and values, the question names the first key only.
    const auto multikey = make(task_kind::kMultiKey, needle_kind::kNumber, 2048, 0.3, seed);
    ASSERT_EQ(multikey.inserted.size(), 4u);
    std::vector<std::string> sentences;
    for (const auto& s : multikey.inserted) sentences.push_back(tok.detokenize(s));
    for (std::size_t i = 1; i < sentences.size(); ++i) {
      EXPECT_NE(sentences[i], sentences[0]);
      EXPECT_EQ(sentences[i].find(multikey.expected[0]), std::string::npos);
    }
    const std::string question = tok.detokenize(multikey.question);
    const std::string key0 = sentences[0].substr(sentences[0].find(" for ") + 5);
    EXPECT_NE(question.find(key0.substr(0, key0.find(' '))), std::string::npos);

    // Variable tracking: the chain is in order, each link reads the one before it.
    const auto chain = make(task_kind::kVariableTracking, needle_kind::kNumber, 2048, 0.2, seed);
    ASSERT_EQ(chain.expected.size(), 4u);
    for (std::size_t i = 1; i < chain.inserted_at.size(); ++i) {
      EXPECT_GT(chain.inserted_at[i], chain.inserted_at[i - 1]) << "seed " << seed;
      EXPECT_NE(tok.detokenize(chain.inserted[i]).find("VAR " + chain.expected[i - 1]),
                std::string::npos);
    }
  }
}

TEST(LongContextTasks, AnAnswerCountsOnlyWhenWhole) {
  EXPECT_TRUE(tiny_llama::answer_is_correct(" 4819203.", {"4819203"}));
  EXPECT_FALSE(tiny_llama::answer_is_correct(" 481920.", {"4819203"}));
  EXPECT_FALSE(tiny_llama::answer_is_correct(" 4819208", {"4819203"}));
  EXPECT_TRUE(tiny_llama::answer_is_correct("AB, CD and EF", {"AB", "CD", "EF"}));
  EXPECT_FALSE(tiny_llama::answer_is_correct("AB, CD", {"AB", "CD", "EF"}));
}

TEST(LongContextTasks, BadSpecsAreNamedErrors) {
  RAZORKV_EXPECT_ERROR(make(task_kind::kSingleNeedle, needle_kind::kNumber, 1024, 1.5, 1),
                       kInvalidArgument, "depth (1.5)");
  RAZORKV_EXPECT_ERROR(make(task_kind::kMultiKey, needle_kind::kUuid, 200, 0.5, 1),
                       kInvalidArgument, "length (200)");
  RAZORKV_EXPECT_ERROR(make(task_kind::kSingleNeedle, needle_kind::kNumber, 10000000, 0.5, 1),
                       kInvalidArgument, "length (10000000)");
}

}  // namespace
