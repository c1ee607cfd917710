// Tests of the engine of the trained model (examples/engine/) on the committed weights: its
// forward pass against PyTorch's logits, its decode over razorkv caches (single and batched)
// against its own prefill, calibration against the committed scores and plan (and against
// scores computed from PyTorch's attention), and razor against the full cache on retrieval.
#include <gtest/gtest.h>

#include <razorkv/eval.hpp>
#include <razorkv/io/json.hpp>
#include <razorkv/io/npy.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/tasks.hpp"
#include "support/expect_error.hpp"

namespace {

using razorkv::index_t;

const std::string kModelDir = RAZORKV_TRAINED_MODEL_DIR;

const tiny_llama::model& trained() {
  static const tiny_llama::model m = tiny_llama::model::load(kModelDir + "/model.safetensors");
  return m;
}

// Largest |a - b| over the logits, relative to the largest |b|.
double relative_max_error(const Eigen::Ref<const tiny_llama::row_matrix>& a,
                          const std::vector<float>& b) {
  double err = 0, scale = 0;
  for (index_t i = 0; i < a.size(); ++i) {
    err =
        std::max(err, std::abs(static_cast<double>(a.data()[i]) - b[static_cast<std::size_t>(i)]));
    scale = std::max(scale, std::abs(static_cast<double>(b[static_cast<std::size_t>(i)])));
  }
  return err / scale;
}

TEST(RazorkvTrainedModel, PrefillMatchesPyTorchLogits) {
  const auto tokens64 =
      razorkv::io::read_npy(kModelDir + "/reference_tokens.npy").to<std::int64_t>();
  const auto logits = razorkv::io::read_npy(kModelDir + "/reference_logits.npy");
  const std::vector<int> tokens(tokens64.begin(), tokens64.end());
  ASSERT_EQ(logits.shape, (std::vector<index_t>{static_cast<index_t>(tokens.size()),
                                                trained().cfg().vocab_size}));
  const tiny_llama::prefill_state state = trained().prefill(tokens, true);
  EXPECT_LT(relative_max_error(state.logits, logits.to<float>()), 1e-4);
}

TEST(RazorkvTrainedModel, DecodeOverRazorkvCachesMatchesPrefill) {
  const auto tokens64 =
      razorkv::io::read_npy(kModelDir + "/reference_tokens.npy").to<std::int64_t>();
  const std::vector<int> tokens(tokens64.begin(), tokens64.end());
  const std::vector<float> reference =
      razorkv::io::read_npy(kModelDir + "/reference_logits.npy").to<float>();
  const tiny_llama::model& m = trained();
  const index_t vocab = m.cfg().vocab_size, n = static_cast<index_t>(tokens.size());
  // Two sequences of different lengths (prefixes of the reference prompt), one dense cache
  // each, decoded in one batch: every step must give the PyTorch logits of its position.
  const std::vector<index_t> prompt_lengths = {40, 97};
  std::vector<razorkv::dense_kv_cache<float>> caches;
  for (index_t p : prompt_lengths) {
    const tiny_llama::prefill_state state =
        m.prefill(std::vector<int>(tokens.begin(), tokens.begin() + p), false);
    caches.push_back(razorkv::compress_prompt(razorkv::full_policy(), m.prompt_of(state, 0),
                                              razorkv::memory_budget::fraction_of_full(1.0)));
  }
  std::vector<razorkv::dense_kv_cache<float>*> pointers = {&caches[0], &caches[1]};
  for (index_t step = 0; step + prompt_lengths[1] < n; ++step) {
    const std::vector<index_t> positions = {prompt_lengths[0] + step, prompt_lengths[1] + step};
    const std::vector<int> next = {tokens[static_cast<std::size_t>(positions[0])],
                                   tokens[static_cast<std::size_t>(positions[1])]};
    const tiny_llama::row_matrix logits = m.decode_batch(pointers, next, positions);
    for (int b = 0; b < 2; ++b) {
      const std::vector<float> want(
          reference.begin() + positions[static_cast<std::size_t>(b)] * vocab,
          reference.begin() + (positions[static_cast<std::size_t>(b)] + 1) * vocab);
      EXPECT_LT(relative_max_error(logits.row(b), want), 1e-4)
          << "sequence " << b << ", step " << step;
    }
  }
}

TEST(RazorkvTrainedModel, BatchedDecodeOverRazorCachesMatchesOneSequenceAtATime) {
  const tiny_llama::model& m = trained();
  const razorkv::head_plan plan =
      razorkv::io::head_plan_from_json(razorkv::io::read_text_file(kModelDir + "/plan.json"));
  const std::string text = tiny_llama::heldout_text(RAZORKV_SOURCE_DIR);
  razorkv::razor_config bounded;
  bounded.decode = razorkv::decode_mode::kBounded;
  // Three sequences of different lengths, compressed to a quarter of their cache, bounded decode.
  const std::vector<index_t> lengths = {300, 517, 1024};
  std::vector<razorkv::razor_kv_cache<float>> batched, single;
  std::vector<std::vector<int>> texts;
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    texts.push_back(
        tiny_llama::tokenize(text.substr(1000 * b, static_cast<std::size_t>(lengths[b]) + 8)));
    const tiny_llama::prefill_state state =
        m.prefill(std::vector<int>(texts[b].begin(), texts[b].begin() + lengths[b]), false);
    const auto policy = razorkv::razor_policy("razor", plan, bounded);
    for (auto* caches : {&batched, &single}) {
      caches->push_back(razorkv::compress_prompt(policy, m.prompt_of(state, 0),
                                                 razorkv::memory_budget::fraction_of_full(0.25)));
    }
  }
  std::vector<razorkv::razor_kv_cache<float>*> pointers;
  for (auto& c : batched) pointers.push_back(&c);
  for (index_t step = 0; step < 8; ++step) {
    std::vector<int> tokens;
    std::vector<index_t> positions;
    for (std::size_t b = 0; b < lengths.size(); ++b) {
      positions.push_back(lengths[b] + step);
      tokens.push_back(texts[b][static_cast<std::size_t>(positions.back())]);
    }
    const tiny_llama::row_matrix together = m.decode_batch(pointers, tokens, positions);
    for (std::size_t b = 0; b < lengths.size(); ++b) {
      const Eigen::VectorXf alone = m.decode(single[b], tokens[b], positions[b]);
      EXPECT_LT((together.row(static_cast<index_t>(b)).transpose() - alone).cwiseAbs().maxCoeff(),
                1e-5f * alone.cwiseAbs().maxCoeff())
          << "sequence " << b << ", step " << step;
    }
  }
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    EXPECT_EQ(razorkv::held_kv_bytes(batched[b]), razorkv::held_kv_bytes(single[b]));
  }
}

