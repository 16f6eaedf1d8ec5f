// `frugal export RUN_DIR --out DIR`: a run's model written as a Hugging Face directory of its
// family (model/model_family.h: GPT-2, or Llama / Qwen2 / Qwen3 / Mistral) that
// transformers.AutoModelForCausalLM.from_pretrained loads: config.json, model.safetensors (or
// shards with their index past --max-shard-size), generation_config.json, and the run's tokenizer
// files where transformers can use them (with the chat template of the checkpoint the run started
// from), and a note saying how otherwise. A LoRA run's adapters are merged into the weights, or
// with --adapter written alone as PEFT's adapter directory (model/peft.h).
#include <torch/torch.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "frugal/ckpt/safetensors.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/model/hf_checkpoint.h"
#include "frugal/model/lora.h"
#include "frugal/model/model_family.h"
#include "frugal/model/peft.h"
#include "frugal/model/scripted_module.h"
#include "frugal/model/weights.h"
#include "frugal/train/open_run.h"

namespace frugal::cli {

namespace {
namespace fs = std::filesystem;
using nlohmann::json;

struct ExportArgs {
  std::string run_dir;
  std::string out;
  std::string weights;
  std::string dtype = "fp32";
  std::string max_shard_size = "5GB";
  bool json = false;
  bool adapter = false;
  bool dtype_given = false, max_shard_size_given = false;  // set on the command line
};

// The tokenizer files written beside the weights, and what a user reads about them.
struct ExportedTokenizer {
  std::map<std::string, std::string> files;  // name -> bytes
  std::string note;
  std::optional<int64_t> end_token;  // the one id that ends a document in the run's data, if any
};

// The config files of the checkpoint the run started from (model.init_from): the run's own copy
// (RUN/hf_source, kept when it started), else the directory itself where it still exists.
std::optional<fs::path> source_dir(const OpenedRun& run) {
  std::error_code ec;
  const fs::path kept = run.dir.hf_source();
  if (fs::is_regular_file(kept / "config.json", ec)) return kept;
  const std::string dir = hf_init_dir(run.config.model);
  if (dir.empty() || !fs::is_regular_file(fs::path(dir) / "config.json", ec)) return std::nullopt;
  return fs::path(dir);
}

std::optional<json> source_config(const OpenedRun& run) {
  const auto dir = source_dir(run);
  if (!dir) return std::nullopt;
  try {
    json j = json::parse(read_small_file((*dir / "config.json").string()));
    if (j.is_object()) return j;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// The chat template the run's documents were rendered with, as the exported tokenizer's own: it
// replaces the source checkpoint's (tokenizer_config.json's chat_template, chat_template.json),
// which may be another (`frugal prepare --chat-template`).
void use_chat_template(const std::string& file, ExportedTokenizer& e) {
  e.files["chat_template.jinja"] = read_file(file);
  e.files.erase("chat_template.json");
  json config = json::parse(e.files["tokenizer_config.json"], nullptr, false);
  if (config.is_object() && config.contains("chat_template")) {
    config.erase("chat_template");
    e.files["tokenizer_config.json"] = config.dump(2) + "\n";
  }
  e.note += " (the chat template the run's documents were rendered with: chat_template.jinja)";
}

// The files beside a Hugging Face tokenizer.json that say how to use it: its chat template and
// special tokens. Taken from the checkpoint the run started from when that directory holds the
// very tokenizer the run trained with; otherwise a tokenizer_config.json naming the fast class.
void hf_tokenizer_files(const OpenedRun& run, const std::string& tokenizer_json, const std::string& chat_template,
                        ExportedTokenizer& e) {
  e.files["tokenizer.json"] = tokenizer_json;
  const auto src = source_dir(run);
  std::error_code ec;
  if (src && fs::is_regular_file(*src / "tokenizer.json", ec) &&
      read_file((*src / "tokenizer.json").string()) == tokenizer_json &&
      fs::is_regular_file(*src / "tokenizer_config.json", ec)) {
    for (const char* name :
         {"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "chat_template.json"})
      if (fs::is_regular_file(*src / name, ec)) e.files[name] = read_file((*src / name).string());
    e.note =
        fmt::format("tokenizer.json with {}'s tokenizer_config.json{}: transformers.AutoTokenizer.from_pretrained(DIR)",
                    src->string(),
                    e.files.count("chat_template.jinja") ||
                            json::parse(e.files["tokenizer_config.json"], nullptr, false).contains("chat_template")
                        ? " (and its chat template)"
                        : "");
    if (!chat_template.empty()) use_chat_template(chat_template, e);
    return;
  }
  e.files["tokenizer_config.json"] =
      json{{"tokenizer_class", "PreTrainedTokenizerFast"}, {"model_max_length", run.config.model.block}}.dump(2) + "\n";
  e.note = "tokenizer.json (the dataset's Hugging Face tokenizer): transformers.AutoTokenizer.from_pretrained(DIR)";
  if (!chat_template.empty()) use_chat_template(chat_template, e);
}

// The token that ends a document in the run's data: the dataset's separator where it is one id
// (a SentencePiece model's </s>, a Hugging Face tokenizer's end-of-text); for builtin:arith the
// newline that ends each problem (where `frugal sample` stops). Byte-level text has none: its
// documents end with two newlines, which no one id can say.
std::optional<int64_t> document_end_token(const OpenedRun& run, const TokenizerFiles& t) {
  if (run.config.data.source.kind == DataSource::Kind::kArith) return '\n';
  std::error_code ec;
  const fs::path manifest = fs::path(t.dir) / "manifest.json";
  if (t.dir.empty() || !fs::is_regular_file(manifest, ec)) return std::nullopt;
  const json m = json::parse(read_small_file(manifest.string()), nullptr, false);
  const json tok = m.is_object() ? m.value("tokenizer", json()) : json();
  const json sep = tok.is_object() ? tok.value("separator", json()) : json();
  if (sep.is_array() && sep.size() == 1 && sep[0].is_number_integer()) return sep[0].get<int64_t>();
  return std::nullopt;
}

ExportedTokenizer export_tokenizer(const OpenedRun& run) {
  const TokenizerFiles t = run_tokenizer_files(run);
  ExportedTokenizer e;
  e.end_token = document_end_token(run, t);
  if (t.name == "bytes") {
    e.note =
        "byte-level: the token ids are the UTF-8 bytes of the text (ids = list(text.encode()), "
        "text = bytes(ids).decode()); there is no tokenizer file to load";
  } else if (t.name == "hf") {
    hf_tokenizer_files(run, read_file(t.model_file), t.chat_template_file, e);
  } else {
    // transformers has no tokenizer class over a bare SentencePiece model for these families; the
    // model file itself is what encodes and decodes exactly as the run did.
    e.files["tokenizer.model"] = read_file(t.model_file);
    e.note =
        "tokenizer.model (SentencePiece): encode and decode with "
        "sentencepiece.SentencePieceProcessor(model_file=\"DIR/tokenizer.model\")";
  }
  return e;
}

// generation_config.json: the source checkpoint's, else the token ids config.json names (none for
// a byte-level text run: generate() then runs to max_new_tokens, as `frugal sample` does).
std::string generation_config(const OpenedRun& run, const json& config) {
  const auto src = source_dir(run);
  std::error_code ec;
  if (src && fs::is_regular_file(*src / "generation_config.json", ec))
    return read_file((*src / "generation_config.json").string());
  json g{{"_from_model_config", true}};
  for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (config.contains(k) && !config[k].is_null()) g[k] = config[k];
  return g.dump(2) + "\n";
}

// GPT-2 learns a row of position embeddings per position. A run whose model.block is shorter than
// its source's n_positions loaded and trained the first rows only; the others are the source's,
// untouched, and go out with the run's so that the export keeps the source's context. Without the
// source's weights (its directory gone) the export has model.block's positions, as said.
void keep_source_positions(const OpenedRun& run, json& config, NamedTensors& tensors, c10::ScalarType dtype,
                           std::string& note) {
  const ModelConfig& m = run.config.model;
  const std::optional<json> source = source_config(run);
  if (m.arch != ModelConfig::Arch::kGpt || !source || !(*source)["n_positions"].is_number_integer()) return;
  const int64_t positions = (*source)["n_positions"].get<int64_t>();
  const std::string dir = hf_init_dir(m);
  std::error_code ec;
  if (positions <= m.block) return;
  if (dir.empty() || !fs::is_directory(dir, ec)) {
    note = fmt::format("; {} positions, not the source's {}: its weights are gone", m.block, positions);
    return;
  }
  const HfLayout layout = model_family(m.arch).hf_layout(m);
  for (const std::string& file : hf_weight_files(dir))
    for (const auto& [name, t] : load_safetensors(file).tensors) {
      if ((layout.canonical ? layout.canonical(name) : name) != "transformer.wpe.weight") continue;
      for (auto& [out_name, out] : tensors)
        if (out_name == "transformer.wpe.weight" && t.size(0) == positions)
          out = at::cat({out, t.narrow(0, m.block, positions - m.block).to(at::kCPU, dtype)}).contiguous();
      config["n_positions"] = positions;
      note = fmt::format("; positions {}-{} are the source's (the run trained the first {})", m.block, positions - 1,
                         m.block);
      return;
    }
}

// "5GB" (10^9), "500MB", "2GiB" (2^30), "100KB" or a byte count, as transformers' max_shard_size:
// digits with at most one '.', then a unit. At least one byte and under 2^63: 0 (which
// write_hf_dir would read as "no limit"), a negative, a fraction of a byte or too large a size is
// refused.
int64_t parse_size(const std::string& text) {
  const std::string allowed =
      "expected a positive size such as 5GB, 500MB, 2GiB, 100KB or a byte count such as 1000000";
  size_t i = 0, digits = 0, dots = 0;
  for (; i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'); ++i)
    (text[i] == '.' ? dots : digits) += 1;
  const std::string unit = text.substr(i);
  static const std::map<std::string, double> units = {{"", 1},     {"B", 1},        {"KB", 1e3},      {"MB", 1e6},
                                                      {"GB", 1e9}, {"KiB", 1024.0}, {"MiB", 1 << 20}, {"GiB", 1 << 30}};
  auto u = units.find(unit);
  if (digits == 0 || dots > 1 || u == units.end())
    throw ConfigError(fmt::format("--max-shard-size {}: {}", text, allowed));
  const double bytes = std::strtod(text.substr(0, i).c_str(), nullptr) * u->second;  // inf when too large
  if (bytes < 1)
    throw ConfigError(fmt::format("--max-shard-size {}: a shard must hold at least 1 byte; {}", text, allowed));
  if (bytes >= 9.2e18)
    throw ConfigError(fmt::format("--max-shard-size {}: more bytes than a file can hold; {}", text, allowed));
  return static_cast<int64_t>(bytes);
}

// `--adapter`: the run's LoRA adapters as PEFT's adapter directory.
// The run's tokenizer files go with the adapters (a chat fine-tune's template among them), as a
// fine-tune's output folder holds them: AutoTokenizer.from_pretrained(DIR) reads the run's own.
int export_adapter(const ExportArgs& a, const OpenedRun& run, CausalLmImpl& model, const std::string& weights,
                   const ExportedTokenizer& tok) {
  const Config& c = run.config;
  const std::string base = c.model.init_from.rfind("hf:", 0) == 0 ? c.model.init_from.substr(3) : c.model.init_from;
  const std::string cls = model_family(c.model.arch).hf_class(c.model);
  const LoraSetup setup = lora_setup(c.lora);
  write_peft_adapter(model, setup, base, cls, a.out, tok.files);
  std::vector<std::string> files = {"adapter_config.json", "adapter_model.safetensors"};
  for (const auto& [name, text] : tok.files) files.push_back(name);
  int64_t n = 0;
  for (const auto& [name, p] : model.named_parameter_list())
    if (p.requires_grad()) n += p.numel();
  if (a.json) {
    fmt::print("{}\n", json{{"out", a.out},
                            {"weights", weights},
                            {"adapter", true},
                            {"files", files},
                            {"parameters", n},
                            {"base", base},
                            {"tokenizer", tok.note}}
                           .dump());
  } else {
    fmt::print(
        "exported the {} adapters of {} ({} parameters, r={}) to {}\n"
        "  load them: peft.PeftModel.from_pretrained({}.from_pretrained(\"{}\"), \"{}\")\n"
        "  tokenizer: {}\n",
        setup.dora ? "DoRA" : "LoRA", weights, n, setup.rank, a.out, cls, base.empty() ? "BASE" : base, a.out,
        tok.note);
  }
  return 0;
}

// The model's parameters, a LoRA run's adapters merged into the weights they adapt (onto the base
// itself where training held those weights in bf16 and the base is still there).
NamedTensors exported_parameters(CausalLmImpl& model, const Config& c, const std::string& weights) {
  if (!has_lora(model)) return model.named_parameter_list();
  const StoredBase base = stored_base_weights(model, c, weights);
  if (!base.gone.empty())
    fmt::print(stderr,
               "frugal export: the base model.init_from = \"{}\" holds no weights any more ({}); the adapters are "
               "merged onto the run's own bf16 copies of the weights they adapt ({}), which differ from the base's "
               "by that rounding (put the base back for the merge onto it)\n",
               c.model.init_from, base.gone, weights);
  return merged_parameter_list(model, base.weights);
}

// --adapter writes the adapters as PEFT saves them: one adapter_model.safetensors in fp32, the
// dtype the adapters train in (a rounded copy would not be the run's adapters).
void check_adapter_flags(const ExportArgs& a) {
  const std::pair<bool, const char*> flags[] = {{a.dtype_given && a.dtype != "fp32", "--dtype"},
                                                {a.max_shard_size_given, "--max-shard-size"}};
  for (const auto& [given, flag] : flags)
    FRUGAL_CHECK(!given, ConfigError,
                 fmt::format("{} does not apply with --adapter: the adapter is written as PEFT saves it, one "
                             "adapter_model.safetensors in fp32 (the adapters' own precision); drop {}, or leave "
                             "out --adapter to write the merged model",
                             flag, flag));
}

int run_export(const ExportArgs& a) {
  FRUGAL_CHECK(!a.out.empty(), ConfigError, "--out must not be empty: name the directory to write");
  if (a.adapter) check_adapter_flags(a);
  const int64_t max_shard = parse_size(a.max_shard_size);
  const OpenedRun run = open_run(a.run_dir);
  const Config& c = run.config;
  FRUGAL_CHECK(torchscript_path(c.model.source).empty(), ConfigError,
               fmt::format("{}: the run trained model.source = \"{}\"; frugal export writes frugal's own decoders "
                           "(a scripted module's weights are the script's own: save them from Python)",
                           run.config_file, c.model.source));
  const std::string weights = a.weights.empty() ? run_weights(a.run_dir, "export") : named_weights(a.weights);
  const ExportedTokenizer tok = export_tokenizer(run);
  const c10::ScalarType dtype = a.dtype == "bf16" ? at::kBFloat16 : a.dtype == "fp16" ? at::kHalf : at::kFloat;
  const ModelFamily& family = model_family(c.model.arch);
  CausalLm model = family.make(c.model);
  reading_named_input("the weights " + weights, [&] { load_run_weights(*model, c, weights); });
  FRUGAL_CHECK(
      !a.adapter || has_lora(*model), ConfigError,
      fmt::format("--adapter: {} trained no adapters (lora.rank = 0); export the model without --adapter", a.run_dir));
  if (a.adapter) return export_adapter(a, run, *model, weights, tok);
  const std::optional<json> source = source_config(run);
  json config = family.hf_config(c.model, source ? &*source : nullptr);
  config["torch_dtype"] = a.dtype == "bf16" ? "bfloat16" : a.dtype == "fp16" ? "float16" : "float32";
  // A run from random weights has no checkpoint's eos: the id that ends its documents is one.
  if (tok.end_token && (!config.contains("eos_token_id") || config["eos_token_id"].is_null()))
    config["eos_token_id"] = *tok.end_token;
  std::map<std::string, std::string> extra = tok.files;
  extra["generation_config.json"] = generation_config(run, config);
  const NamedTensors params = exported_parameters(*model, c, weights);
  NamedTensors tensors = to_hf_tensors(params, family.hf_layout(c.model), dtype);
  std::string positions;
  keep_source_positions(run, config, tensors, dtype, positions);
  int64_t parameters = 0;
  for (const auto& [name, p] : params) parameters += p.numel();
  write_hf_dir(tensors, config.dump(2) + "\n", a.out, extra, max_shard);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(a.out)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  const std::string cls = config["architectures"][0].get<std::string>();
  if (a.json) {
    json j{{"out", a.out},        {"weights", weights},       {"dtype", a.dtype},
           {"files", files},      {"parameters", parameters}, {"model_type", config["model_type"]},
           {"architecture", cls}, {"tokenizer", tok.note}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print(
        "exported {} ({} parameters, {}{}) to {}: {}\n"
        "  load it: transformers.AutoModelForCausalLM.from_pretrained(\"{}\")  ({})\n"
        "  tokenizer: {}\n",
        weights, parameters, a.dtype, positions, a.out, fmt::join(files, ", "), a.out, cls, tok.note);
  }
  return 0;
}
}  // namespace

void add_export_command(CLI::App& app, Run* run) {
  auto args = std::make_shared<ExportArgs>();
  auto* cmd = app.add_subcommand(
      "export",
      "Write a run's model as a Hugging Face directory of its family (GPT-2, Llama, Qwen2, Qwen3, Mistral: "
      "config.json, safetensors, generation_config.json, the tokenizer files) that "
      "transformers.AutoModelForCausalLM.from_pretrained loads. Without final/ it uses the newest sound checkpoint.");
  cmd->add_option("run_dir", args->run_dir, "run directory, e.g. runs/demo")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("-o,--out", args->out, "directory to write; must not exist (written whole or not at all)")
      ->required();
  cmd->add_option("--weights", args->weights,
                  "a weights file or a checkpoint directory, whose files must match the checksums in its state.json "
                  "(default RUN_DIR/final/model.safetensors, else the newest sound checkpoint's)");
  cmd->add_option("--dtype", args->dtype, "dtype of the written weights (not with --adapter: fp32, as PEFT saves it)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--max-shard-size", args->max_shard_size,
                  "weights larger than this are split into shards model-0000K-of-0000N.safetensors with "
                  "model.safetensors.index.json (as save_pretrained's max_shard_size: 5GB, 500MB, 2GiB, 100KB or a "
                  "byte count; at least 1 byte: 0 and negative sizes are refused; not with --adapter: one file)")
      ->capture_default_str();
  cmd->add_flag(
      "--adapter", args->adapter,
      "a LoRA run: write its adapters as PEFT's adapter directory (adapter_config.json, "
      "adapter_model.safetensors, target_modules naming the modules adapted, and the run's tokenizer files) for "
      "peft.PeftModel.from_pretrained(base, DIR), instead of the merged model");
  cmd->add_flag("--json", args->json,
                "print one JSON object: out, weights, dtype, files, parameters, model_type, architecture, tokenizer");
  cmd->callback([args, run, cmd] {
    args->dtype_given = cmd->count("--dtype") > 0;
    args->max_shard_size_given = cmd->count("--max-shard-size") > 0;
    *run = [args] { return run_export(*args); };
  });
}

}  // namespace frugal::cli
