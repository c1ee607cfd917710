// examples/engine/tiny_llama.hpp: a small C++ inference engine for Llama-family models, which
// keeps its KV cache in razorkv the way an engine would: the byte model trained in tools/train/
// (safetensors) and SmolLM2-135M (a GGUF file, scripts/get_model.sh).
//
// The engine owns the dense prefill (its K/V in its own NHD float buffers), hands each layer to
// whichever cache policy the caller picked, and decodes over that cache through razorkv's
// KV-cache contract, so full, RazorAttention and every baseline run through one forward pass.
// Weights are float32 in memory (a GGUF file's quantised ones dequantised once at load).
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include <razorkv/io/gguf.hpp>
#include <razorkv/io/safetensors.hpp>
#include <razorkv/razorkv.hpp>

namespace tiny_llama {

using razorkv::index_t;
using row_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Which dimensions of a head RoPE rotates together: (i, i + head_dim / 2), as PyTorch's Llama
/// and the trained model do, or (2i, 2i + 1), as GGUF files store Llama's Q/K weights (their rows
/// permuted so that this pairing computes the same attention).
enum class rope_pairs { kHalves, kAdjacent };

/// The model's hyper-parameters: the safetensors metadata "config" (a JSON object) or a GGUF
/// file's llama.* metadata.
struct config {
  index_t vocab_size = 0, d_model = 0, num_layers = 0, num_q_heads = 0, num_kv_heads = 0,
          ffn_hidden = 0;
  index_t max_context = 0;
  double rope_theta = 10000.0;
  float norm_eps = 1e-5f;
  rope_pairs rope = rope_pairs::kHalves;
  bool tied_embeddings = false;  ///< the output head is the embedding matrix
  index_t first_text_id = 0;     ///< ids below it are control tokens (<|im_start|>, ...)

  index_t head_dim() const { return d_model / num_q_heads; }
  razorkv::model_shape shape() const { return {num_layers, num_q_heads, num_kv_heads, head_dim()}; }
};

/// Bytes are the tokens: the text's UTF-8 bytes, one id each (the probe draws from all 256).
inline std::vector<int> tokenize(const std::string& text) {
  return std::vector<int>(reinterpret_cast<const unsigned char*>(text.data()),
                          reinterpret_cast<const unsigned char*>(text.data()) + text.size());
}
inline std::string detokenize(const std::vector<int>& tokens) {
  std::string text;
  for (int t : tokens) text += static_cast<char>(t);
  return text;
}

/// What a dense prefill leaves: each layer's post-RoPE queries, keys and values, in the
/// engine's NHD layout, and the logits it was asked for.
struct prefill_state {
  index_t tokens = 0;
  std::vector<row_matrix> queries;  ///< [layer] [tokens, num_q_heads * head_dim]
  std::vector<row_matrix> keys;     ///< [layer] [tokens, num_kv_heads * head_dim], post-RoPE
  std::vector<row_matrix> values;   ///< [layer] [tokens, num_kv_heads * head_dim]
  row_matrix logits;                ///< [positions asked for, vocab]

  /// Layer l's views, [tokens, heads, head_dim], read in place by razorkv.
  razorkv::layer_view<const float> query_view(index_t l, index_t heads) const {
    return view(queries, l, heads);
  }
  razorkv::layer_view<const float> key_view(index_t l, index_t heads) const {
    return view(keys, l, heads);
  }
  razorkv::layer_view<const float> value_view(index_t l, index_t heads) const {
    return view(values, l, heads);
  }

 private:
  razorkv::layer_view<const float> view(const std::vector<row_matrix>& m, index_t l,
                                        index_t heads) const {
    const row_matrix& x = m.at(static_cast<std::size_t>(l));
    return razorkv::layer_view<const float>::nhd(x.data(), x.rows(), heads, x.cols() / heads);
  }
};

class model {
 public:
  /// Loads weights and config from a safetensors file written by tools/train/model.py, or from
  /// a GGUF file of a "llama" architecture (recognised by its magic).
  static model load(const std::string& path);
  static model load_safetensors(const std::string& path);
  static model load_gguf(const razorkv::io::gguf_file& file);

  const config& cfg() const noexcept { return cfg_; }
  razorkv::model_shape shape() const { return cfg_.shape(); }

