// Tests of the engine on a real pretrained LLM, SmolLM2-135M-Instruct (its GGUF file, fetched by
// scripts/get_model.sh), against llama.cpp's reference committed in
// examples/engine/smollm2/llama_cpp/ (tools/smollm2/llama_cpp_reference.py wrote it): the
// tokenizer's ids, next-token agreement and KL divergence on 64-, 1,024- and 4,096-token prompts,
// decode over a razorkv cache along llama.cpp's generation; calibration reproducing the committed
// plan; razor against the full cache, random heads and StreamingLLM on hidden passphrases; and
// the long-context evaluation's machinery (every task through full and razor, in lockstep).
#include <gtest/gtest.h>

#include <razorkv/eval.hpp>
#include <razorkv/io/json.hpp>
#include <razorkv/io/npy.hpp>
#include <razorkv/io/plan_files.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/long_context_eval.hpp"
#include "engine/smollm2.hpp"

namespace {

using razorkv::index_t;

const std::string kDir = std::string(RAZORKV_SOURCE_DIR) + "/examples/engine/smollm2";
const std::string kReference = kDir + "/llama_cpp";

const tiny_llama::gguf_model& smollm2() {
  static const tiny_llama::gguf_model m = tiny_llama::gguf_model::load(RAZORKV_SMOLLM2_GGUF);
  return m;
}

std::vector<int> read_ids(const std::string& name) {
  const std::vector<std::int64_t> ids =
      razorkv::io::read_npy(kReference + "/" + name).to<std::int64_t>();
  return std::vector<int>(ids.begin(), ids.end());
}

// How the engine's next-token distribution at one position compares with llama.cpp's, given
// llama.cpp's `k` most likely tokens and their log-probabilities there.
struct position_check {
  bool same_top = false;  ///< both pick the same most likely token
  double margin = 0;      ///< llama.cpp's lead of its first choice over its second (nats)
  /// KL(llama.cpp || engine) over llama.cpp's k tokens and the rest of the probability as one
  /// bucket: it can only understate the divergence over the whole vocabulary.
  double kl = 0;
};

position_check check_position(const Eigen::VectorXf& logits, const int* top, const float* top_lp,
                              index_t k) {
  const Eigen::VectorXd x = logits.cast<double>();
  const double top_x = x.maxCoeff();
  const double lse = top_x + std::log((x.array() - top_x).exp().sum());
  Eigen::Index best = 0;
  x.maxCoeff(&best);
  position_check c;
  c.same_top = best == top[0];
  c.margin = static_cast<double>(top_lp[0]) - static_cast<double>(top_lp[1]);
  double p_in = 0, q_in = 0;
  for (index_t j = 0; j < k; ++j) {
    const double lp = top_lp[j], lq = x[top[j]] - lse;
    c.kl += std::exp(lp) * (lp - lq);
    p_in += std::exp(lp);
    q_in += std::exp(lq);
  }
  if (p_in < 1 && q_in < 1) c.kl += (1 - p_in) * std::log((1 - p_in) / (1 - q_in));
  return c;
}

TEST(RazorkvSmolLM2, ReadsTheModelsShapeFromItsFile) {
  const tiny_llama::config& c = smollm2().weights.cfg();
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.num_q_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim(), 64);
  EXPECT_EQ(c.max_context, 8192);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.first_text_id, 17);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope, tiny_llama::rope_pairs::kAdjacent);
}

TEST(RazorkvSmolLM2, TokenizerIdsEqualLlamaCppsOnTheHeldOutCorpus) {
  const tiny_llama::bpe_tokenizer& tok = smollm2().tokenizer;
  const std::string text = tiny_llama::smollm2_heldout_text(RAZORKV_SOURCE_DIR);
  const std::vector<int> ids = tok.tokenize(text);
  EXPECT_EQ(ids, read_ids("heldout_ids.npy"));
  EXPECT_EQ(tok.detokenize(ids), text);

  // Short texts beyond the corpus (digits, contractions, Unicode letters and numbers, runs of
  // spaces), one per line with \n and \t escaped; llama.cpp's ids end each with -1.
  std::ifstream in(kReference + "/tokenizer_samples.txt", std::ios::binary);
  const std::vector<int> want = read_ids("tokenizer_samples.npy");
  std::size_t at = 0;
  int samples = 0;
  for (std::string line; std::getline(in, line); ++samples) {
    std::string sample;
    for (std::size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && (line[i + 1] == 'n' || line[i + 1] == 't')) {
        sample += line[++i] == 'n' ? '\n' : '\t';
      } else {
        sample += line[i];
      }
    }
    std::vector<int> expected;
    while (at < want.size() && want[at] != -1) expected.push_back(want[at++]);
    ++at;
    EXPECT_EQ(tok.tokenize(sample), expected) << sample;
    EXPECT_EQ(tok.detokenize(tok.tokenize(sample)), sample);
  }
  EXPECT_EQ(samples, 4);
  EXPECT_EQ(at, want.size());
  // Control tokens are text unless asked for.
  EXPECT_EQ(tok.tokenize("<|im_start|>user", true).front(), 1);
  EXPECT_GT(tok.tokenize("<|im_start|>user").size(), 2u);
}

