// Fuzz target: restore_state, the loader of saved razor caches. An accepted state saves back to
// the same bytes, and decodes and appends like any cache.
#include <razorkv/attention/decode.hpp>
#include <razorkv/compress/razor_state.hpp>

#include <Eigen/Core>

#include <vector>

#include "fuzz_support.hpp"

namespace {

template <class T>
void restore_and_use(const std::uint8_t* data, std::size_t size) {
  razorkv_fuzz::reject_only_with_razorkv_errors([&] {
    razorkv::razor_kv_cache<T> cache =
        razorkv::restore_state<T>(data, size, razorkv::index_t{16} << 20);
    const std::vector<std::uint8_t> saved = razorkv::save_state(cache);
    razorkv_fuzz::require(saved.size() == size && std::memcmp(saved.data(), data, size) == 0,
                          "save_state(restore_state(bytes)) == bytes");
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
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  restore_and_use<float>(data, size);
  restore_and_use<Eigen::bfloat16>(data, size);
  return 0;
}
