// Fuzz target: restore_state, the loader of saved razor caches, with its default options. An
// accepted state saves back to the same bytes, holds what save_state guarantees, and decodes and
// appends like any cache.
#include <razorkv/attention/decode.hpp>
#include <razorkv/compress/razor_state.hpp>

#include <Eigen/Core>

#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_support.hpp"

namespace {

// What every cache save_state could have written holds, read through the public API: each head
// accounts for every token of its layer (its entries and the tokens it folded), a retrieval head
// folds nothing, a head that folded nothing has no compensation token and zero sums, and a head
// of a bounded cache holds at most its sinks, its compensation token and its window.
template <class T>
void require_invariants(const razorkv::razor_kv_cache<T>& cache) {
  const razorkv::razor_config& config = cache.config();
  for (razorkv::index_t l = 0; l < cache.num_layers(); ++l) {
    if (!cache.is_compressed(l)) continue;
    for (razorkv::index_t h = 0; h < cache.num_kv_heads(); ++h) {
      const razorkv::compensation_token<T> token = cache.compensation(l, h);
      const razorkv::index_t entries = razorkv::num_entries(cache, l, h) - token.key.rows();
      razorkv_fuzz::require(entries + token.count == cache.num_tokens(l),
                            "every token is an entry or folded");
      if (cache.is_retrieval(l, h)) razorkv_fuzz::require(token.count == 0, "retrieval folds none");
      if (token.count == 0) {
        razorkv_fuzz::require(token.key.rows() == 0, "no compensation token for nothing folded");
        for (razorkv::index_t c = 0; token.key_sum != nullptr && c < cache.head_dim(); ++c)
          razorkv_fuzz::require(token.key_sum[c] == 0.0 && token.value_sum[c] == 0.0,
                                "zero sums when nothing was folded");
      }
      if (config.decode == razorkv::decode_mode::kBounded && !cache.is_retrieval(l, h))
        razorkv_fuzz::require(entries <= config.sinks + cache.window(l, h),
                              "a bounded head holds at most its sinks and window");
    }
  }
}

template <class T>
void restore_and_use(const std::uint8_t* data, std::size_t size) {
  razorkv_fuzz::reject_only_with_razorkv_errors([&] {
    razorkv::razor_kv_cache<T> cache = razorkv::restore_state<T>(data, size);
    razorkv_fuzz::require(cache.allocated_bytes() <= razorkv::default_max_bytes(size),
                          "the default options bound what a state allocates");
    const std::vector<std::uint8_t> saved = razorkv::save_state(cache);
    std::uint32_t version;
    std::memcpy(&version, data + 8, sizeof version);  // after the magic, as restore_state read it
    if (version == razorkv::kRazorStateVersion) {
      razorkv_fuzz::require(saved.size() == size && std::memcmp(saved.data(), data, size) == 0,
                            "save_state(restore_state(bytes)) == bytes");
    } else {  // an older version is saved as the current one, which then round-trips
      razorkv_fuzz::require(razorkv::save_state(razorkv::restore_state<T>(saved)) == saved,
                            "an older state saves as one that round-trips");
    }
    require_invariants(cache);
    const razorkv::model_shape& shape = cache.plan().shape();
    if (shape.num_query_heads * shape.head_dim > (1 << 14) ||
        shape.num_kv_heads * shape.head_dim > (1 << 14))
      return;
    const std::vector<float> queries(
        static_cast<std::size_t>(shape.num_query_heads * shape.head_dim), 0.5f);
    std::vector<float> out(queries.size());
    const std::vector<T> token(static_cast<std::size_t>(shape.num_kv_heads * shape.head_dim),
                               T(0.25f));
    const auto kv =
        razorkv::layer_view<const T>::nhd(token.data(), 1, shape.num_kv_heads, shape.head_dim);
    for (razorkv::index_t l = 0; l < cache.num_layers(); ++l) {
      if (!cache.is_compressed(l)) continue;
      for (int step = 0; step < 2; ++step) {
        razorkv::decode_attention(
            cache, l,
            razorkv::matrix_view<const float>(queries.data(), shape.num_query_heads,
                                              shape.head_dim),
            razorkv::matrix_view<float>(out.data(), shape.num_query_heads, shape.head_dim));
        cache.append(l, kv, kv);
      }
    }
    require_invariants(cache);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  restore_and_use<float>(data, size);
  restore_and_use<Eigen::bfloat16>(data, size);
  return 0;
}
