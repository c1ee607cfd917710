// Compile-only checks: views are trivially copyable, and the KV-source and KV-cache contracts
// accept the library's sources and caches and reject types that miss a member.
#include <razorkv/razorkv.hpp>

#include <type_traits>

namespace {

using razorkv::index_t;

static_assert(std::is_trivially_copyable_v<razorkv::matrix_view<float>>);
static_assert(std::is_trivially_copyable_v<razorkv::matrix_view<const Eigen::half>>);
static_assert(std::is_trivially_copyable_v<razorkv::layer_view<Eigen::bfloat16>>);
static_assert(std::is_trivially_copyable_v<razorkv::layer_view<const double>>);
static_assert(std::is_trivially_copyable_v<razorkv::kv_span<float>>);
static_assert(std::is_trivially_copyable_v<razorkv::any_layer_view>);

static_assert(razorkv::is_kv_cache_v<razorkv::dense_kv_cache<float>>);
static_assert(razorkv::is_kv_cache_v<razorkv::dense_kv_cache<double>>);
static_assert(razorkv::is_kv_cache_v<razorkv::dense_kv_cache<Eigen::half>>);
static_assert(razorkv::is_kv_cache_v<const razorkv::dense_kv_cache<Eigen::bfloat16>>);
static_assert(razorkv::is_kv_cache_v<razorkv::razor_kv_cache<float>>);
static_assert(razorkv::is_kv_cache_v<razorkv::razor_kv_cache<double>>);
static_assert(razorkv::is_kv_cache_v<razorkv::razor_kv_cache<Eigen::half>>);
static_assert(razorkv::is_kv_cache_v<razorkv::razor_kv_cache<Eigen::bfloat16>>);

// Has everything but append: a read-only source, not a cache.
struct read_only_cache {
  using value_type = float;
  index_t num_layers() const { return 1; }
  index_t num_kv_heads() const { return 1; }
  index_t head_dim() const { return 1; }
  index_t num_spans(index_t, index_t) const { return 0; }
  razorkv::kv_span<float> span(index_t, index_t, index_t) const { return {}; }
};
static_assert(razorkv::is_kv_source_v<read_only_cache>);
static_assert(!razorkv::is_kv_cache_v<read_only_cache>);
static_assert(razorkv::is_kv_source_v<razorkv::paged_kv_view<float>>);
static_assert(!razorkv::is_kv_cache_v<razorkv::paged_kv_view<float>>);

// Element type razorkv cannot read: not a cache.
struct int_cache : read_only_cache {
  using value_type = int;
  void append(index_t, razorkv::layer_view<const int>, razorkv::layer_view<const int>) {}
};
static_assert(!razorkv::is_kv_source_v<int_cache>);
static_assert(!razorkv::is_kv_cache_v<int_cache>);
static_assert(!razorkv::is_kv_cache_v<int>);

#if defined(__cpp_concepts) && __cpp_concepts >= 201907L
static_assert(razorkv::kv_cache<razorkv::dense_kv_cache<float>>);
static_assert(razorkv::kv_cache<razorkv::razor_kv_cache<Eigen::bfloat16>>);
static_assert(!razorkv::kv_cache<read_only_cache>);
static_assert(razorkv::kv_source<read_only_cache>);
static_assert(razorkv::kv_source<razorkv::dense_kv_cache<float>>);
#endif

}  // namespace
