// A model written in Python: a module compiled with torch.jit.script and saved to a file, trained
// by frugal's loop (model.source = "torchscript:FILE"). The contract (docs/library.md, "A model
// written in Python"):
//
//   class Net(torch.nn.Module):
//       def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
//           return F.cross_entropy(self.body(x), y)      # the mean loss of the batch, 0-dim
//   torch.jit.script(Net()).save("net.pt")
//
// x and y are the batch of data.source (token windows and their next tokens, or a record
// dataset's features and labels), already on run.device. The script's parameters and buffers
// are this module's, under the same dotted names as the Python module's state_dict(), so
// checkpoints, the optimizer, data parallelism and exact resume see them as any other module's.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>

namespace torch::jit {
struct Module;
}  // namespace torch::jit

namespace frugal {

class ScriptedModuleImpl : public torch::nn::Module {
 public:
  // Loads `path` (on the CPU). Throws ConfigError naming the file when it is not a TorchScript
  // archive or its forward does not take (x, y).
  explicit ScriptedModuleImpl(const std::string& path);
  ~ScriptedModuleImpl() override;

  // The script's forward(x, y); throws DataError naming the file unless it returns a 0-dim
  // floating tensor.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& y);
  // Switches the script's own modules too (dropout, batch norm).
  void train(bool on = true) override;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<torch::jit::Module> script_;
};
TORCH_MODULE(ScriptedModule);

// model.source spelled "torchscript:FILE": FILE; "" for the reference GPT ("gpt").
std::string torchscript_path(const std::string& model_source);

}  // namespace frugal
