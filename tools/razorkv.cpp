// razorkv: the offline calibration tool. Subcommands: probe (write the probe tokens), score
// (echo/induction scores from per-layer Q/K or attention dumps), select (a head plan from
// scores), ratio (full vs RazorAttention KV bytes) and heatmap (SVG of the scores). Bad
// arguments or files: exit code 2 and one line on stderr.
#include <razorkv/io/json.hpp>
#include <razorkv/io/npy.hpp>
#include <razorkv/razorkv.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using razorkv::index_t;

struct probe_args {
  index_t period = 2500, repeats = 4;
  std::optional<std::int64_t> bos;
  std::int64_t vocab_min = 0, vocab_max = 0;
  std::uint64_t seed = 0;
  bool allow_duplicates = false;
  std::string out;
};

int run_probe(const probe_args& a) {
  razorkv::probe_config c;
  c.num_random_tokens = a.period;
  c.repeats = a.repeats;
  c.bos_id = a.bos;
  c.min_id = a.vocab_min;
  c.max_id = a.vocab_max;
  c.seed = a.seed;
  c.allow_duplicates = a.allow_duplicates;
  const razorkv::probe probe(c);
  razorkv::io::write_text_file(a.out, razorkv::io::format_npy(probe.tokens(), {probe.length()}));
  std::fprintf(stderr, "razorkv probe: %ld tokens written to %s\n",
               static_cast<long>(probe.length()), a.out.c_str());
  return 0;
}

struct score_args {
  index_t period = 2500, repeats = 4;
  bool bos = false;
  std::string probe_file;
  std::vector<std::string> q_files, k_files, attn_files;
  std::optional<double> scale;
  index_t subsample = 1;
  index_t kv_heads = 0;  // for --attn dumps, which do not carry the GQA grouping (0: no GQA)
  std::string out;
};

// [L, heads, dim] float view of a 3-D dump (float32, float16 or bfloat16-as-u2).
razorkv::layer_view<const float> as_layer(const razorkv::io::npy_array& a,
                                          std::vector<float>& storage, const std::string& name) {
  RAZORKV_CHECK(a.shape.size() == 3, kShapeMismatch, "razorkv score: ", name,
                " must be [L, heads, head_dim], has ", a.shape.size(), " dimensions");
  storage = a.to<float>();
  return razorkv::layer_view<const float>::nhd(storage.data(), a.shape[0], a.shape[1], a.shape[2]);
}

int run_score(const score_args& a) {
  const bool from_qk = !a.q_files.empty();
  RAZORKV_CHECK(from_qk != !a.attn_files.empty(), kInvalidArgument,
                "razorkv score: give either --q/--k per layer or --attn per layer");
  RAZORKV_CHECK(a.q_files.size() == a.k_files.size(), kInvalidArgument,
                "razorkv score: ", a.q_files.size(), " --q files but ", a.k_files.size(),
                " --k files");
  std::optional<razorkv::probe> probe;
  if (!a.probe_file.empty()) {
    probe.emplace(razorkv::io::read_npy(a.probe_file).to<std::int64_t>(), a.period, a.repeats,
                  a.bos);
  } else {  // distinct ids: the masks need only P, R and the BOS flag
    razorkv::probe_config c;
    c.num_random_tokens = a.period;
    c.repeats = a.repeats;
    c.max_id = a.period;
    if (a.bos) c.bos_id = -1;
    probe.emplace(c);
  }
  const std::size_t layers = from_qk ? a.q_files.size() : a.attn_files.size();
  std::optional<razorkv::head_scores> table;
  for (std::size_t l = 0; l < layers; ++l) {
    std::fprintf(stderr, "razorkv score: layer %zu of %zu\n", l + 1, layers);
    razorkv::layer_scores scores;
    index_t query_heads = 0, kv_heads = 0;
    if (from_qk) {
      std::vector<float> q_storage, k_storage;
      const auto q = as_layer(razorkv::io::read_npy(a.q_files[l]), q_storage, a.q_files[l]);
      const auto k = as_layer(razorkv::io::read_npy(a.k_files[l]), k_storage, a.k_files[l]);
      razorkv::qk_scoring_options options;
      options.scale = a.scale;
      options.row_step = a.subsample;
      scores = razorkv::score_from_queries_keys(*probe, q, k, options);
      query_heads = q.heads();
      kv_heads = k.heads();
    } else {
      const auto attn = razorkv::io::read_npy(a.attn_files[l]);
      RAZORKV_CHECK(attn.shape.size() == 3 && attn.shape[1] == attn.shape[2], kShapeMismatch,
                    "razorkv score: ", a.attn_files[l], " must be [heads, L, L]");
      razorkv::scoring_options options;
      options.row_step = a.subsample;
      const auto probs = attn.to<float>();
      scores = razorkv::score_from_probabilities(*probe, probs.data(), attn.shape[0], attn.shape[1],
                                                 options);
      query_heads = attn.shape[0];
      kv_heads = a.kv_heads > 0 ? a.kv_heads : query_heads;
    }
    if (!table) table.emplace(static_cast<index_t>(layers), query_heads, kv_heads);
    table->set_layer(static_cast<index_t>(l), scores);
  }
  razorkv::io::write_text_file(a.out, razorkv::io::head_scores_to_json(*table));
  std::fprintf(stderr, "razorkv score: %zu layers written to %s\n", layers, a.out.c_str());
  return 0;
}

