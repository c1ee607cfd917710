// razorkv_trained_evaluate: the trained model at equal memory. Every policy (full, RazorAttention
// and its ablations, random heads, StreamingLLM, SnapKV, H2O, the head-budget sweep) runs through
// one engine on copy, needle (a random run found and copied, scored per byte), whole needles (five
// kinds, scored by exact match of the generated rest), key/value retrieval and held-out
// likelihood trials, at several context lengths, at a third of the full cache, and so does
// RazorAttention with a chunked prefill (never dense); prints the table and writes a CSV and an
// SVG chart.
//   razorkv_trained_evaluate <model folder> <repository root> <output folder> [--quick]
// The model folder holds model.safetensors, scores.json and plan.json.
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <razorkv/eval.hpp>
#include <razorkv/io/json.hpp>

#include "tasks.hpp"

namespace {

using razorkv::index_t;

struct policy_totals {
  double copy_correct = 0, copy_predictions = 0;
  double needle_correct = 0, needle_predictions = 0;
  double whole_correct[std::size(tiny_llama::kByteNeedles)] = {};  ///< per kind of needle
  double whole_trials[std::size(tiny_llama::kByteNeedles)] = {};
  double retrieval_correct = 0, retrieval_trials = 0, answer_chars = 0;
  double nll = 0, nll_tokens = 0;
  double kv_bytes = 0, kv_samples = 0;
};

// The policies of one trial (the random-heads plan is drawn anew for each trial).
std::vector<razorkv::policy> policies_for(const razorkv::head_plan& plan,
                                          const razorkv::head_scores& scores, index_t head_dim,
                                          std::uint64_t trial_seed) {
  using razorkv::razor_config;
  std::vector<razorkv::policy> out;
  out.push_back(razorkv::full_policy());
  out.push_back(razorkv::razor_policy("razor", plan));
  razor_config unweighted, none;
  unweighted.compensation = razorkv::compensation_mode::kUnweighted;
  none.compensation = razorkv::compensation_mode::kNone;
  razor_config bounded;
  bounded.decode = razorkv::decode_mode::kBounded;
  out.push_back(razorkv::razor_policy("razor, bounded decode", plan, bounded));
  out.push_back(razorkv::razor_policy("razor, unweighted mean token", plan, unweighted));
  out.push_back(razorkv::razor_policy("razor, no compensation token", plan, none));
  razorkv::selection_config induction_only;
  induction_only.echo_ratio = 0;
  out.push_back(
      razorkv::razor_policy("razor, induction heads only",
                            razorkv::select_retrieval_heads(scores, head_dim, induction_only)));
  out.push_back(
      razorkv::razor_policy("razor, random heads (same count)",
                            razorkv::random_plan(plan.shape(), plan.num_retrieval(), trial_seed)));
  for (double ratio : {0.05, 0.10, 0.20}) {
    razorkv::selection_config sweep;
    sweep.induction_ratio = ratio;
    const razorkv::head_plan swept = razorkv::select_retrieval_heads(scores, head_dim, sweep);
    char name[96];
    std::snprintf(name, sizeof name, "razor, %.0f%% induction + 1%% echo (%lld groups)",
                  ratio * 100, static_cast<long long>(swept.num_retrieval()));
    out.push_back(razorkv::razor_policy(name, swept));
  }
  out.push_back(razorkv::streaming_llm_policy());
  out.push_back(razorkv::snapkv_policy());
  out.push_back(razorkv::h2o_policy());
  return out;
}

template <std::size_t N>
double total_of(const double (&values)[N]) {
  double sum = 0;
  for (const double v : values) sum += v;
  return sum;
}

std::string fixed(double x, int digits) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, x);
  return buffer;
}

