// `frugal export RUN_DIR --out DIR`: a run's GPT written as a Hugging Face GPT-2 directory
// (config.json + model.safetensors) that transformers.GPT2LMHeadModel.from_pretrained loads.
#include <torch/torch.h>

#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/model/gpt.h"
#include "frugal/model/hf_gpt2.h"
#include "frugal/model/scripted_module.h"
#include "frugal/model/weights.h"

namespace frugal::cli {

namespace {
namespace fs = std::filesystem;

struct ExportArgs {
  std::string run_dir;
  std::string out;
  std::string weights;
  std::string dtype = "fp32";
  bool json = false;
};

int run_export(const ExportArgs& a) {
  const std::string cfg = a.run_dir + "/config.toml";
  if (!fs::is_regular_file(cfg))
    throw ConfigError(fmt::format("{} is not a run directory: {} is missing", a.run_dir, cfg));
  const Config c = resolve_config(cfg, {}, {}).config;  // the run's own resolved file
  FRUGAL_CHECK(torchscript_path(c.model.source).empty(), ConfigError,
               fmt::format("{}: the run trained model.source = \"{}\"; frugal export writes the reference GPT "
                           "(its module and weights are the script's own: save them from Python)",
                           cfg, c.model.source));
  const std::string weights = a.weights.empty() ? run_weights(a.run_dir, "export") : a.weights;
  if (!fs::is_regular_file(weights)) throw ConfigError(fmt::format("--weights {}: no such file", weights));
  const c10::ScalarType dtype = a.dtype == "bf16" ? at::kBFloat16 : a.dtype == "fp16" ? at::kHalf : at::kFloat;
  Gpt model(c.model);
  reading_named_input("the weights " + weights, [&] {
    load_parameters(model->named_parameter_list(), load_safetensors(weights), weights);
  });
  write_hf_gpt2(model->named_parameter_list(), c.model, a.out, dtype);
  if (a.json) {
    nlohmann::json j{{"out", a.out}, {"weights", weights}, {"dtype", a.dtype},
                     {"files", {"config.json", "model.safetensors"}}, {"parameters", model->parameter_count()}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("exported {} ({} parameters, {}) to {}: config.json, model.safetensors\n"
               "  load it: transformers.GPT2LMHeadModel.from_pretrained(\"{}\")\n",
               weights, model->parameter_count(), a.dtype, a.out, a.out);
  }
  return 0;
}
}  // namespace

void add_export_command(CLI::App& app, Run* run) {
  auto args = std::make_shared<ExportArgs>();
  auto* cmd = app.add_subcommand(
      "export",
      "Write a run's GPT as a Hugging Face GPT-2 directory (config.json + model.safetensors) that "
      "transformers.GPT2LMHeadModel.from_pretrained loads. Without final/ it uses the newest sound checkpoint.");
  cmd->add_option("run_dir", args->run_dir, "run directory, e.g. runs/demo")->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("-o,--out", args->out, "directory to write; must not exist (written whole or not at all)")
      ->required();
  cmd->add_option("--weights", args->weights,
                  "weights file (default RUN_DIR/final/model.safetensors, else the newest sound checkpoint's)");
  cmd->add_option("--dtype", args->dtype, "dtype of the written weights")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))->capture_default_str();
  cmd->add_flag("--json", args->json, "print one JSON object: out, weights, dtype, files, parameters");
  cmd->callback([args, run] { *run = [args] { return run_export(*args); }; });
}

}  // namespace frugal::cli
