// razorkv: the offline calibration tool. Subcommands: probe (write the probe tokens), score
// (echo/induction scores from per-layer Q/K or attention dumps), select (a head plan from
// scores), ratio (full vs RazorAttention KV bytes), heatmap (SVG of the scores) and convert (a
// plan from one file format to another). Bad arguments or files: exit code 2 and one line on
// stderr.
#include <razorkv/io/json.hpp>
#include <razorkv/io/npy.hpp>
#include <razorkv/io/plan_files.hpp>
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

// A model's shape from the command line: a preset (--model) or the four numbers; "none given"
// is an empty optional, half given an error naming what is missing.
struct shape_args {
  std::string model;
  razorkv::model_shape shape;
};

std::optional<razorkv::model_shape> shape_from(const shape_args& a, const char* who) {
  if (!a.model.empty()) return razorkv::model_preset_shape(a.model);
  const razorkv::model_shape& s = a.shape;
  const int given =
      (s.num_layers != 0) + (s.num_query_heads != 0) + (s.num_kv_heads != 0) + (s.head_dim != 0);
  if (given == 0) return std::nullopt;
  RAZORKV_CHECK(given == 4, kInvalidArgument, who,
                ": give all of --layers, --query-heads, --kv-heads and --head-dim (or --model)");
  razorkv::head_plan check(s);  // validates the shape, naming the bad number
  static_cast<void>(check);
  return s;
}

void add_shape_options(CLI::App* cmd, shape_args& a) {
  std::string known;
  for (const auto& p : razorkv::model_presets())
    known += std::string(known.empty() ? "" : ", ") + p.name;
  cmd->add_option("--model", a.model, "model preset: " + known);
  cmd->add_option("--layers", a.shape.num_layers, "number of layers (instead of --model)");
  cmd->add_option("--query-heads", a.shape.num_query_heads, "query heads per layer");
  cmd->add_option("--kv-heads", a.shape.num_kv_heads, "kv heads per layer");
  cmd->add_option("--head-dim", a.shape.head_dim, "head dimension");
}

// A plan file in any format razorkv reads.
struct plan_args {
  std::string path, format = "auto";
  razorkv::io::duoattention_import gates;
};

void add_plan_options(CLI::App* cmd, plan_args& a, const std::string& what) {
  cmd->add_option("--plan", a.path, what);
  cmd->add_option("--plan-format", a.format,
                  "format of --plan: auto (recognised), razorkv, mindspore or duoattention")
      ->check(CLI::IsMember({"auto", "razorkv", "mindspore", "duoattention"}))
      ->capture_default_str();
  cmd->add_option("--threshold", a.gates.threshold,
                  "DuoAttention plans: a gate above this is a retrieval head")
      ->capture_default_str();
  cmd->add_option("--sparsity", a.gates.sparsity,
                  "DuoAttention plans: keep the top (1 - sparsity) of the gates instead");
}

// `shape` is what a plan without a shape of its own (mindspore, DuoAttention) is read for; a
// razorkv plan is checked against it too unless `check_razorkv_plans` is false.
razorkv::head_plan read_plan(const plan_args& a, const std::optional<razorkv::model_shape>& shape,
                             const char* who, bool check_razorkv_plans = true) {
  const std::string text = razorkv::io::read_text_file(a.path);
  razorkv::io::plan_read_options options;
  options.format = a.format == "auto" ? razorkv::io::detect_plan_format(text)
                                      : razorkv::io::parse_plan_format(a.format);
  RAZORKV_CHECK(shape || options.format == razorkv::io::plan_format::kRazorkv, kInvalidArgument,
                who, ": ", a.path, " is a ", razorkv::io::plan_format_name(options.format),
                " plan, which does not carry the model's shape: give --model, or --layers, "
                "--query-heads, --kv-heads and --head-dim");
  const bool razorkv_plan = options.format == razorkv::io::plan_format::kRazorkv;
  if (!razorkv_plan || check_razorkv_plans) options.shape = shape;
  options.gates = a.gates;
  return razorkv::io::parse_head_plan(text, options);
}

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
  std::optional<std::int64_t> bos;
  std::string probe_file;
  std::vector<std::string> q_files, k_files, attn_files;
  std::optional<double> scale;
  index_t subsample = 1;
  index_t kv_heads = 0;  // for --attn dumps, which do not carry the GQA grouping (0: no GQA)
  std::string out;
};

