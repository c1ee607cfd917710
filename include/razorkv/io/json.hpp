// razorkv/io/json.hpp: versioned JSON for head plans and head scores, and the Huawei
// mindspore_gs retrieval-head file. Needs nlohmann-json; the rest of razorkv needs only Eigen.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "razorkv/config.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/error.hpp"
#include "razorkv/scoring/head_scores.hpp"

RAZORKV_BEGIN_NAMESPACE
namespace io {

namespace detail {

// The member `key` of object `j`, required, as an integer in [min, max].
inline index_t get_index(const nlohmann::json& j, const char* key, index_t min, index_t max,
                         const char* where) {
  RAZORKV_CHECK(j.contains(key), kParseError, where, ": missing \"", key, "\"");
  const nlohmann::json& v = j.at(key);
  RAZORKV_CHECK(v.is_number_integer(), kParseError, where, ": \"", key,
                "\" must be an integer, got ", v.dump());
  const auto x = v.get<std::int64_t>();
  RAZORKV_CHECK(x >= min && x <= max, kParseError, where, ": \"", key, "\" (", x, ") outside [",
                min, ", ", max, "]");
  return static_cast<index_t>(x);
}

inline void check_format(const nlohmann::json& j, const char* format, const char* where) {
  RAZORKV_CHECK(j.is_object(), kParseError, where, ": the document must be a JSON object");
  RAZORKV_CHECK(j.contains("format") && j.at("format") == format, kParseError, where,
                ": \"format\" must be \"", format, "\", got ",
                j.contains("format") ? j.at("format").dump() : std::string("nothing"));
  RAZORKV_CHECK(j.contains("version") && j.at("version") == 1, kParseError, where,
                ": unsupported \"version\" ",
                j.contains("version") ? j.at("version").dump() : std::string("(missing)"),
                " (this razorkv reads version 1)");
}

constexpr index_t kMaxCount = index_t{1} << 24;  // far above any model, far below overflow

inline model_shape read_shape(const nlohmann::json& j, const char* where) {
  model_shape shape;
  shape.num_layers = get_index(j, "num_layers", 1, kMaxCount, where);
  shape.num_query_heads = get_index(j, "num_query_heads", 1, kMaxCount, where);
  shape.num_kv_heads = get_index(j, "num_kv_heads", 1, kMaxCount, where);
  if (j.contains("head_dim")) shape.head_dim = get_index(j, "head_dim", 1, kMaxCount, where);
  RAZORKV_CHECK(shape.num_query_heads % shape.num_kv_heads == 0, kParseError, where,
                ": num_query_heads (", shape.num_query_heads,
                ") is not a multiple of num_kv_heads (", shape.num_kv_heads, ")");
  return shape;
}

// A list of distinct kv-head indices in [0, kv_heads).
inline std::vector<index_t> read_heads(const nlohmann::json& list, index_t kv_heads,
                                       const std::string& where) {
  RAZORKV_CHECK(list.is_array(), kParseError, where, ": expected a list of kv heads, got ",
                list.dump());
  std::vector<index_t> heads;
  std::vector<bool> seen(static_cast<std::size_t>(kv_heads), false);
  for (const auto& v : list) {
    RAZORKV_CHECK(v.is_number_integer(), kParseError, where, ": kv head ", v.dump(),
                  " is not an integer");
    const auto h = v.get<std::int64_t>();
    RAZORKV_CHECK(h >= 0 && h < kv_heads, kParseError, where, ": kv head ", h, " outside [0, ",
                  kv_heads, ")");
    RAZORKV_CHECK(!seen[static_cast<std::size_t>(h)], kParseError, where, ": kv head ", h,
                  " listed twice");
    seen[static_cast<std::size_t>(h)] = true;
    heads.push_back(static_cast<index_t>(h));
  }
  return heads;
}

inline nlohmann::json parse(const std::string& text, const char* where) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    ::razorkv::detail::raise(errc::kParseError, __FILE__, __LINE__, where,
                             ": not valid JSON: ", e.what());
  }
}

}  // namespace detail

