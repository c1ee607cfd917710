// razorkv_smollm2_eval: SmolLM2-135M-Instruct at equal KV bytes on long-context tasks (single
// needles of four kinds, multi-key, multi-value, variable tracking, passage copy) at several
// lengths and depths, and held-out perplexity and KL after a compressed prefix; every policy runs
// on the same prompts through one engine. Writes, appending one prompt at a time:
//   results.csv     one row per prompt and policy: whole-answer correctness, bytes, the answer
//   likelihood.csv  one row per likelihood trial and policy: NLL, KL from the full cache
//   prompts.jsonl   the prompts' token ids and expected answers (tools/eval/llama_cpp_kv.py and
//                   tools/eval/kvpress_eval.py)
//   likelihood.jsonl  the likelihood trials' token ids (tools/eval/llama_cpp_kv.py --likelihood);
//                   --prompts-only writes the two .jsonl files and runs no policy
//   razorkv_smollm2_eval <model.gguf> <repository root> <output folder>
//       [--lengths 1024,2048,4096,8128] [--reps 1] [--likelihood 4] [--budget 0.3333]
//       [--tasks single,multikey,multivalue,vartrack,copy] [--needles number,word,alnum,uuid]
//       [--chunked] [--quant] [--prompts-only] [--quick]
// --quant runs the KV-quantisation set instead of the baselines: full and razor with rows of
// float, 8-bit and 4-bit rows (keys rotated or not), razor with 8-bit retrieval heads beside 4-bit
// windows.
// tools/eval/README.md gives the commands that made docs/real_model.md's tables.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <razorkv/eval.hpp>
#include <razorkv/io/json.hpp>
#include <razorkv/io/plan_files.hpp>

#include "long_context_eval.hpp"

