// examples/engine/long_context_eval.hpp: one long-context prompt (or one held-out likelihood
// trial) through every policy at once: one dense prefill, then the policies' caches in lockstep.
//
// Decoding all caches as one batch reads the weights once per step for all policies: decode on
// this model is dominated by reading the weights, so each added policy costs far less than a
// pass of its own.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include <razorkv/razorkv.hpp>

#include "long_context_tasks.hpp"
#include "smollm2.hpp"

namespace tiny_llama {

/// What one cache answered.
struct policy_answer {
  std::string generated;
  bool correct = false;
  index_t kv_bytes = 0;  ///< K/V bytes the cache held after compression
};

/// How the policies of one run see the prompt.
struct task_policies {
  std::vector<razorkv::policy> agnostic;  ///< compress the document; the question comes after
  std::vector<razorkv::policy> aware;     ///< compress document + question, then answer
  const razorkv::head_plan* chunked_plan = nullptr;  ///< razor with chunked prefill, if set
  index_t chunk = 512;  ///< tokens per chunk, at most a local head's window
};

namespace eval_detail {

inline int argmax(const float* logits, index_t n) {
  return static_cast<int>(std::max_element(logits, logits + n) - logits);
}

}  // namespace eval_detail

/// Prefills `p` densely once; each agnostic policy compresses its document to `budget` and reads
/// the question through decode, each aware policy compresses document and question; then every
/// cache generates greedily, stopping at a control token, at a newline after the first letter or
/// digit of a single-line answer, or after p.max_answer_tokens. Answers are in the order agnostic,
/// chunked (when set), aware.
inline std::vector<policy_answer> answer_task(const gguf_model& m, const task_prompt& p,
                                              const task_policies& policies,
                                              const razorkv::memory_budget& budget) {
  using razorkv::any_kv_cache;
  const auto doc_tokens = static_cast<index_t>(p.document.size());
  std::vector<int> all = p.document;
  all.insert(all.end(), p.question.begin(), p.question.end());
  const index_t length = static_cast<index_t>(all.size());
  std::vector<any_kv_cache<float>> caches;
  index_t vocab = 0;
  row_matrix first_logits;  // the dense prefill's prediction after the whole prompt
  {
    const prefill_state state = m.weights.prefill(all, false);
    first_logits = state.logits.bottomRows(1);
    vocab = static_cast<index_t>(state.logits.cols());
    const razorkv::prompt_kv<float> document = m.weights.prompt_of(state, -1, doc_tokens);
    for (const razorkv::policy& policy : policies.agnostic) {
      caches.push_back(razorkv::compress_prompt(policy, document, budget));
    }
    if (policies.chunked_plan != nullptr) {
      const index_t entries = razorkv::entries_per_head(budget, m.weights.shape(), doc_tokens,
                                                        static_cast<index_t>(sizeof(float)));
      const razorkv::razor_config config =
          razorkv::razor_config_for_budget(*policies.chunked_plan, doc_tokens, entries);
      razorkv::razor_kv_cache<float> cache(*policies.chunked_plan, config);
      // A chunk's tokens must all still be in every local head's window when it is read, so a
      // chunk is at most a window long.
      m.weights.prefill_chunked(cache, p.document, std::min(policies.chunk, config.fixed_window));
      caches.emplace_back(std::move(cache));
    }
    const razorkv::prompt_kv<float> whole = m.weights.prompt_of(state);
    for (const razorkv::policy& policy : policies.aware) {
      caches.push_back(razorkv::compress_prompt(policy, whole, budget));
    }
  }  // the dense K/V and queries go here, before decode grows the caches
  const std::size_t n = caches.size();
  const std::size_t reading = policies.agnostic.size() + (policies.chunked_plan ? 1 : 0);
  std::vector<policy_answer> answers(n);
  for (std::size_t b = 0; b < n; ++b) answers[b].kv_bytes = caches[b].kv_bytes();

  // The question, teacher-forced over every cache that has not read it.
  row_matrix logits(static_cast<index_t>(n), vocab);
  std::vector<any_kv_cache<float>*> readers;
  for (std::size_t b = 0; b < reading; ++b) readers.push_back(&caches[b]);
  if (!readers.empty()) {
    row_matrix out;
    for (std::size_t i = 0; i < p.question.size(); ++i) {
      out = m.weights.decode_batch(
          readers, std::vector<int>(readers.size(), p.question[i]),
          std::vector<index_t>(readers.size(), doc_tokens + static_cast<index_t>(i)));
    }
    logits.topRows(static_cast<index_t>(reading)) = out;
  }
  for (std::size_t b = reading; b < n; ++b) logits.row(static_cast<index_t>(b)) = first_logits;

  // Greedy answers in lockstep; a cache leaves the batch when its answer ends.
  std::vector<std::vector<int>> generated(n);
  std::vector<std::size_t> active(n);
  std::vector<bool> started(n, false);
  for (std::size_t b = 0; b < n; ++b) active[b] = b;
  for (index_t g = 0; g < p.max_answer_tokens && !active.empty(); ++g) {
    std::vector<std::size_t> next_active;
    std::vector<int> next_tokens;
    for (const std::size_t b : active) {
      const int next = eval_detail::argmax(logits.row(static_cast<index_t>(b)).data(), vocab);
      if (m.tokenizer.is_control(next)) continue;
      generated[b].push_back(next);
      const std::string piece = m.tokenizer.detokenize({next});
      // A newline ends a single-line answer once it has begun: models often put the answer on
      // the line after "is:".
      if (p.single_line && started[b] && piece.find('\n') != std::string::npos) continue;
      started[b] = started[b] || std::any_of(piece.begin(), piece.end(), [](char c) {
                     return std::isalnum(static_cast<unsigned char>(c)) != 0;
                   });
      next_active.push_back(b);
      next_tokens.push_back(next);
    }
    active = std::move(next_active);
    if (active.empty() || g + 1 == p.max_answer_tokens) break;
    std::vector<any_kv_cache<float>*> batch;
    for (const std::size_t b : active) batch.push_back(&caches[b]);
    const row_matrix out =
        m.weights.decode_batch(batch, next_tokens, std::vector<index_t>(batch.size(), length + g));
    for (std::size_t k = 0; k < active.size(); ++k) {
      logits.row(static_cast<index_t>(active[k])) = out.row(static_cast<index_t>(k));
    }
  }
  for (std::size_t b = 0; b < n; ++b) {
    answers[b].generated = m.tokenizer.detokenize(generated[b]);
    answers[b].correct = answer_is_correct(answers[b].generated, p.expected);
  }
  return answers;
}

/// What one cache did on one likelihood trial.
struct likelihood_outcome {
  double nll = 0;        ///< summed over the scored tokens, nats
  double kl = 0;         ///< summed KL(full || this cache) over the scored positions, nats
  double agree = 0;      ///< positions whose most likely token is the full cache's
  index_t scored = 0;    ///< positions scored
  index_t kv_bytes = 0;  ///< K/V bytes after compressing the prefix
};

/// Held-out likelihood after a compressed prefix: `tokens[0, prefix)` prefilled densely and
/// compressed by each policy (policies[0] must keep everything: the KL is measured from it), then
/// tokens[prefix, end) teacher-forced through every cache in lockstep; the predictions of
/// tokens[prefix + 1, end) are scored (the first comes from the dense prefill, alike for all).
inline std::vector<likelihood_outcome> likelihood_trial(
    const gguf_model& m, const std::vector<int>& tokens, index_t prefix,
    const std::vector<razorkv::policy>& policies, const razorkv::memory_budget& budget) {
  using razorkv::any_kv_cache;
  RAZORKV_CHECK(prefix > 0 && prefix + 1 < static_cast<index_t>(tokens.size()), kInvalidArgument,
                "likelihood_trial: prefix (", prefix, ") must leave tokens to score of ",
                tokens.size());
  std::vector<any_kv_cache<float>> caches;
  {
    const prefill_state state =
        m.weights.prefill(std::vector<int>(tokens.begin(), tokens.begin() + prefix), false);
    const razorkv::prompt_kv<float> prompt = m.weights.prompt_of(state);
    for (const razorkv::policy& policy : policies) {
      caches.push_back(razorkv::compress_prompt(policy, prompt, budget));
    }
  }
  std::vector<likelihood_outcome> out(caches.size());
  for (std::size_t b = 0; b < caches.size(); ++b) out[b].kv_bytes = caches[b].kv_bytes();
  std::vector<any_kv_cache<float>*> batch;
  for (auto& c : caches) batch.push_back(&c);
  const auto end = static_cast<index_t>(tokens.size());
  for (index_t t = prefix; t + 1 < end; ++t) {
    const row_matrix logits = m.weights.decode_batch(
        batch, std::vector<int>(batch.size(), tokens[static_cast<std::size_t>(t)]),
        std::vector<index_t>(batch.size(), t));
    // Log-probabilities in double: the KL of two close distributions is a small difference.
    const auto log_softmax = [&](index_t b) {
      const Eigen::VectorXd x = logits.row(b).transpose().cast<double>();
      const double top = x.maxCoeff();
      return Eigen::VectorXd(x.array() - top - std::log((x.array() - top).exp().sum()));
    };
    const Eigen::VectorXd full = log_softmax(0);
    const int target = tokens[static_cast<std::size_t>(t + 1)];
    Eigen::Index full_best = 0;
    full.maxCoeff(&full_best);
    for (std::size_t b = 0; b < caches.size(); ++b) {
      const Eigen::VectorXd lp = b == 0 ? full : log_softmax(static_cast<index_t>(b));
      Eigen::Index best = 0;
      lp.maxCoeff(&best);
      out[b].nll -= lp[target];
      out[b].kl += (full.array().exp() * (full - lp).array()).sum();
      out[b].agree += best == full_best ? 1 : 0;
      out[b].scored += 1;
    }
  }
  return out;
}

}  // namespace tiny_llama
