// Fuzz target: safetensors files. An accepted file's tensors tile its data section, and every
// tensor converts to float with as many elements as its shape says.
#include <razorkv/io/safetensors.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  razorkv_fuzz::reject_only_with_razorkv_errors([&] {
    const razorkv::io::safetensors_file file = razorkv::io::safetensors_file::parse(bytes);
    razorkv::index_t covered = 0;
    for (const std::string& name : file.names()) {
      const razorkv::io::safetensors_tensor& t = file.tensor(name);
      covered += t.end - t.begin;
      razorkv_fuzz::require(
          static_cast<razorkv::index_t>(file.to_float(name, t.shape).size()) == t.size(),
          "to_float holds product(shape) elements");
    }
    razorkv_fuzz::require(covered <= static_cast<razorkv::index_t>(size),
                          "tensors lie inside the file");
  });
  return 0;
}
