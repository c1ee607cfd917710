// razorkv/python/module.cpp: the C++ side of `import razorkv` (pybind11): calibration (probe,
// scorers, selection, plans and their files, the memory calculator), the RazorAttention cache,
// the baseline policies, paged K/V read in place, and GGUF model files. razorkv/__init__.py wraps
// it; arrays arrive here as numpy arrays.
#include <razorkv/io/gguf.hpp>
#include <razorkv/io/json.hpp>
#include <razorkv/io/plan_files.hpp>
#include <razorkv/razorkv.hpp>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace py = pybind11;
using razorkv::index_t;

namespace {

// ---- arrays in ----------------------------------------------------------------------------------

// The storage dtype of a numpy array: float32, float64 and float16 by their numpy dtype;
// bfloat16 (which numpy lacks) as 16-bit integers that the Python layer declares as "bfloat16".
razorkv::dtype storage_dtype(const py::array& a, const std::string& declared, const char* name) {
  const py::dtype d = a.dtype();
  const char kind = d.kind();
  const auto size = d.itemsize();
  // razorkv reads elements in the machine's byte order; a swapped array would read as other
  // numbers, silently.
  const std::string order = d.attr("byteorder").cast<std::string>();
  const std::uint16_t probe = 1;
  const bool little = *reinterpret_cast<const unsigned char*>(&probe) == 1;
  RAZORKV_CHECK(order == "=" || order == "|" || order == (little ? "<" : ">"), kInvalidArgument,
                name, ": dtype ", d.attr("str").cast<std::string>(), " is ",
                order == ">" ? "big" : "little", "-endian, not this machine's byte order; ",
                "convert it first (a.astype(a.dtype.newbyteorder('=')))");
  if (declared == "bfloat16") {
    RAZORKV_CHECK((kind == 'i' || kind == 'u') && size == 2, kInvalidArgument, name,
                  ": a bfloat16 array must be carried as 16-bit integers, got ",
                  d.attr("name").cast<std::string>());
    return razorkv::dtype::kBFloat16;
  }
  RAZORKV_CHECK(declared.empty(), kInvalidArgument, name, ": unknown dtype '", declared,
                "' (expected bfloat16 or none)");
  if (kind == 'f' && size == 4) return razorkv::dtype::kFloat32;
  if (kind == 'f' && size == 8) return razorkv::dtype::kFloat64;
  if (kind == 'f' && size == 2) return razorkv::dtype::kFloat16;
  RAZORKV_CHECK(false, kInvalidArgument, name, ": dtype ", d.attr("name").cast<std::string>(),
                " is not a storage dtype (float32, float64, float16 or bfloat16)");
  return razorkv::dtype::kFloat32;
}

// Calls f(static_cast<T*>(nullptr)) with T the C++ type of `type`.
template <class F>
decltype(auto) with_type(razorkv::dtype type, F&& f) {
  switch (type) {
    case razorkv::dtype::kFloat32:
      return f(static_cast<float*>(nullptr));
    case razorkv::dtype::kFloat64:
      return f(static_cast<double*>(nullptr));
    case razorkv::dtype::kFloat16:
      return f(static_cast<Eigen::half*>(nullptr));
    case razorkv::dtype::kBFloat16:
      break;
  }
  return f(static_cast<Eigen::bfloat16*>(nullptr));
}

const char* numpy_name(razorkv::dtype type) noexcept;

// A numpy array seen as razorkv's views: in place when its last axis is contiguous and every
// stride is a non-negative multiple of the element size, else a C-contiguous copy that this
// object keeps alive.
class array_in {
 public:
  array_in(py::array a, const std::string& declared, const char* name, py::ssize_t ndim)
      : type_(storage_dtype(a, declared, name)), name_(name) {
    RAZORKV_CHECK(a.ndim() == ndim, kShapeMismatch, name, " must have ", ndim, " dimensions, has ",
                  a.ndim());
    const auto item = a.itemsize();
    bool in_place = a.shape(ndim - 1) <= 1 || a.strides(ndim - 1) == item;
    for (py::ssize_t i = 0; i < ndim; ++i)
      in_place = in_place && a.strides(i) >= 0 && a.strides(i) % item == 0;
    array_ =
        in_place ? std::move(a) : py::array::ensure(a, py::array::c_style | py::array::forcecast);
  }

  razorkv::dtype type() const noexcept { return type_; }
  index_t extent(py::ssize_t i) const { return static_cast<index_t>(array_.shape(i)); }
  index_t stride(py::ssize_t i) const {
    return static_cast<index_t>(array_.strides(i) / array_.itemsize());
  }

  template <class T>
  const T* data() const {
    return static_cast<const T*>(array_.data());
  }
  // [tokens, heads, head_dim] of a 3-D array.
  template <class T>
  razorkv::layer_view<const T> layer() const {
    return razorkv::layer_view<const T>(data<T>(), extent(0), extent(1), extent(2), stride(0),
                                        stride(1));
  }
  razorkv::any_layer_view any_layer() const {
    return with_type(type_, [&](auto* tag) -> razorkv::any_layer_view {
      using T = std::remove_pointer_t<decltype(tag)>;
      return layer<T>();
    });
  }
  // layer<T>() for a cache that stores T: another dtype is an error in numpy's names (the C++
  // check's message names C++ types, which a Python user does not write).
  template <class T>
  razorkv::layer_view<const T> layer_for(const char* where) const {
    RAZORKV_CHECK(type_ == razorkv::dtype_of<T>(), kInvalidArgument, where, ": ", name_,
                  " has dtype ", numpy_name(type_), ", expected ",
                  numpy_name(razorkv::dtype_of<T>()), " (the cache's dtype)");
    return layer<T>();
  }