/// {"format": "razorkv.head_plan", "version": 1, num_layers, num_query_heads, num_kv_heads,
///  head_dim, "retrieval": [[kv heads of layer 0], ...], "buffer_override": {"<layer>":
///  {"<kv head>": tokens}}, "selection": {method, induction_ratio, echo_ratio, aggregation,
///  min_groups_per_layer}}
inline std::string head_plan_to_json(const head_plan& plan) {
  nlohmann::json j;
  j["format"] = "razorkv.head_plan";
  j["version"] = 1;
  j["num_layers"] = plan.shape().num_layers;
  j["num_query_heads"] = plan.shape().num_query_heads;
  j["num_kv_heads"] = plan.shape().num_kv_heads;
  j["head_dim"] = plan.shape().head_dim;
  j["retrieval"] = nlohmann::json::array();
  nlohmann::json overrides = nlohmann::json::object();
  for (index_t l = 0; l < plan.shape().num_layers; ++l) {
    j["retrieval"].push_back(plan.retrieval_heads(l));
    for (index_t h = 0; h < plan.shape().num_kv_heads; ++h) {
      if (const auto tokens = plan.buffer_override(l, h))
        overrides[std::to_string(l)][std::to_string(h)] = *tokens;
    }
  }
  if (!overrides.empty()) j["buffer_override"] = overrides;
  const auto& why = plan.selection();
  j["selection"] = {{"method", why.method},
                    {"induction_ratio", why.induction_ratio},
                    {"echo_ratio", why.echo_ratio},
                    {"aggregation", gqa_aggregation_name(why.aggregation)},
                    {"min_groups_per_layer", why.min_groups_per_layer}};
  if (!why.group_echo.empty()) {
    j["selection"]["group_echo"] = why.group_echo;
    j["selection"]["group_induction"] = why.group_induction;
  }
  return j.dump(2);
}

inline head_plan head_plan_from_json(const std::string& text) {
  constexpr const char* kWhere = "head_plan_from_json";
  const nlohmann::json j = detail::parse(text, kWhere);
  detail::check_format(j, "razorkv.head_plan", kWhere);
  const model_shape shape = detail::read_shape(j, kWhere);
  RAZORKV_CHECK(shape.head_dim > 0, kParseError, kWhere, ": missing \"head_dim\"");
  head_plan plan(shape);
  RAZORKV_CHECK(j.contains("retrieval") && j.at("retrieval").is_array(), kParseError, kWhere,
                ": \"retrieval\" must be a list with one list of kv heads per layer");
  const auto& retrieval = j.at("retrieval");
  RAZORKV_CHECK(static_cast<index_t>(retrieval.size()) == shape.num_layers, kParseError, kWhere,
                ": \"retrieval\" has ", retrieval.size(), " layers, num_layers is ",
                shape.num_layers);
  for (index_t l = 0; l < shape.num_layers; ++l) {
    for (index_t h :
         detail::read_heads(retrieval.at(static_cast<std::size_t>(l)), shape.num_kv_heads,
                            std::string(kWhere) + ": retrieval layer " + std::to_string(l))) {
      plan.set_retrieval(l, h, true);
    }
  }
  if (j.contains("buffer_override")) {
    const auto& overrides = j.at("buffer_override");
    RAZORKV_CHECK(overrides.is_object(), kParseError, kWhere,
                  ": \"buffer_override\" must be an object");
    for (const auto& [layer_key, heads] : overrides.items()) {
      const nlohmann::json layer_json = detail::parse(layer_key, kWhere);
      RAZORKV_CHECK(layer_json.is_number_integer() && heads.is_object(), kParseError, kWhere,
                    ": buffer_override key \"", layer_key,
                    "\" must be a layer number mapping to an object");
      const auto layer = layer_json.get<std::int64_t>();
      RAZORKV_CHECK(layer >= 0 && layer < shape.num_layers, kParseError, kWhere,
                    ": buffer_override layer ", layer, " outside [0, ", shape.num_layers, ")");
      for (const auto& [head_key, tokens] : heads.items()) {
        const nlohmann::json head_json = detail::parse(head_key, kWhere);
        RAZORKV_CHECK(head_json.is_number_integer(), kParseError, kWhere,
                      ": buffer_override head \"", head_key, "\"");
        const auto head = head_json.get<std::int64_t>();
        RAZORKV_CHECK(head >= 0 && head < shape.num_kv_heads, kParseError, kWhere,
                      ": buffer_override kv head ", head, " outside [0, ", shape.num_kv_heads, ")");
        RAZORKV_CHECK(tokens.is_number_integer() && tokens.get<std::int64_t>() > 0, kParseError,
                      kWhere, ": buffer_override of layer ", layer, " kv head ", head,
                      " must be a positive integer, got ", tokens.dump());
        plan.set_buffer_override(layer, head, tokens.get<index_t>());
      }
    }
  }
  if (j.contains("selection") && j.at("selection").is_object()) {
    const auto& s = j.at("selection");
    auto& why = plan.selection();
    if (s.contains("method") && s.at("method").is_string())
      why.method = s.at("method").get<std::string>();
    if (s.contains("induction_ratio") && s.at("induction_ratio").is_number())
      why.induction_ratio = s.at("induction_ratio").get<double>();
    if (s.contains("echo_ratio") && s.at("echo_ratio").is_number())
      why.echo_ratio = s.at("echo_ratio").get<double>();
    if (s.contains("min_groups_per_layer") && s.at("min_groups_per_layer").is_number_integer()) {
      why.min_groups_per_layer = s.at("min_groups_per_layer").get<index_t>();
    }
    for (const auto& [key, target] :
         {std::pair<const char*, std::vector<double>*>{"group_echo", &why.group_echo},
          std::pair<const char*, std::vector<double>*>{"group_induction", &why.group_induction}}) {
      if (!s.contains(key)) continue;
      const auto& values = s.at(key);
      RAZORKV_CHECK(values.is_array() && static_cast<index_t>(values.size()) ==
                                             shape.num_layers * shape.num_kv_heads,
                    kParseError, kWhere, ": selection \"", key,
                    "\" must list num_layers * num_kv_heads (",
                    shape.num_layers * shape.num_kv_heads, ") scores");
      for (const auto& v : values) {
        RAZORKV_CHECK(v.is_number(), kParseError, kWhere, ": selection \"", key, "\" holds ",
                      v.dump());
        target->push_back(v.get<double>());
      }
    }
    if (s.contains("aggregation")) {
      const std::optional<gqa_aggregation> aggregation =
          s.at("aggregation").is_string()
              ? gqa_aggregation_from_name(s.at("aggregation").get<std::string>())
              : std::nullopt;
      RAZORKV_CHECK(aggregation.has_value(), kParseError, kWhere,
                    ": unknown selection aggregation ", s.at("aggregation").dump());
      why.aggregation = *aggregation;
    }
  }
  return plan;
}