  /// Runs `tokens` (positions 0..n-1) through the model with full causal attention. Logits of
  /// every position when `all_logits`, else of the last one only.
  prefill_state prefill(const std::vector<int>& tokens, bool all_logits) const;

  /// Chunked prefill straight into a razor cache, which never holds the dense K/V: `tokens`
  /// (positions 0..n-1) in chunks of `chunk` tokens; each layer compresses a chunk's K/V as it
  /// arrives (razor_kv_cache::compress_chunk) and the chunk's queries then attend to the cache,
  /// that is to the compressed past and the chunk, causally (prefill_attention, which checks
  /// that the chunk fits in every window). Non-retrieval heads of later chunks thus read
  /// the compressed past, not every earlier token. Returns the last position's logits.
  Eigen::VectorXf prefill_chunked(razorkv::razor_kv_cache<float>& cache,
                                  const std::vector<int>& tokens, index_t chunk) const;

  /// The prefill as the prompt razorkv's policies compress: views of every layer's K/V and of
  /// the last `queries` prompt queries (SnapKV and H2O rank by them; -1: all of them). With
  /// `length` >= 0, the prompt is the prefill's first `length` tokens (a document whose
  /// question the same prefill read after it).
  razorkv::prompt_kv<float> prompt_of(const prefill_state& state, index_t queries = -1,
                                      index_t length = -1) const;

  /// One decode step of the token at `position` over any razorkv cache holding positions
  /// [0, position) of every layer: appends the token's K/V to each layer, attends with
  /// razorkv::decode_attention, hands a cache that learns from decode its attention weights, and
  /// returns the logits.
  template <class Cache>
  Eigen::VectorXf decode(Cache& cache, int token, index_t position) const;

  /// One decode step for a batch of sequences of any lengths, one cache each (all of one type):
  /// sequence b decodes tokens[b] at positions[b]; attention runs as one razorkv batch call per
  /// layer. Returns [batch, vocab] logits.
  template <class Cache>
  row_matrix decode_batch(const std::vector<Cache*>& caches, const std::vector<int>& tokens,
                          const std::vector<index_t>& positions) const;

 private:
  struct layer_weights {
    Eigen::VectorXf attn_norm, ffn_norm;
    row_matrix wq, wk, wv, wo, w_gate, w_up, w_down;  // [out, in], as PyTorch stores Linear weights
  };

  // Rows of x through RMSNorm with weight w.
  row_matrix rms_norm(const row_matrix& x, const Eigen::VectorXf& w) const;
  // RoPE in place on rows of x ([rows, heads * head_dim]); row r is at positions[r].
  void rope(row_matrix& x, const std::vector<index_t>& positions) const;
  // The SwiGLU MLP of rows of x.
  row_matrix feed_forward(const layer_weights& w, const row_matrix& x) const;
  // Embeddings of tokens[first, first + count), checked against the vocabulary.
  row_matrix embed(const std::vector<int>& tokens, index_t first, index_t count,
                   const char* where) const;
  // Projections of rows of normalised hidden states: Q, K (both roped) and V.
  void project(const layer_weights& w, const row_matrix& h, const std::vector<index_t>& positions,
               row_matrix& q, row_matrix& k, row_matrix& v) const;
  row_matrix output_logits(const row_matrix& x) const;
  // x * w^T for a weight w stored [out, in], as PyTorch's Linear stores it.
  static row_matrix linear(const row_matrix& x, const row_matrix& w) { return x * w.transpose(); }
  void check_config(const std::string& what) const;

  config cfg_;
  row_matrix embed_, lm_head_;
  Eigen::VectorXf final_norm_;
  std::vector<layer_weights> layers_;
};

// ---------------------------------------------------------------------------------------------

inline model model::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RAZORKV_CHECK(in.good(), kInvalidArgument, "tiny_llama::load: cannot open \"", path, "\"");
  char magic[4] = {};
  in.read(magic, 4);
  if (in.gcount() == 4 && std::string(magic, 4) == "GGUF")
    return load_gguf(razorkv::io::gguf_file::read(path));
  return load_safetensors(path);
}

inline void model::check_config(const std::string& what) const {
  const config& c = cfg_;
  RAZORKV_CHECK(c.num_q_heads % c.num_kv_heads == 0 && c.d_model % c.num_q_heads == 0 &&
                    c.head_dim() % 2 == 0 && c.rope_theta > 1 && c.norm_eps > 0,
                kInvalidArgument, "tiny_llama::load: ", what,
                " is not a GQA model with an even head_dim, rope_theta > 1 and norm_eps > 0");
}