 private:
  razorkv::dtype type_;
  const char* name_;  // a string literal: the argument's name in messages
  py::array array_;
};

// The Python-side name of a storage dtype (numpy's, and "bfloat16").
const char* numpy_name(razorkv::dtype type) noexcept {
  switch (type) {
    case razorkv::dtype::kFloat32:
      return "float32";
    case razorkv::dtype::kFloat64:
      return "float64";
    case razorkv::dtype::kFloat16:
      return "float16";
    case razorkv::dtype::kBFloat16:
      break;
  }
  return "bfloat16";
}

// The enum value whose name (by the library's own naming function) is `name`; anything else is
// an error naming `what`, the value and every accepted name.
template <class E, std::size_t N>
E from_name(const std::string& name, const char* what, const E (&values)[N],
            const char* (*name_of)(E) noexcept) {
  std::string accepted;
  for (const E value : values) {
    if (name == name_of(value)) return value;
    accepted += std::string(accepted.empty() ? "'" : ", '") + name_of(value) + "'";
  }
  RAZORKV_CHECK(false, kInvalidArgument, what, " ('", name, "') must be one of ", accepted);
  return values[0];
}

razorkv::gqa_aggregation parse_aggregation(const std::string& name) {
  return from_name(name, "gqa", razorkv::kGqaAggregations, &razorkv::gqa_aggregation_name);
}

razorkv::compensation_mode parse_compensation(const std::string& name) {
  using razorkv::compensation_mode;
  constexpr compensation_mode kAll[] = {compensation_mode::kWeighted,
                                        compensation_mode::kUnweighted, compensation_mode::kNone};
  return from_name(name, "compensation", kAll, &razorkv::compensation_mode_name);
}

razorkv::decode_mode parse_decode(const std::string& name) {
  constexpr razorkv::decode_mode kAll[] = {razorkv::decode_mode::kAppend,
                                           razorkv::decode_mode::kBounded};
  return from_name(name, "decode", kAll, &razorkv::decode_mode_name);
}

razorkv::dtype parse_dtype(const std::string& name) {
  using razorkv::dtype;
  constexpr dtype kAll[] = {dtype::kFloat32, dtype::kFloat64, dtype::kFloat16, dtype::kBFloat16};
  return from_name(name, "dtype", kAll, &numpy_name);
}

razorkv::model_shape shape_from(const py::tuple& t) {
  RAZORKV_CHECK(t.size() == 4, kInvalidArgument, "shape must be (num_layers, num_query_heads, ",
                "num_kv_heads, head_dim), has ", t.size(), " entries");
  return {t[0].cast<index_t>(), t[1].cast<index_t>(), t[2].cast<index_t>(), t[3].cast<index_t>()};
}

py::tuple shape_to(const razorkv::model_shape& s) {
  return py::make_tuple(s.num_layers, s.num_query_heads, s.num_kv_heads, s.head_dim);
}

// ---- scoring ------------------------------------------------------------------------------------

py::tuple to_python(const razorkv::layer_scores& s) {
  return py::make_tuple(
      py::array_t<double>(static_cast<py::ssize_t>(s.echo.size()), s.echo.data()),
      py::array_t<double>(static_cast<py::ssize_t>(s.induction.size()), s.induction.data()));
}

py::tuple score_queries_keys(const razorkv::probe& probe, py::array queries,
                             const std::string& queries_dtype, py::array keys,
                             const std::string& keys_dtype, std::optional<double> scale,
                             std::vector<double> alibi_slopes, index_t row_step) {
  const array_in q(std::move(queries), queries_dtype, "queries", 3);
  const array_in k(std::move(keys), keys_dtype, "keys", 3);
  RAZORKV_CHECK(q.type() == k.type(), kInvalidArgument, "score_queries_keys: queries are ",
                razorkv::dtype_name(q.type()), ", keys ", razorkv::dtype_name(k.type()),
                "; give both in one dtype");
  razorkv::qk_scoring_options options;
  options.scale = scale;
  options.alibi_slopes = std::move(alibi_slopes);
  options.row_step = row_step;
  const razorkv::layer_scores scores = [&] {
    py::gil_scoped_release unlocked;  // the arrays stay referenced by q and k
    return with_type(q.type(), [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      return razorkv::score_from_queries_keys(probe, q.layer<T>(), k.layer<T>(), options);
    });
  }();
  return to_python(scores);
}

py::tuple score_probabilities(const razorkv::probe& probe, py::array probabilities,
                              const std::string& dtype, double row_sum_tolerance,
                              index_t row_step) {
  py::array contiguous = py::array::ensure(probabilities, py::array::c_style);
  RAZORKV_CHECK(contiguous, kInvalidArgument, "probabilities: not an array");
  const array_in p(contiguous, dtype, "probabilities", 3);
  RAZORKV_CHECK(p.extent(1) == p.extent(2), kShapeMismatch,
                "probabilities must be [heads, L, L], is [", p.extent(0), ", ", p.extent(1), ", ",
                p.extent(2), "]");
  razorkv::scoring_options options;
  options.row_sum_tolerance = row_sum_tolerance;
  options.row_step = row_step;
  const razorkv::layer_scores scores = [&] {
    py::gil_scoped_release unlocked;
    return with_type(p.type(), [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      return razorkv::score_from_probabilities(probe, p.data<T>(), p.extent(0), p.extent(1),
                                               options);
    });
  }();
  return to_python(scores);
}

py::array_t<double> score_table(const razorkv::head_scores& s, bool induction) {
  py::array_t<double> out({s.num_layers(), s.num_query_heads()});
  auto cells = out.mutable_unchecked<2>();
  for (index_t l = 0; l < s.num_layers(); ++l) {
    for (index_t h = 0; h < s.num_query_heads(); ++h)
      cells(l, h) = induction ? s.induction(l, h) : s.echo(l, h);
  }
  return out;
}

// ---- caches -------------------------------------------------------------------------------------

// Decode (one query per query head, [heads, head_dim]) or prefill attention (a chunk of queries,
// [tokens, heads, head_dim]) over any source; queries are float32, the result is float32.
// check_finite is the C++ checked mode: a NaN or infinity in the queries or the layer's K/V is
// an error naming it, not an output of NaN.
template <class Source>
py::array_t<float> attend_source(const Source& source, index_t layer, py::array_t<float> queries,
                                 std::optional<double> scale, bool check_finite,
                                 razorkv::attention_weights* weights) {
  const array_in q(queries, "", "queries", queries.ndim() == 2 ? 2 : 3);
  razorkv::attention_options options;
  options.scale = scale;
  options.check_finite = check_finite;
  if (queries.ndim() == 2) {
    const razorkv::matrix_view<const float> view(q.data<float>(), q.extent(0), q.extent(1),
                                                 q.stride(0));
    py::array_t<float> out({q.extent(0), q.extent(1)});
    const razorkv::matrix_view<float> out_view(out.mutable_data(), q.extent(0), q.extent(1));
    py::gil_scoped_release unlocked;
    if (weights != nullptr) {
      razorkv::decode_attention(source, layer, view, out_view, *weights, options);
    } else {
      razorkv::decode_attention(source, layer, view, out_view, options);
    }
    return out;
  }
  py::array_t<float> out({q.extent(0), q.extent(1), q.extent(2)});
  const auto out_view =
      razorkv::layer_view<float>::nhd(out.mutable_data(), q.extent(0), q.extent(1), q.extent(2));
  py::gil_scoped_release unlocked;
  razorkv::prefill_attention(source, layer, q.layer<float>(), out_view, options);
  return out;
}

// ---- paged K/V ---------------------------------------------------------------------------------

// One layer's K or V page pool as razorkv's pool view, in place: [num_pages, page_size, kv heads,
// head_dim] ("nhd") or [num_pages, kv heads, page_size, head_dim] ("hnd"), any non-negative
// strides that are whole elements, the last axis contiguous. A pool is never copied (it is the
// engine's memory, and may be gigabytes), so a layout it cannot be read in is an error.
template <class T>
razorkv::page_pool_view<const T> pool_view(const py::array& a, bool hnd, const char* name,
                                           std::size_t layer) {
  RAZORKV_CHECK(a.ndim() == 4, kShapeMismatch, name, "[", layer, "] must have 4 dimensions (",
                hnd ? "[num_pages, kv heads, page_size, head_dim]"
                    : "[num_pages, page_size, kv heads, head_dim]",
                "), has ", a.ndim());
  const auto item = a.itemsize();
  index_t strides[4];
  for (py::ssize_t i = 0; i < 4; ++i) {
    RAZORKV_CHECK(a.strides(i) >= 0 && a.strides(i) % item == 0, kInvalidArgument, name, "[", layer,
                  "]: stride ", i, " (", a.strides(i), " bytes) is not a non-negative ",
                  "multiple of the element size (", item, " bytes); pools are read in place");
    strides[i] = static_cast<index_t>(a.strides(i) / item);
  }
  RAZORKV_CHECK(a.shape(3) <= 1 || strides[3] == 1, kInvalidArgument, name, "[", layer,
                "]: the last axis (head_dim) must be contiguous, has stride ", strides[3],
                " elements; pools are read in place, never copied");
  const auto extent = [&a](int i) { return static_cast<index_t>(a.shape(i)); };
  const int token_axis = hnd ? 2 : 1, head_axis = hnd ? 1 : 2;
  return razorkv::page_pool_view<const T>(static_cast<const T*>(a.data()), extent(0),
                                          extent(token_axis), extent(head_axis), extent(3),
                                          strides[0], strides[token_axis], strides[head_axis]);
}

// A sequence's page table as int32 (what paged_kv_view reads): any integer array, every value
// checked to fit (the view then checks each against the pools).
std::vector<std::int32_t> page_table_from(const py::array& table) {
  RAZORKV_CHECK(table.ndim() == 1, kShapeMismatch, "page_table must have 1 dimension, has ",
                table.ndim());
  const char kind = table.dtype().kind();
  RAZORKV_CHECK(kind == 'i' || kind == 'u', kInvalidArgument,
                "page_table must hold integers, holds ",
                table.dtype().attr("name").cast<std::string>());
  const py::array_t<std::int64_t> wide = py::array_t<std::int64_t>::ensure(table);
  RAZORKV_CHECK(wide, kInvalidArgument, "page_table: not readable as 64-bit integers");
  const auto values = wide.unchecked<1>();
  std::vector<std::int32_t> pages(static_cast<std::size_t>(values.shape(0)));
  for (py::ssize_t i = 0; i < values.shape(0); ++i) {
    RAZORKV_CHECK(values(i) >= 0 && values(i) <= std::numeric_limits<std::int32_t>::max(),
                  kOutOfRange, "page_table[", i, "] (", values(i),
                  ") is not a page index (0 to 2^31 - 1)");
    pages[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(values(i));
  }
  return pages;
}

// One sequence's K/V in an engine's page pools, read in place (razorkv::paged_kv_view): the pools
// (one K and one V array per layer, all of one storage dtype), which this object keeps alive,
// and its own copy of the page table.
class py_paged {
 public:
  py_paged(std::vector<py::array> key_pools, std::vector<py::array> value_pools,
           const std::string& declared, const py::array& page_table, index_t num_tokens,
           const std::string& layout)
      : key_arrays_(std::move(key_pools)),
        value_arrays_(std::move(value_pools)),
        page_table_(page_table_from(page_table)) {
    RAZORKV_CHECK(layout == "nhd" || layout == "hnd", kInvalidArgument, "layout ('", layout,
                  "') must be 'nhd' or 'hnd'");
    RAZORKV_CHECK(!key_arrays_.empty() && key_arrays_.size() == value_arrays_.size(),
                  kShapeMismatch, "PagedKV: ", key_arrays_.size(), " key pools and ",
                  value_arrays_.size(), " value pools; give one of each per layer");
    const razorkv::dtype type = storage_dtype(key_arrays_[0], declared, "key_pools");
    for (std::size_t l = 0; l < key_arrays_.size(); ++l) {
      for (const auto* pools : {&key_arrays_, &value_arrays_}) {
        const char* name = pools == &key_arrays_ ? "key_pools" : "value_pools";
        const razorkv::dtype pool_type = storage_dtype((*pools)[l], declared, name);
        RAZORKV_CHECK(pool_type == type, kInvalidArgument, name, "[", l, "] is ",
                      numpy_name(pool_type), ", key_pools[0] ", numpy_name(type),
                      "; every pool must hold one dtype");
      }
    }
    const bool hnd = layout == "hnd";
    view_ = with_type(type, [&](auto* tag) -> view_variant {
      using T = std::remove_pointer_t<decltype(tag)>;
      auto typed = std::make_unique<typed_view<T>>();
      for (std::size_t l = 0; l < key_arrays_.size(); ++l) {
        typed->keys.push_back(pool_view<T>(key_arrays_[l], hnd, "key_pools", l));
        typed->values.push_back(pool_view<T>(value_arrays_[l], hnd, "value_pools", l));
      }
      typed->view.emplace(typed->keys.data(), typed->values.data(),
                          static_cast<index_t>(typed->keys.size()), page_table_.data(),
                          static_cast<index_t>(page_table_.size()), num_tokens);
      return typed;
    });
  }

  /// f(const razorkv::paged_kv_view<T>&).
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit([&](const auto& typed) -> decltype(auto) { return f(*typed->view); }, view_);
  }

  std::string dtype() const {
    return visit([](const auto& view) {
      using T = typename std::decay_t<decltype(view)>::value_type;
      return numpy_name(razorkv::dtype_of<T>());
    });
  }
  py::tuple shape() const {
    return visit([](const auto& view) {
      return py::make_tuple(view.num_layers(), view.num_kv_heads(), view.head_dim());
    });
  }
  index_t num_tokens() const {
    return visit([](const auto& view) { return view.num_tokens(); });
  }
  index_t page_size() const {
    return visit([](const auto& view) { return view.page_size(); });
  }
  py::array_t<float> attend(index_t layer, py::array_t<float> queries, std::optional<double> scale,
                            bool check_finite) const {
    return visit([&](const auto& view) {
      return attend_source(view, layer, queries, scale, check_finite, nullptr);
    });
  }

 private:
  // The pool views live on the heap, where the paged_kv_view points, so that a move of this
  // object leaves the view valid.
  template <class T>
  struct typed_view {
    std::vector<razorkv::page_pool_view<const T>> keys, values;
    std::optional<razorkv::paged_kv_view<T>> view;
  };
  using view_variant =
      std::variant<std::unique_ptr<typed_view<float>>, std::unique_ptr<typed_view<double>>,
                   std::unique_ptr<typed_view<Eigen::half>>,
                   std::unique_ptr<typed_view<Eigen::bfloat16>>>;

  std::vector<py::array> key_arrays_, value_arrays_;  // kept alive: the views read them
  std::vector<std::int32_t> page_table_;
  view_variant view_;
};

template <class T>
using any_cache_t = razorkv::any_kv_cache<T>;

// A cache of any storage dtype behind one Python class: the baselines' caches (any_kv_cache) or
// the RazorAttention cache (razor_kv_cache), chosen by the template.
template <template <class> class Cache>
class py_cache {
 public:
  using variant =
      std::variant<Cache<float>, Cache<double>, Cache<Eigen::half>, Cache<Eigen::bfloat16>>;
  explicit py_cache(variant cache) : cache_(std::move(cache)) {}

