// Fuzz target: razorkv's head-plan JSON. Accepted plans must survive a write/read round trip.
#include <razorkv/io/json.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  razorkv_fuzz::reject_only_with_razorkv_errors([&] {
    const razorkv::head_plan plan = razorkv::io::head_plan_from_json(text);
    const std::string written = razorkv::io::head_plan_to_json(plan);
    const razorkv::head_plan again = razorkv::io::head_plan_from_json(written);
    razorkv_fuzz::require(razorkv::io::head_plan_to_json(again) == written,
                          "head plan JSON round trip");
  });
  return 0;
}