inline model model::load_gguf(const razorkv::io::gguf_file& file) {
  const std::string arch = file.value("general.architecture").as_string("general.architecture");
  RAZORKV_CHECK(arch == "llama", kInvalidArgument, "tiny_llama::load: general.architecture \"",
                arch, "\" is not \"llama\"");
  const auto count = [&](const std::string& key) {
    const std::int64_t x = file.value(key).as_int(key);
    RAZORKV_CHECK(x >= 1 && x <= 1000000000, kInvalidArgument, "tiny_llama::load: ", key, " (", x,
                  ") must be a positive integer");
    return static_cast<index_t>(x);
  };
  model m;
  config& c = m.cfg_;
  c.num_layers = count("llama.block_count");
  c.d_model = count("llama.embedding_length");
  c.ffn_hidden = count("llama.feed_forward_length");
  c.num_q_heads = count("llama.attention.head_count");
  c.num_kv_heads = count("llama.attention.head_count_kv");
  c.max_context = count("llama.context_length");
  c.vocab_size = static_cast<index_t>(
      file.value("tokenizer.ggml.tokens").as_array("tokenizer.ggml.tokens").size());
  c.rope_theta = file.contains("llama.rope.freq_base")
                     ? file.value("llama.rope.freq_base").as_float("llama.rope.freq_base")
                     : 10000.0;
  c.norm_eps = static_cast<float>(file.value("llama.attention.layer_norm_rms_epsilon")
                                      .as_float("llama.attention.layer_norm_rms_epsilon"));
  c.rope = rope_pairs::kAdjacent;
  c.tied_embeddings = !file.has_tensor("output.weight");
  // Control tokens come first in the vocabulary (the probe draws only the ids after them).
  const auto& types = file.value("tokenizer.ggml.token_type").as_array("tokenizer.ggml.token_type");
  while (c.first_text_id < static_cast<index_t>(types.size()) &&
         types[static_cast<std::size_t>(c.first_text_id)].as_int("tokenizer.ggml.token_type") == 3)
    ++c.first_text_id;
  for (std::size_t i = static_cast<std::size_t>(c.first_text_id); i < types.size(); ++i) {
    RAZORKV_CHECK(types[i].as_int("tokenizer.ggml.token_type") != 3, kInvalidArgument,
                  "tiny_llama::load: control token ", i, " follows text tokens (ids ",
                  c.first_text_id, " on): the engine expects the control tokens first");
  }
  m.check_config("the GGUF file's llama.* metadata");
  const index_t d = c.d_model, hd = c.head_dim();
  if (file.contains("llama.rope.dimension_count")) {
    const index_t rotary = count("llama.rope.dimension_count");
    RAZORKV_CHECK(rotary == hd, kInvalidArgument, "tiny_llama::load: llama.rope.dimension_count (",
                  rotary, ") is not head_dim (", hd,
                  "): partial rotary embeddings are not supported");
  }
  // GGUF dims are innermost first: a weight of dims {in, out} is out rows of in, as PyTorch's.
  const auto matrix = [&](const std::string& name, index_t rows, index_t cols) {
    const std::vector<float> data = file.to_float(name, {cols, rows});
    return row_matrix(Eigen::Map<const row_matrix>(data.data(), rows, cols));
  };
  const auto vector = [&](const std::string& name, index_t n) {
    const std::vector<float> data = file.to_float(name, {n});
    return Eigen::VectorXf(Eigen::Map<const Eigen::VectorXf>(data.data(), n));
  };
  m.embed_ = matrix("token_embd.weight", c.vocab_size, d);
  if (!c.tied_embeddings) m.lm_head_ = matrix("output.weight", c.vocab_size, d);
  m.final_norm_ = vector("output_norm.weight", d);
  for (index_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    layer_weights w;
    w.attn_norm = vector(p + "attn_norm.weight", d);
    w.ffn_norm = vector(p + "ffn_norm.weight", d);
    w.wq = matrix(p + "attn_q.weight", c.num_q_heads * hd, d);
    w.wk = matrix(p + "attn_k.weight", c.num_kv_heads * hd, d);
    w.wv = matrix(p + "attn_v.weight", c.num_kv_heads * hd, d);
    w.wo = matrix(p + "attn_output.weight", d, c.num_q_heads * hd);
    w.w_gate = matrix(p + "ffn_gate.weight", c.ffn_hidden, d);
    w.w_up = matrix(p + "ffn_up.weight", c.ffn_hidden, d);
    w.w_down = matrix(p + "ffn_down.weight", d, c.ffn_hidden);
    m.layers_.push_back(std::move(w));
  }
  return m;
}