  /// f(the cache), alone: every call on one cache runs while no other thread's call on it does
  /// (the binding releases the GIL inside the long ones, and a release or append beside a decode
  /// would free what the decode reads).
  template <class F>
  decltype(auto) visit(F&& f) {
    const auto lock = lock_cache();
    return std::visit(std::forward<F>(f), cache_);
  }
  template <class F>
  decltype(auto) visit(F&& f) const {
    const auto lock = lock_cache();
    return std::visit(std::forward<F>(f), cache_);
  }

  std::string dtype() const {
    return visit([](const auto& c) {
      using T = typename std::decay_t<decltype(c)>::value_type;
      return numpy_name(razorkv::dtype_of<T>());
    });
  }

  void append(index_t layer, py::array keys, const std::string& keys_dtype, py::array values,
              const std::string& values_dtype) {
    const array_in k(std::move(keys), keys_dtype, "keys", 3);
    const array_in v(std::move(values), values_dtype, "values", 3);
    visit([&](auto& c) {
      using T = typename std::decay_t<decltype(c)>::value_type;
      const auto keys_view = k.template layer_for<T>("append");  // keys named first
      c.append(layer, keys_view, v.template layer_for<T>("append"));
    });
  }

  // Decode or prefill attention; a cache that learns from decode (H2O) observes the step.
  py::array_t<float> attend(index_t layer, py::array_t<float> queries, std::optional<double> scale,
                            bool check_finite) {
    return visit([&](auto& c) {
      if constexpr (std::is_same_v<Cache<float>, razorkv::any_kv_cache<float>>) {
        if (queries.ndim() == 2 && c.observes_attention()) {
          razorkv::attention_weights weights;
          py::array_t<float> out = attend_source(c, layer, queries, scale, check_finite, &weights);
          c.observe(layer, weights);
          return out;
        }
      }
      return attend_source(c, layer, queries, scale, check_finite, nullptr);
    });
  }

  index_t entries(index_t layer, index_t kv_head) const {
    return visit([&](const auto& c) { return c.entries(layer, kv_head); });
  }
  index_t kv_bytes() const {
    return visit([](const auto& c) { return c.kv_bytes(); });
  }
  index_t allocated_bytes() const {
    return visit([](const auto& c) { return c.allocated_bytes(); });
  }
  index_t max_new_tokens(index_t layer) const {
    return visit([&](const auto& c) { return c.max_new_tokens(layer); });
  }
  py::tuple shape() const {
    return visit([](const auto& c) {
      return py::make_tuple(c.num_layers(), c.num_kv_heads(), c.head_dim());
    });
  }

 private:
  // Waits for the cache with the GIL released when this thread holds it: the thread inside
  // may need the GIL to finish its call.
  std::unique_lock<std::recursive_mutex> lock_cache() const {
    std::unique_lock<std::recursive_mutex> lock(*mutex_, std::try_to_lock);
    if (!lock.owns_lock()) {
      if (PyGILState_Check() != 0) {
        py::gil_scoped_release unlocked;
        lock.lock();
      } else {
        lock.lock();
      }
    }
    return lock;
  }

  variant cache_;
  // On the heap, so that the cache moves (the binding returns it by value).
  std::unique_ptr<std::recursive_mutex> mutex_ = std::make_unique<std::recursive_mutex>();
};

using baseline_cache = py_cache<any_cache_t>;
using razor_cache = py_cache<razorkv::razor_kv_cache>;

razor_cache make_razor_cache(const razorkv::head_plan& plan, const std::string& dtype,
                             const razorkv::razor_config& config,
                             razorkv::huge_page_resource* resource) {
  return with_type(parse_dtype(dtype), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return razor_cache(razorkv::razor_kv_cache<T>(plan, config, resource));
  });
}

