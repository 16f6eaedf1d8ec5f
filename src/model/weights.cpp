// Strict parameter loading; see weights.h.
#include "frugal/model/weights.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/StringUtil.h>
#include <fmt/format.h>

#include <set>
#include <unordered_map>

#include "frugal/core/errors.h"

namespace frugal {

std::vector<at::Tensor> matched_weights(const NamedTensors& params, const SafetensorsFile& file,
                                        const std::string& origin) {
  std::unordered_map<std::string, const at::Tensor*> stored;  // one lookup per parameter, not a scan
  stored.reserve(file.tensors.size());
  for (const auto& [name, t] : file.tensors) stored.emplace(name, &t);
  std::set<std::string> wanted;
  for (const auto& [name, p] : params) {
    wanted.insert(name);
    auto it = stored.find(name);
    if (it == stored.end())
      throw CheckpointError(
          fmt::format("{}: tensor '{}' is missing (was it written by a model with "
                      "the same [model] config?)",
                      origin, name));
    const at::Tensor& t = *it->second;
    if (t.sizes() != p.sizes())
      throw CheckpointError(
          fmt::format("{}: tensor '{}' has shape {} but the model expects {}; "
                      "the [model] config differs from the one that wrote it",
                      origin, name, c10::str(t.sizes()), c10::str(p.sizes())));
    // Floating weights load into floating parameters of any width (bf16 -> fp32); an integer or
    // bool tensor is not a weight of this parameter, and casting it would train on garbage.
    if (t.is_floating_point() != p.is_floating_point() ||
        (t.scalar_type() == at::kBool) != (p.scalar_type() == at::kBool))
      throw CheckpointError(
          fmt::format("{}: tensor '{}' is stored as {} but the parameter is {}; "
                      "a floating-point weight is needed (was the file written for "
                      "another model?)",
                      origin, name, c10::toString(t.scalar_type()), c10::toString(p.scalar_type())));
  }
  for (const auto& [name, t] : file.tensors)
    if (!wanted.count(name))
      throw CheckpointError(fmt::format("{}: unexpected tensor '{}' that the model does not have", origin, name));
  std::vector<at::Tensor> out;
  out.reserve(params.size());
  for (const auto& [name, p] : params) out.push_back(*stored.at(name));
  return out;
}

void load_parameters(const NamedTensors& params, const SafetensorsFile& file, const std::string& origin) {
  const std::vector<at::Tensor> values = matched_weights(params, file, origin);
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) params[i].second.copy_(values[i]);
}

}  // namespace frugal