inline model model::load_safetensors(const std::string& path) {
  const razorkv::io::safetensors_file file = razorkv::io::safetensors_file::read(path);
  const auto meta = file.metadata().find("config");
  RAZORKV_CHECK(meta != file.metadata().end(), kInvalidArgument, "tiny_llama::load: \"", path,
                "\" has no \"config\" metadata");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(meta->second);
  } catch (const nlohmann::json::exception& e) {
    RAZORKV_CHECK(false, kParseError,
                  "tiny_llama::load: \"config\" metadata is not JSON: ", e.what());
  }
  RAZORKV_CHECK(j.is_object(), kParseError,
                "tiny_llama::load: \"config\" metadata is not an object");
  const auto number = [&](const char* key) {
    RAZORKV_CHECK(j.contains(key) && j.at(key).is_number(), kParseError,
                  "tiny_llama::load: config \"", key, "\" is missing or not a number in ",
                  meta->second);
    return j.at(key).get<double>();
  };
  const auto count = [&](const char* key) {
    const double x = number(key);
    RAZORKV_CHECK(x >= 1 && x <= 1e9 && x == static_cast<double>(static_cast<index_t>(x)),
                  kInvalidArgument, "tiny_llama::load: config \"", key, "\" (", x,
                  ") must be a positive integer");
    return static_cast<index_t>(x);
  };
  model m;
  config& c = m.cfg_;
  c.vocab_size = count("vocab_size");
  c.d_model = count("d_model");
  c.num_layers = count("num_layers");
  c.num_q_heads = count("num_q_heads");
  c.num_kv_heads = count("num_kv_heads");
  c.ffn_hidden = count("ffn_hidden");
  c.max_context = count("max_context");
  c.rope_theta = number("rope_theta");
  c.norm_eps = static_cast<float>(number("norm_eps"));
  m.check_config("config " + meta->second);
  const index_t d = c.d_model, hd = c.head_dim();
  const auto matrix = [&](const std::string& name, index_t rows, index_t cols) {
    const std::vector<float> data = file.to_float(name, {rows, cols});
    return row_matrix(Eigen::Map<const row_matrix>(data.data(), rows, cols));
  };
  const auto vector = [&](const std::string& name, index_t n) {
    const std::vector<float> data = file.to_float(name, {n});
    return Eigen::VectorXf(Eigen::Map<const Eigen::VectorXf>(data.data(), n));
  };
  m.embed_ = matrix("embed.weight", c.vocab_size, d);
  m.lm_head_ = matrix("lm_head.weight", c.vocab_size, d);
  m.final_norm_ = vector("norm.weight", d);
  for (index_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    layer_weights w;
    w.attn_norm = vector(p + "attn_norm.weight", d);
    w.ffn_norm = vector(p + "ffn_norm.weight", d);
    w.wq = matrix(p + "attn.wq.weight", c.num_q_heads * hd, d);
    w.wk = matrix(p + "attn.wk.weight", c.num_kv_heads * hd, d);
    w.wv = matrix(p + "attn.wv.weight", c.num_kv_heads * hd, d);
    w.wo = matrix(p + "attn.wo.weight", d, c.num_q_heads * hd);
    w.w_gate = matrix(p + "ffn.w_gate.weight", c.ffn_hidden, d);
    w.w_up = matrix(p + "ffn.w_up.weight", c.ffn_hidden, d);
    w.w_down = matrix(p + "ffn.w_down.weight", d, c.ffn_hidden);
    m.layers_.push_back(std::move(w));
  }
  return m;
}

inline row_matrix model::rms_norm(const row_matrix& x, const Eigen::VectorXf& w) const {
  row_matrix out(x.rows(), x.cols());
  for (index_t r = 0; r < x.rows(); ++r) {
    const float inv =
        1.0f / std::sqrt(x.row(r).squaredNorm() / static_cast<float>(x.cols()) + cfg_.norm_eps);
    out.row(r) = (x.row(r) * inv).cwiseProduct(w.transpose());
  }
  return out;
}