// A HugePageResource: every block it maps is kept mapped for the next cache while they total at
// most keep_bytes (an engine's long-lived KV pool), blocks under min_bytes come from the heap.
std::unique_ptr<razorkv::huge_page_resource> make_huge_page_resource(index_t min_bytes,
                                                                     index_t keep_bytes) {
  RAZORKV_CHECK(min_bytes > 0, kInvalidArgument, "HugePageResource: min_bytes (", min_bytes,
                ") must be > 0");
  RAZORKV_CHECK(keep_bytes >= 0, kInvalidArgument, "HugePageResource: keep_bytes (", keep_bytes,
                ") must be >= 0");
  return std::make_unique<razorkv::huge_page_resource>(nullptr, static_cast<std::size_t>(min_bytes),
                                                       static_cast<std::size_t>(keep_bytes));
}

// A row storage by its Python name: None (rows of the cache's dtype), "q8" or "q4" for keys and
// values alike, keys rotated when `rotate`.
razorkv::kv_storage parse_storage(const std::optional<std::string>& name, bool rotate,
                                  const char* what) {
  razorkv::kv_storage storage;
  storage.rotate_keys = rotate;
  if (!name) return storage;
  constexpr razorkv::row_format kAll[] = {razorkv::row_format::kQ8, razorkv::row_format::kQ4};
  const razorkv::row_format format = from_name(*name, what, kAll, &razorkv::row_format_name);
  storage.keys = storage.values = format;
  return storage;
}

razorkv::razor_config make_razor_config(index_t sinks, index_t s0, double c, index_t fixed_window,
                                        const std::string& compensation, const std::string& decode,
                                        bool check_finite,
                                        const std::optional<std::string>& storage, bool rotate_keys,
                                        const std::optional<std::string>& retrieval_storage) {
  razorkv::razor_config config;
  config.storage = parse_storage(storage, rotate_keys, "storage");
  if (retrieval_storage)
    config.retrieval_storage = parse_storage(retrieval_storage, rotate_keys, "retrieval_storage");
  config.sinks = sinks;
  config.s0 = s0;
  config.c = c;
  config.fixed_window = fixed_window;
  config.compensation = parse_compensation(compensation);
  config.decode = parse_decode(decode);
  config.check_finite = check_finite;
  razorkv::check_config(config, "RazorConfig");
  return config;
}

// A policy's cache of a prompt given as per-layer arrays (keys and values [N, kv heads, dim],
// queries [Nq, query heads, dim] or none), all of one dtype, read in place.
baseline_cache compress_prompt(const razorkv::policy& policy, const razorkv::model_shape& shape,
                               const std::vector<py::array>& keys,
                               const std::vector<py::array>& values,
                               const std::vector<py::array>& queries, const std::string& dtype,
                               index_t budget_entries, razorkv::huge_page_resource* resource) {
  RAZORKV_CHECK(keys.size() == values.size() && (queries.empty() || queries.size() == keys.size()),
                kShapeMismatch, "compress: ", keys.size(), " key, ", values.size(), " value and ",
                queries.size(), " query layers given; they must be equal (queries may be none)");
  std::vector<array_in> k, v, q;
  for (std::size_t l = 0; l < keys.size(); ++l) {
    k.emplace_back(keys[l], dtype, "keys", 3);
    v.emplace_back(values[l], dtype, "values", 3);
    if (!queries.empty()) q.emplace_back(queries[l], dtype, "queries", 3);
  }
  const razorkv::dtype type = k.empty() ? razorkv::dtype::kFloat32 : k.front().type();
  return with_type(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    std::vector<razorkv::layer_sequence<T>> layers;
    for (std::size_t l = 0; l < k.size(); ++l) {
      razorkv::layer_sequence<T> s;
      s.keys = k[l].template layer_for<T>("compress");
      s.values = v[l].template layer_for<T>("compress");
      if (!q.empty()) s.queries = q[l].template layer_for<T>("compress");
      layers.push_back(s);
    }
    razorkv::prompt_kv<T> prompt(shape, std::move(layers));
    prompt.cache_resource = resource;
    py::gil_scoped_release unlocked;
    return baseline_cache(policy.compress(prompt, budget_entries));
  });
}

// ---- GGUF files --------------------------------------------------------------------------------

// A metadata value as the Python value it stands for: int, float, bool, str or a list of them.
py::object gguf_to_python(const razorkv::io::gguf_value& v, const std::string& key) {
  using razorkv::io::gguf_value_type;
  switch (v.type()) {
    case gguf_value_type::kFloat32:
    case gguf_value_type::kFloat64:
      return py::float_(v.as_float(key));
    case gguf_value_type::kBool:
      return py::bool_(v.as_bool(key));
    case gguf_value_type::kString:
      // Bytes that are not UTF-8 are kept, escaped, rather than failing the whole read.
      return py::reinterpret_steal<py::object>(PyUnicode_DecodeUTF8(
          v.as_string(key).data(), static_cast<py::ssize_t>(v.as_string(key).size()),
          "surrogateescape"));
    case gguf_value_type::kArray: {
      py::list out;
      for (const razorkv::io::gguf_value& e : v.as_array(key)) out.append(gguf_to_python(e, key));
      return std::move(out);
    }
    case gguf_value_type::kUint64:
      return py::reinterpret_steal<py::object>(PyLong_FromUnsignedLongLong(
          static_cast<unsigned long long>(v.as_int(key) < 0 ? 0 : v.as_int(key))));
    default:
      return py::int_(v.as_int(key));
  }
}

// A tensor dequantised to float32, shaped as PyTorch holds it (GGUF's dims reversed).
py::array_t<float> gguf_tensor_array(const razorkv::io::gguf_file& f, const std::string& name) {
  const razorkv::io::gguf_tensor& t = f.tensor(name);
  std::vector<float> values;
  {
    py::gil_scoped_release unlocked;
    values = f.to_float(name, t.dims);
  }
  std::vector<py::ssize_t> shape(t.dims.rbegin(), t.dims.rend());
  auto* owner = new std::vector<float>(std::move(values));
  py::capsule free_owner(owner, [](void* p) { delete static_cast<std::vector<float>*>(p); });
  return py::array_t<float>(shape, owner->data(), free_owner);
}

}  // namespace