// One panel per task: the metric against context length, one line per policy.
void write_svg(const std::string& path, const std::vector<std::string>& names,
               const std::vector<index_t>& lengths,
               const std::map<std::pair<std::string, index_t>, policy_totals>& totals,
               double full_fraction) {
  const int panel_w = 260, panel_h = 220, left = 60, top = 50, gap = 60, legend = 330;
  constexpr int kPanels = 5;
  const int width = left + kPanels * (panel_w + gap) + legend, height = top + panel_h + 70;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
         "fill=\"white\"/>\n";
  svg << "<text x=\"" << left << "\" y=\"22\" font-size=\"15\">Trained model, every policy at "
      << fixed(full_fraction, 2) << " of the full KV cache</text>\n";
  const char* colours[] = {"#000000", "#d62728", "#ff9896", "#e377c2", "#8c564b",
                           "#7f7f7f", "#bcbd22", "#dbdb8d", "#9467bd", "#1f77b4",
                           "#2ca02c", "#17becf", "#aec7e8"};
  struct panel {
    const char* title;
    double lo, hi;
    double (*metric)(const policy_totals&);
  };
  const panel panels[] = {
      {"copy: accuracy in the second copy", 0, 1,
       [](const policy_totals& t) { return t.copy_correct / std::max(1.0, t.copy_predictions); }},
      {"needle: accuracy in the repeated run", 0, 1,
       [](const policy_totals& t) {
         return t.needle_correct / std::max(1.0, t.needle_predictions);
       }},
      {"needle: whole answers (5 kinds)", 0, 1,
       [](const policy_totals& t) {
         return total_of(t.whole_correct) / std::max(1.0, total_of(t.whole_trials));
       }},
      {"retrieval: exact match", 0, 1,
       [](const policy_totals& t) {
         return t.retrieval_correct / std::max(1.0, t.retrieval_trials);
       }},
      {"held-out NLL (nats / byte)", 0, 0,
       [](const policy_totals& t) { return t.nll / std::max(1.0, t.nll_tokens); }},
  };
  for (int k = 0; k < kPanels; ++k) {
    const panel& p = panels[k];
    double lo = p.lo, hi = p.hi;
    if (lo == hi) {  // the NLL panel: the range of the data
      lo = 1e9;
      hi = -1e9;
      for (const auto& [key, t] : totals) {
        lo = std::min(lo, p.metric(t));
        hi = std::max(hi, p.metric(t));
      }
      const double pad = 0.05 * (hi - lo + 1e-9);
      lo -= pad;
      hi += pad;
    }
    const int x0 = left + k * (panel_w + gap), y0 = top, x1 = x0 + panel_w, y1 = top + panel_h;
    const auto px = [&](std::size_t i) {
      return x0 + static_cast<int>(panel_w * (lengths.size() == 1
                                                  ? 0.5
                                                  : static_cast<double>(i) /
                                                        static_cast<double>(lengths.size() - 1)));
    };
    const auto py = [&](double v) { return y1 - static_cast<int>(panel_h * (v - lo) / (hi - lo)); };
    svg << "<text x=\"" << x0 << "\" y=\"" << y0 - 10 << "\">" << p.title << "</text>\n";
    svg << "<line x1=\"" << x0 << "\" y1=\"" << y1 << "\" x2=\"" << x1 << "\" y2=\"" << y1
        << "\" stroke=\"black\"/>\n";
    svg << "<line x1=\"" << x0 << "\" y1=\"" << y0 << "\" x2=\"" << x0 << "\" y2=\"" << y1
        << "\" stroke=\"black\"/>\n";
    for (int tick = 0; tick <= 4; ++tick) {
      const double v = lo + (hi - lo) * tick / 4;
      svg << "<text x=\"" << x0 - 5 << "\" y=\"" << py(v) + 4 << "\" text-anchor=\"end\">"
          << fixed(v, 2) << "</text>\n";
    }
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      svg << "<text x=\"" << px(i) << "\" y=\"" << y1 + 16 << "\" text-anchor=\"middle\">"
          << lengths[i] << "</text>\n";
    }
    svg << "<text x=\"" << (x0 + x1) / 2 << "\" y=\"" << y1 + 34
        << "\" text-anchor=\"middle\">context tokens</text>\n";
    for (std::size_t n = 0; n < names.size(); ++n) {
      std::ostringstream points;
      for (std::size_t i = 0; i < lengths.size(); ++i) {
        points << px(i) << ',' << py(p.metric(totals.at({names[n], lengths[i]}))) << ' ';
      }
      svg << "<polyline fill=\"none\" stroke-width=\"" << (n == 1 ? 3 : 1.5) << "\" stroke=\""
          << colours[n % 13] << "\" points=\"" << points.str() << "\"/>\n";
    }
  }
  const int lx = left + kPanels * (panel_w + gap) - 20;
  for (std::size_t n = 0; n < names.size(); ++n) {
    svg << "<rect x=\"" << lx << "\" y=\"" << top + 18 * static_cast<int>(n)
        << "\" width=\"14\" height=\"4\" fill=\"" << colours[n % 13] << "\"/><text x=\"" << lx + 20
        << "\" y=\"" << top + 18 * static_cast<int>(n) + 6 << "\">" << names[n] << "</text>\n";
  }
  svg << "</svg>\n";
  std::ofstream out(path);
  out << svg.str();
  RAZORKV_CHECK(out.good(), kInvalidArgument, "razorkv_trained_evaluate: cannot write \"", path,
                "\"");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5 || (argc == 5 && std::string(argv[4]) != "--quick")) {
    std::fprintf(stderr, "usage: %s <model folder> <repository root> <output folder> [--quick]\n",
                 argv[0]);
    return 2;
  }
  try {
    const std::string model_dir = argv[1], out_dir = argv[3];
    const bool quick = argc == 5;
    const tiny_llama::model m = tiny_llama::model::load(model_dir + "/model.safetensors");
    const razorkv::head_plan plan =
        razorkv::io::head_plan_from_json(razorkv::io::read_text_file(model_dir + "/plan.json"));
    const razorkv::head_scores scores =
        razorkv::io::head_scores_from_json(razorkv::io::read_text_file(model_dir + "/scores.json"));
    plan.validate_against(m.shape());
    const std::string text = tiny_llama::heldout_text(argv[2]);
    const double fraction = 1.0 / 3.0;
    const razorkv::memory_budget budget = razorkv::memory_budget::fraction_of_full(fraction);

    // Context lengths leave room in the 2,048-token context for the longest continuation (128).
    const std::vector<index_t> lengths =
        quick ? std::vector<index_t>{512} : std::vector<index_t>{512, 1024, 1920};
    const int copy_trials = quick ? 2 : 16, nll_trials = quick ? 1 : 16, per_depth = quick ? 1 : 10;
    const int whole_per_depth = quick ? 1 : 4;  // per kind of needle
    const std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};

    std::vector<std::string> names;
    std::map<std::pair<std::string, index_t>, policy_totals> totals;
    std::uint64_t trial_index = 0;
    const char* const chunked = "razor, chunked prefill (64-token chunks)";
    enum task { kCopy, kRetrieval, kLikelihood, kNeedle, kWholeNeedle };
    const auto record = [&](index_t length, const tiny_llama::trial& t, task kind,
                            std::size_t needle_kind = 0) {
      const std::vector<razorkv::policy> policies =
          policies_for(plan, scores, m.cfg().head_dim(), 1000 + trial_index++);
      std::vector<tiny_llama::trial_outcome> outcomes =
          tiny_llama::run_trial(m, t, policies, budget);
      std::vector<std::string> trial_names;
      for (const razorkv::policy& p : policies) trial_names.push_back(p.name);
      // Right after "razor", which differs from it only by the prefill.
      outcomes.insert(outcomes.begin() + 2, tiny_llama::run_chunked_trial(m, t, plan, budget, 64));
      trial_names.insert(trial_names.begin() + 2, chunked);
      if (names.empty()) names = trial_names;
      for (std::size_t i = 0; i < trial_names.size(); ++i) {
        policy_totals& total = totals[{trial_names[i], length}];
        const tiny_llama::trial_outcome& o = outcomes[i];
        if (kind == kCopy) {
          total.copy_correct += o.correct;
          total.copy_predictions += o.predictions;
        } else if (kind == kNeedle) {
          total.needle_correct += o.correct;
          total.needle_predictions += o.predictions;
        } else if (kind == kWholeNeedle) {
          total.whole_correct[needle_kind] += o.correct;
          total.whole_trials[needle_kind] += 1;
        } else if (kind == kRetrieval) {
          total.retrieval_correct += o.correct;
          total.retrieval_trials += 1;
          total.answer_chars += static_cast<double>(o.generated.size());
        } else {
          total.nll += o.nll;
          total.nll_tokens += o.predictions;
        }
        total.kv_bytes += static_cast<double>(o.kv_bytes);
        total.kv_samples += 1;
      }
    };
    for (index_t length : lengths) {
      std::mt19937_64 rng(
          static_cast<std::uint64_t>(length));  // fixed seeds: the same trials every run
      for (int i = 0; i < copy_trials; ++i)
        record(length, tiny_llama::copy_trial(text, length, rng), kCopy);
      for (double depth : depths) {
        for (int i = 0; i < per_depth; ++i)
          record(length, tiny_llama::retrieval_trial(text, length, depth, rng), kRetrieval);
      }
      for (double depth : depths) {
        for (int i = 0; i < per_depth; ++i) {
          record(length, tiny_llama::needle_trial(text, length, depth, rng), kNeedle);
        }
      }
      for (int i = 0; i < nll_trials; ++i)
        record(length, tiny_llama::likelihood_trial(text, length, rng), kLikelihood);
      // Whole needles draw from their own stream, so that the trials above stay as they were.
      std::mt19937_64 whole_rng(static_cast<std::uint64_t>(length) * 7919u + 17u);
      for (std::size_t k = 0; k < std::size(tiny_llama::kByteNeedles); ++k) {
        for (double depth : depths) {
          for (int i = 0; i < whole_per_depth; ++i) {
            record(length,
                   tiny_llama::whole_needle_trial(text, length, depth, tiny_llama::kByteNeedles[k],
                                                  whole_rng),
                   kWholeNeedle, k);
          }
        }
      }
      std::fprintf(stderr, "evaluated %lld-token contexts\n", static_cast<long long>(length));
    }

    std::ofstream csv(out_dir + "/trained_eval.csv");
    RAZORKV_CHECK(csv.good(), kInvalidArgument, "razorkv_trained_evaluate: cannot write \"",
                  out_dir, "/trained_eval.csv\"; does the output folder exist?");
    csv << "policy,context,copy_accuracy,needle_accuracy,needle_whole,needle_whole_trials";
    for (const tiny_llama::byte_needle k : tiny_llama::kByteNeedles) {
      csv << ",needle_whole_" << tiny_llama::byte_needle_name(k);
    }
    csv << ",retrieval_exact_match,retrieval_trials,answer_chars,nll_per_byte,kv_fraction_of_"
           "full\n";
    std::printf("%-44s %7s %7s %7s %7s %9s %7s %9s %8s\n", "policy", "context", "copy", "needle",
                "whole", "retrieval", "answer", "NLL/byte", "KV held");
    for (index_t length : lengths) {
      const policy_totals& full = totals.at({"full", length});
      for (const std::string& name : names) {
        const policy_totals& t = totals.at({name, length});
        const double copy = t.copy_correct / t.copy_predictions;
        const double needle = t.needle_correct / t.needle_predictions;
        const double retrieval = t.retrieval_correct / t.retrieval_trials;
        const double answer = t.answer_chars / t.retrieval_trials, nll = t.nll / t.nll_tokens;
        const double kv = (t.kv_bytes / t.kv_samples) / (full.kv_bytes / full.kv_samples);
        const double whole_trials = total_of(t.whole_trials);
        const double whole = total_of(t.whole_correct) / whole_trials;
        std::printf("%-44s %7lld %7.3f %7.3f %7.3f %9.3f %7.2f %9.4f %8.3f\n", name.c_str(),
                    static_cast<long long>(length), copy, needle, whole, retrieval, answer, nll,
                    kv);
        csv << '"' << name << "\"," << length << ',' << copy << ',' << needle << ',' << whole << ','
            << whole_trials;
        for (std::size_t k = 0; k < std::size(tiny_llama::kByteNeedles); ++k) {
          csv << ',' << t.whole_correct[k] / t.whole_trials[k];
        }
        csv << ',' << retrieval << ',' << t.retrieval_trials << ',' << answer << ',' << nll << ','
            << kv << '\n';
      }
    }
    std::vector<std::string> charted;  // the head-budget sweep stays in the table
    for (const std::string& name : names) {
      if (name.find("% induction") == std::string::npos) charted.push_back(name);
    }
    write_svg(out_dir + "/trained_eval.svg", charted, lengths, totals, fraction);
    std::printf("wrote %s/trained_eval.csv and %s/trained_eval.svg\n", out_dir.c_str(),
                out_dir.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