inline void model::rope(row_matrix& x, const std::vector<index_t>& positions) const {
  const index_t hd = cfg_.head_dim(), half = hd / 2, heads = x.cols() / hd;
  for (index_t r = 0; r < x.rows(); ++r) {
    for (index_t i = 0; i < half; ++i) {
      // The angle in double, as the reference computes it, then cos/sin rounded to float.
      const double angle =
          static_cast<double>(positions[static_cast<std::size_t>(r)]) *
          (1.0 / std::pow(cfg_.rope_theta, static_cast<double>(i) / static_cast<double>(half)));
      const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
      const index_t first = cfg_.rope == rope_pairs::kHalves ? i : 2 * i;
      const index_t second = cfg_.rope == rope_pairs::kHalves ? i + half : 2 * i + 1;
      for (index_t h = 0; h < heads; ++h) {
        float& a = x(r, h * hd + first);
        float& b = x(r, h * hd + second);
        const float x1 = a, x2 = b;
        a = x1 * c - x2 * s;
        b = x2 * c + x1 * s;
      }
    }
  }
}

inline row_matrix model::feed_forward(const layer_weights& w, const row_matrix& x) const {
  const row_matrix gate = linear(x, w.w_gate);
  const row_matrix up = linear(x, w.w_up);
  const row_matrix act = (gate.array() / (1.0f + (-gate.array()).exp()) * up.array()).matrix();
  return linear(act, w.w_down);
}

inline void model::project(const layer_weights& w, const row_matrix& h,
                           const std::vector<index_t>& positions, row_matrix& q, row_matrix& k,
                           row_matrix& v) const {
  q = linear(h, w.wq);
  k = linear(h, w.wk);
  v = linear(h, w.wv);
  rope(q, positions);
  rope(k, positions);
}

inline row_matrix model::output_logits(const row_matrix& x) const {
  const row_matrix& head = cfg_.tied_embeddings ? embed_ : lm_head_;
  return linear(rms_norm(x, final_norm_), head);
}

inline prefill_state model::prefill(const std::vector<int>& tokens, bool all_logits) const {
  const index_t n = static_cast<index_t>(tokens.size()), hd = cfg_.head_dim();
  RAZORKV_CHECK(n > 0 && n <= cfg_.max_context, kInvalidArgument, "tiny_llama::prefill: tokens (",
                n, ") outside [1, ", cfg_.max_context, "]");
  row_matrix x = embed(tokens, 0, n, "tiny_llama::prefill");
  std::vector<index_t> positions(static_cast<std::size_t>(n));
  for (index_t t = 0; t < n; ++t) positions[static_cast<std::size_t>(t)] = t;

  prefill_state state;
  state.tokens = n;
  row_matrix attn(n, cfg_.num_q_heads * hd);
  using kv_view = razorkv::layer_view<const float>;
  for (const layer_weights& w : layers_) {
    row_matrix q, k, v;
    project(w, rms_norm(x, w.attn_norm), positions, q, k, v);
    // Causal attention over the prompt: razorkv's prefill over a one-layer dense cache, the
    // tiled kernel an engine would call (the engine keeps q, k, v in its own buffers too).
    razorkv::dense_kv_cache<float> kv(1, cfg_.num_kv_heads, hd, n);
    kv.append(0, kv_view::nhd(k.data(), n, cfg_.num_kv_heads, hd),
              kv_view::nhd(v.data(), n, cfg_.num_kv_heads, hd));
    razorkv::prefill_attention(
        kv, 0, kv_view::nhd(q.data(), n, cfg_.num_q_heads, hd),
        razorkv::layer_view<float>::nhd(attn.data(), n, cfg_.num_q_heads, hd));
    x += linear(attn, w.wo);
    x += feed_forward(w, rms_norm(x, w.ffn_norm));
    state.queries.push_back(std::move(q));
    state.keys.push_back(std::move(k));
    state.values.push_back(std::move(v));
  }
  state.logits = all_logits ? output_logits(x) : output_logits(x.bottomRows(1));
  return state;
}

