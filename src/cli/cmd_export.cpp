// `frugal export RUN_DIR --out DIR`: a run's GPT written as a Hugging Face GPT-2 directory
// (config.json + model.safetensors) that transformers.GPT2LMHeadModel.from_pretrained loads, with
// the run's tokenizer files where transformers can use them (and a note saying how otherwise).
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/model/gpt.h"
#include "frugal/model/hf_gpt2.h"
#include "frugal/model/scripted_module.h"
#include "frugal/model/weights.h"
#include "frugal/train/open_run.h"

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

// The tokenizer files written beside the weights, and what a user reads about them.
struct ExportedTokenizer {
  std::map<std::string, std::string> files;  // name -> bytes
  std::string note;
};

ExportedTokenizer export_tokenizer(const OpenedRun& run) {
  const TokenizerFiles t = run_tokenizer_files(run);
  ExportedTokenizer e;
  if (t.name == "bytes") {
    e.note =
        "byte-level: the token ids are the UTF-8 bytes of the text (ids = list(text.encode()), "
        "text = bytes(ids).decode()); there is no tokenizer file to load";
  } else if (t.name == "hf") {
    // tokenizer.json with a tokenizer_config.json naming the fast tokenizer class: what
    // transformers.AutoTokenizer.from_pretrained(DIR) reads.
    e.files["tokenizer.json"] = read_file(t.model_file);
    e.files["tokenizer_config.json"] =
        nlohmann::json{{"tokenizer_class", "PreTrainedTokenizerFast"}, {"model_max_length", run.config.model.block}}
            .dump(2) +
        "\n";
    e.note = "tokenizer.json (the dataset's Hugging Face tokenizer): transformers.AutoTokenizer.from_pretrained(DIR)";
  } else {
    // transformers has no GPT-2 tokenizer class over a SentencePiece model; the model file itself is
    // what encodes and decodes exactly as the run did.
    e.files["tokenizer.model"] = read_file(t.model_file);
    e.note =
        "tokenizer.model (SentencePiece): transformers has no GPT-2 tokenizer for it; encode and decode with "
        "sentencepiece.SentencePieceProcessor(model_file=\"DIR/tokenizer.model\")";
  }
  return e;
}

int run_export(const ExportArgs& a) {
  const OpenedRun run = open_run(a.run_dir);
  const Config& c = run.config;
  FRUGAL_CHECK(torchscript_path(c.model.source).empty(), ConfigError,
               fmt::format("{}: the run trained model.source = \"{}\"; frugal export writes the reference GPT "
                           "(its module and weights are the script's own: save them from Python)",
                           run.config_file, c.model.source));
  const std::string weights = a.weights.empty() ? run_weights(a.run_dir, "export") : named_weights(a.weights);
  const ExportedTokenizer tok = export_tokenizer(run);
  const c10::ScalarType dtype = a.dtype == "bf16" ? at::kBFloat16 : a.dtype == "fp16" ? at::kHalf : at::kFloat;
  Gpt model(c.model);
  reading_named_input("the weights " + weights,
                      [&] { load_parameters(model->named_parameter_list(), load_safetensors(weights), weights); });
  write_hf_gpt2(model->named_parameter_list(), c.model, a.out, dtype, tok.files);
  std::vector<std::string> files = {"config.json", "model.safetensors"};
  for (const auto& [name, bytes] : tok.files) files.push_back(name);
  const std::string& note = tok.note;
  if (a.json) {
    nlohmann::json j{{"out", a.out},
                     {"weights", weights},
                     {"dtype", a.dtype},
                     {"files", files},
                     {"parameters", model->parameter_count()},
                     {"tokenizer", note}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print(
        "exported {} ({} parameters, {}) to {}: {}\n"
        "  load it: transformers.GPT2LMHeadModel.from_pretrained(\"{}\")\n"
        "  tokenizer: {}\n",
        weights, model->parameter_count(), a.dtype, a.out, fmt::join(files, ", "), a.out, note);
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
  cmd->add_option("run_dir", args->run_dir, "run directory, e.g. runs/demo")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("-o,--out", args->out, "directory to write; must not exist (written whole or not at all)")
      ->required();
  cmd->add_option("--weights", args->weights,
                  "a weights file or a checkpoint directory (default RUN_DIR/final/model.safetensors, else the newest "
                  "sound checkpoint's)");
  cmd->add_option("--dtype", args->dtype, "dtype of the written weights")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "print one JSON object: out, weights, dtype, files, parameters");
  cmd->callback([args, run] { *run = [args] { return run_export(*args); }; });
}

}  // namespace frugal::cli
