// Strict parameter loading; see weights.h.
#include "frugal/model/weights.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/StringUtil.h>
#include <fmt/format.h>

#include <set>

#include "frugal/core/errors.h"

namespace frugal {

void load_parameters(const NamedTensors& params, const SafetensorsFile& file, const std::string& origin) {
  std::set<std::string> wanted;
  for (const auto& [name, p] : params) {
    wanted.insert(name);
    const at::Tensor* t = file.find(name);
    if (!t)
      throw CheckpointError(fmt::format("{}: tensor '{}' is missing (was it written by a model with "
                                        "the same [model] config?)",
                                        origin, name));
    if (t->sizes() != p.sizes())
      throw CheckpointError(fmt::format("{}: tensor '{}' has shape {} but the model expects {}; "
                                        "the [model] config differs from the one that wrote it",
                                        origin, name, c10::str(t->sizes()), c10::str(p.sizes())));
  }
  for (const auto& [name, t] : file.tensors)
    if (!wanted.count(name))
      throw CheckpointError(fmt::format("{}: unexpected tensor '{}' that the model does not have", origin, name));
  c10::NoGradGuard no_grad;
  for (const auto& [name, p] : params) p.copy_(*file.find(name));
}

}  // namespace frugal
