// bench/compile_time/engine_unit.cpp: one engine translation unit, as an engine writes it:
// includes the umbrella and decodes over a compressed cache. scripts/compile_time.sh times it.
#include <razorkv/razorkv.hpp>

void engine_decode(const razorkv::razor_kv_cache<float>& cache, razorkv::index_t layer,
                   razorkv::matrix_view<const float> query, razorkv::matrix_view<float> out) {
  razorkv::decode_attention(cache, layer, query, out);
}
