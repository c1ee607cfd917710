// Fuzz target: razorkv's head-scores JSON. Accepted scores must survive a write/read round trip.
#include <razorkv/io/json.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  razorkv_fuzz::reject_only_with_razorkv_errors([&] {
    const razorkv::head_scores scores = razorkv::io::head_scores_from_json(text);
    const std::string written = razorkv::io::head_scores_to_json(scores);
    razorkv_fuzz::require(
        razorkv::io::head_scores_to_json(razorkv::io::head_scores_from_json(written)) == written,
        "head scores JSON round trip");
  });
  return 0;
}
