// docs/trained_model.md's block (trained_engine), compiled against the trained model's engine.
#include "engine/tiny_llama.hpp"

void documented_engine(const tiny_llama::model& model, const razorkv::head_plan& plan,
                       const std::vector<int>& tokens, int token, razorkv::index_t position) {
  Eigen::VectorXf logits;
  // @snippet
}

int main() { return 0; }
