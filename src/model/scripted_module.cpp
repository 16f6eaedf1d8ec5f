// A TorchScript module as a torch::nn::Module; see scripted_module.h.
#include "frugal/model/scripted_module.h"

#include <torch/script.h>
#include <torch/version.h>

#include <fmt/format.h>

#include <filesystem>

#include "frugal/core/errors.h"

namespace frugal {

namespace {

// The holder of `dotted`'s last component: the chain of child modules named by the components
// before it, created on first use, so that named_parameters() gives the Python names back.
torch::nn::Module& holder(torch::nn::Module& root, const std::string& dotted, std::string* leaf) {
  torch::nn::Module* at = &root;
  size_t start = 0;
  for (size_t dot = dotted.find('.'); dot != std::string::npos; dot = dotted.find('.', start)) {
    const std::string part = dotted.substr(start, dot - start);
    auto children = at->named_children();
    if (auto* found = children.find(part)) {
      at = found->get();
    } else {
      at = at->register_module(part, std::make_shared<torch::nn::Module>(part)).get();
    }
    start = dot + 1;
  }
  *leaf = dotted.substr(start);
  return *at;
}

}  // namespace

std::string torchscript_path(const std::string& model_source) {
  const std::string prefix = "torchscript:";
  return model_source.rfind(prefix, 0) == 0 ? model_source.substr(prefix.size()) : std::string();
}

ScriptedModuleImpl::ScriptedModuleImpl(const std::string& path) : torch::nn::Module("ScriptedModule"), path_(path) {
  if (!std::filesystem::is_regular_file(path))
    throw ConfigError(
        fmt::format("model.source = \"torchscript:{}\": no such file (write it with "
                    "torch.jit.script(module).save(PATH))",
                    path));
  try {
    script_ = std::make_unique<torch::jit::Module>(torch::jit::load(path, torch::kCPU));
  } catch (const c10::Error& e) {
    throw ConfigError(
        fmt::format("model.source = \"torchscript:{}\": not a TorchScript archive that this "
                    "LibTorch ({}.{}) can load: {}",
                    path, TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, e.what_without_backtrace()));
  }
  const auto method = script_->find_method("forward");
  // forward's schema counts `self`: (self, x, y).
  if (!method || method->function().getSchema().arguments().size() != 3)
    throw ConfigError(
        fmt::format("model.source = \"torchscript:{}\": forward must take (x, y) and return the "
                    "batch's mean loss; it is {}",
                    path, method ? c10::str(method->function().getSchema()) : std::string("missing")));
  // The script's tensors themselves (not copies): the interpreter, the optimizer and the
  // checkpoint all act on the same storage; `to(device)` swaps their data in place.
  std::string leaf;
  for (const auto& p : script_->named_parameters(/*recurse=*/true))
    holder(*this, p.name, &leaf).register_parameter(leaf, p.value, p.value.requires_grad());
  for (const auto& b : script_->named_buffers(/*recurse=*/true))
    holder(*this, b.name, &leaf).register_buffer(leaf, b.value);
  script_->train(true);
}

ScriptedModuleImpl::~ScriptedModuleImpl() = default;

at::Tensor ScriptedModuleImpl::forward(const at::Tensor& x, const at::Tensor& y) {
  const c10::IValue out = script_->forward({x, y});
  if (!out.isTensor() || out.toTensor().dim() != 0 || !out.toTensor().is_floating_point())
    throw DataError(
        fmt::format("{}: forward(x, y) must return the batch's mean loss as a 0-dim floating tensor; it "
                    "returned {}",
                    path_,
                    out.isTensor() ? fmt::format("a {} tensor of shape {}", c10::toString(out.toTensor().scalar_type()),
                                                 c10::str(out.toTensor().sizes()))
                                   : out.tagKind()));
  return out.toTensor();
}

void ScriptedModuleImpl::train(bool on) {
  torch::nn::Module::train(on);
  script_->train(on);
}

}  // namespace frugal