inline row_matrix model::embed(const std::vector<int>& tokens, index_t first, index_t count,
                               const char* where) const {
  row_matrix x(count, cfg_.d_model);
  for (index_t t = 0; t < count; ++t) {
    const int id = tokens[static_cast<std::size_t>(first + t)];
    RAZORKV_CHECK(id >= 0 && id < cfg_.vocab_size, kInvalidArgument, where, ": token ", first + t,
                  " (", id, ") outside [0, ", cfg_.vocab_size, ")");
    x.row(t) = embed_.row(id);
  }
  return x;
}

inline Eigen::VectorXf model::prefill_chunked(razorkv::razor_kv_cache<float>& cache,
                                              const std::vector<int>& tokens, index_t chunk) const {
  constexpr const char* kWhere = "tiny_llama::prefill_chunked";
  const index_t n = static_cast<index_t>(tokens.size()), hd = cfg_.head_dim();
  RAZORKV_CHECK(n > 0 && n <= cfg_.max_context, kInvalidArgument, kWhere, ": tokens (", n,
                ") outside [1, ", cfg_.max_context, "]");
  RAZORKV_CHECK(chunk > 0, kInvalidArgument, kWhere, ": chunk (", chunk, ") must be > 0");
  cache.plan().validate_against(shape());
  using kv_view = razorkv::layer_view<const float>;
  row_matrix x;
  for (index_t first = 0; first < n; first += chunk) {
    const index_t count = std::min(chunk, n - first);
    x = embed(tokens, first, count, kWhere);
    std::vector<index_t> positions(static_cast<std::size_t>(count));
    for (index_t t = 0; t < count; ++t) positions[static_cast<std::size_t>(t)] = first + t;
    row_matrix out(count, cfg_.num_q_heads * hd);
    for (index_t l = 0; l < cfg_.num_layers; ++l) {
      const layer_weights& w = layers_[static_cast<std::size_t>(l)];
      row_matrix q, k, v;
      project(w, rms_norm(x, w.attn_norm), positions, q, k, v);
      cache.compress_chunk(l, kv_view::nhd(k.data(), count, cfg_.num_kv_heads, hd),
                           kv_view::nhd(v.data(), count, cfg_.num_kv_heads, hd));
      razorkv::prefill_attention(
          cache, l, kv_view::nhd(q.data(), count, cfg_.num_q_heads, hd),
          razorkv::layer_view<float>::nhd(out.data(), count, cfg_.num_q_heads, hd));
      x += linear(out, w.wo);
      x += feed_forward(w, rms_norm(x, w.ffn_norm));
    }
  }
  return output_logits(x.bottomRows(1)).row(0).transpose();
}

inline razorkv::prompt_kv<float> model::prompt_of(const prefill_state& state, index_t queries,
                                                  index_t length) const {
  const index_t n = length < 0 ? state.tokens : length;
  RAZORKV_CHECK(n > 0 && n <= state.tokens, kInvalidArgument, "tiny_llama::prompt_of: length (", n,
                ") outside [1, ", state.tokens, "], the prefill's tokens");
  const index_t kept = queries < 0 ? n : queries;
  RAZORKV_CHECK(kept <= n, kInvalidArgument, "tiny_llama::prompt_of: queries (", kept,
                ") exceeds the prompt's ", n, " tokens");
  std::vector<razorkv::layer_sequence<float>> layers;
  for (index_t l = 0; l < cfg_.num_layers; ++l) {
    layers.push_back({state.query_view(l, cfg_.num_q_heads).middle_tokens(n - kept, kept),
                      state.key_view(l, cfg_.num_kv_heads).middle_tokens(0, n),
                      state.value_view(l, cfg_.num_kv_heads).middle_tokens(0, n)});
  }
  return razorkv::prompt_kv<float>(shape(), std::move(layers));
}

template <class Cache>
Eigen::VectorXf model::decode(Cache& cache, int token, index_t position) const {
  return decode_batch(std::vector<Cache*>{&cache}, {token}, {position}).row(0).transpose();
}