// llama.cpp's next-token distribution against the engine's: greedy agreement at every position
// and KL(llama.cpp || engine), from llama.cpp's 32 most likely tokens and the rest of the
// probability as one bucket (which can only understate the KL divergence), on three prompts.
TEST(RazorkvSmolLM2, LogitsAgreeWithLlamaCpp) {
  const razorkv::io::npy_array prompts = razorkv::io::read_npy(kReference + "/prompt_tokens.npy");
  const std::vector<int> prompt_ids = read_ids("prompt_tokens.npy");
  const std::vector<int> top = read_ids("top_ids.npy");
  const std::vector<float> top_lp =
      razorkv::io::read_npy(kReference + "/top_logprobs.npy").to<float>();
  const std::vector<float> last =
      razorkv::io::read_npy(kReference + "/last_logits.npy").to<float>();
  const index_t longest = prompts.shape[1], k = 32, vocab = smollm2().weights.cfg().vocab_size;
  for (index_t p = 0; p < prompts.shape[0]; ++p) {
    std::vector<int> tokens;
    for (index_t i = 0; i < longest && prompt_ids[static_cast<std::size_t>(p * longest + i)] >= 0;
         ++i)
      tokens.push_back(prompt_ids[static_cast<std::size_t>(p * longest + i)]);
    const index_t n = static_cast<index_t>(tokens.size());
    const tiny_llama::prefill_state state = smollm2().weights.prefill(tokens, true);
    index_t agree = 0, confident = 0, confident_agree = 0;
    double kl_sum = 0;
    for (index_t i = 0; i < n; ++i) {
      const std::size_t base = static_cast<std::size_t>((p * longest + i) * k);
      const position_check c =
          check_position(state.logits.row(i).transpose(), &top[base], &top_lp[base], k);
      agree += c.same_top ? 1 : 0;
      // Positions where llama.cpp's first choice leads its second by 0.25 nats or more.
      if (c.margin >= 0.25) {
        ++confident;
        confident_agree += c.same_top ? 1 : 0;
      }
      kl_sum += c.kl;
    }
    // The last position's whole distribution: its exact KL divergence.
    const Eigen::VectorXd x = state.logits.row(n - 1).cast<double>().transpose();
    Eigen::VectorXd y(vocab);
    for (index_t v = 0; v < vocab; ++v) y[v] = last[static_cast<std::size_t>(p * vocab + v)];
    const auto log_softmax = [](const Eigen::VectorXd& z) {
      const double m = z.maxCoeff();
      return Eigen::VectorXd(z.array() - m - std::log((z.array() - m).exp().sum()));
    };
    const Eigen::VectorXd lx = log_softmax(x), ly = log_softmax(y);
    const double last_kl = (ly.array().exp() * (ly - lx).array()).sum();
    const double agreement = static_cast<double>(agree) / static_cast<double>(n);
    const double mean_kl = kl_sum / static_cast<double>(n);
    std::printf(
        "prompt of %lld tokens: greedy agreement %.4f (%lld of %lld), %.4f where llama.cpp "
        "leads by >= 0.25 nats (%lld positions); mean KL %.5f nats; last position's "
        "exact KL %.5f\n",
        static_cast<long long>(n), agreement, static_cast<long long>(agree),
        static_cast<long long>(n),
        static_cast<double>(confident_agree) / static_cast<double>(confident),
        static_cast<long long>(confident), mean_kl, last_kl);
    EXPECT_LT(mean_kl, 0.01) << n;
    EXPECT_LT(last_kl, 0.05) << n;
    EXPECT_GE(agreement, 0.93) << n;
    EXPECT_GE(static_cast<double>(confident_agree) / static_cast<double>(confident), 0.99) << n;
  }
}

