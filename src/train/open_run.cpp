// A run read back from its directory; see open_run.h.
#include "frugal/train/open_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/core/atomic_file.h"
#include "frugal/model/freeze.h"
#include "frugal/model/lora.h"
#include "frugal/model/hf_checkpoint.h"
#include "frugal/model/weights.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/data/token_dataset.h"

namespace frugal {
namespace fs = std::filesystem;

OpenedRun open_run(const std::string& run_dir) {
  OpenedRun r{RunDir(run_dir), Config{}, ""};
  r.config_file = r.dir.config();
  if (!fs::is_regular_file(r.config_file))
    throw ConfigError(fmt::format("{} is not a run directory: {} is missing", run_dir, r.config_file));
  r.config = resolve_config(r.config_file, {}, {}).config;  // the run's own resolved file
  return r;
}

namespace {
// A checkpoint's weights: its model.safetensors, or the directory itself when the ranks wrote
// them in shards (load_run_weights assembles them).
std::string weights_in(const std::string& checkpoint) {
  const fs::path file = fs::path(checkpoint) / "model.safetensors";
  std::error_code ec;
  return fs::is_regular_file(file, ec) || !fs::is_regular_file(fs::path(checkpoint) / "state.json", ec) ? file.string()
                                                                                                        : checkpoint;
}
}  // namespace

std::string run_weights(const std::string& run_dir, const char* command) {
  const RunDir dir(run_dir);
  if (fs::is_regular_file(dir.final_weights())) return dir.final_weights();
  const std::string root = dir.checkpoints();
  std::string problems;  // each newer checkpoint passed over and why, for the note or the error
  if (fs::is_directory(root)) {
    auto list = list_checkpoints(root);
    std::sort(list.begin(), list.end(), [](const auto& x, const auto& y) { return x.step > y.step; });
    for (const auto& ck : list) {
      const std::string why = ck.complete ? verify_checkpoint(ck.path) : "incomplete";
      if (why.empty()) {
        fmt::print(stderr, "frugal {}: {} has no final/ weights; using the newest sound checkpoint, step {}{}\n",
                   command, run_dir, ck.step, problems.empty() ? "" : "; skipped " + problems.substr(2));
        return weights_in(ck.path);
      }
      problems += fmt::format("; {}: {}", ck.path, why);
    }
  }
  throw ConfigError(
      fmt::format("no weights in {}: neither final/model.safetensors nor a sound checkpoint under "
                  "{}{} (pass --weights PATH)",
                  run_dir, root, problems));
}

std::string named_weights(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path;
  if (fs::is_directory(path, ec)) {
    // A checkpoint (it has a state.json): its files' sizes and checksums are checked first, its
    // weights in one file or in shards alike; final/ has no state.json and no checksums.
    if (fs::is_regular_file(fs::path(path) / "state.json", ec))
      if (const std::string why = verify_checkpoint(path); !why.empty())
        throw ConfigError(
            fmt::format("--weights {} is not a sound checkpoint: {}; pass another checkpoint (an "
                        "older one under RUN_DIR/checkpoints) or RUN_DIR/final",
                        path, why));
    const std::string inside = weights_in(path);
    if (fs::is_regular_file(inside, ec)) return inside;
    if (inside == path) return path;  // a checkpoint of several processes: its weights in shards
    throw ConfigError(
        fmt::format("--weights {} is a directory without model.safetensors; pass a .safetensors file "
                    "or a checkpoint directory (RUN_DIR/checkpoints/step-NNNNNNNN)",
                    path));
  }
  throw ConfigError(fmt::format("--weights {}: no such file or directory", path));
}

TokenizerFiles run_tokenizer_files(const OpenedRun& run) {
  const std::string& cfg = run.config_file;
  const DataSource& src = run.config.data.source;
  switch (src.kind) {
    case DataSource::Kind::kArith:
    case DataSource::Kind::kText:
      return {"bytes", "", "", ""};
    case DataSource::Kind::kRecords:
      throw ConfigError(fmt::format("{}: data.source = \"{}\" is an image or table dataset; it has no text tokenizer",
                                    cfg, to_string(src)));
    case DataSource::Kind::kShards:
      break;
  }
  // The run's own copy first (written when it started); runs from before it was kept read the dataset.
  const std::string kept = run.dir.tokenizer_dir();
  const std::string dir = manifest_tokenizer(kept) ? kept : src.path;
  const auto m = manifest_tokenizer(dir);
  if (!m) {
    bool bins = false;
    std::error_code ec;
    if (fs::is_directory(src.path, ec) && !fs::exists(fs::path(src.path) / "manifest.json"))
      for (const auto& e : fs::directory_iterator(src.path, ec)) bins = bins || e.path().extension() == ".bin";
    if (bins)
      throw ConfigError(
          fmt::format("{}: the run trained on {}, token files without a manifest (llm.c or nanoGPT .bin files, whose "
                      "tokenizer they do not record); frugal cannot encode or decode them: it knows the byte and "
                      "SentencePiece tokenizers of `frugal prepare` and Hugging Face tokenizer.json files",
                      cfg, src.path));
    throw ConfigError(
        fmt::format("{}: the run keeps no tokenizer ({} is missing) and its dataset {} (data.source) has "
                    "no readable manifest.json, so its tokenizer is unknown; put the dataset back where "
                    "the run read it",
                    cfg, kept + "/manifest.json", src.path));
  }
  if (m->name == "bytes") return {"bytes", dir, "", ""};
  const char* file = m->name == "sentencepiece" ? "tokenizer.model" : m->name == "hf" ? "tokenizer.json" : nullptr;
  if (!file)
    throw ConfigError(
        fmt::format("{}: the run's tokenizer in {} is '{}', which frugal does not know (bytes, "
                    "sentencepiece, hf)",
                    cfg, dir, m->name));
  const std::string model = (fs::path(dir) / file).string();
  if (!fs::is_regular_file(model))
    throw ConfigError(
        fmt::format("{}: the run's tokenizer in {} is {} but its {} is missing", cfg, dir, m->name, file));
  std::string chat_template;
  const nlohmann::json manifest =
      nlohmann::json::parse(read_small_file((fs::path(dir) / "manifest.json").string()), nullptr, false);
  const nlohmann::json tok = manifest.is_object() ? manifest.value("tokenizer", nlohmann::json()) : nlohmann::json();
  const nlohmann::json chat = tok.is_object() ? tok.value("chat_template", nlohmann::json()) : nlohmann::json();
  if (chat.is_object() && chat.value("file", "") == "chat_template.jinja")
    chat_template = (fs::path(dir) / "chat_template.jinja").string();
  if (!chat_template.empty() && !fs::is_regular_file(chat_template))
    throw ConfigError(
        fmt::format("{}: the run's tokenizer in {} names the chat template its documents were rendered "
                    "with, but {} is missing",
                    cfg, dir, chat_template));
  return {m->name, dir, model, chat_template};
}

std::unique_ptr<Tokenizer> run_tokenizer(const OpenedRun& run) {
  const TokenizerFiles t = run_tokenizer_files(run);
  if (t.name == "bytes") return make_byte_tokenizer();
  if (t.name == "sentencepiece") {
    require_sentencepiece("reading a SentencePiece run's tokenizer");
    return load_sentencepiece(t.model_file);
  }
  return load_hf_tokenizer(t.model_file);
}

namespace {
bool holds_hf_weights(const std::string& dir) {
  std::error_code ec;
  return !dir.empty() && (fs::is_regular_file(fs::path(dir) / "model.safetensors", ec) ||
                          fs::is_regular_file(fs::path(dir) / "model.safetensors.index.json", ec));
}
}  // namespace

StoredBase stored_base_weights(CausalLmImpl& model, const Config& c, const std::string& weights) {
  StoredBase out;
  if (!has_lora(model) || c.lora.base_dtype != LoraConfig::BaseDtype::kBf16 || c.model.init_from.empty()) return out;
  const std::string dir = hf_init_dir(c.model);
  if (!holds_hf_weights(dir)) {
    out.gone = dir;
    return out;
  }
  // The whole base into fresh fp32 tensors, beside the run's frozen tensors as it holds them.
  std::set<std::string> stored;
  for (const HfTensor& t : model_family(c.model.arch).hf_layout(c.model).tensors) stored.insert(t.frugal);
  NamedTensors held, base;
  for (const auto& [name, p] : model.named_parameter_list()) {
    if (!stored.count(name)) continue;  // a tensor the base does not hold: the adapters
    held.emplace_back(name, p);
    base.emplace_back(name, at::empty(p.sizes(), p.options().dtype(at::kFloat)));
  }
  load_hf_model(base, c.model, dir);
  for (size_t k = 0; k < held.size(); ++k) {
    const auto& [name, p] = held[k];
    FRUGAL_CHECK(at::equal(base[k].second.to(p.scalar_type()), p.detach()), ConfigError,
                 fmt::format("{} holds the frozen tensor {} as the base model.init_from = \"{}\" stored it when the "
                             "run trained, but {} now holds another: the base changed since (or names another "
                             "model). Put back the base weights the run started from, or export the adapters "
                             "alone with --adapter",
                             weights, name, c.model.init_from, dir));
    if (p.scalar_type() == at::kBFloat16) out.weights[name] = base[k].second;
  }
  return out;
}

void load_run_weights(CausalLmImpl& model, const Config& c, const std::string& weights) {
  const bool sharded = fs::is_directory(weights);  // a checkpoint's directory (weights_in)
  const SafetensorsFile file = sharded ? SafetensorsFile{checkpoint_weights(weights), {}} : load_safetensors(weights);
  nlohmann::json frozen;
  const fs::path state = (sharded ? fs::path(weights) : fs::path(weights).parent_path()) / "state.json";
  if (fs::is_regular_file(state)) {
    const nlohmann::json st = nlohmann::json::parse(read_small_file(state.string()), nullptr, false);
    if (st.is_object() && st.contains("frozen") && st["frozen"].is_object()) frozen = st["frozen"];
  }
  if (frozen.is_object()) {  // the frozen tensors come from the base, as in training
    freeze_parameters(model, c.train.freeze);
    load_hf_model(model.named_parameter_list(), c.model, hf_init_dir(c.model));
  }
  install_lora(model, c.lora);  // the adapters' values come from the weights below
  if (frozen.is_object()) check_frozen_base(model, frozen, weights);
  load_parameters(without_frozen(model.named_parameter_list(), frozen), file, weights);
}

}  // namespace frugal
