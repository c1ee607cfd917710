// Fuzz target: DuoAttention's gate TSV, read for a model shape and an import mode taken from the
// first bytes. An accepted plan has the shape asked for.
#include <razorkv/io/duoattention.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  razorkv_fuzz::byte_reader in(data, size);
  razorkv::model_shape shape;
  shape.num_layers = in.range(0, 6);
  shape.num_kv_heads = in.range(0, 8);
  shape.num_query_heads = shape.num_kv_heads * in.range(1, 4);
  shape.head_dim = 64;
  razorkv::io::duoattention_import options;
  options.threshold = static_cast<double>(in.value());
  if (in.byte() % 2 == 0) options.sparsity = static_cast<double>(in.value()) / 8.0;
  const std::string tsv = in.rest();
  razorkv_fuzz::reject_only_with_razorkv_errors([&] {
    const razorkv::head_plan plan = razorkv::io::head_plan_from_duoattention(tsv, shape, options);
    razorkv_fuzz::require(plan.shape().num_layers == shape.num_layers &&
                              plan.shape().num_kv_heads == shape.num_kv_heads,
                          "duoattention plan has the requested shape");
  });
  return 0;
}