struct select_args {
  std::string scores, out, gqa = "sum", format = "razorkv";
  double induction_ratio = 0.14, echo_ratio = 0.01;
  index_t min_per_layer = 0, head_dim = 128;
  razorkv::memory_target memory;  // budget mode when memory.budget_bytes > 0
};

int run_select(const select_args& a) {
  const auto scores = razorkv::io::head_scores_from_json(razorkv::io::read_text_file(a.scores));
  razorkv::selection_config config;
  config.induction_ratio = a.induction_ratio;
  config.echo_ratio = a.echo_ratio;
  config.min_groups_per_layer = a.min_per_layer;
  config.aggregation = a.gqa == "max"    ? razorkv::gqa_aggregation::kMax
                       : a.gqa == "mean" ? razorkv::gqa_aggregation::kMean
                                         : razorkv::gqa_aggregation::kSum;
  const auto plan = a.memory.budget_bytes > 0
                        ? razorkv::select_for_budget(scores, a.head_dim, a.memory, config)
                        : razorkv::select_retrieval_heads(scores, a.head_dim, config);
  if (a.memory.budget_bytes > 0) {
    std::fprintf(
        stderr,
        "razorkv select: budget %ld bytes at %ld tokens -> induction ratio %.4f, echo ratio %.4f\n",
        static_cast<long>(a.memory.budget_bytes), static_cast<long>(a.memory.seq_len),
        plan.selection().induction_ratio, plan.selection().echo_ratio);
  }
  razorkv::io::write_text_file(a.out, a.format == "mindspore"
                                          ? razorkv::io::head_plan_to_mindspore(plan)
                                          : razorkv::io::head_plan_to_json(plan));
  std::fprintf(stderr, "razorkv select: %ld of %ld kv groups kept full, written to %s\n",
               static_cast<long>(plan.num_retrieval()),
               static_cast<long>(plan.shape().num_layers * plan.shape().num_kv_heads),
               a.out.c_str());
  return 0;
}

struct ratio_args {
  std::string model, plan;
  razorkv::model_shape shape;
  double retrieval_fraction = 0.15;
  std::vector<index_t> seq_lens;
  razorkv::razor_budget budget;
  index_t dtype_bytes = 2;
};

int run_ratio(const ratio_args& a) {
  razorkv::model_shape shape = a.model.empty() ? a.shape : razorkv::model_preset_shape(a.model);
  std::optional<razorkv::head_plan> plan;
  if (!a.plan.empty()) {
    plan.emplace(razorkv::io::head_plan_from_json(razorkv::io::read_text_file(a.plan)));
    if (a.model.empty() && shape.num_layers == 0) shape = plan->shape();
    plan->validate_against(shape);
  }
  razorkv::head_plan shape_check(shape);  // validates the shape
  (void)shape_check;
  std::printf(
      "model: %ld layers, %ld query heads, %ld kv heads, head_dim %ld; %s; N0 %ld, S0 %ld, C %g, "
      "%ld-byte K/V\n",
      static_cast<long>(shape.num_layers), static_cast<long>(shape.num_query_heads),
      static_cast<long>(shape.num_kv_heads), static_cast<long>(shape.head_dim),
      plan ? "retrieval groups from the plan" : "retrieval fraction",
      static_cast<long>(a.budget.sinks), static_cast<long>(a.budget.s0), a.budget.c,
      static_cast<long>(a.dtype_bytes));
  std::printf("%12s  %14s  %14s  %8s  %9s\n", "tokens", "full (MiB)", "razor (MiB)", "ratio",
              "reduction");
  for (index_t n : a.seq_lens) {
    const double full = static_cast<double>(razorkv::full_kv_bytes(shape, n, a.dtype_bytes));
    const double razor =
        static_cast<double>(plan ? razorkv::compressed_kv_bytes(*plan, n, a.budget, a.dtype_bytes)
                                 : razorkv::compressed_kv_bytes(shape, a.retrieval_fraction, n,
                                                                a.budget, a.dtype_bytes));
    std::printf("%12ld  %14.1f  %14.1f  %8.4f  %8.2fx\n", static_cast<long>(n), full / 1048576.0,
                razor / 1048576.0, razor / full, full / razor);
  }
  return 0;
}