// [L, heads, dim] float view of a 3-D dump (float32, float64, float16 or bfloat16-as-u2).
razorkv::layer_view<const float> as_layer(const razorkv::io::npy_array& a,
                                          std::vector<float>& storage) {
  storage = a.to<float>();
  return razorkv::layer_view<const float>::nhd(storage.data(), a.shape[0], a.shape[1], a.shape[2]);
}

std::string shape_text(const std::vector<index_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// Every dump's header, checked against the probe and against layer 0's before any layer is
// scored (a wrong last file would otherwise surface after the minutes the others take).
void check_dumps(const score_args& a, index_t length) {
  const bool from_qk = !a.q_files.empty();
  std::vector<index_t> first_q, first_k;
  for (std::size_t l = 0; l < (from_qk ? a.q_files.size() : a.attn_files.size()); ++l) {
    if (from_qk) {
      const auto q = razorkv::io::read_npy_header(a.q_files[l]).shape;
      const auto k = razorkv::io::read_npy_header(a.k_files[l]).shape;
      for (const auto* dims : {&q, &k}) {
        const std::string& file = dims == &q ? a.q_files[l] : a.k_files[l];
        RAZORKV_CHECK(dims->size() == 3 && (*dims)[0] == length, kShapeMismatch, "score: ", file,
                      " is ", shape_text(*dims), ", expected [", length,
                      " (the probe length), heads, head_dim]");
      }
      RAZORKV_CHECK(q[2] == k[2] && q[1] % k[1] == 0, kShapeMismatch, "score: layer ", l,
                    ": queries ", shape_text(q), " and keys ", shape_text(k),
                    " need one head_dim and query heads a multiple of kv heads");
      if (l == 0) first_q = q, first_k = k;
      RAZORKV_CHECK(q == first_q && k == first_k, kShapeMismatch, "score: layer ", l, " is ",
                    shape_text(q), " / ", shape_text(k), ", layer 0 ", shape_text(first_q), " / ",
                    shape_text(first_k));
    } else {
      const auto p = razorkv::io::read_npy_header(a.attn_files[l]).shape;
      RAZORKV_CHECK(p.size() == 3 && p[1] == length && p[2] == length, kShapeMismatch,
                    "score: ", a.attn_files[l], " is ", shape_text(p), ", expected [heads, ",
                    length, ", ", length, "] (the probe length)");
      if (l == 0) first_q = p;
      RAZORKV_CHECK(p == first_q, kShapeMismatch, "score: ", a.attn_files[l], " is ", shape_text(p),
                    ", layer 0 ", shape_text(first_q));
    }
  }
}

int run_score(const score_args& a) {
  const bool from_qk = !a.q_files.empty();
  RAZORKV_CHECK(from_qk != !a.attn_files.empty(), kInvalidArgument,
                "score: give either --q/--k per layer or --attn per layer");
  RAZORKV_CHECK(a.q_files.size() == a.k_files.size(), kInvalidArgument, "score: ", a.q_files.size(),
                " --q files but ", a.k_files.size(), " --k files");
  std::optional<razorkv::probe> probe;
  if (!a.probe_file.empty()) {
    probe.emplace(razorkv::io::read_npy(a.probe_file).to<std::int64_t>(), a.period, a.repeats,
                  a.bos.has_value());
    RAZORKV_CHECK(!a.bos || probe->tokens().front() == *a.bos, kInvalidArgument, "score: --bos (",
                  *a.bos, ") but ", a.probe_file, " starts with ", probe->tokens().front());
  } else {  // distinct ids: the masks need only P, R and whether there is a BOS
    razorkv::probe_config c;
    c.num_random_tokens = a.period;
    c.repeats = a.repeats;
    c.max_id = a.period + 1;  // room for P ids besides a BOS id among them
    c.bos_id = a.bos;
    probe.emplace(c);
  }
  check_dumps(a, probe->length());
  const std::size_t layers = from_qk ? a.q_files.size() : a.attn_files.size();
  std::optional<razorkv::head_scores> table;
  index_t head_dim = 0;
  for (std::size_t l = 0; l < layers; ++l) {
    std::fprintf(stderr, "razorkv score: layer %zu of %zu\n", l + 1, layers);
    razorkv::layer_scores scores;
    index_t query_heads = 0, kv_heads = 0;
    if (from_qk) {
      std::vector<float> q_storage, k_storage;
      const auto q = as_layer(razorkv::io::read_npy(a.q_files[l]), q_storage);
      const auto k = as_layer(razorkv::io::read_npy(a.k_files[l]), k_storage);
      razorkv::qk_scoring_options options;
      options.scale = a.scale;
      options.row_step = a.subsample;
      scores = razorkv::score_from_queries_keys(*probe, q, k, options);
      query_heads = q.heads();
      kv_heads = k.heads();
      head_dim = q.head_dim();
    } else {
      const auto attn = razorkv::io::read_npy(a.attn_files[l]);
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
  razorkv::io::write_text_file(a.out, razorkv::io::head_scores_to_json(*table, head_dim));
  std::fprintf(stderr, "razorkv score: %zu layers written to %s\n", layers, a.out.c_str());
  return 0;
}

struct select_args {
  std::string scores, out, gqa = "sum", format = "razorkv";
  double induction_ratio = 0.14, echo_ratio = 0.01;
  index_t min_per_layer = 0;
  std::optional<index_t> head_dim;  // default: the one scores.json records
  razorkv::memory_target memory;    // budget mode when memory.budget_bytes > 0
};

int run_select(const select_args& a) {
  const std::string text = razorkv::io::read_text_file(a.scores);
  const auto scores = razorkv::io::head_scores_from_json(text);
  const std::optional<index_t> recorded = razorkv::io::head_scores_head_dim(text);
  RAZORKV_CHECK(a.head_dim || recorded, kInvalidArgument, "select: ", a.scores,
                " records no head_dim (scored from --attn dumps): give --head-dim");
  RAZORKV_CHECK(!a.head_dim || !recorded || *a.head_dim == *recorded, kInvalidArgument,
                "select: --head-dim (", a.head_dim.value_or(0), ") but ", a.scores,
                " was scored with head_dim ", recorded.value_or(0));
  const index_t head_dim = a.head_dim ? *a.head_dim : *recorded;
  // --s0, --c and --sinks are read in budget mode only, but a bad value is an error in any mode.
  razorkv::check_budget(a.memory.budget, "select");
  razorkv::selection_config config;
  config.induction_ratio = a.induction_ratio;
  config.echo_ratio = a.echo_ratio;
  config.min_groups_per_layer = a.min_per_layer;
  const std::optional<razorkv::gqa_aggregation> aggregation =
      razorkv::gqa_aggregation_from_name(a.gqa);
  RAZORKV_CHECK(aggregation.has_value(), kInvalidArgument, "select: --gqa ('", a.gqa,
                "') is not an aggregation");  // the option's check lets none through
  config.aggregation = *aggregation;
  const auto plan = a.memory.budget_bytes > 0
                        ? razorkv::select_for_budget(scores, head_dim, a.memory, config)
                        : razorkv::select_retrieval_heads(scores, head_dim, config);
  if (a.memory.budget_bytes > 0) {
    std::fprintf(
        stderr,
        "razorkv select: budget %ld bytes at %ld tokens -> induction ratio %.4f, echo ratio %.4f\n",
        static_cast<long>(a.memory.budget_bytes), static_cast<long>(a.memory.seq_len),
        plan.selection().induction_ratio, plan.selection().echo_ratio);
  }
  razorkv::io::write_text_file(
      a.out, razorkv::io::format_head_plan(plan, razorkv::io::parse_plan_format(a.format)));
  std::fprintf(stderr, "razorkv select: %ld of %ld kv groups kept full, written to %s\n",
               static_cast<long>(plan.num_retrieval()),
               static_cast<long>(plan.shape().num_layers * plan.shape().num_kv_heads),
               a.out.c_str());
  return 0;
}

struct ratio_args {
  shape_args model;
  plan_args plan;
  double retrieval_fraction = 0.15;
  std::vector<index_t> seq_lens;
  razorkv::razor_budget budget;
  index_t dtype_bytes = 2;
  std::string storage = "none", retrieval_storage;  // none, q8 or q4
};

// --storage / --retrieval-storage: "none" (rows of the dtype), "q8" or "q4", keys and values alike.
razorkv::kv_storage storage_from(const std::string& name, const char* option) {
  razorkv::kv_storage storage;
  if (name == "none") return storage;
  for (const razorkv::row_format f : {razorkv::row_format::kQ8, razorkv::row_format::kQ4}) {
    if (name == razorkv::row_format_name(f)) {
      storage.keys = storage.values = f;
      return storage;
    }
  }
  RAZORKV_CHECK(false, kInvalidArgument, "ratio: ", option, " ('", name,
                "') is not none, q8 or q4");
  return storage;
}

int run_ratio(const ratio_args& a) {
  std::optional<razorkv::model_shape> shape = shape_from(a.model, "ratio");
  std::optional<razorkv::head_plan> plan;
  if (!a.plan.path.empty()) {
    plan.emplace(read_plan(a.plan, shape, "ratio"));
    if (!shape) shape = plan->shape();
  }
  RAZORKV_CHECK(shape.has_value(), kInvalidArgument,
                "ratio: no model: give --model PRESET, or --layers, --query-heads, --kv-heads and "
                "--head-dim, or a razorkv --plan");
  for (index_t n : a.seq_lens)
    RAZORKV_CHECK(n > 0, kInvalidArgument, "ratio: --seq-len (", n, ") must be > 0");
  RAZORKV_CHECK(a.dtype_bytes > 0, kInvalidArgument, "ratio: --dtype-bytes (", a.dtype_bytes,
                ") must be > 0");
  razorkv::razor_budget budget = a.budget;
  budget.storage = storage_from(a.storage, "--storage");
  if (!a.retrieval_storage.empty())
    budget.retrieval_storage = storage_from(a.retrieval_storage, "--retrieval-storage");
  razorkv::check_budget(budget, "ratio");  // before the table's header
  razorkv::check_storage(budget.storage, shape->head_dim, "ratio: --storage");
  if (budget.retrieval_storage) {
    razorkv::check_storage(*budget.retrieval_storage, shape->head_dim,
                           "ratio: --retrieval-storage");
  }
  std::printf(
      "model: %ld layers, %ld query heads, %ld kv heads, head_dim %ld; %s; N0 %ld, S0 %ld, C %g, "
      "%ld-byte K/V; razor rows %s%s%s\n",
      static_cast<long>(shape->num_layers), static_cast<long>(shape->num_query_heads),
      static_cast<long>(shape->num_kv_heads), static_cast<long>(shape->head_dim),
      plan ? "retrieval groups from the plan" : "retrieval fraction",
      static_cast<long>(budget.sinks), static_cast<long>(budget.s0), budget.c,
      static_cast<long>(a.dtype_bytes), razorkv::describe(budget.storage).c_str(),
      budget.retrieval_storage ? ", retrieval heads " : "",
      budget.retrieval_storage ? razorkv::describe(*budget.retrieval_storage).c_str() : "");
  std::printf("%12s  %14s  %14s  %8s  %9s\n", "tokens", "full (MiB)", "razor (MiB)", "ratio",
              "reduction");
  for (index_t n : a.seq_lens) {
    const double full = static_cast<double>(razorkv::full_kv_bytes(*shape, n, a.dtype_bytes));
    const double razor =
        static_cast<double>(plan ? razorkv::compressed_kv_bytes(*plan, n, budget, a.dtype_bytes)
                                 : razorkv::compressed_kv_bytes(*shape, a.retrieval_fraction, n,
                                                                budget, a.dtype_bytes));
    std::printf("%12ld  %14.1f  %14.1f  %8.4f  %8.2fx\n", static_cast<long>(n), full / 1048576.0,
                razor / 1048576.0, razor / full, full / razor);
  }
  return 0;
}

struct convert_args {
  shape_args model;
  plan_args plan;
  std::string to, out;
};

int run_convert(const convert_args& a) {
  const razorkv::head_plan plan = read_plan(a.plan, shape_from(a.model, "convert"), "convert");
  razorkv::io::write_text_file(
      a.out, razorkv::io::format_head_plan(plan, razorkv::io::parse_plan_format(a.to)));
  std::fprintf(stderr, "razorkv convert: %ld retrieval groups written to %s as %s\n",
               static_cast<long>(plan.num_retrieval()), a.out.c_str(), a.to.c_str());
  return 0;
}

struct heatmap_args {
  std::string scores, out;
  plan_args plan;
};

// A colour of the viridis ramp (dark purple -> blue -> green -> yellow) at t in [0, 1]: ordered
// by lightness, readable in grey and by the colour-blind.
std::string viridis(double t) {
  static constexpr double kStops[5][3] = {
      {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  const double x = std::clamp(t, 0.0, 1.0) * 4.0;
  const int i = std::min(3, static_cast<int>(x));
  const double f = x - i;
  char rgb[32];
  std::snprintf(
      rgb, sizeof rgb, "rgb(%d,%d,%d)",
      static_cast<int>(std::lround(kStops[i][0] + f * (kStops[i + 1][0] - kStops[i][0]))),
      static_cast<int>(std::lround(kStops[i][1] + f * (kStops[i + 1][1] - kStops[i][1]))),
      static_cast<int>(std::lround(kStops[i][2] + f * (kStops[i + 1][2] - kStops[i][2]))));
  return rgb;
}

// Layers x query heads heat maps of echo and induction scores (viridis, scaled to each panel's
// maximum, with a colour bar), axes labelled by layer and query head, and the query heads of
// the plan's retrieval groups boxed in a heavy red outline.
int run_heatmap(const heatmap_args& a) {
  const std::string text = razorkv::io::read_text_file(a.scores);
  const auto scores = razorkv::io::head_scores_from_json(text);
  std::optional<razorkv::head_plan> plan;
  if (!a.plan.path.empty()) {
    // A plan without a shape of its own is read for the scores'; head_dim does not matter here,
    // so a razorkv plan is not checked against it.
    const razorkv::model_shape shape{scores.num_layers(), scores.num_query_heads(),
                                     scores.num_kv_heads(),
                                     razorkv::io::head_scores_head_dim(text).value_or(1)};
    plan.emplace(read_plan(a.plan, shape, "heatmap", /*check_razorkv_plans=*/false));
    RAZORKV_CHECK(plan->shape().num_layers == scores.num_layers() &&
                      plan->shape().num_kv_heads == scores.num_kv_heads() &&
                      plan->shape().num_query_heads == scores.num_query_heads(),
                  kShapeMismatch, "heatmap: the plan's shape does not match the scores'");
  }
  const index_t layers = scores.num_layers(), heads = scores.num_query_heads();
  const index_t cell = std::clamp<index_t>(480 / std::max(layers, heads), 8, 28);
  const index_t left = 56, top = 58, gap = 90, bar = 14;
  const index_t panel_width = heads * cell, panel_height = layers * cell;
  // Wide enough for the caption under small models' panels.
  const index_t width = std::max<index_t>(left + 2 * (panel_width + gap), 660),
                height = top + panel_height + 78;
  // A tick label every so many rows (14 px apart at least) and columns (22 px).
  const index_t layer_step = std::max<index_t>(1, 14 / cell + (14 % cell ? 1 : 0));
  const index_t head_step = std::max<index_t>(1, 22 / cell + (22 % cell ? 1 : 0));
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"DejaVu Sans, sans-serif\" font-size=\"11\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (int panel = 0; panel < 2; ++panel) {
    const index_t x0 = left + panel * (panel_width + gap), y0 = top;
    double max_score = 0.0;
    for (index_t l = 0; l < layers; ++l)
      for (index_t h = 0; h < heads; ++h)
        max_score = std::max(max_score, panel ? scores.induction(l, h) : scores.echo(l, h));
    const double scale = max_score > 0 ? max_score : 1.0;
    svg << "<text x=\"" << x0 << "\" y=\"" << y0 - 30 << "\" font-size=\"13\" font-weight=\"bold\">"
        << (panel ? "induction" : "echo") << " score</text>\n";
    for (index_t l = 0; l < layers; ++l) {
      for (index_t h = 0; h < heads; ++h) {
        const double v = (panel ? scores.induction(l, h) : scores.echo(l, h)) / scale;
        svg << "<rect x=\"" << x0 + h * cell << "\" y=\"" << y0 + l * cell << "\" width=\"" << cell
            << "\" height=\"" << cell << "\" fill=\"" << viridis(v) << "\"/>\n";
      }
    }
    // Retrieval groups on top of the cells, so that no neighbour paints over an outline.
    for (index_t l = 0; plan && l < layers; ++l) {
      for (index_t g = 0; g < scores.num_kv_heads(); ++g) {
        if (!plan->is_retrieval(l, g)) continue;
        const index_t group = scores.group_size();
        svg << "<rect x=\"" << x0 + g * group * cell + 1 << "\" y=\"" << y0 + l * cell + 1
            << "\" width=\"" << group * cell - 2 << "\" height=\"" << cell - 2
            << "\" fill=\"none\" stroke=\"white\" stroke-width=\"4\"/>\n"
            << "<rect x=\"" << x0 + g * group * cell + 1 << "\" y=\"" << y0 + l * cell + 1
            << "\" width=\"" << group * cell - 2 << "\" height=\"" << cell - 2
            << "\" fill=\"none\" stroke=\"red\" stroke-width=\"2\"/>\n";
      }
    }
    svg << "<rect x=\"" << x0 << "\" y=\"" << y0 << "\" width=\"" << panel_width << "\" height=\""
        << panel_height << "\" fill=\"none\" stroke=\"#444\"/>\n";
    for (index_t h = 0; h < heads; h += head_step) {
      svg << "<text x=\"" << x0 + h * cell + cell / 2 << "\" y=\"" << y0 - 5
          << "\" text-anchor=\"middle\" font-size=\"10\">" << h << "</text>\n";
    }
    for (index_t l = 0; l < layers; l += layer_step) {
      svg << "<text x=\"" << x0 - 5 << "\" y=\"" << y0 + l * cell + cell / 2 + 4
          << "\" text-anchor=\"end\" font-size=\"10\">" << l << "</text>\n";
    }
    svg << "<text x=\"" << x0 + panel_width / 2 << "\" y=\"" << y0 - 18
        << "\" text-anchor=\"middle\">query head</text>\n"
        << "<text x=\"" << x0 - 34 << "\" y=\"" << y0 + panel_height / 2
        << "\" text-anchor=\"middle\" transform=\"rotate(-90 " << x0 - 34 << " "
        << y0 + panel_height / 2 << ")\">layer</text>\n";
    // Colour bar: 0 at the bottom, the panel's maximum at the top.
    const index_t bx = x0 + panel_width + 10;
    for (int i = 0; i < 50; ++i) {
      svg << "<rect x=\"" << bx << "\" y=\"" << y0 + panel_height * (49 - i) / 50 << "\" width=\""
          << bar << "\" height=\"" << panel_height / 50 + 1 << "\" fill=\"" << viridis(i / 49.0)
          << "\"/>\n";
    }
    char top_label[32];
    std::snprintf(top_label, sizeof top_label, "%.3g", max_score);
    svg << "<text x=\"" << bx + bar + 3 << "\" y=\"" << y0 + 9 << "\" font-size=\"10\">"
        << top_label << "</text>\n<text x=\"" << bx + bar + 3 << "\" y=\"" << y0 + panel_height
        << "\" font-size=\"10\">0</text>\n";
  }
  svg << "<text x=\"" << left << "\" y=\"" << top + panel_height + 30 << "\">"
      << (plan ? "red boxes: the kv groups the plan keeps whole (retrieval heads); "
               : "no plan given; ")
      << layers << " layers x " << heads << " query heads, " << scores.num_kv_heads()
      << " kv heads</text>\n</svg>\n";
  razorkv::io::write_text_file(a.out, svg.str());
  std::fprintf(stderr, "razorkv heatmap: written to %s\n", a.out.c_str());
  return 0;
}

}  // namespace

// One line on stderr for every error, whatever the message held.
int fail(const std::string& message) {
  std::string line = message;
  for (char& c : line) c = (c == '\n' || c == '\r') ? ' ' : c;
  std::fprintf(stderr, "razorkv: %s\n", line.c_str());
  return 2;
}

int main(int argc, char** argv) {
  CLI::App app{
      "razorkv: offline RazorAttention calibration (probe -> score -> select -> ratio, heatmap, "
      "convert)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::to_string(RAZORKV_VERSION_MAJOR) + "." +
                                        std::to_string(RAZORKV_VERSION_MINOR) + "." +
                                        std::to_string(RAZORKV_VERSION_PATCH));

  probe_args pa;
  auto* probe = app.add_subcommand("probe", "write the probe token ids (int64 .npy)");
  probe->add_option("--period", pa.period, "random tokens per copy (P)")->capture_default_str();
  probe->add_option("--repeats", pa.repeats, "copies (R)")->capture_default_str();
  probe->add_option("--bos", pa.bos, "BOS token id, prepended once");
  probe->add_option("--vocab-min", pa.vocab_min, "smallest id")->capture_default_str();
  probe->add_option("--vocab-max", pa.vocab_max, "one past the largest id")->required();
  probe->add_option("--seed", pa.seed, "random seed")->capture_default_str();
  probe->add_flag("--allow-duplicates", pa.allow_duplicates, "draw ids with replacement");
  probe->add_option("--out", pa.out, "output .npy")->required();

  score_args sa;
  auto* score = app.add_subcommand("score", "echo/induction scores from per-layer dumps");
  score->add_option("--period", sa.period, "P of the probe")->capture_default_str();
  score->add_option("--repeats", sa.repeats, "R of the probe")->capture_default_str();
  score->add_option("--bos", sa.bos, "BOS token id the probe starts with (as given to probe)");
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
  select
      ->add_option("--induction-ratio", sel.induction_ratio,
                   "share of all kv groups kept by induction score")
      ->capture_default_str();
  select->add_option("--echo-ratio", sel.echo_ratio, "share of all kv groups kept by echo score")
      ->capture_default_str();
  std::vector<std::string> aggregations;
  for (razorkv::gqa_aggregation a : razorkv::kGqaAggregations)
    aggregations.emplace_back(razorkv::gqa_aggregation_name(a));
  select->add_option("--gqa", sel.gqa, "group score: the query heads' sum, max or mean")
      ->check(CLI::IsMember(aggregations))
      ->capture_default_str();
  select->add_option("--min-per-layer", sel.min_per_layer, "minimum retrieval groups per layer")
      ->capture_default_str();
  select->add_option("--head-dim", sel.head_dim,
                     "head dimension of the model (default: the one scores.json records)");
  select->add_option("--format", sel.format, "razorkv, mindspore or duoattention")
      ->check(CLI::IsMember({"razorkv", "mindspore", "duoattention"}))
      ->capture_default_str();
  select->add_option("--budget-bytes", sel.memory.budget_bytes,
                     "instead of the ratios: the K/V byte budget at --seq-len");
  select->add_option("--seq-len", sel.memory.seq_len, "sequence length of --budget-bytes");
  select->add_option("--dtype-bytes", sel.memory.dtype_bytes, "bytes per K/V element")
      ->capture_default_str();
  select->add_option("--s0", sel.memory.budget.s0, "S0: the shortest recent window")
      ->capture_default_str();
  select->add_option("--c", sel.memory.budget.c, "C: the window is at least N / C tokens")
      ->capture_default_str();
  select->add_option("--sinks", sel.memory.budget.sinks, "N0: sink tokens every head keeps")
      ->capture_default_str();
  select->add_option("--out", sel.out, "output plan")->required();

  ratio_args ra;
  auto* ratio = app.add_subcommand("ratio", "full vs RazorAttention KV bytes");
  add_shape_options(ratio, ra.model);
  add_plan_options(ratio, ra.plan, "a plan (instead of --retrieval-fraction)");
  ratio
      ->add_option("--retrieval-fraction", ra.retrieval_fraction,
                   "share of kv groups kept whole when no plan is given")
      ->capture_default_str();
  ratio->add_option("--seq-len", ra.seq_lens, "sequence lengths")->required();
  ratio->add_option("--s0", ra.budget.s0, "S0: the shortest recent window")->capture_default_str();
  ratio->add_option("--c", ra.budget.c, "C: the window is at least N / C tokens")
      ->capture_default_str();
  ratio->add_option("--sinks", ra.budget.sinks, "N0: sink tokens every head keeps")
      ->capture_default_str();
  ratio->add_option("--dtype-bytes", ra.dtype_bytes, "bytes per K/V element")
      ->capture_default_str();
  ratio
      ->add_option("--storage", ra.storage,
                   "razor rows (windows, retrieval heads): none (the dtype), q8 or q4; sinks and "
                   "compensation tokens stay the dtype")
      ->capture_default_str();
  ratio->add_option("--retrieval-storage", ra.retrieval_storage,
                    "retrieval heads' rows instead: none, q8 or q4");

  heatmap_args ha;
  auto* heatmap = app.add_subcommand("heatmap", "SVG heat maps of echo and induction scores");
  heatmap->add_option("--scores", ha.scores, "scores.json")->required();
  add_plan_options(heatmap, ha.plan, "a plan: box its retrieval groups");
  heatmap->add_option("--out", ha.out, "output .svg")->required();

  convert_args ca;
  auto* convert = app.add_subcommand("convert", "a plan from one file format to another");
  add_plan_options(convert, ca.plan, "the plan to convert");
  convert->get_option("--plan")->required();
  add_shape_options(convert, ca.model);
  convert->add_option("--to", ca.to, "razorkv, mindspore or duoattention (gates 1 and 0)")
      ->check(CLI::IsMember({"razorkv", "mindspore", "duoattention"}))
      ->required();
  convert->add_option("--out", ca.out, "output plan")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(std::string(e.what()) + " (see --help)");
  }
  try {
    if (probe->parsed()) return run_probe(pa);
    if (score->parsed()) return run_score(sa);
    if (select->parsed()) return run_select(sel);
    if (ratio->parsed()) return run_ratio(ra);
    if (heatmap->parsed()) return run_heatmap(ha);
    if (convert->parsed()) return run_convert(ca);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 2;
}