TEST(RazorkvTrainedModel, CalibrationReproducesTheCommittedScoresAndPlan) {
  const tiny_llama::model& m = trained();
  const razorkv::head_scores scores =
      tiny_llama::score_heads(m, razorkv::probe(tiny_llama::probe_config_for(m.cfg())));
  const auto committed =
      razorkv::io::head_scores_from_json(razorkv::io::read_text_file(kModelDir + "/scores.json"));
  // Scores PyTorch's attention probabilities give through `razorkv score --attn` (the CLI's path).
  const auto from_torch = razorkv::io::head_scores_from_json(
      razorkv::io::read_text_file(kModelDir + "/scores_from_torch.json"));
  for (index_t l = 0; l < m.cfg().num_layers; ++l) {
    for (index_t h = 0; h < m.cfg().num_q_heads; ++h) {
      EXPECT_NEAR(scores.echo(l, h), committed.echo(l, h), 1e-5) << "layer " << l << " head " << h;
      EXPECT_NEAR(scores.induction(l, h), committed.induction(l, h), 1e-5)
          << "layer " << l << " head " << h;
      EXPECT_NEAR(scores.echo(l, h), from_torch.echo(l, h), 1e-3) << "layer " << l << " head " << h;
      EXPECT_NEAR(scores.induction(l, h), from_torch.induction(l, h), 1e-3)
          << "layer " << l << " head " << h;
    }
  }
  const razorkv::head_plan plan = razorkv::select_retrieval_heads(scores, m.cfg().head_dim(), {});
  const razorkv::head_plan want =
      razorkv::io::head_plan_from_json(razorkv::io::read_text_file(kModelDir + "/plan.json"));
  for (index_t l = 0; l < m.cfg().num_layers; ++l)
    EXPECT_EQ(plan.retrieval_heads(l), want.retrieval_heads(l)) << l;
}