/// {"format": "razorkv.head_scores", "version": 1, num_layers, num_query_heads, num_kv_heads,
///  "echo": [[per query head] per layer], "induction": [[...] per layer]}. Every layer must be set.
/// head_dim > 0 is recorded (as "head_dim") so that selection need not be told it again; the
/// scores do not depend on it. 0 leaves it out (scores from attention probabilities).
inline std::string head_scores_to_json(const head_scores& scores, index_t head_dim = 0) {
  RAZORKV_CHECK(scores.complete(), kInvalidArgument,
                "head_scores_to_json: head_scores is incomplete");
  RAZORKV_CHECK(head_dim >= 0, kInvalidArgument, "head_scores_to_json: head_dim (", head_dim,
                ") must be >= 0");
  nlohmann::json j;
  j["format"] = "razorkv.head_scores";
  j["version"] = 1;
  j["num_layers"] = scores.num_layers();
  j["num_query_heads"] = scores.num_query_heads();
  j["num_kv_heads"] = scores.num_kv_heads();
  if (head_dim > 0) j["head_dim"] = head_dim;
  for (const char* key : {"echo", "induction"}) {
    nlohmann::json rows = nlohmann::json::array();
    for (index_t l = 0; l < scores.num_layers(); ++l) {
      std::vector<double> row;
      for (index_t h = 0; h < scores.num_query_heads(); ++h) {
        row.push_back(std::string(key) == "echo" ? scores.echo(l, h) : scores.induction(l, h));
      }
      rows.push_back(row);
    }
    j[key] = rows;
  }
  return j.dump(2);
}