// Decode over razorkv's full cache, one token at a time: the 64-token prompt, then llama.cpp's
// 64 greedily generated tokens fed back, its distribution before each of them compared with the
// engine's; and how far the engine's own greedy generation follows llama.cpp's.
TEST(RazorkvSmolLM2, DecodeFollowsLlamaCppsGeneration) {
  const std::vector<int> prompt_ids = read_ids("prompt_tokens.npy");
  const std::vector<int> greedy = read_ids("greedy.npy");
  const std::vector<int> top = read_ids("greedy_top_ids.npy");
  const std::vector<float> top_lp =
      razorkv::io::read_npy(kReference + "/greedy_top_logprobs.npy").to<float>();
  const tiny_llama::model& m = smollm2().weights;
  const index_t prompt = 64, generated = 64, k = 32;
  const auto fresh_cache = [&] {
    return razorkv::dense_kv_cache<float>(m.cfg().num_layers, m.cfg().num_kv_heads,
                                          m.cfg().head_dim());
  };
  razorkv::dense_kv_cache<float> cache = fresh_cache();
  Eigen::VectorXf logits;
  for (index_t i = 0; i < prompt; ++i)
    logits = m.decode(cache, prompt_ids[static_cast<std::size_t>(i)], i);
  razorkv::dense_kv_cache<float> free_running = cache;
  Eigen::VectorXf free_logits = logits;
  index_t agree = 0;
  double kl_sum = 0;
  for (index_t g = 0; g < generated; ++g) {
    const std::size_t base = static_cast<std::size_t>(g * k);
    const position_check c = check_position(logits, &top[base], &top_lp[base], k);
    agree += c.same_top ? 1 : 0;
    kl_sum += c.kl;
    logits = m.decode(cache, greedy[static_cast<std::size_t>(g)], prompt + g);
  }
  index_t followed = 0;
  for (index_t g = 0; g < generated; ++g) {
    Eigen::Index best = 0;
    free_logits.maxCoeff(&best);
    if (static_cast<int>(best) != greedy[static_cast<std::size_t>(g)]) break;
    ++followed;
    free_logits = m.decode(free_running, static_cast<int>(best), prompt + g);
  }
  std::printf(
      "decode before llama.cpp's 64 generated tokens: greedy agreement %lld of 64, mean KL "
      "%.5f nats; the engine's own greedy generation equals llama.cpp's for %lld tokens\n",
      static_cast<long long>(agree), kl_sum / static_cast<double>(generated),
      static_cast<long long>(followed));
  EXPECT_LT(kl_sum / static_cast<double>(generated), 0.01);
  EXPECT_GE(agree, 58);
}

// The engine's other paths on the real model: a batch of sequences of different lengths decoded
// together equals each decoded alone, and chunked prefill into a razor cache whose window holds
// the whole prompt is the dense prefill.
TEST(RazorkvSmolLM2, BatchedDecodeAndChunkedPrefillMatchTheDensePaths) {
  const tiny_llama::model& m = smollm2().weights;
  const std::vector<int> all = read_ids("prompt_tokens.npy");
  const std::vector<int> ids(all.begin() + 2 * 4096, all.end());  // the 4,096-token prompt
  const auto dense_cache = [&] {
    return razorkv::dense_kv_cache<float>(m.cfg().num_layers, m.cfg().num_kv_heads,
                                          m.cfg().head_dim());
  };
  std::vector<razorkv::dense_kv_cache<float>> alone, together;
  for (int b = 0; b < 2; ++b) {
    alone.push_back(dense_cache());
    together.push_back(dense_cache());
  }
  const index_t lengths[] = {40, 17};
  index_t steps = 0;
  for (index_t step = 0; step < 40; ++step) {
    std::vector<razorkv::dense_kv_cache<float>*> batch;
    std::vector<int> tokens;
    std::vector<index_t> positions;
    std::vector<Eigen::VectorXf> single;
    for (int b = 0; b < 2; ++b) {
      if (step >= lengths[b]) continue;
      const int token = ids[static_cast<std::size_t>(100 * b + step)];
      single.push_back(m.decode(alone[static_cast<std::size_t>(b)], token, step));
      batch.push_back(&together[static_cast<std::size_t>(b)]);
      tokens.push_back(token);
      positions.push_back(step);
    }
    const tiny_llama::row_matrix logits = m.decode_batch(batch, tokens, positions);
    for (std::size_t r = 0; r < single.size(); ++r) {
      const float scale = single[r].cwiseAbs().maxCoeff();
      EXPECT_LE((logits.row(static_cast<index_t>(r)).transpose() - single[r]).cwiseAbs().maxCoeff(),
                1e-4f * scale)
          << "step " << step;
    }
    ++steps;
  }
  EXPECT_EQ(steps, 40);

  const std::vector<int> prompt(ids.begin(), ids.begin() + 200);
  const tiny_llama::prefill_state dense = m.prefill(prompt, false);
  const razorkv::head_plan plan = tiny_llama::smollm2_plan(RAZORKV_SOURCE_DIR);
  razorkv::razor_config keep_all;
  keep_all.s0 = 200;
  razorkv::razor_kv_cache<float> cache(plan, keep_all);
  const Eigen::VectorXf chunked = m.prefill_chunked(cache, prompt, 64);
  const Eigen::VectorXf want = dense.logits.row(0).transpose();
  EXPECT_LE((chunked - want).cwiseAbs().maxCoeff(), 1e-4f * want.cwiseAbs().maxCoeff());
  EXPECT_EQ(cache.kv_bytes(), cache.dense_kv_bytes());
}

