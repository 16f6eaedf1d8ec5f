// A resumed run's configuration: see run_config.h.
#include "frugal/train/run_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <map>
#include <optional>

#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/data/token_dataset.h"
#include "frugal/data/tokenizer.h"
#include "frugal/model/hf_checkpoint.h"

namespace frugal {
namespace fs = std::filesystem;

namespace {

// data.source = "shards:DIR" records its vocabulary in the manifest (or, for nanoGPT's
// train.bin/val.bin, in meta.pkl): a model.vocab left at its default takes it from there, so that
// the two need not be kept in step by hand.
void adopt_dataset_vocab(ResolvedConfig& rc) {
  const DataSource& src = rc.config.data.source;
  if (src.kind != DataSource::Kind::kShards) return;
  ValueOrigin& origin = rc.origins.at("model.vocab");
  const std::string& dir = src.path;
  // model.init_from's vocabulary is its embedding's: data with larger ids was tokenised otherwise,
  // and no model.vocab fixes that.
  if (const std::string& init = rc.config.model.init_from; !init.empty() && origin.kind == ValueOrigin::Kind::kFile) {
    const std::optional<ManifestTokenizer> tok = manifest_tokenizer(dir);
    if (tok && tok->vocab > rc.config.model.vocab)
      throw ConfigError(fmt::format(
          "data.source = \"shards:{}\" was tokenised with {} (a vocabulary of {}), but model.init_from = \"{}\" "
          "has {} ({}): its embedding has no row for the larger ids. Prepare the data with the checkpoint's own "
          "tokenizer: frugal prepare FILES --tokenizer {}/tokenizer.json --out DIR",
          dir, tok->name, tok->vocab, init, rc.config.model.vocab, origin.describe(), init));
  }
  if (origin.kind != ValueOrigin::Kind::kDefault) return;  // set on purpose: checked against the data later
  const std::optional<ManifestTokenizer> tok = manifest_tokenizer(dir);
  const fs::path meta = fs::path(dir) / "meta.pkl";
  if (!tok && fs::is_regular_file(meta) && fs::is_regular_file(fs::path(dir) / "train.bin")) {
    rc.config.model.vocab = nanogpt_meta_vocab(meta.string());
    origin = ValueOrigin{ValueOrigin::Kind::kFile, meta.string() + " vocab_size"};
    return;
  }
  if (!tok || tok->vocab == rc.config.model.vocab) return;
  rc.config.model.vocab = tok->vocab;
  origin = ValueOrigin{ValueOrigin::Kind::kFile, (fs::path(dir) / "manifest.json").string() + " tokenizer.vocab"};
}

// A Hugging Face tokenizer.json's tokens by id: its model's vocabulary (an object of token -> id,
// or Unigram's list of [piece, score]) and its added tokens.
std::map<int64_t, std::string> tokens_by_id(const std::string& file) {
  const nlohmann::json j = nlohmann::json::parse(read_file(file), nullptr, false);
  std::map<int64_t, std::string> out;
  if (!j.is_object()) return out;
  const nlohmann::json vocab = j.value("model", nlohmann::json::object()).value("vocab", nlohmann::json());
  if (vocab.is_object()) {
    for (const auto& [token, id] : vocab.items())
      if (id.is_number_integer()) out[id.get<int64_t>()] = token;
  } else if (vocab.is_array()) {
    for (size_t i = 0; i < vocab.size(); ++i)
      if (vocab[i].is_array() && !vocab[i].empty() && vocab[i][0].is_string())
        out[static_cast<int64_t>(i)] = vocab[i][0].get<std::string>();
  }
  for (const auto& t : j.value("added_tokens", nlohmann::json::array()))
    if (t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
        t["content"].is_string())
      out[t["id"].get<int64_t>()] = t["content"].get<std::string>();
  return out;
}

// data.source = "shards:DIR" tokenised by a Hugging Face tokenizer and model.init_from's own
// tokenizer.json must agree on every id both define: the checkpoint's embedding row `i` was learned
// for its token `i`. Ids only one defines (tokens added in the embedding's padding) are free.
void check_dataset_tokenizer(const ResolvedConfig& rc) {
  const DataSource& src = rc.config.data.source;
  if (src.kind != DataSource::Kind::kShards || rc.config.model.init_from.empty()) return;
  const std::optional<ManifestTokenizer> tok = manifest_tokenizer(src.path);
  const std::string init = hf_init_dir(rc.config.model);
  if (!tok || tok->name != "hf" || init.empty()) return;
  const fs::path base = fs::path(init) / "tokenizer.json", data = fs::path(src.path) / "tokenizer.json";
  std::error_code ec;
  if (!fs::is_regular_file(base, ec) || !fs::is_regular_file(data, ec) || read_file(base) == read_file(data)) return;
  const std::map<int64_t, std::string> ours = tokens_by_id(data.string()), theirs = tokens_by_id(base.string());
  for (const auto& [id, token] : ours) {
    const auto other = theirs.find(id);
    if (other == theirs.end() || other->second == token) continue;
    throw ConfigError(fmt::format(
        "data.source = \"shards:{}\" was tokenised with {}, whose token {} is {} where model.init_from's {} has "
        "{}: the checkpoint's embeddings were learned for its own tokens. Prepare the data with the checkpoint's "
        "tokenizer: frugal prepare FILES --tokenizer hf:{} --out DIR",
        src.path, data.string(), id, nlohmann::json(token).dump(), base.string(), nlohmann::json(other->second).dump(),
        base.string()));
  }
}

// Whether `path` lies inside `dir` (both made absolute and normal).
bool within(const std::string& path, const std::string& dir) {
  const fs::path p = fs::absolute(path).lexically_normal(), d = fs::absolute(dir).lexically_normal();
  auto pi = p.begin();
  for (auto di = d.begin(); di != d.end(); ++di, ++pi) {
    if (di->empty()) continue;  // a trailing separator
    if (pi == p.end() || *pi != *di) return false;
  }
  return true;
}

// The path after `prefix` ("hf:", "torchscript:", "") in `value`, made absolute where it is relative
// and names a folder (`folder`) or a file here; anything else stays as typed (a hub id is looked up
// in the cache anew, a missing path fails naming what the user wrote).
void make_absolute(std::string& value, const std::string& prefix, bool folder) {
  if (value.size() <= prefix.size() || value.compare(0, prefix.size(), prefix) != 0) return;
  const fs::path path = value.substr(prefix.size());
  std::error_code ec;
  if (path.is_relative() && (folder ? fs::is_directory(path, ec) : fs::is_regular_file(path, ec)))
    value = prefix + fs::absolute(path).lexically_normal().string();
}

// Every key that names a file or folder, by its absolute path: the run's config.toml then names the
// same files from any working directory (sample, export, a resume started elsewhere).
void make_paths_absolute(Config& c) {
  DataSource& src = c.data.source;
  if (src.kind != DataSource::Kind::kArith && !src.path.empty() && fs::path(src.path).is_relative())
    src.path = fs::absolute(src.path).lexically_normal().string();
  make_absolute(c.model.init_from, "hf:", true);
  make_absolute(c.model.source, "torchscript:", false);
  make_absolute(c.lora.init_from, "", true);
}

// Whether a run's recorded value of key `k` (`theirs`, as a TOML literal) names the same files as
// `mine` once made absolute here: a run that recorded a relative path, resumed from its folder.
bool same_paths(const KeySpec& k, const std::string& theirs, const std::string& mine, const Config& c) {
  if (k.key != "data.source" && k.key != "model.init_from" && k.key != "model.source" && k.key != "lora.init_from")
    return false;
  Config other = c;
  try {
    k.set(other, parse_toml_value(k, theirs, "the run's checkpoint"));
  } catch (const ConfigError&) {
    return false;
  }
  make_paths_absolute(other);
  return format_value_shown(k, other) == mine;
}

}  // namespace

void complete_config(ResolvedConfig& rc) {
  make_paths_absolute(rc.config);
  adopt_hf_shape(rc);  // before the dataset's vocabulary: the checkpoint's is the model's
  adopt_dataset_vocab(rc);
  check_dataset_tokenizer(rc);
}

ResolvedConfig resolve_run_config(const std::string& file, const std::vector<std::string>& overrides,
                                  const std::map<std::string, std::string>& env) {
  ResolvedConfig rc = resolve_config(file, overrides, env);
  complete_config(rc);
  return rc;
}

std::vector<std::string> probe_overrides(const std::string& out_dir, const std::string& name, int64_t steps) {
  return {"run.out_dir=" + out_dir, "run.name=" + name, fmt::format("train.steps={}", steps), "train.log_every=1"};
}

nlohmann::json ConfigChange::to_json(int64_t at_step) const {
  return {{"key", key}, {"from", from}, {"to", to}, {"origin", origin}, {"at_step", at_step}};
}

bool resume_may_change(const std::string& key) {
  const KeySpec* k = find_key(key);
  return k && k->on_resume == KeySpec::OnResume::kMayChange;
}

std::vector<ConfigChange> reconcile_resume_config(ResolvedConfig& rc, const nlohmann::json& saved,
                                                  const std::string& checkpoint, std::vector<std::string>* not_taken) {
  std::vector<ConfigChange> changes;
  std::vector<std::string> refused;
  if (!saved.is_object()) return changes;
  const bool own_run = within(checkpoint, RunDir::of(rc.config).root());
  for (const KeySpec& k : config_schema()) {
    if (k.secret || k.key == "run.name" || k.key == "run.out_dir") continue;
    if (!saved.contains(k.key) || !saved[k.key].is_string()) continue;
    const std::string theirs = saved[k.key].get<std::string>();
    const std::string mine = format_value_shown(k, rc.config);
    if (theirs == mine || same_paths(k, theirs, mine, rc.config)) continue;
    ValueOrigin& origin = rc.origins.at(k.key);
    if (k.reaches_out && !own_run) {  // another run's command or server is not this run's to use
      if (not_taken) not_taken->push_back(k.key);
      continue;
    }
    if (origin.kind == ValueOrigin::Kind::kDefault) {
      k.set(rc.config, parse_toml_value(k, theirs, "the run's checkpoint " + checkpoint));
      origin = ValueOrigin{ValueOrigin::Kind::kRun, checkpoint};
    } else if (resume_may_change(k.key)) {
      changes.push_back({k.key, theirs, mine, origin.describe()});
    } else {
      refused.push_back(fmt::format("  {}: the run has {}, {} gives {}", k.key, theirs, origin.describe(), mine));
    }
  }
  if (!refused.empty())
    throw ConfigError(fmt::format(
        "cannot resume {} with a different model, data, batch or optimizer; these keys differ from the run's:\n{}\n"
        "  hint: drop them to continue the run as it was (a resume takes the run's own config), or start a new run "
        "from these weights: frugal export {} --weights {} --out DIR, then --set run.name=NEW --set "
        "model.init_from=hf:DIR; a "
        "resume may change only keys such as train.steps, train.eval_every, checkpoint.*, budget.*, monitor.*, "
        "run.device",
        checkpoint, fmt::join(refused, "\n"), fs::path(checkpoint).parent_path().parent_path().string(), checkpoint));
  validate_config(rc.config);
  return changes;
}

}  // namespace frugal
