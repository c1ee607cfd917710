// Fuzz target: GGUF files. An accepted file's tensors lie inside it without overlapping, every
// metadata accessor either answers or throws a razorkv error, and every tensor razorkv
// dequantises converts to as many floats as its dims say.
#include <razorkv/io/gguf.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  razorkv_fuzz::reject_only_with_razorkv_errors([&] {
    const razorkv::io::gguf_file file = razorkv::io::gguf_file::parse(bytes);
    for (const std::string& key : file.metadata_keys()) {
      const razorkv::io::gguf_value& v = file.value(key);
      razorkv_fuzz::reject_only_with_razorkv_errors([&] { (void)v.as_int(key); });
      razorkv_fuzz::reject_only_with_razorkv_errors([&] { (void)v.as_string(key); });
    }
    razorkv_fuzz::reject_only_with_razorkv_errors([&] { (void)razorkv::io::plan_from_gguf(file); });
    razorkv::index_t covered = 0;
    for (const razorkv::io::gguf_tensor& t : file.tensors()) {
      covered += t.bytes;
      razorkv_fuzz::require(t.offset % file.alignment() == 0, "tensor offsets are aligned");
      if (razorkv::io::gguf_tensor_type_traits(t.type).dequantised) {
        razorkv_fuzz::require(
            static_cast<razorkv::index_t>(file.to_float(t.name, t.dims).size()) == t.elements(),
            "to_float holds product(dims) elements");
      }
    }
    razorkv_fuzz::require(covered <= static_cast<razorkv::index_t>(size),
                          "tensors lie inside the file without overlapping");
  });
  return 0;
}
