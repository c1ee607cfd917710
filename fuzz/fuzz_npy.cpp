// Fuzz target: .npy headers and bodies. An accepted array holds exactly product(shape) items,
// and converts to every supported element type.
#include <razorkv/io/npy.hpp>

#include <Eigen/Core>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string file(reinterpret_cast<const char*>(data), size);
  for (bool u2_is_bfloat16 : {true, false}) {
    razorkv_fuzz::reject_only_with_razorkv_errors([&] {
      const razorkv::io::npy_array array = razorkv::io::parse_npy(file, u2_is_bfloat16);
      razorkv_fuzz::require(static_cast<razorkv::index_t>(array.bytes.size()) ==
                                array.size() * razorkv::io::npy_item_size(array.dtype),
                            "npy data size == product(shape) * item size");
      razorkv_fuzz::require(static_cast<razorkv::index_t>(array.to<float>().size()) == array.size(),
                            "as<float>");
      razorkv_fuzz::require(
          static_cast<razorkv::index_t>(array.to<Eigen::bfloat16>().size()) == array.size(),
          "as<bfloat16>");
      razorkv_fuzz::require(
          static_cast<razorkv::index_t>(array.to<std::int64_t>().size()) == array.size(),
          "as<int64>");
    });
  }
  return 0;
}
