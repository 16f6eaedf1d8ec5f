// Freezing parameters by their Hugging Face names; see freeze.h.
#include "frugal/model/freeze.h"

#include <fnmatch.h>

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "frugal/core/console.h"
#include "frugal/ckpt/checkpoint.h"  // xxh3_hex
#include "frugal/core/errors.h"
#include "frugal/model/model_family.h"

namespace frugal {

std::vector<std::string> freeze_patterns(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string p = text.substr(start, end - start);
    const size_t a = p.find_first_not_of(" \t"), b = p.find_last_not_of(" \t");
    if (a != std::string::npos) out.push_back(p.substr(a, b - a + 1));
    start = end + 1;
  }
  return out;
}

namespace {

bool matches(const std::string& pattern, const std::string& name) {
  return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

struct Names {
  std::vector<std::string> hf;  // the Hugging Face tensors the parameter holds
  std::string tied_head;        // the head's name where the parameter is also the (tied) head
};

// Each parameter's Hugging Face names, by its frugal name.
std::map<std::string, Names> names_by_parameter(const CausalLmImpl& model) {
  const HfLayout layout = model_family(model.config().arch).hf_layout(model.config());
  std::map<std::string, Names> names;
  for (const HfTensor& t : layout.tensors) {
    Names& n = names[t.frugal];
    n.hf = t.hf;
    if (!layout.tied_head.empty() && std::find(t.hf.begin(), t.hf.end(), layout.embedding) != t.hf.end())
      n.tied_head = layout.tied_head;
  }
  return names;
}

}  // namespace

FrozenParameters freeze_parameters(CausalLmImpl& model, const std::string& text) {
  FrozenParameters out;
  const std::vector<std::string> patterns = freeze_patterns(text);
  const auto params = model.named_parameter_list();
  if (patterns.empty()) {
    for (const auto& [name, p] : params) out.trainable_elements += p.numel();
    return out;
  }
  const auto names = names_by_parameter(model);
  std::vector<bool> used(patterns.size(), false);
  auto matched = [&](const std::string& h) {
    bool any = false;
    for (size_t k = 0; k < patterns.size(); ++k)
      if (matches(patterns[k], h)) used[k] = any = true;
    return any;
  };
  std::vector<at::Tensor> frozen;
  std::vector<std::string> examples;
  for (const auto& [name, p] : params) {
    const auto it = names.find(name);
    const Names n = it != names.end() ? it->second : Names{{name}, ""};
    if (examples.size() < 3) examples.push_back(n.hf.front());
    std::vector<std::string> hit, missed;
    for (const std::string& h : n.hf) (matched(h) ? hit : missed).push_back(h);
    // A tied head is the embedding itself: naming either freezes both, and the run says so.
    const bool head = !n.tied_head.empty() && matched(n.tied_head);
    if (hit.empty() && !head) {
      out.trainable_elements += p.numel();
      continue;
    }
    if (!n.tied_head.empty() && (hit.empty() || !head))
      Console::get().line(fmt::format("train.freeze: {} and {} are one tensor (a tied head): both are frozen",
                                      n.hf.front(), n.tied_head));
    else if (!missed.empty())
      throw ConfigError(
          fmt::format("train.freeze = \"{}\" freezes {} but not {}, which frugal holds with it in one tensor ({}): "
                      "freeze all of them or none (e.g. add \"{}\")",
                      text, fmt::join(hit, ", "), fmt::join(missed, ", "), name, missed.front()));
    frozen.push_back(p);
    out.hf_names.insert(out.hf_names.end(), n.hf.begin(), n.hf.end());
    if (!n.tied_head.empty()) out.hf_names.push_back(n.tied_head);
    out.tensors += 1;
    out.frozen_elements += p.numel();
  }
  for (size_t k = 0; k < patterns.size(); ++k)
    if (!used[k])
      throw ConfigError(
          fmt::format("train.freeze: \"{}\" matches no parameter of this {}; the names are those `frugal export` "
                      "writes, such as {} (globs: *, ?, [0-3])",
                      patterns[k], model.describe(), fmt::join(examples, ", ")));
  if (out.trainable_elements == 0)
    throw ConfigError(fmt::format("train.freeze = \"{}\" freezes every parameter: nothing would train", text));
  for (at::Tensor& p : frozen) p.requires_grad_(false);
  return out;
}

namespace {
std::string digest(const at::Tensor& t) {
  const at::Tensor c = t.detach().cpu().contiguous();
  return xxh3_hex(std::string(static_cast<const char*>(c.data_ptr()), c.nbytes()));
}
}  // namespace

nlohmann::json frozen_base(const torch::nn::Module& module, const std::string& init_from) {
  if (init_from.empty()) return nullptr;
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& p : module.named_parameters(/*recurse=*/true))
    if (!p.value().requires_grad()) tensors[p.key()] = digest(p.value());
  if (tensors.empty()) return nullptr;
  return {{"init_from", init_from}, {"tensors", tensors}};
}

NamedTensors without_frozen(NamedTensors tensors, const nlohmann::json& frozen) {
  if (!frozen.is_object() || !frozen.contains("tensors")) return tensors;
  const auto& names = frozen["tensors"];
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(), [&](const auto& t) { return names.contains(t.first); }),
                tensors.end());
  return tensors;
}

void check_frozen_base(const torch::nn::Module& module, const nlohmann::json& frozen, const std::string& origin) {
  std::map<std::string, at::Tensor> params;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) params.emplace(p.key(), p.value());
  const std::string base = frozen.value("init_from", "");
  for (const auto& [name, want] : frozen.at("tensors").items()) {
    const auto it = params.find(name);
    if (it == params.end() || it->second.requires_grad() || digest(it->second) != want.get<std::string>())
      throw ConfigError(fmt::format(
          "{} leaves its frozen tensor {} to the base it was trained on, model.init_from = \"{}\", but {}: the base "
          "changed since (or names another model). Put back the base weights the run started from",
          origin, name, base,
          it == params.end()           ? "this model has no such parameter"
          : it->second.requires_grad() ? "train.freeze no longer freezes it"
                                       : "the tensor it loads from there differs"));
  }
}

}  // namespace frugal