// The first decode step over a razor cache with the committed plan, after a 600-token prompt
// whose local heads keep 4 sinks, a compensation token and 120 tokens (s0 = 64, C = 5): its
// logits are committed (razor_decode_logits.npy), so that razorkv.hf's cache, which runs the
// same step through transformers (tests/python/test_hf.py), is held to the engine's numbers.
// RAZORKV_UPDATE_REFERENCE=1 rewrites the file from this engine.
TEST(RazorkvSmolLM2, RazorDecodeLogitsEqualTheCommittedOnes) {
  const tiny_llama::model& m = smollm2().weights;
  const std::vector<int> ids = read_ids("heldout_ids.npy");
  const std::vector<int> prompt(ids.begin(), ids.begin() + 600);
  const tiny_llama::prefill_state state = m.prefill(prompt, false);
  const razorkv::head_plan plan = tiny_llama::smollm2_plan(RAZORKV_SOURCE_DIR);
  razorkv::razor_config config;
  config.s0 = 64;
  razorkv::razor_kv_cache<float> cache(plan, config);
  for (index_t l = 0; l < m.cfg().num_layers; ++l) {
    cache.compress_layer(l, state.key_view(l, m.cfg().num_kv_heads),
                         state.value_view(l, m.cfg().num_kv_heads));
  }
  // Every one of the 76 local kv groups folds the 600 - 4 - 120 tokens between its sinks and
  // its window into its compensation token.
  ASSERT_EQ(plan.num_retrieval(), 14);
  EXPECT_EQ(cache.dropped_tokens(), 76 * (600 - 4 - 120));
  const Eigen::VectorXf logits = m.decode(cache, ids[600], 600);

  const std::string path = kDir + "/razor_decode_logits.npy";
  const char* update = std::getenv("RAZORKV_UPDATE_REFERENCE");
  if (update != nullptr && std::string(update) == "1") {
    // A version 1.0 .npy file: magic, header length, a header padded to 64 bytes, the data.
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                         std::to_string(logits.size()) + ",), }";
    header.append(63 - (10 + header.size()) % 64, ' ').push_back('\n');
    std::ofstream out(path, std::ios::binary);
    const auto length = static_cast<std::uint16_t>(header.size());
    out.write("\x93NUMPY\x01\x00", 8);
    out.put(static_cast<char>(length & 0xff)).put(static_cast<char>(length >> 8));
    out << header;
    out.write(
        reinterpret_cast<const char*>(logits.data()),
        static_cast<std::streamsize>(sizeof(float) * static_cast<std::size_t>(logits.size())));
    ASSERT_TRUE(out.good()) << "could not write " << path;
  }
  const std::vector<float> want = razorkv::io::read_npy(path).to<float>();
  ASSERT_EQ(static_cast<index_t>(want.size()), logits.size());
  const Eigen::Map<const Eigen::VectorXf> committed(want.data(), logits.size());
  EXPECT_LE((logits - committed).cwiseAbs().maxCoeff(), 1e-4f * committed.cwiseAbs().maxCoeff());
}