struct heatmap_args {
  std::string scores, plan, out;
};

// Layers x query heads heat maps of echo and induction scores (white -> dark blue, scaled to
// each panel's maximum), with the query heads of the plan's retrieval groups outlined in red.
int run_heatmap(const heatmap_args& a) {
  const auto scores = razorkv::io::head_scores_from_json(razorkv::io::read_text_file(a.scores));
  std::optional<razorkv::head_plan> plan;
  if (!a.plan.empty()) {
    plan.emplace(razorkv::io::head_plan_from_json(razorkv::io::read_text_file(a.plan)));
    RAZORKV_CHECK(plan->shape().num_layers == scores.num_layers() &&
                      plan->shape().num_kv_heads == scores.num_kv_heads() &&
                      plan->shape().num_query_heads == scores.num_query_heads(),
                  kShapeMismatch, "razorkv heatmap: the plan's shape does not match the scores'");
  }
  const index_t layers = scores.num_layers(), heads = scores.num_query_heads(), cell = 12,
                margin = 40;
  const index_t panel_width = heads * cell, panel_height = layers * cell;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << 2 * panel_width + 3 * margin
      << "\" height=\"" << panel_height + 2 * margin
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  for (int panel = 0; panel < 2; ++panel) {
    const index_t x0 = margin + panel * (panel_width + margin), y0 = margin;
    double top = 1e-12;
    for (index_t l = 0; l < layers; ++l)
      for (index_t h = 0; h < heads; ++h)
        top = std::max(top, panel ? scores.induction(l, h) : scores.echo(l, h));
    svg << "<text x=\"" << x0 << "\" y=\"" << y0 - 8 << "\">" << (panel ? "induction" : "echo")
        << " score (max " << top << "); rows: layers, columns: query heads</text>\n";
    for (index_t l = 0; l < layers; ++l) {
      for (index_t h = 0; h < heads; ++h) {
        const double v = (panel ? scores.induction(l, h) : scores.echo(l, h)) / top;
        const int shade = static_cast<int>(std::lround(255.0 * (1.0 - std::clamp(v, 0.0, 1.0))));
        const bool selected = plan && plan->is_retrieval(l, h / scores.group_size());
        svg << "<rect x=\"" << x0 + h * cell << "\" y=\"" << y0 + l * cell << "\" width=\"" << cell
            << "\" height=\"" << cell << "\" fill=\"rgb(" << shade << "," << shade << ",255)\""
            << (selected ? " stroke=\"red\" stroke-width=\"1.5\"" : "") << "/>\n";
      }
    }
  }
  svg << "</svg>\n";
  razorkv::io::write_text_file(a.out, svg.str());
  std::fprintf(stderr, "razorkv heatmap: written to %s\n", a.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"razorkv: offline RazorAttention calibration (probe -> score -> select -> ratio)"};
  app.require_subcommand(1);

  probe_args pa;
  auto* probe = app.add_subcommand("probe", "write the probe token ids (int64 .npy)");
  probe->add_option("--period", pa.period, "random tokens per copy (P)")->capture_default_str();
  probe->add_option("--repeats", pa.repeats, "copies (R)")->capture_default_str();
  probe->add_option("--bos", pa.bos, "BOS id to prepend");
  probe->add_option("--vocab-min", pa.vocab_min, "smallest id")->capture_default_str();
  probe->add_option("--vocab-max", pa.vocab_max, "one past the largest id")->required();
  probe->add_option("--seed", pa.seed, "random seed")->capture_default_str();
  probe->add_flag("--allow-duplicates", pa.allow_duplicates, "draw ids with replacement");
  probe->add_option("--out", pa.out, "output .npy")->required();

  score_args sa;
  auto* score = app.add_subcommand("score", "echo/induction scores from per-layer dumps");
  score->add_option("--period", sa.period, "P of the probe")->capture_default_str();
  score->add_option("--repeats", sa.repeats, "R of the probe")->capture_default_str();
  score->add_flag("--bos", sa.bos, "the probe starts with a BOS token");
  score->add_option("--probe", sa.probe_file, "probe.npy (needed for probes with duplicate ids)");
  score->add_option("--q", sa.q_files,
                    "post-RoPE queries [L, query heads, d] per layer, in layer order");
  score->add_option("--k", sa.k_files, "post-RoPE keys [L, kv heads, d] per layer, in layer order");
  score->add_option("--attn", sa.attn_files, "attention probabilities [heads, L, L] per layer");
  score->add_option("--scale", sa.scale, "softmax scale (default 1/sqrt(d))");
  score->add_option("--subsample", sa.subsample, "score every K-th query row")
      ->capture_default_str();
  score->add_option("--kv-heads", sa.kv_heads,
                    "kv heads of the model, for --attn dumps (default: no GQA)");
  score->add_option("--out", sa.out, "output scores.json")->required();

  select_args sel;
  auto* select = app.add_subcommand("select", "a head plan from scores");
  select->add_option("--scores", sel.scores, "scores.json")->required();
  select->add_option("--induction-ratio", sel.induction_ratio)->capture_default_str();
  select->add_option("--echo-ratio", sel.echo_ratio)->capture_default_str();
  select->add_option("--gqa", sel.gqa, "group score: sum, max or mean")
      ->check(CLI::IsMember({"sum", "max", "mean"}))
      ->capture_default_str();
  select->add_option("--min-per-layer", sel.min_per_layer, "minimum retrieval groups per layer")
      ->capture_default_str();
  select->add_option("--head-dim", sel.head_dim, "head dimension of the model")
      ->capture_default_str();
  select->add_option("--format", sel.format, "razorkv or mindspore")
      ->check(CLI::IsMember({"razorkv", "mindspore"}))
      ->capture_default_str();
  select->add_option("--budget-bytes", sel.memory.budget_bytes,
                     "instead of the ratios: the K/V byte budget at --seq-len");
  select->add_option("--seq-len", sel.memory.seq_len, "sequence length of --budget-bytes");
  select->add_option("--dtype-bytes", sel.memory.dtype_bytes, "bytes per K/V element")
      ->capture_default_str();
  select->add_option("--s0", sel.memory.budget.s0)->capture_default_str();
  select->add_option("--c", sel.memory.budget.c)->capture_default_str();
  select->add_option("--sinks", sel.memory.budget.sinks)->capture_default_str();
  select->add_option("--out", sel.out, "output plan")->required();

  ratio_args ra;
  auto* ratio = app.add_subcommand("ratio", "full vs RazorAttention KV bytes");
  std::string known;
  for (const auto& p : razorkv::model_presets())
    known += std::string(known.empty() ? "" : ", ") + p.name;
  ratio->add_option("--model", ra.model, "preset: " + known);
  ratio->add_option("--layers", ra.shape.num_layers);
  ratio->add_option("--query-heads", ra.shape.num_query_heads);
  ratio->add_option("--kv-heads", ra.shape.num_kv_heads);
  ratio->add_option("--head-dim", ra.shape.head_dim);
  ratio->add_option("--plan", ra.plan, "plan.json (instead of --retrieval-fraction)");
  ratio->add_option("--retrieval-fraction", ra.retrieval_fraction)->capture_default_str();
  ratio->add_option("--seq-len", ra.seq_lens, "sequence lengths")->required();
  ratio->add_option("--s0", ra.budget.s0)->capture_default_str();
  ratio->add_option("--c", ra.budget.c)->capture_default_str();
  ratio->add_option("--sinks", ra.budget.sinks)->capture_default_str();
  ratio->add_option("--dtype-bytes", ra.dtype_bytes)->capture_default_str();

  heatmap_args ha;
  auto* heatmap = app.add_subcommand("heatmap", "SVG heat maps of echo and induction scores");
  heatmap->add_option("--scores", ha.scores, "scores.json")->required();
  heatmap->add_option("--plan", ha.plan, "plan.json: outline the selected heads");
  heatmap->add_option("--out", ha.out, "output .svg")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "razorkv: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    if (probe->parsed()) return run_probe(pa);
    if (score->parsed()) return run_score(sa);
    if (select->parsed()) return run_select(sel);
    if (ratio->parsed()) return run_ratio(ra);
    if (heatmap->parsed()) return run_heatmap(ha);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "razorkv: %s\n", e.what());
    return 2;
  }
  return 2;
}