TEST(RazorkvTrainedModel, RazorFindsNeedlesLikeTheFullCache) {
  const tiny_llama::model& m = trained();
  const razorkv::head_plan plan =
      razorkv::io::head_plan_from_json(razorkv::io::read_text_file(kModelDir + "/plan.json"));
  const std::string text = tiny_llama::heldout_text(RAZORKV_SOURCE_DIR);
  const auto scores =
      razorkv::io::head_scores_from_json(razorkv::io::read_text_file(kModelDir + "/scores.json"));
  razorkv::selection_config two_groups;  // 20% of the 8 kv groups: both induction groups of layer 1
  two_groups.induction_ratio = 0.20;
  const std::vector<razorkv::policy> policies = {
      razorkv::full_policy(), razorkv::razor_policy("razor", plan),
      razorkv::razor_policy(
          "razor 20%", razorkv::select_retrieval_heads(scores, m.cfg().head_dim(), two_groups)),
      razorkv::razor_policy("random", razorkv::random_plan(m.shape(), plan.num_retrieval(), 5)),
      razorkv::streaming_llm_policy()};
  std::mt19937_64 rng(11);
  std::vector<double> correct(policies.size(), 0.0), predictions(policies.size(), 0.0);
  std::vector<index_t> kv_bytes(policies.size(), 0);
  for (int i = 0; i < 10; ++i) {
    // A random run in the first half of a 1,024-token document: outside StreamingLLM's window.
    const tiny_llama::trial t = tiny_llama::needle_trial(text, 1024, 0.05 * i, rng);
    const auto outcomes =
        tiny_llama::run_trial(m, t, policies, razorkv::memory_budget::fraction_of_full(1.0 / 3.0));
    for (std::size_t p = 0; p < policies.size(); ++p) {
      correct[p] += outcomes[p].correct;
      predictions[p] += outcomes[p].predictions;
      kv_bytes[p] = outcomes[p].kv_bytes;
    }
  }
  std::vector<double> accuracy;
  for (std::size_t p = 0; p < policies.size(); ++p) accuracy.push_back(correct[p] / predictions[p]);
  const double full = accuracy[0], razor = accuracy[1], razor_two = accuracy[2];
  const double random = accuracy[3], streaming = accuracy[4];
  // What the README reports of this model (measured: full 0.67, razor 0.56, razor with two
  // groups 0.67, random groups and StreamingLLM near 0), with slack.
  RecordProperty("needle_accuracy", testing::PrintToString(accuracy));
  EXPECT_GE(full, 0.5) << "the full cache should copy most of the runs it finds";
  EXPECT_GE(razor, full - 0.15) << "razor (1 group kept) should find most of what full finds";
  EXPECT_GE(razor_two, full - 0.05) << "razor keeping both induction groups should match full";
  EXPECT_LE(random, razor - 0.15) << "random groups should do far worse than scored ones";
  EXPECT_LE(streaming, 0.5 * full) << "StreamingLLM cannot see runs outside its window";
  EXPECT_LE(3 * kv_bytes[1], kv_bytes[0] + kv_bytes[0] / 20) << "razor held more than a third";
}

// The engine's chunked prefill runs the same model as its dense prefill: with a window that
// drops nothing, every chunk size gives the dense prefill's last logits; with one that drops,
// the cache holds what its budget allows and a chunk longer than a window is an error.
TEST(RazorkvTrainedModel, ChunkedPrefillIsTheDensePrefillWhenNothingIsDropped) {
  const tiny_llama::model& m = trained();
  const auto tokens64 =
      razorkv::io::read_npy(kModelDir + "/reference_tokens.npy").to<std::int64_t>();
  const std::vector<int> tokens(tokens64.begin(), tokens64.end());
  const auto n = static_cast<index_t>(tokens.size());
  const tiny_llama::prefill_state dense = m.prefill(tokens, false);
  const razorkv::head_plan plan =
      razorkv::io::head_plan_from_json(razorkv::io::read_text_file(kModelDir + "/plan.json"));
  razorkv::razor_config keep_all;
  keep_all.s0 = n;  // the window holds the whole prompt
  for (const index_t chunk : {index_t{1}, index_t{7}, index_t{32}, n}) {
    razorkv::razor_kv_cache<float> cache(plan, keep_all);
    const Eigen::VectorXf logits = m.prefill_chunked(cache, tokens, chunk);
    EXPECT_LT(relative_max_error(dense.logits,
                                 std::vector<float>(logits.data(), logits.data() + logits.size())),
              1e-4)
        << "chunk " << chunk;
    EXPECT_EQ(cache.kv_bytes(), cache.dense_kv_bytes());
  }
  razorkv::razor_config small_window;
  small_window.fixed_window = 16;
  razorkv::razor_kv_cache<float> cache(plan, small_window);
  m.prefill_chunked(cache, tokens, 16);
  EXPECT_EQ(cache.num_tokens(0), n);
  EXPECT_EQ(cache.entries(0, 0), plan.is_retrieval(0, 0) ? n : 4 + 1 + 16);
  razorkv::razor_kv_cache<float> too_long(plan, small_window);
  RAZORKV_EXPECT_ERROR(m.prefill_chunked(too_long, tokens, 17), kInvalidArgument,
                       "queries.tokens() (17) exceeds the 16 newest tokens layer 0 keeps");
}