PYBIND11_MODULE(_razorkv, m) {
  m.doc() = "razorkv: RazorAttention KV-cache compression (C++ core; see the razorkv package)";
  m.attr("__version__") = std::to_string(RAZORKV_VERSION_MAJOR) + "." +
                          std::to_string(RAZORKV_VERSION_MINOR) + "." +
                          std::to_string(RAZORKV_VERSION_PATCH);

  // razorkv's errors arrive as razorkv.Error (a ValueError) carrying razorkv's message.
  py::register_exception<razorkv::error>(m, "Error", PyExc_ValueError);

  py::class_<razorkv::probe>(
      m, "Probe", R"doc(The calibration probe: `period` random token ids repeated `repeats` times.

Run the model on probe.tokens; echo heads attend to the earlier copy of the current token,
induction heads to the token after it. Probe(period=2500, repeats=4, *, vocab_max,
vocab_min=0, bos=None, seed=0, allow_duplicates=False): ids drawn from [vocab_min,
vocab_max), without repeats within a period unless allow_duplicates; bos, when given, is
prepended. A bad field is a razorkv.Error naming it.)doc")
      .def(py::init([](index_t period, index_t repeats, std::int64_t vocab_max,
                       std::int64_t vocab_min, std::optional<std::int64_t> bos, std::uint64_t seed,
                       bool allow_duplicates) {
             razorkv::probe_config c;
             c.num_random_tokens = period;
             c.repeats = repeats;
             c.max_id = vocab_max;
             c.min_id = vocab_min;
             c.bos_id = bos;
             c.seed = seed;
             c.allow_duplicates = allow_duplicates;
             return razorkv::probe(c);
           }),
           py::arg("period") = 2500, py::arg("repeats") = 4, py::kw_only(), py::arg("vocab_max"),
           py::arg("vocab_min") = 0, py::arg("bos") = std::nullopt, py::arg("seed") = 0,
           py::arg("allow_duplicates") = false,
           "Draws the probe's ids (see the class); period and repeats at least 1.")
      .def_static(
          "from_tokens",
          [](std::vector<std::int64_t> tokens, index_t period, index_t repeats, bool has_bos) {
            return razorkv::probe(std::move(tokens), period, repeats, has_bos);
          },
          py::arg("tokens"), py::arg("period"), py::arg("repeats"), py::arg("has_bos") = false,
          "A probe the engine already has (e.g. read back from probe.npy): tokens must be "
          "[bos,] then `repeats` identical copies of `period` ids; a mismatch names the first "
          "position that differs.")
      .def_property_readonly(
          "tokens",
          [](const razorkv::probe& p) {
            return py::array_t<std::int64_t>(static_cast<py::ssize_t>(p.tokens().size()),
                                             p.tokens().data());
          },
          "The ids to run the model on, int64 [len(probe)] (a copy).")
      .def_property_readonly("period", &razorkv::probe::num_random_tokens,
                             "Random ids per copy (P).")
      .def_property_readonly("repeats", &razorkv::probe::repeats, "Copies of the period (R).")
      .def_property_readonly("has_bos", &razorkv::probe::has_bos,
                             "Whether tokens[0] is a BOS id before the copies.")
      .def("__len__", &razorkv::probe::length, "Tokens in all: P * R, plus one with a BOS.");

  m.def("_score_queries_keys", &score_queries_keys);
  m.def("_score_probabilities", &score_probabilities);

  py::class_<razorkv::head_scores>(
      m, "HeadScores", R"doc(Echo and induction scores of every query head, layer by layer.

HeadScores(num_layers, num_query_heads, num_kv_heads) is empty; set_layer fills one layer.
razorkv.torch.score_heads and load_scores return filled ones; select reads them.)doc")
      .def(py::init<index_t, index_t, index_t>(), py::arg("num_layers"), py::arg("num_query_heads"),
           py::arg("num_kv_heads"), "Empty scores for the shape (complete is False).")
      .def(
          "set_layer",
          [](razorkv::head_scores& s, index_t layer, std::vector<double> echo,
             std::vector<double> induction) {
            s.set_layer(layer, razorkv::layer_scores{std::move(echo), std::move(induction)});
          },
          py::arg("layer"), py::arg("echo"), py::arg("induction"),
          "Sets one layer's scores: echo and induction are num_query_heads floats each, "
          "finite (score_queries_keys returns them).")
      .def_property_readonly("num_layers", &razorkv::head_scores::num_layers, "Layers.")
      .def_property_readonly("num_query_heads", &razorkv::head_scores::num_query_heads,
                             "Query heads per layer.")
      .def_property_readonly("num_kv_heads", &razorkv::head_scores::num_kv_heads,
                             "KV heads per layer (a GQA group of query heads shares one).")
      .def_property_readonly("complete", &razorkv::head_scores::complete,
                             "True once every layer is set.")
      .def_property_readonly(
          "echo", [](const razorkv::head_scores& s) { return score_table(s, false); },
          "Echo scores, float64 [num_layers, num_query_heads] (0 where a layer is unset).")
      .def_property_readonly(
          "induction", [](const razorkv::head_scores& s) { return score_table(s, true); },
          "Induction scores, float64 [num_layers, num_query_heads] (0 where unset).")
      .def("to_json", &razorkv::io::head_scores_to_json, py::arg("head_dim") = 0,
           "The scores as scores.json text; a head_dim > 0 is recorded for `razorkv select`.")
      .def_static("from_json", &razorkv::io::head_scores_from_json, py::arg("text"),
                  "Scores from scores.json text (a malformed one names the field).");

  py::class_<razorkv::head_plan>(
      m, "HeadPlan", R"doc(Which kv heads keep their whole cache (retrieval heads) in every layer.

HeadPlan(shape) with shape = (num_layers, num_query_heads, num_kv_heads, head_dim) keeps none;
select, load_plan and razorkv.torch.calibrate make calibrated ones. Under GQA the kv head (the
group of query heads that reads it) is the unit.)doc")
      .def(py::init([](const py::tuple& shape) { return razorkv::head_plan(shape_from(shape)); }),
           py::arg("shape"), "A plan for the model's shape with no retrieval head.")
      .def_property_readonly(
          "shape", [](const razorkv::head_plan& p) { return shape_to(p.shape()); },
          "(num_layers, num_query_heads, num_kv_heads, head_dim).")
      .def("is_retrieval", &razorkv::head_plan::is_retrieval, py::arg("layer"), py::arg("kv_head"),
           "True when the kv head keeps its whole cache.")
      .def("set_retrieval", &razorkv::head_plan::set_retrieval, py::arg("layer"),
           py::arg("kv_head"), py::arg("retrieval") = true,
           "Makes the kv head a retrieval head (or, with retrieval=False, a compressed one).")
      .def("retrieval_heads", &razorkv::head_plan::retrieval_heads, py::arg("layer"),
           "The layer's retrieval kv heads, increasing.")
      .def_property_readonly("num_retrieval", &razorkv::head_plan::num_retrieval,
                             "Retrieval kv heads over every layer.")
      .def("buffer_override", &razorkv::head_plan::buffer_override, py::arg("layer"),
           py::arg("kv_head"),
           "The window, in tokens, that replaces max(s0, N / c) for this compressed head (the "
           "ALiBi plans set one), or None.")
      .def("set_buffer_override", &razorkv::head_plan::set_buffer_override, py::arg("layer"),
           py::arg("kv_head"), py::arg("tokens"),
           "Sets the head's window to `tokens` (>= 1) whatever the prompt's length.")
      .def_property_readonly(
          "retrieval_mask",
          [](const razorkv::head_plan& p) {
            const auto& s = p.shape();
            py::array_t<bool> out({s.num_layers, s.num_kv_heads});
            auto cells = out.mutable_unchecked<2>();
            for (index_t l = 0; l < s.num_layers; ++l)
              for (index_t h = 0; h < s.num_kv_heads; ++h) cells(l, h) = p.is_retrieval(l, h);
            return out;
          },
          "bool [num_layers, num_kv_heads]: True at the retrieval heads.")
      .def_property_readonly(
          "method", [](const razorkv::head_plan& p) { return p.selection().method; },
          "How the plan was made, as its file records it (e.g. \"razorattention\", \"alibi "
          "span\", \"manual\").")
      .def(
          "validate_against",
          [](const razorkv::head_plan& p, const py::tuple& shape) {
            p.validate_against(shape_from(shape));
          },
          py::arg("shape"),
          "Raises razorkv.Error naming the first field of the plan's shape that differs from "
          "`shape` (the model's (num_layers, num_query_heads, num_kv_heads, head_dim)): a plan "
          "calibrated for another model.")
      .def(
          "format",
          [](const razorkv::head_plan& p, const std::string& format) {
            return razorkv::io::format_head_plan(p, razorkv::io::parse_plan_format(format));
          },
          py::arg("format") = "razorkv",
          "The plan as text: \"razorkv\" (JSON), \"mindspore\" (mindspore_gs JSON) or "
          "\"duoattention\" (TSV of gates 1/0); save_plan writes it.")
      .def_static(
          "parse",
          [](const std::string& text, const std::string& format, std::optional<py::tuple> shape,
             double threshold, std::optional<double> sparsity) {
            razorkv::io::plan_read_options options;
            options.format = razorkv::io::parse_plan_format(format);
            if (shape) options.shape = shape_from(*shape);
            options.gates.threshold = threshold;
            options.gates.sparsity = sparsity;
            return razorkv::io::parse_head_plan(text, options);
          },
          py::arg("text"), py::kw_only(), py::arg("format") = "auto",
          py::arg("shape") = std::nullopt, py::arg("threshold") = 0.5,
          py::arg("sparsity") = std::nullopt,
          "A plan from text in any format format() writes (\"auto\" recognises it); see "
          "load_plan for shape, threshold and sparsity.");

  // After HeadPlan, so that plan()'s signature names it.
  py::class_<razorkv::io::gguf_file>(m, "GgufFile",
                                     R"doc(A GGUF model file, read and checked at construction.

GgufFile(path). file["general.architecture"] gives a metadata value as a Python value (arrays
as lists), `key in file` tests for one, keys() lists them; tensor(name) dequantises a tensor
to float32. A malformed file is a razorkv.Error naming the offset and the field.)doc")
      .def(py::init([](const std::string& path) {
             py::gil_scoped_release unlocked;
             return razorkv::io::gguf_file::read(path);
           }),
           py::arg("path"), "Reads and checks the file at `path` (its tensors stay on disk).")
      .def_property_readonly("version", &razorkv::io::gguf_file::version,
                             "The GGUF format version (2 or 3).")
      .def_property_readonly("alignment", &razorkv::io::gguf_file::alignment,
                             "The tensor data's alignment in bytes.")
      .def("keys", &razorkv::io::gguf_file::metadata_keys, "The metadata keys, in file order.")
      .def("__contains__", &razorkv::io::gguf_file::contains, py::arg("key"))
      .def(
          "__getitem__",
          [](const razorkv::io::gguf_file& f, const std::string& key) {
            if (!f.contains(key)) throw py::key_error(key);
            return gguf_to_python(f.value(key), key);
          },
          py::arg("key"))
      .def_property_readonly(
          "tensor_names",
          [](const razorkv::io::gguf_file& f) {
            std::vector<std::string> names;
            for (const auto& t : f.tensors()) names.push_back(t.name);
            return names;
          },
          "The tensors' names, in file order.")
      .def(
          "tensor_type",
          [](const razorkv::io::gguf_file& f, const std::string& name) {
            return std::string(f.tensor(name).type_name());
          },
          py::arg("name"), "The tensor's GGML type, e.g. \"F32\", \"Q4_1\".")
      .def("tensor", &gguf_tensor_array, py::arg("name"),
           "The tensor dequantised to a float32 array, its GGUF dimensions reversed (GGUF lists "
           "the contiguous one first; numpy's C order lists it last).")
      .def(
          "plan", [](const razorkv::io::gguf_file& f) { return razorkv::io::plan_from_gguf(f); },
          "The HeadPlan the file carries under \"razorkv.plan\", or None.");

  m.def(
      "select",
      [](const razorkv::head_scores& scores, index_t head_dim, double induction_ratio,
         double echo_ratio, const std::string& gqa, index_t min_per_layer) {
        razorkv::selection_config config;
        config.induction_ratio = induction_ratio;
        config.echo_ratio = echo_ratio;
        config.aggregation = parse_aggregation(gqa);
        config.min_groups_per_layer = min_per_layer;
        return razorkv::select_retrieval_heads(scores, head_dim, config);
      },
      py::arg("scores"), py::kw_only(), py::arg("head_dim"), py::arg("induction_ratio") = 0.14,
      py::arg("echo_ratio") = 0.01, py::arg("gqa") = "sum", py::arg("min_per_layer") = 0,
      R"doc(The plan of RazorAttention's selection from complete HeadScores.

Keeps the top induction_ratio of all kv groups by induction score, then the top echo_ratio
by echo score (the paper's 14% + 1%). gqa: how a group's query-head scores combine, "sum",
"mean" or "max". min_per_layer: at least this many retrieval groups in every layer.
head_dim: the model's, recorded in the plan's shape. Returns a HeadPlan.)doc");
  m.def(
      "select_for_budget",
      [](const razorkv::head_scores& scores, index_t head_dim, index_t budget_bytes,
         index_t seq_len, index_t dtype_bytes, index_t sinks, index_t s0, double c,
         double induction_ratio, double echo_ratio, const std::string& gqa) {
        razorkv::memory_target target;
        target.budget_bytes = budget_bytes;
        target.seq_len = seq_len;
        target.dtype_bytes = dtype_bytes;
        target.budget.sinks = sinks;
        target.budget.s0 = s0;
        target.budget.c = c;
        razorkv::selection_config config;
        config.induction_ratio = induction_ratio;
        config.echo_ratio = echo_ratio;
        config.aggregation = parse_aggregation(gqa);
        return razorkv::select_for_budget(scores, head_dim, target, config);
      },
      py::arg("scores"), py::kw_only(), py::arg("head_dim"), py::arg("budget_bytes"),
      py::arg("seq_len"), py::arg("dtype_bytes") = 2, py::arg("sinks") = 4, py::arg("s0") = 4000,
      py::arg("c") = 5.0, py::arg("induction_ratio") = 0.14, py::arg("echo_ratio") = 0.01,
      py::arg("gqa") = "sum",
      R"doc(The largest selection whose cache fits budget_bytes at seq_len tokens.

Scales induction_ratio and echo_ratio (keeping their proportion) to the largest overall
ratio whose plan's compressed_kv_bytes (sinks, s0, c, dtype_bytes as there) fits, and returns
that HeadPlan; a budget that not even zero retrieval groups fit is a razorkv.Error naming the
budget and the smallest size.)doc");

  // ALiBi models: a head's span follows from its slope, so no probe is needed.
  m.def("alibi_slopes", &razorkv::alibi_slopes, py::arg("num_heads"),
        "The ALiBi slopes of Press et al. for num_heads heads: 2^(-8 i / n), i = 1..n, for a "
        "power of two n, otherwise the reference implementation's interleaving.");
  m.def("alibi_logit_bound", &razorkv::alibi_logit_bound, py::arg("spectral_norm"),
        py::arg("hidden_norm_bound"), py::arg("scale"),
        "The bound B on |scale * q.k|: scale * spectral_norm * hidden_norm_bound^2, with "
        "spectral_norm = ||W_Q W_K^T||_2 and hidden_norm_bound bounding the hidden states' "
        "norm.");
  m.def("alibi_span", &razorkv::alibi_span, py::arg("slope"), py::arg("bound"),
        py::arg("eps") = 1e-3,
        "The distance beyond which a head with `slope` gives less than eps of its attention "
        "when every logit is within [-bound, bound]: (2 bound - ln eps) / slope.");
  m.def(
      "select_alibi",
      [](const py::tuple& shape, const std::vector<double>& slopes, double bound, double eps,
         std::optional<index_t> seq_len, std::optional<double> ratio) {
        // Which keywords were given; their values are select_alibi_heads' to check.
        RAZORKV_CHECK(seq_len.has_value() != ratio.has_value(), kInvalidArgument,
                      "select_alibi: give seq_len or ratio, not ", seq_len ? "both" : "neither");
        razorkv::alibi_selection options;
        options.bound = bound;
        options.eps = eps;
        options.seq_len = seq_len.value_or(0);
        options.ratio = ratio;
        return razorkv::select_alibi_heads(shape_from(shape), slopes, options);
      },
      py::arg("shape"), py::arg("slopes"), py::kw_only(), py::arg("bound") = 0.0,
      py::arg("eps") = 1e-3, py::arg("seq_len") = std::nullopt, py::arg("ratio") = std::nullopt,
      R"doc(A plan for an ALiBi model from its slopes alone (no probe).

slopes: one per query head (alibi_slopes), the same in every layer; a group's span is its
query heads' largest alibi_span(slope, bound, eps). Give seq_len (groups whose span reaches
it keep their whole cache) or ratio (the top share of groups by span); every other group
gets ceil(span) as its buffer_override.)doc");

  // The memory calculator.
  m.def(
      "full_kv_bytes",
      [](const py::tuple& shape, index_t tokens, index_t dtype_bytes,
         const std::optional<std::string>& storage) {
        return razorkv::full_kv_bytes(shape_from(shape), tokens, dtype_bytes,
                                      parse_storage(storage, false, "storage"));
      },
      py::arg("shape"), py::arg("tokens"), py::arg("dtype_bytes") = 2, py::kw_only(),
      py::arg("storage") = py::none(),
      "Bytes of a dense K/V cache of the model (num_layers, num_query_heads, num_kv_heads, "
      "head_dim) at `tokens` tokens: 2 * layers * kv heads * head_dim * tokens * dtype_bytes, "
      "or with storage \"q8\" / \"q4\" the rows' 8-/4-bit blocks (34 / 18 bytes per 32 "
      "values).");
  m.def(
      "compressed_kv_bytes",
      [](const razorkv::head_plan& plan, index_t tokens, index_t sinks, index_t s0, double c,
         index_t dtype_bytes, const std::optional<std::string>& storage,
         const std::optional<std::string>& retrieval_storage) {
        razorkv::razor_budget b;
        b.sinks = sinks;
        b.s0 = s0;
        b.c = c;
        b.storage = parse_storage(storage, false, "storage");
        if (retrieval_storage)
          b.retrieval_storage = parse_storage(retrieval_storage, false, "retrieval_storage");
        return razorkv::compressed_kv_bytes(plan, tokens, b, dtype_bytes);
      },
      py::arg("plan"), py::arg("tokens"), py::kw_only(), py::arg("sinks") = 4, py::arg("s0") = 4000,
      py::arg("c") = 5.0, py::arg("dtype_bytes") = 2, py::arg("storage") = py::none(),
      py::arg("retrieval_storage") = py::none(),
      "Bytes of the plan's razor cache at `tokens` tokens: retrieval heads whole, every other "
      "head its sinks, one compensation token and a window of max(s0, tokens / c) (or its "
      "buffer_override); a head with no more tokens than sinks and window keeps them all. With "
      "storage (\"q8\" or \"q4\", as RazorConfig's) windows and retrieval heads count their "
      "blocks' bytes (retrieval heads retrieval_storage's when given); sinks and compensation "
      "tokens stay dtype_bytes.");
  m.def(
      "model_presets",
      [] {
        py::dict presets;
        for (const auto& p : razorkv::model_presets()) presets[py::str(p.name)] = shape_to(p.shape);
        return presets;
      },
      "Well-known models' shapes: {name: (num_layers, num_query_heads, num_kv_heads, head_dim)}, "
      "for the "
      "calculator.");

  py::class_<razorkv::razor_config>(
      m, "RazorConfig", R"doc(What a compressed (non-retrieval) head keeps, and how it decodes.

RazorConfig(*, sinks=4, s0=4000, c=5.0, fixed_window=0, compensation="weighted",
decode="append", check_finite=True): the first `sinks` tokens, a recent window of max(s0,
N / c) tokens of an N-token prompt (fixed_window > 0: that many instead), and one
compensation token standing for what was dropped ("weighted": mean key and value weighted by
their count, "unweighted": the mean as one token, "none"). decode "append" lets the window grow
as tokens are decoded; "bounded" keeps it at its size and folds the oldest token into the
compensation token. check_finite: compression and append raise razorkv.Error at the first NaN
or infinity they are handed (one more pass over the K/V); unchecked (False, the C++ default),
a dropped non-finite token poisons its head's compensation token silently.
storage: how windows and retrieval heads store their rows, None (the cache's dtype), "q8" or
"q4" (blocks of 32 values and a 16-bit scale, 0.53 and 0.28 of a 16-bit row; head_dim a
multiple of 32); retrieval_storage: the same for retrieval heads alone (None: as storage);
rotate_keys: keys are stored rotated by the Walsh-Hadamard transform, which decode matches by
rotating each query (head_dim a power of two). Sinks and compensation tokens stay the dtype.)doc")
      .def(py::init(&make_razor_config), py::kw_only(), py::arg("sinks") = 4, py::arg("s0") = 4000,
           py::arg("c") = 5.0, py::arg("fixed_window") = 0, py::arg("compensation") = "weighted",
           py::arg("decode") = "append", py::arg("check_finite") = true,
           py::arg("storage") = py::none(), py::arg("rotate_keys") = false,
           py::arg("retrieval_storage") = py::none(),
           "See the class; a bad field is a razorkv.Error naming it and its value.")
      .def_property_readonly(
          "storage",
          [](const razorkv::razor_config& c) -> std::optional<std::string> {
            if (!c.storage.keys) return std::nullopt;
            return std::string(razorkv::row_format_name(*c.storage.keys));
          },
          "\"q8\", \"q4\" or None: how windows (and retrieval heads, unless retrieval_storage) "
          "store their rows.")
      .def_property_readonly(
          "retrieval_storage",
          [](const razorkv::razor_config& c) -> std::optional<std::string> {
            const razorkv::kv_storage& s = c.storage_for(true);
            if (!s.keys) return std::nullopt;
            return std::string(razorkv::row_format_name(*s.keys));
          },
          "\"q8\", \"q4\" or None: how retrieval heads store their rows.")
      .def_property_readonly(
          "rotate_keys", [](const razorkv::razor_config& c) { return c.storage.rotate_keys; },
          "Whether keys are stored rotated (decode rotates the queries to match).")
      .def_readonly("sinks", &razorkv::razor_config::sinks, "Attention-sink tokens kept.")
      .def_readonly("s0", &razorkv::razor_config::s0, "The smallest window, in tokens.")
      .def_readonly("c", &razorkv::razor_config::c,
                    "The window is N / c tokens of an N-token prompt when that exceeds s0.")
      .def_readonly("fixed_window", &razorkv::razor_config::fixed_window,
                    "A window of this many tokens whatever N (0: max(s0, N / c)).")
      .def_readonly("check_finite", &razorkv::razor_config::check_finite,
                    "Whether compression and append reject NaN and infinity.")
      .def_property_readonly(
          "compensation",
          [](const razorkv::razor_config& c) {
            return razorkv::compensation_mode_name(c.compensation);
          },
          "\"weighted\", \"unweighted\" or \"none\".")
      .def_property_readonly(
          "decode",
          [](const razorkv::razor_config& c) { return razorkv::decode_mode_name(c.decode); },
          "\"append\" or \"bounded\".");

  // Where caches take their K/V memory from; a cache keeps its resource alive.
  py::class_<razorkv::huge_page_resource>(
      m, "HugePageResource", R"doc(K/V memory on 2 MiB huge pages, and an engine's pool of it.

HugePageResource(*, min_bytes=2 MiB, keep_bytes=0): blocks of at least min_bytes are mapped
on huge-page boundaries (Linux backs them with huge pages where transparent huge pages are
enabled), smaller ones come from the heap. A freed block stays mapped for the next cache while
the kept blocks total at most keep_bytes, so an engine that makes a cache per request pays the
OS for its pages once. Pass it as resource= to RazorCache, RazorCache.restore_state or
compress; a cache keeps its resource alive. HugePageResource.maps_blocks is True where this
build maps blocks itself (Linux); elsewhere every block is the heap's.)doc")
      .def(py::init(&make_huge_page_resource), py::kw_only(),
           py::arg("min_bytes") = static_cast<index_t>(razorkv::huge_page_resource::kHugePageBytes),
           py::arg("keep_bytes") = 0, "See the class; min_bytes > 0, keep_bytes >= 0.")
      .def_property_readonly("min_bytes", &razorkv::huge_page_resource::min_bytes,
                             "Blocks at least this large are mapped on huge-page boundaries.")
      .def_property_readonly("keep_bytes", &razorkv::huge_page_resource::keep_bytes,
                             "Freed mapped blocks kept for reuse, at most, in bytes.")
      .def("kept_bytes", &razorkv::huge_page_resource::kept_bytes,
           "Bytes of freed blocks kept mapped for reuse now.")
      // A constant of the build, so a class attribute (a static property's docstring is lost
      // on Python 3.11); the class's docstring says what it means.
      .attr("maps_blocks") = razorkv::huge_page_resource::maps_blocks();

  // Declared before _RazorCache, so that compress_layer_paged's signature names it.
  py::class_<py_paged> paged(m, "_PagedKV");
  py::class_<razor_cache>(m, "_RazorCache")
      .def(py::init(&make_razor_cache), py::arg("plan"), py::arg("dtype"), py::arg("config"),
           py::arg("resource") = nullptr, py::keep_alive<1, 5>())
      .def_property_readonly("dtype", &razor_cache::dtype)
      .def_property_readonly("shape", &razor_cache::shape)
      .def("compress_layer",
           [](razor_cache& c, index_t layer, py::array keys, const std::string& keys_dtype,
              py::array values, const std::string& values_dtype) {
             const array_in k(std::move(keys), keys_dtype, "keys", 3);
             const array_in v(std::move(values), values_dtype, "values", 3);
             py::gil_scoped_release unlocked;
             c.visit([&](auto& cache) {
               using T = typename std::decay_t<decltype(cache)>::value_type;
               const auto keys_view =
                   k.template layer_for<T>("compress_layer");  // keys named first
               cache.compress_layer(layer, keys_view, v.template layer_for<T>("compress_layer"));
             });
           })
      .def("compress_chunk",
           [](razor_cache& c, index_t layer, py::array keys, const std::string& keys_dtype,
              py::array values, const std::string& values_dtype) {
             const array_in k(std::move(keys), keys_dtype, "keys", 3);
             const array_in v(std::move(values), values_dtype, "values", 3);
             py::gil_scoped_release unlocked;
             c.visit([&](auto& cache) {
               using T = typename std::decay_t<decltype(cache)>::value_type;
               const auto keys_view =
                   k.template layer_for<T>("compress_chunk");  // keys named first
               cache.compress_chunk(layer, keys_view, v.template layer_for<T>("compress_chunk"));
             });
           })
      .def("compress_layer_paged",
           [](razor_cache& c, index_t layer, const py_paged& prefill) {
             py::gil_scoped_release unlocked;
             c.visit([&](auto& cache) {
               using T = typename std::decay_t<decltype(cache)>::value_type;
               prefill.visit([&](const auto& view) {
                 using P = typename std::decay_t<decltype(view)>::value_type;
                 RAZORKV_CHECK((std::is_same_v<T, P>), kInvalidArgument,
                               "compress_layer: the pages hold ",
                               numpy_name(razorkv::dtype_of<P>()), ", this cache stores ",
                               numpy_name(razorkv::dtype_of<T>()));
                 if constexpr (std::is_same_v<T, P>) cache.compress_layer(layer, view);
               });
             });
           })
      .def("append", &razor_cache::append)
      .def("attend", &razor_cache::attend)
      .def("entries", &razor_cache::entries)
      .def("kv_bytes", &razor_cache::kv_bytes)
      .def("allocated_bytes", &razor_cache::allocated_bytes)
      .def("max_new_tokens", &razor_cache::max_new_tokens)
      .def("num_tokens",
           [](const razor_cache& c, index_t layer) {
             return c.visit([&](const auto& cache) { return cache.num_tokens(layer); });
           })
      .def("window",
           [](const razor_cache& c, index_t layer, index_t kv_head) {
             return c.visit([&](const auto& cache) { return cache.window(layer, kv_head); });
           })
      .def("is_retrieval",
           [](const razor_cache& c, index_t layer, index_t kv_head) {
             return c.visit([&](const auto& cache) { return cache.is_retrieval(layer, kv_head); });
           })
      .def("dense_kv_bytes",
           [](const razor_cache& c) {
             return c.visit([](const auto& cache) { return cache.dense_kv_bytes(); });
           })
      .def("compression_ratio",
           [](const razor_cache& c) {
             return c.visit([](const auto& cache) { return cache.compression_ratio(); });
           })
      .def("dropped_tokens",
           [](const razor_cache& c) {
             return c.visit([](const auto& cache) { return cache.dropped_tokens(); });
           })
      .def("kv_bytes_after",
           [](const razor_cache& c, index_t tokens) {
             return c.visit([&](const auto& cache) { return cache.kv_bytes_after(tokens); });
           })
      .def("clear", [](razor_cache& c) { c.visit([](auto& cache) { cache.clear(); }); })
      .def("release", [](razor_cache& c) { c.visit([](auto& cache) { cache.release(); }); })
      .def("save_state",
           [](const razor_cache& c) {
             const std::vector<std::uint8_t> bytes =
                 c.visit([](const auto& cache) { return razorkv::save_state(cache); });
             return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
           })
      .def_static(
          "restore_state",
          [](const py::bytes& state, const std::string& dtype,
             razorkv::huge_page_resource* resource, std::optional<index_t> max_bytes) {
            const std::string_view bytes(state);
            razorkv::restore_options options;
            options.resource = resource;
            options.max_bytes = max_bytes;
            return with_type(parse_dtype(dtype), [&](auto* tag) {
              using T = std::remove_pointer_t<decltype(tag)>;
              return razor_cache(razorkv::restore_state<T>(
                  reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), options));
            });
          },
          py::arg("state"), py::arg("dtype"), py::arg("resource") = nullptr,
          py::arg("max_bytes") = py::none(), py::keep_alive<0, 3>());

  paged
      .def(py::init<std::vector<py::array>, std::vector<py::array>, const std::string&,
                    const py::array&, index_t, const std::string&>(),
           py::arg("key_pools"), py::arg("value_pools"), py::arg("dtype"), py::arg("page_table"),
           py::arg("num_tokens"), py::arg("layout"))
      .def_property_readonly("dtype", &py_paged::dtype)
      .def_property_readonly("shape", &py_paged::shape)
      .def_property_readonly("num_tokens", &py_paged::num_tokens)
      .def_property_readonly("page_size", &py_paged::page_size)
      .def("attend", &py_paged::attend);

  py::class_<baseline_cache>(m, "_Cache")
      .def_property_readonly("dtype", &baseline_cache::dtype)
      .def_property_readonly("shape", &baseline_cache::shape)
      .def("append", &baseline_cache::append)
      .def("attend", &baseline_cache::attend)
      .def("entries", &baseline_cache::entries)
      .def("kv_bytes", &baseline_cache::kv_bytes)
      .def("allocated_bytes", &baseline_cache::allocated_bytes)
      .def("max_new_tokens", &baseline_cache::max_new_tokens);

  py::class_<razorkv::policy>(m, "Policy", R"doc(A KV-compression policy, for razorkv.compress.

Policy.full(), Policy.streaming_llm(), Policy.snapkv(), Policy.h2o() and Policy.razor(plan)
make one; compress(policy, keys, values, budget_entries=...) applies it to a prompt, every
policy keeping at most budget_entries entries per kv head on average, so that they compare at
equal bytes.)doc")
      .def_readonly("name", &razorkv::policy::name, "The policy's name, as reports print it.")
      .def_property_readonly(
          "reads_queries",
          [](const razorkv::policy& p) {
            return p.target<razorkv::snapkv_policy>() != nullptr ||
                   p.target<razorkv::h2o_policy>() != nullptr;
          },
          "True for the policies that read the prompt's last queries (SnapKV, H2O): compress "
          "needs them.")
      .def_static(
          "full", [] { return razorkv::policy(razorkv::full_policy()); },
          "Keeps every token (the reference the others are measured against).")
      .def_static(
          "streaming_llm",
          [](index_t sinks) { return razorkv::policy(razorkv::streaming_llm_policy(sinks)); },
          py::arg("sinks") = 4,
          "StreamingLLM: the first `sinks` tokens and the most recent ones, in every head.")
      .def_static(
          "snapkv",
          [](index_t window, index_t kernel, const std::string& pooling) {
            razorkv::snapkv_config config;
            config.window = window;
            config.kernel = kernel;
            RAZORKV_CHECK(pooling == "max" || pooling == "average", kInvalidArgument,
                          "snapkv: pooling ('", pooling, "') must be 'max' or 'average'");
            config.pooling = pooling == "max" ? razorkv::snapkv_pooling::kMax
                                              : razorkv::snapkv_pooling::kAverage;
            return razorkv::policy(razorkv::snapkv_policy(config));
          },
          py::arg("window") = 32, py::arg("kernel") = 5, py::arg("pooling") = "max",
          "SnapKV: the prompt's last `window` queries vote (their attention, pooled over "
          "`kernel` tokens, \"max\" or \"average\") for the tokens each head keeps beside "
          "the window; compress needs those queries.")
      .def_static(
          "h2o",
          [](index_t recent, index_t observed_queries) {
            razorkv::h2o_config config;
            config.recent = recent;
            return razorkv::policy(razorkv::h2o_policy(config, observed_queries));
          },
          py::arg("recent") = 0, py::arg("observed_queries") = 0,
          "H2O: each head keeps its `recent` newest tokens (0: half the budget) and the heavy "
          "hitters, the tokens with the most accumulated attention, from the prompt's last "
          "`observed_queries` queries (0: all given) and then from every decode step.")
      .def_static(
          "razor",
          [](const razorkv::head_plan& plan, const razorkv::razor_config& config,
             const std::string& name) {
            return razorkv::policy(razorkv::razor_policy(name, plan, config));
          },
          py::arg("plan"), py::arg_v("config", razorkv::razor_config{}, "RazorConfig()"),
          py::arg("name") = "razor",
          "RazorAttention at the budget: the plan's retrieval heads keep every token, the "
          "others the config's sinks and compensation token and the window that fills "
          "budget_entries per kv head on average; `name` labels it in reports.")
      .def(
          "_compress",
          [](const razorkv::policy& p, const py::tuple& shape, const std::vector<py::array>& keys,
             const std::vector<py::array>& values, const std::vector<py::array>& queries,
             const std::string& dtype, index_t budget_entries,
             razorkv::huge_page_resource* resource) {
            return compress_prompt(p, shape_from(shape), keys, values, queries, dtype,
                                   budget_entries, resource);
          },
          py::arg("shape"), py::arg("keys"), py::arg("values"), py::arg("queries"),
          py::arg("dtype"), py::arg("budget_entries"), py::arg("resource") = nullptr,
          py::keep_alive<0, 8>());
}