namespace {

using razorkv::index_t;
using tiny_llama::needle_kind;
using tiny_llama::task_kind;

struct options {
  std::vector<index_t> lengths = {1024, 2048, 4096, 8128};
  int reps = 1;
  int likelihood = 4;
  double budget = 1.0 / 3.0;
  std::vector<std::string> tasks = {"single", "multikey", "multivalue", "vartrack", "copy"};
  std::vector<std::string> needles = {"number", "word", "alnum", "uuid"};  ///< single's kinds
  bool chunked = false;
  bool quant = false;         ///< the quantised storages instead of the baselines
  bool prompts_only = false;  ///< write the .jsonl files, run no policy (for llama.cpp, kvpress)
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

// A number from the command line, or an error naming the option and what it got.
template <typename Number>
Number parse_number(const std::string& option, const std::string& text) {
  std::size_t used = 0;
  Number n{};
  bool fits = true;
  try {
    if constexpr (std::is_floating_point_v<Number>) {
      n = static_cast<Number>(std::stod(text, &used));
    } else {
      const long long wide = std::stoll(text, &used);
      fits =
          wide >= std::numeric_limits<Number>::min() && wide <= std::numeric_limits<Number>::max();
      n = static_cast<Number>(wide);
    }
  } catch (const std::exception&) {
    used = 0;
  }
  RAZORKV_CHECK(used == text.size() && !text.empty(), kInvalidArgument,
                "razorkv_smollm2_eval: ", option, " (\"", text, "\") is not a number");
  RAZORKV_CHECK(fits, kInvalidArgument, "razorkv_smollm2_eval: ", option, " (", text,
                ") is outside [", std::numeric_limits<Number>::min(), ", ",
                std::numeric_limits<Number>::max(), "]");
  return n;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      RAZORKV_CHECK(i + 1 < argc, kInvalidArgument, "razorkv_smollm2_eval: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--lengths") {
      o.lengths.clear();
      for (const std::string& l : split(value())) {
        o.lengths.push_back(parse_number<index_t>("--lengths", l));
      }
    } else if (a == "--reps") {
      o.reps = parse_number<int>("--reps", value());
    } else if (a == "--likelihood") {
      o.likelihood = parse_number<int>("--likelihood", value());
    } else if (a == "--budget") {
      o.budget = parse_number<double>("--budget", value());
    } else if (a == "--tasks") {
      o.tasks = split(value());
    } else if (a == "--needles") {
      o.needles = split(value());
    } else if (a == "--chunked") {
      o.chunked = true;
    } else if (a == "--quant") {
      o.quant = true;
    } else if (a == "--prompts-only") {
      o.prompts_only = true;
    } else if (a == "--quick") {
      o.lengths = {1024};
      o.likelihood = 1;
    } else {
      RAZORKV_CHECK(false, kInvalidArgument, "razorkv_smollm2_eval: unknown option \"", a, "\"");
    }
  }
  RAZORKV_CHECK(o.reps >= 1, kInvalidArgument, "razorkv_smollm2_eval: --reps (", o.reps,
                ") must be >= 1");
  for (const std::string& n : o.needles) {
    RAZORKV_CHECK(n == "number" || n == "word" || n == "alnum" || n == "uuid", kInvalidArgument,
                  "razorkv_smollm2_eval: needle \"", n, "\" is not number, word, alnum or uuid");
  }
  RAZORKV_CHECK(o.likelihood >= 0, kInvalidArgument, "razorkv_smollm2_eval: --likelihood (",
                o.likelihood, ") must be >= 0");
  return o;
}

// The task variants of the grid: the single needle in each kind, the others with numbers.
struct variant {
  task_kind task;
  needle_kind needle;
};

std::vector<variant> variants_for(const std::vector<std::string>& tasks,
                                  const std::vector<std::string>& needles) {
  std::vector<variant> out;
  for (const std::string& t : tasks) {
    if (t == "single") {
      for (needle_kind k : {needle_kind::kNumber, needle_kind::kWord, needle_kind::kAlphanumeric,
                            needle_kind::kUuid}) {
        const std::string name = tiny_llama::needle_name(k);
        if (std::find(needles.begin(), needles.end(), name) != needles.end()) {
          out.push_back({task_kind::kSingleNeedle, k});
        }
      }
    } else if (t == "multikey") {
      out.push_back({task_kind::kMultiKey, needle_kind::kNumber});
    } else if (t == "multivalue") {
      out.push_back({task_kind::kMultiValue, needle_kind::kNumber});
    } else if (t == "vartrack") {
      out.push_back({task_kind::kVariableTracking, needle_kind::kNumber});
    } else if (t == "copy") {
      out.push_back({task_kind::kPassageCopy, needle_kind::kWord});
    } else {
      RAZORKV_CHECK(false, kInvalidArgument, "razorkv_smollm2_eval: task \"", t,
                    "\" is not single, multikey, multivalue, vartrack or copy");
    }
  }
  return out;
}

// Whether razor with `plan` fits `budget` after `tokens` tokens: its retrieval groups hold every
// token, so a plan that keeps many groups whole does not fit a small budget (the 20% and 30%
// sweep points at a fifth of the cache). razor_config_for_budget is the one place that decides.
bool fits(const razorkv::head_plan& plan, const razorkv::memory_budget& budget, index_t tokens) {
  const index_t entries =
      razorkv::entries_per_head(budget, plan.shape(), tokens, static_cast<index_t>(sizeof(float)));
  try {
    razorkv::razor_config_for_budget(plan, tokens, entries);
    return true;
  } catch (const razorkv::error&) {
    return false;
  }
}

// The quantisation set: the full cache and razor (at `budget` entries) with rows of float, 8-bit
// and 4-bit rows (keys rotated or not), and razor with 8-bit retrieval heads beside 4-bit windows.
std::vector<razorkv::policy> quantised_policies(const razorkv::head_plan& plan) {
  using razorkv::kv_storage;
  constexpr auto kQ8 = razorkv::row_format::kQ8, kQ4 = razorkv::row_format::kQ4;
  std::vector<razorkv::policy> out = {razorkv::full_policy(), razorkv::razor_policy("razor", plan)};
  const std::pair<const char*, kv_storage> storages[] = {
      {"q8", kv_storage::both(kQ8)},
      {"q4", kv_storage::both(kQ4)},
      {"q4 rotated", kv_storage::both(kQ4, true)}};
  for (const auto& [name, storage] : storages) {
    out.push_back(razorkv::full_policy{std::string("full ") + name, storage});
  }
  for (const auto& [name, storage] : storages) {
    razorkv::razor_config config;
    config.storage = storage;
    out.push_back(razorkv::razor_policy(std::string("razor ") + name, plan, config));
  }
  razorkv::razor_config split;
  split.storage = kv_storage::both(kQ4, true);
  split.retrieval_storage = kv_storage::both(kQ8, true);
  out.push_back(razorkv::razor_policy("razor q4 rotated, retrieval q8", plan, split));
  return out;
}

// The policies that compress a document of `tokens` tokens alone to `budget`; the random plan is
// drawn per prompt; a head-budget sweep point that does not fit the budget is left out.
std::vector<razorkv::policy> agnostic_policies(const razorkv::head_plan& plan,
                                               const razorkv::head_scores& scores, index_t head_dim,
                                               std::uint64_t seed,
                                               const razorkv::memory_budget& budget,
                                               index_t tokens) {
  using razorkv::razor_config;
  std::vector<razorkv::policy> out = {razorkv::full_policy(), razorkv::razor_policy("razor", plan)};
  razor_config bounded, unweighted, none;
  bounded.decode = razorkv::decode_mode::kBounded;
  unweighted.compensation = razorkv::compensation_mode::kUnweighted;
  none.compensation = razorkv::compensation_mode::kNone;
  out.push_back(razorkv::razor_policy("razor bounded decode", plan, bounded));
  out.push_back(razorkv::razor_policy("razor unweighted compensation", plan, unweighted));
  out.push_back(razorkv::razor_policy("razor no compensation", plan, none));
  razorkv::selection_config no_echo;
  no_echo.echo_ratio = 0;
  out.push_back(razorkv::razor_policy("razor no echo heads",
                                      razorkv::select_retrieval_heads(scores, head_dim, no_echo)));
  out.push_back(razorkv::razor_policy(
      "razor random groups", razorkv::random_plan(plan.shape(), plan.num_retrieval(), seed)));
  for (double ratio : {0.05, 0.10, 0.20, 0.30}) {
    razorkv::selection_config sweep;
    sweep.induction_ratio = ratio;
    const razorkv::head_plan swept = razorkv::select_retrieval_heads(scores, head_dim, sweep);
    if (!fits(swept, budget, tokens)) continue;
    char name[64];
    std::snprintf(name, sizeof name, "razor %.0f%% induction", ratio * 100);
    out.push_back(razorkv::razor_policy(name, swept));
  }
  out.push_back(razorkv::streaming_llm_policy());
  out.push_back(razorkv::snapkv_policy());
  out.push_back(razorkv::h2o_policy());
  return out;
}

std::string csv(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string json_string(const std::string& s) { return nlohmann::json(s).dump(); }

// Where the policy called `name` is among `policies` (the progress lines show a few by name).
std::size_t index_of(const std::vector<razorkv::policy>& policies, const std::string& name) {
  const auto found = std::find_if(policies.begin(), policies.end(),
                                  [&](const razorkv::policy& p) { return p.name == name; });
  RAZORKV_CHECK(found != policies.end(), kInvalidArgument, "razorkv_smollm2_eval: no policy \"",
                name, "\"");
  return static_cast<std::size_t>(found - policies.begin());
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s <model.gguf> <repository root> <output folder> [options]\n",
                 argv[0]);
    return 2;
  }
  try {
    const options o = parse(argc, argv);
    const std::string root = argv[2], out_dir = argv[3];
    const auto start = std::chrono::steady_clock::now();
    const tiny_llama::gguf_model m = tiny_llama::gguf_model::load(argv[1]);
    const std::string dir = root + "/examples/engine/smollm2";
    const razorkv::head_plan plan = tiny_llama::smollm2_plan(root);
    const razorkv::head_scores scores =
        razorkv::io::head_scores_from_json(razorkv::io::read_text_file(dir + "/scores.json"));
    const index_t head_dim = m.weights.cfg().head_dim();
    const razorkv::memory_budget budget = razorkv::memory_budget::fraction_of_full(o.budget);
    const std::vector<int> haystack = m.tokenizer.tokenize(tiny_llama::smollm2_heldout_text(root));

    std::ofstream results(out_dir + "/results.csv"), prompts(out_dir + "/prompts.jsonl"),
        likelihood(out_dir + "/likelihood.csv"), trials(out_dir + "/likelihood.jsonl");
    RAZORKV_CHECK(results.good() && prompts.good() && likelihood.good() && trials.good(),
                  kInvalidArgument, "razorkv_smollm2_eval: cannot write into \"", out_dir, "\"");
    results << "length,task,needle,depth,rep,policy,query_aware,budget,kv_bytes,full_bytes,"
               "correct,generated,expected\n";
    likelihood << "length,trial,policy,kv_bytes,full_bytes,scored,nll,kl,agree\n";

    const std::vector<variant> variants = variants_for(o.tasks, o.needles);
    const double depths[] = {0.0, 0.25, 0.5, 0.75, 1.0};
    for (const index_t length : o.lengths) {
      const auto length_start = std::chrono::steady_clock::now();
      int prompts_run = 0;
      for (std::size_t v = 0; v < variants.size(); ++v) {
        for (int d = 0; d < 5; ++d) {
          for (int rep = 0; rep < o.reps; ++rep) {
            // One seed per grid cell, so that any subset of the grid draws the same prompts.
            const std::uint64_t seed = static_cast<std::uint64_t>(length) * 1000003u +
                                       static_cast<std::uint64_t>(variants[v].task) * 10007u +
                                       static_cast<std::uint64_t>(variants[v].needle) * 1009u +
                                       static_cast<std::uint64_t>(d) * 101u +
                                       static_cast<std::uint64_t>(rep);
            std::mt19937_64 rng(seed);
            const tiny_llama::task_spec spec{variants[v].task, variants[v].needle, length,
                                             depths[d]};
            const tiny_llama::task_prompt p =
                tiny_llama::make_task_prompt(m.tokenizer, haystack, spec, rng);
            const char* task = tiny_llama::task_name(spec.task);
            const char* needle = tiny_llama::needle_name(spec.needle);
            std::vector<int> ids = p.document;
            ids.insert(ids.end(), p.question.begin(), p.question.end());
            prompts << "{\"length\": " << length << ", \"task\": \"" << task << "\", \"needle\": \""
                    << needle << "\", \"depth\": " << depths[d] << ", \"rep\": " << rep
                    << ", \"document_tokens\": " << p.document.size()
                    << ", \"max_answer_tokens\": " << p.max_answer_tokens
                    << ", \"single_line\": " << (p.single_line ? "true" : "false")
                    << ", \"expected\": " << nlohmann::json(p.expected).dump()
                    << ", \"ids\": " << nlohmann::json(ids).dump() << "}\n";
            prompts.flush();
            ++prompts_run;
            if (o.prompts_only) continue;
            tiny_llama::task_policies policies;
            if (o.quant) {
              policies.agnostic = quantised_policies(plan);
            } else {
              policies.agnostic = agnostic_policies(plan, scores, head_dim, seed, budget,
                                                    static_cast<index_t>(p.document.size()));
              policies.aware = {razorkv::snapkv_policy()};
            }
            if (o.chunked) policies.chunked_plan = &plan;
            const std::vector<tiny_llama::policy_answer> answers =
                tiny_llama::answer_task(m, p, policies, budget);

            std::vector<std::string> names;
            for (const auto& pol : policies.agnostic) names.push_back(pol.name);
            if (o.chunked) names.push_back("razor chunked prefill");
            for (const auto& pol : policies.aware) names.push_back(pol.name);
            std::string expected;
            for (const std::string& e : p.expected) expected += (expected.empty() ? "" : "|") + e;
            for (std::size_t b = 0; b < answers.size(); ++b) {
              const bool aware = b + policies.aware.size() >= answers.size();
              results << length << ',' << task << ',' << needle << ',' << depths[d] << ',' << rep
                      << ',' << csv(names[b]) << ',' << (aware ? 1 : 0) << ',' << o.budget << ','
                      << answers[b].kv_bytes << ',' << answers[0].kv_bytes << ','
                      << (answers[b].correct ? 1 : 0) << ',' << csv(answers[b].generated) << ','
                      << csv(expected) << '\n';
            }
            results.flush();
            const char* second = o.quant ? "razor q8" : "streaming_llm";
            const char* third = o.quant ? "razor q4 rotated" : "snapkv";
            std::printf("%5lld %-10s %-6s depth %.2f: full %d razor %d %s %d %s %d | %s | %.0f s\n",
                        static_cast<long long>(length), task, needle, depths[d], answers[0].correct,
                        answers[index_of(policies.agnostic, "razor")].correct, second,
                        answers[index_of(policies.agnostic, second)].correct, third,
                        answers[index_of(policies.agnostic, third)].correct,
                        json_string(answers[0].generated).c_str(), seconds_since(start));
            std::fflush(stdout);
          }
        }
      }
      // Held-out likelihood: a prefix of `length` tokens (what fits the context beside 128 more).
      const index_t prefix = std::min<index_t>(length, m.weights.cfg().max_context - 129);
      std::mt19937_64 rng(static_cast<std::uint64_t>(length) * 7919u);
      const std::vector<razorkv::policy> policies =
          o.quant ? quantised_policies(plan)
                  : agnostic_policies(plan, scores, head_dim, 1, budget, prefix);
      for (int t = 0; t < o.likelihood; ++t) {
        const auto first = static_cast<std::ptrdiff_t>(razorkv::detail::uniform_below(
            rng, haystack.size() - static_cast<std::size_t>(prefix + 128)));
        const std::vector<int> tokens(haystack.begin() + first,
                                      haystack.begin() + first + prefix + 128);
        trials << "{\"length\": " << length << ", \"trial\": " << t << ", \"prefix\": " << prefix
               << ", \"ids\": " << nlohmann::json(tokens).dump() << "}\n";
        trials.flush();
        if (o.prompts_only) continue;
        const std::vector<tiny_llama::likelihood_outcome> outcomes =
            tiny_llama::likelihood_trial(m, tokens, prefix, policies, budget);
        for (std::size_t b = 0; b < outcomes.size(); ++b) {
          const auto& r = outcomes[b];
          likelihood << length << ',' << t << ',' << csv(policies[b].name) << ',' << r.kv_bytes
                     << ',' << outcomes[0].kv_bytes << ',' << r.scored << ',' << r.nll << ','
                     << r.kl << ',' << r.agree << '\n';
        }
        likelihood.flush();
        const auto& full = outcomes[0];
        const auto& razor = outcomes[index_of(policies, "razor")];
        const char* other = o.quant ? "razor q4 rotated" : "streaming_llm";
        const auto& third = outcomes[index_of(policies, other)];
        std::printf(
            "%5lld likelihood %d: ppl full %.3f razor %.3f (KL %.4f) %s %.3f (KL %.4f) | "
            "%.0f s\n",
            static_cast<long long>(length), t, std::exp(full.nll / full.scored),
            std::exp(razor.nll / razor.scored), razor.kl / razor.scored, other,
            std::exp(third.nll / third.scored), third.kl / third.scored, seconds_since(start));
        std::fflush(stdout);
      }
      std::printf("%lld tokens: %d prompts and %d likelihood trials in %.0f s\n",
                  static_cast<long long>(length), prompts_run, o.likelihood,
                  seconds_since(length_start));
    }
    std::printf(
        "wrote %s/results.csv, likelihood.csv, prompts.jsonl and likelihood.jsonl in %.0f s\n",
        out_dir.c_str(), seconds_since(start));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