TEST(RazorkvTrainedModel, LoaderRejectsAMissingOrBadConfig) {
  const std::string path = testing::TempDir() + "/no_config.safetensors";
  std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string file(8, '\0');
  file[0] = static_cast<char>(header.size());
  razorkv::io::write_text_file(path, file + header + std::string(4, '\0'));
  RAZORKV_EXPECT_ERROR(tiny_llama::model::load(path), kInvalidArgument,
                       "has no \"config\" metadata");
  const auto with_config = [&](const std::string& config) {
    const std::string h = R"({"__metadata__":{"config":)" + nlohmann::json(config).dump() +
                          R"(},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    std::string f(8, '\0');
    f[0] = static_cast<char>(h.size());
    razorkv::io::write_text_file(path, f + h + std::string(4, '\0'));
    return tiny_llama::model::load(path);
  };
  RAZORKV_EXPECT_ERROR(with_config("{"), kParseError, "\"config\" metadata is not JSON");
  RAZORKV_EXPECT_ERROR(with_config(R"({"vocab_size":256})"), kParseError,
                       "config \"d_model\" is missing or not a number");
  RAZORKV_EXPECT_ERROR(with_config(R"({"vocab_size":2.5})"), kInvalidArgument,
                       "config \"vocab_size\" (2.5) must be a positive integer");
}

}  // namespace

// The whole-answer needle: the context is exactly the asked length with the needle at the asked
// depth of the filler, the cue and the answer are the needle cut in two, each kind keeps to its
// alphabet, and a seed draws the same trial again.
TEST(RazorkvTrainedTasks, WholeNeedleTrialsPlaceTheNeedleWhereTheySay) {
  const std::string text = tiny_llama::heldout_text(RAZORKV_SOURCE_DIR);
  for (const tiny_llama::byte_needle kind : tiny_llama::kByteNeedles) {
    const std::string name = tiny_llama::byte_needle_name(kind);
    for (const double depth : {0.0, 0.3, 1.0}) {
      std::mt19937_64 rng(7), again(7);
      const tiny_llama::trial t = tiny_llama::whole_needle_trial(text, 300, depth, kind, rng);
      const tiny_llama::trial u = tiny_llama::whole_needle_trial(text, 300, depth, kind, again);
      EXPECT_EQ(t.context, u.context) << name;
      EXPECT_EQ(t.answer, u.answer) << name;
      ASSERT_EQ(t.context.size(), 300u) << name;
      const std::string needle = tiny_llama::detokenize(t.continuation) + t.answer;
      ASSERT_EQ(t.continuation.size(), tiny_llama::kWholeNeedleCue) << name;
      EXPECT_EQ(needle.size(), kind == tiny_llama::byte_needle::kUuid ? 36u : 32u) << name;
      EXPECT_EQ(t.generate, static_cast<index_t>(t.answer.size())) << name;
      EXPECT_FALSE(t.newline_ends) << name;
      const auto at = static_cast<std::size_t>(depth * static_cast<double>(300 - needle.size()));
      EXPECT_EQ(tiny_llama::detokenize(t.context).substr(at, needle.size()), needle)
          << name << " at depth " << depth;
      const std::string alphabet =
          kind == tiny_llama::byte_needle::kDigits         ? "0123456789"
          : kind == tiny_llama::byte_needle::kLetters      ? "abcdefghijklmnopqrstuvwxyz"
          : kind == tiny_llama::byte_needle::kAlphanumeric ? "abcdefghijklmnopqrstuvwxyz0123456789"
          : kind == tiny_llama::byte_needle::kUuid         ? "0123456789abcdef-"
                                                           : "";
      if (!alphabet.empty()) {
        EXPECT_EQ(needle.find_first_not_of(alphabet), std::string::npos) << name << ": " << needle;
      }
      if (kind == tiny_llama::byte_needle::kUuid) {
        for (const std::size_t dash : {8u, 13u, 18u, 23u}) EXPECT_EQ(needle[dash], '-') << needle;
      }
    }
  }
}