TEST(RazorkvSmolLM2, CalibrationReproducesTheCommittedPlan) {
  const tiny_llama::model& m = smollm2().weights;
  const razorkv::probe probe(tiny_llama::probe_config_for(m.cfg()));
  EXPECT_EQ(probe.length(), 8192);
  const razorkv::head_scores scores = tiny_llama::score_heads(m, probe);
  const auto committed =
      razorkv::io::head_scores_from_json(razorkv::io::read_text_file(kDir + "/scores.json"));
  const razorkv::head_plan plan = razorkv::select_retrieval_heads(scores, m.cfg().head_dim(), {});
  const razorkv::head_plan want = tiny_llama::smollm2_plan(RAZORKV_SOURCE_DIR);
  EXPECT_EQ(plan.num_retrieval(), 14);
  for (index_t l = 0; l < m.cfg().num_layers; ++l) {
    EXPECT_EQ(plan.retrieval_heads(l), want.retrieval_heads(l)) << "layer " << l;
    for (index_t h = 0; h < m.cfg().num_q_heads; ++h) {
      EXPECT_NEAR(scores.echo(l, h), committed.echo(l, h), 1e-4) << l << ", " << h;
      EXPECT_NEAR(scores.induction(l, h), committed.induction(l, h), 1e-4) << l << ", " << h;
    }
  }
}

// Five-digit passphrases at six depths of 3,000-token documents (a task the full cache solves:
// 20 of 20 in razorkv_smollm2_needles' run), each cache but full at a third of its memory: the
// calibrated retrieval heads must recall at least as many as the same number of random heads
// and as StreamingLLM, at the same memory.
TEST(RazorkvSmolLM2, CalibratedHeadsRecallWhatRandomHeadsAndStreamingLLMMiss) {
  const tiny_llama::gguf_model& m = smollm2();
  const razorkv::head_plan plan = tiny_llama::smollm2_plan(RAZORKV_SOURCE_DIR);
  const std::string text = tiny_llama::smollm2_heldout_text(RAZORKV_SOURCE_DIR);
  const razorkv::policy policies[] = {
      razorkv::full_policy(), razorkv::razor_policy("razor", plan),
      razorkv::razor_policy("random heads",
                            razorkv::random_plan(m.weights.shape(), plan.num_retrieval(), 1)),
      razorkv::streaming_llm_policy()};
  constexpr int kPolicies = 4, kTrials = 6;
  std::mt19937_64 rng(3);
  int recalled[kPolicies] = {};
  for (int i = 0; i < kTrials; ++i) {
    const double depth = (i + 0.5) / kTrials;
    const tiny_llama::passphrase_trial t = tiny_llama::make_passphrase_trial(
        m, text, 3000, depth, rng, tiny_llama::passphrase_kind::kNumber);
    const tiny_llama::prefill_state state = m.weights.prefill(t.document, false);
    const razorkv::prompt_kv<float> prompt = m.weights.prompt_of(state);
    for (int p = 0; p < kPolicies; ++p) {
      razorkv::any_kv_cache<float> cache = razorkv::compress_prompt(
          policies[p], prompt, razorkv::memory_budget::fraction_of_full(1.0 / 3.0));
      const std::string answer = tiny_llama::answer_passphrase(m, cache, t);
      recalled[p] += tiny_llama::recalls_passphrase(answer, t.passphrase) ? 1 : 0;
      std::printf("depth %.2f %-13s \"%s\" (%s)\n", depth, policies[p].name.c_str(), answer.c_str(),
                  t.passphrase.c_str());
    }
  }
  std::printf("recalled of %d: full %d, razor %d, random heads %d, streaming_llm %d\n", kTrials,
              recalled[0], recalled[1], recalled[2], recalled[3]);
  EXPECT_GE(recalled[0], kTrials - 1);
  EXPECT_GE(recalled[1], recalled[2]);
  EXPECT_GE(recalled[1], recalled[3]);
  EXPECT_GT(recalled[1], 0);
}