template <class Cache>
row_matrix model::decode_batch(const std::vector<Cache*>& caches, const std::vector<int>& tokens,
                               const std::vector<index_t>& positions) const {
  const index_t batch = static_cast<index_t>(caches.size()), hd = cfg_.head_dim();
  RAZORKV_CHECK(batch > 0 && tokens.size() == caches.size() && positions.size() == caches.size(),
                kShapeMismatch, "tiny_llama::decode_batch: ", caches.size(), " caches, ",
                tokens.size(), " tokens, ", positions.size(), " positions");
  row_matrix x(batch, cfg_.d_model);
  for (index_t b = 0; b < batch; ++b) {
    const int id = tokens[static_cast<std::size_t>(b)];
    const index_t position = positions[static_cast<std::size_t>(b)];
    RAZORKV_CHECK(id >= 0 && id < cfg_.vocab_size, kInvalidArgument,
                  "tiny_llama::decode_batch: tokens[", b, "] (", id, ") outside [0, ",
                  cfg_.vocab_size, ")");
    RAZORKV_CHECK(position >= 0 && position < cfg_.max_context, kInvalidArgument,
                  "tiny_llama::decode_batch: positions[", b, "] (", position, ") outside [0, ",
                  cfg_.max_context, ")");
    x.row(b) = embed_.row(id);
  }
  row_matrix out(batch, cfg_.num_q_heads * hd);
  // Caches that learn from decode (H2O) get each layer's attention weights from the decode call.
  std::vector<razorkv::attention_weights> weights(static_cast<std::size_t>(batch));
  std::vector<razorkv::attention_weights*> observed(static_cast<std::size_t>(batch), nullptr);
  for (std::size_t b = 0; b < caches.size(); ++b) {
    if (razorkv::observes_attention(*caches[b])) observed[b] = &weights[b];
  }
  for (index_t l = 0; l < cfg_.num_layers; ++l) {
    const layer_weights& w = layers_[static_cast<std::size_t>(l)];
    row_matrix q, k, v;
    project(w, rms_norm(x, w.attn_norm), positions, q, k, v);
    using kv_view = razorkv::layer_view<const float>;
    for (index_t b = 0; b < batch; ++b) {
      caches[static_cast<std::size_t>(b)]->append(
          l, kv_view::nhd(k.row(b).data(), 1, cfg_.num_kv_heads, hd),
          kv_view::nhd(v.row(b).data(), 1, cfg_.num_kv_heads, hd));
    }
    const auto queries = kv_view::nhd(q.data(), batch, cfg_.num_q_heads, hd);
    razorkv::decode_attention_batch(
        caches.data(), batch, l, queries,
        razorkv::layer_view<float>::nhd(out.data(), batch, cfg_.num_q_heads, hd), observed.data());
    for (std::size_t b = 0; b < caches.size(); ++b) {
      if (observed[b] != nullptr) razorkv::observe_decode(*caches[b], l, *observed[b]);
    }
    x += linear(out, w.wo);
    x += feed_forward(w, rms_norm(x, w.ffn_norm));
  }
  return output_logits(x);
}

}  // namespace tiny_llama

namespace tiny_llama {

/// razorkv's calibration probe for a model: 4 copies of P distinct ids (distinct ids make the
/// scorer's masks exact) drawn from the text tokens (control tokens left out), P the smaller of
/// the number of text ids and a quarter of the context. The byte model: its 256 ids x 4 = 1,024
/// tokens, half its context; SmolLM2: 2,048 x 4 = 8,192 tokens, its whole context (the paper's
/// 2,500 x 4 does not fit).
inline razorkv::probe_config probe_config_for(const config& c) {
  razorkv::probe_config p;
  p.num_random_tokens = std::min(c.vocab_size - c.first_text_id, c.max_context / 4);
  p.repeats = 4;
  p.min_id = c.first_text_id;
  p.max_id = c.vocab_size;
  p.seed = 0;
  return p;
}

/// Calibration through the library: prefill the probe, hand each layer's post-RoPE Q/K (the
/// engine's own buffers, read in place) to razorkv's streaming scorer.
inline razorkv::head_scores score_heads(const model& m, const razorkv::probe& probe) {
  std::vector<int> tokens(probe.tokens().begin(), probe.tokens().end());
  const prefill_state state = m.prefill(tokens, false);
  const config& c = m.cfg();
  razorkv::head_scores scores(c.num_layers, c.num_q_heads, c.num_kv_heads);
  for (index_t l = 0; l < c.num_layers; ++l) {
    scores.set_layer(l, razorkv::score_from_queries_keys(probe, state.query_view(l, c.num_q_heads),
                                                         state.key_view(l, c.num_kv_heads)));
  }
  return scores;
}

}  // namespace tiny_llama
