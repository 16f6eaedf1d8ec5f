// The family table; see model_family.h.
#include "frugal/model/model_family.h"

#include <algorithm>

#include "model/internal/families.h"

namespace frugal {
namespace {
const std::vector<const ModelFamily*>& families() {
  static const std::vector<const ModelFamily*> all = {&gpt_family(), &llama_family()};
  return all;
}
}  // namespace

const ModelFamily& model_family(ModelConfig::Arch arch) {
  for (const ModelFamily* f : families())
    if (f->arch() == arch) return *f;
  return gpt_family();
}

const ModelFamily* model_family_for_hf(const std::string& model_type) {
  for (const ModelFamily* f : families()) {
    const auto types = f->hf_model_types();
    if (std::find(types.begin(), types.end(), model_type) != types.end()) return f;
  }
  return nullptr;
}

std::vector<std::string> hf_model_types() {
  std::vector<std::string> out;
  for (const ModelFamily* f : families())
    for (const auto& t : f->hf_model_types()) out.push_back(t);
  return out;
}

CausalLm make_causal_lm(const ModelConfig& m) { return model_family(m.arch).make(m); }

}  // namespace frugal
