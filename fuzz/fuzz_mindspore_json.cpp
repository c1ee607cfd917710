// Fuzz target: the mindspore retrieval-head JSON, read for a model shape taken from the first
// bytes (small, sometimes invalid). Accepted plans must survive a write/read round trip.
#include <razorkv/io/json.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  razorkv_fuzz::byte_reader in(data, size);
  razorkv::model_shape shape;
  shape.num_layers = in.range(-1, 6);
  shape.num_kv_heads = in.range(0, 8);
  shape.num_query_heads = shape.num_kv_heads * in.range(0, 4);
  shape.head_dim = in.range(0, 3) * 32;
  const std::string text = in.rest();
  razorkv_fuzz::reject_only_with_razorkv_errors([&] {
    const razorkv::head_plan plan = razorkv::io::head_plan_from_mindspore(text, shape);
    const std::string written = razorkv::io::head_plan_to_mindspore(plan);
    razorkv_fuzz::require(razorkv::io::head_plan_to_mindspore(
                              razorkv::io::head_plan_from_mindspore(written, shape)) == written,
                          "mindspore JSON round trip");
  });
  return 0;
}