// One 768-token prompt of each long-context task through full and razor in one lockstep batch
// (razorkv_smollm2_eval's machinery): the full cache recalls the seven-digit needle (5 of 5 at
// 1,024 tokens in the evaluation's run), razor holds a third of the bytes, and a cache answers
// the same in the batch as alone (each cache's decode reads only its own K/V).
TEST(RazorkvSmolLM2, EveryLongContextTaskRunsThroughFullAndRazorInLockstep) {
  const tiny_llama::gguf_model& m = smollm2();
  const razorkv::head_plan plan = tiny_llama::smollm2_plan(RAZORKV_SOURCE_DIR);
  const std::vector<int> haystack =
      m.tokenizer.tokenize(tiny_llama::smollm2_heldout_text(RAZORKV_SOURCE_DIR));
  const auto budget = razorkv::memory_budget::fraction_of_full(1.0 / 3.0);
  tiny_llama::task_policies both, razor_alone;
  both.agnostic = {razorkv::full_policy(), razorkv::razor_policy("razor", plan)};
  razor_alone.agnostic = {razorkv::razor_policy("razor", plan)};
  using tiny_llama::needle_kind;
  using tiny_llama::task_kind;
  const std::pair<task_kind, needle_kind> tasks[] = {
      {task_kind::kSingleNeedle, needle_kind::kNumber},
      {task_kind::kSingleNeedle, needle_kind::kUuid},
      {task_kind::kMultiKey, needle_kind::kNumber},
      {task_kind::kMultiValue, needle_kind::kNumber},
      {task_kind::kVariableTracking, needle_kind::kNumber},
      {task_kind::kPassageCopy, needle_kind::kWord}};
  for (const auto& [task, needle] : tasks) {
    std::mt19937_64 rng(5);
    const tiny_llama::task_prompt p =
        tiny_llama::make_task_prompt(m.tokenizer, haystack, {task, needle, 768, 0.5}, rng);
    ASSERT_EQ(p.length(), 768);
    const auto answers = tiny_llama::answer_task(m, p, both, budget);
    ASSERT_EQ(answers.size(), 2u);
    std::printf("%s %s: full \"%s\" razor \"%s\" (expected %s)\n", tiny_llama::task_name(task),
                tiny_llama::needle_name(needle), answers[0].generated.c_str(),
                answers[1].generated.c_str(), p.expected[0].c_str());
    EXPECT_NEAR(static_cast<double>(answers[1].kv_bytes) / static_cast<double>(answers[0].kv_bytes),
                1.0 / 3.0, 0.01);
    if (task == task_kind::kSingleNeedle && needle == needle_kind::kNumber) {
      EXPECT_TRUE(answers[0].correct) << answers[0].generated;
      const auto alone = tiny_llama::answer_task(m, p, razor_alone, budget);
      EXPECT_EQ(alone[0].generated, answers[1].generated);
      // Razor with a chunked prefill: 512-token chunks are longer than the local heads' window
      // at this budget, so the document goes in window-long chunks, and the cache still holds a
      // third of the full cache's bytes.
      tiny_llama::task_policies chunked;
      chunked.chunked_plan = &plan;
      const auto by_chunks = tiny_llama::answer_task(m, p, chunked, budget);
      ASSERT_EQ(by_chunks.size(), 1u);
      EXPECT_NEAR(
          static_cast<double>(by_chunks[0].kv_bytes) / static_cast<double>(answers[0].kv_bytes),
          1.0 / 3.0, 0.01);
      EXPECT_FALSE(by_chunks[0].generated.empty());
    }
  }
}

// Held-out likelihood in lockstep: a cache identical to the full one is at KL 0 from it with the
// same NLL, razor at a third of the bytes is not.
TEST(RazorkvSmolLM2, LikelihoodTrialsMeasureKlFromTheFullCache) {
  const tiny_llama::gguf_model& m = smollm2();
  const razorkv::head_plan plan = tiny_llama::smollm2_plan(RAZORKV_SOURCE_DIR);
  const std::vector<int> haystack =
      m.tokenizer.tokenize(tiny_llama::smollm2_heldout_text(RAZORKV_SOURCE_DIR));
  const std::vector<int> tokens(haystack.begin() + 2000, haystack.begin() + 2000 + 1024 + 24);
  const std::vector<razorkv::policy> policies = {razorkv::full_policy(), razorkv::full_policy(),
                                                 razorkv::razor_policy("razor", plan)};
  const auto out = tiny_llama::likelihood_trial(m, tokens, 1024, policies,
                                                razorkv::memory_budget::fraction_of_full(0.25));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].scored, 23);
  EXPECT_EQ(out[1].kl, 0.0);
  EXPECT_EQ(out[1].nll, out[0].nll);
  EXPECT_EQ(out[1].agree, 23);
  EXPECT_GT(out[2].kl, 1e-4);
  EXPECT_LT(out[2].kv_bytes, out[0].kv_bytes / 3);
  // The NLL is the held-out text's: a perplexity a small model gives prose, not a broken cache's.
  EXPECT_LT(std::exp(out[0].nll / out[0].scored), 60.0);
}

}  // namespace
