// docs/using.md's shared-plan block (using_shared_plan): a plan shared by every sequence's cache,
// K/V from the engine's memory resource.
#include <memory_resource>
#include <string>

#include <razorkv/io/json.hpp>

#include "docs/doc_data.hpp"

namespace {
std::pmr::memory_resource* engine_kv_pool() {
  static std::pmr::unsynchronized_pool_resource pool;
  return &pool;
}
}  // namespace

int main() {
  const std::string text = razorkv::io::head_plan_to_json(doc::plan(2, 4, 2, 32));

  // @snippet

  return sequence.plan().num_retrieval() == 1 && sequence.memory_resource() == pool ? 0 : 1;
}