inline head_scores head_scores_from_json(const std::string& text) {
  constexpr const char* kWhere = "head_scores_from_json";
  const nlohmann::json j = detail::parse(text, kWhere);
  detail::check_format(j, "razorkv.head_scores", kWhere);
  const model_shape shape = detail::read_shape(j, kWhere);
  std::vector<layer_scores> layers(static_cast<std::size_t>(shape.num_layers));
  for (const char* key : {"echo", "induction"}) {
    RAZORKV_CHECK(j.contains(key) && j.at(key).is_array() &&
                      static_cast<index_t>(j.at(key).size()) == shape.num_layers,
                  kParseError, kWhere, ": \"", key, "\" must be a list of num_layers (",
                  shape.num_layers, ") lists");
    for (index_t l = 0; l < shape.num_layers; ++l) {
      const auto& row = j.at(key).at(static_cast<std::size_t>(l));
      RAZORKV_CHECK(row.is_array() && static_cast<index_t>(row.size()) == shape.num_query_heads,
                    kParseError, kWhere, ": \"", key, "\" layer ", l,
                    " must list num_query_heads (", shape.num_query_heads, ") scores");
      auto& out = std::string(key) == "echo" ? layers[static_cast<std::size_t>(l)].echo
                                             : layers[static_cast<std::size_t>(l)].induction;
      for (const auto& v : row) {
        RAZORKV_CHECK(v.is_number(), kParseError, kWhere, ": \"", key, "\" layer ", l, " holds ",
                      v.dump(), ", not a number");
        out.push_back(v.get<double>());
      }
    }
  }
  head_scores scores(shape.num_layers, shape.num_query_heads, shape.num_kv_heads);
  for (index_t l = 0; l < shape.num_layers; ++l)
    scores.set_layer(l, layers[static_cast<std::size_t>(l)]);
  return scores;
}

/// The head_dim a scores file records, if it records one.
inline std::optional<index_t> head_scores_head_dim(const std::string& text) {
  constexpr const char* kWhere = "head_scores_head_dim";
  const nlohmann::json j = detail::parse(text, kWhere);
  detail::check_format(j, "razorkv.head_scores", kWhere);
  const model_shape shape = detail::read_shape(j, kWhere);
  return shape.head_dim > 0 ? std::optional<index_t>(shape.head_dim) : std::nullopt;
}

/// The mindspore_gs retrieval-head file: {"<layer>": [kv heads], ...}, empty layers omitted.
inline std::string head_plan_to_mindspore(const head_plan& plan) {
  nlohmann::json j = nlohmann::json::object();
  for (index_t l = 0; l < plan.shape().num_layers; ++l) {
    const auto heads = plan.retrieval_heads(l);
    if (!heads.empty()) j[std::to_string(l)] = heads;
  }
  return j.dump();
}

/// Reads a mindspore_gs retrieval-head file into a plan for `shape` (which the file does not
/// carry); layer keys must be decimal numbers of layers of the model.
inline head_plan head_plan_from_mindspore(const std::string& text, const model_shape& shape) {
  constexpr const char* kWhere = "head_plan_from_mindspore";
  const nlohmann::json j = detail::parse(text, kWhere);
  RAZORKV_CHECK(j.is_object(), kParseError, kWhere,
                ": the document must be an object {\"<layer>\": [kv heads]}");
  head_plan plan(shape);
  plan.selection().method = "mindspore_gs import";
  for (const auto& [key, heads] : j.items()) {
    RAZORKV_CHECK(
        !key.empty() && key.size() < 10 && key.find_first_not_of("0123456789") == std::string::npos,
        kParseError, kWhere, ": layer key \"", key, "\" is not a layer number");
    const index_t layer = std::stol(key);
    RAZORKV_CHECK(layer < shape.num_layers, kParseError, kWhere, ": layer ", layer, " outside [0, ",
                  shape.num_layers, ") of the model");
    for (index_t h :
         detail::read_heads(heads, shape.num_kv_heads, std::string(kWhere) + ": layer " + key)) {
      plan.set_retrieval(layer, h, true);
    }
  }
  return plan;
}

/// Whole-file helpers; errors name the path.
inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RAZORKV_CHECK(in.good(), kInvalidArgument, "read_text_file: cannot open \"", path, "\"");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}
inline void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  RAZORKV_CHECK(out.good(), kInvalidArgument, "write_text_file: cannot create \"", path, "\"");
  out << text;
  RAZORKV_CHECK(out.good(), kInvalidArgument, "write_text_file: writing \"", path, "\" failed");
}

}  // namespace io
RAZORKV_END_NAMESPACE
