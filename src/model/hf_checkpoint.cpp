// Hugging Face checkpoint directories; see hf_checkpoint.h.
#include "frugal/model/hf_checkpoint.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/core/hf_hub.h"
#include "model/internal/hf_json.h"

namespace frugal {
namespace fs = std::filesystem;
using nlohmann::json;

std::string hf_init_dir(const ModelConfig& m) {
  if (m.init_from.rfind("hf:", 0) != 0) return "";
  return hf_resolve_dir(m.init_from.substr(3));
}

namespace {

json read_config_json(const std::string& dir, const std::string& origin) {
  if (!fs::is_directory(dir) && !is_hf_hub_id(dir))
    throw ConfigError(fmt::format(
        "model.init_from = \"hf:{0}\": no such directory (a Hugging Face model directory holds "
        "config.json and model.safetensors); check the path, or save a model there with save_pretrained(\"{0}\")",
        dir));
  if (!fs::is_directory(dir))
    throw ConfigError(fmt::format(
        "model.init_from = \"hf:{0}\": no such directory, and the Hugging Face cache {1} has no snapshot of a "
        "model \"{0}\" (a Hugging Face model directory holds config.json and model.safetensors); get one with "
        "`huggingface-cli download {0}` (then hf:{0} finds it in the cache) or save one with "
        "AutoModelForCausalLM.from_pretrained(\"{0}\").save_pretrained(\"DIR\") and set model.init_from = \"hf:DIR\"",
        dir, hf_hub_cache()));
  if (!fs::is_regular_file(origin))
    throw ConfigError(
        fmt::format("model.init_from = \"hf:{}\": {} is missing (save the model with save_pretrained)", dir, origin));
  json j;
  try {
    j = json::parse(read_small_file(origin));
  } catch (const json::exception& e) {
    throw ConfigError(fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
  if (!j.is_object()) throw ConfigError(fmt::format("{}: expected a JSON object", origin));
  return j;
}

}  // namespace

ModelConfig read_hf_model_config(const std::string& dir, std::vector<std::pair<std::string, std::string>>* fields) {
  const std::string origin = (fs::path(dir) / "config.json").string();
  const json j = read_config_json(dir, origin);
  const std::string type = hf_json::get_string(j, "model_type", origin, "Hugging Face");
  const ModelFamily* family = model_family_for_hf(type);
  if (!family) {
    std::string known;
    for (const auto& t : hf_model_types()) known += (known.empty() ? "\"" : ", \"") + t + "\"";
    hf_json::refuse(origin, "model_type", j["model_type"],
                    fmt::format("frugal reads the model types {} (docs/model.md)", known));
  }
  ModelConfig m;
  m.arch = family->arch();
  auto read = family->read_hf_config(j, origin, m);
  read.insert(read.begin(), {"model.arch", "model_type"});
  // The same checks as the keys themselves: a count out of range names the file and field.
  Config as_config;
  as_config.model = m;
  for (const auto& [key, field] : read) {
    const KeySpec* k = find_key(key);
    FRUGAL_INTERNAL_ASSERT(k != nullptr, "the family set an unknown key " + key);
    check_config_value(*k, k->get(as_config), fmt::format("{} \"{}\"", origin, field));
  }
  try {
    validate_model_config(m);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", origin, e.what()));
  }
  if (fields) *fields = std::move(read);
  return m;
}

namespace {
constexpr int64_t kUnsetBlockCap = 4096;  // model.block left unset takes the checkpoint's up to this
}  // namespace

void adopt_hf_shape(ResolvedConfig& rc) {
  const std::string dir = hf_init_dir(rc.config.model);
  if (dir.empty()) return;
  std::vector<std::pair<std::string, std::string>> fields;
  ModelConfig hf_model = read_hf_model_config(dir, &fields);
  const std::string file = (fs::path(dir) / "config.json").string();
  Config theirs_config = rc.config;
  theirs_config.model = hf_model;
  // model.arch first: the other keys are checked against the family's own ranges afterwards.
  for (const auto& [key, field] : fields) {
    const KeySpec* k = find_key(key);
    const ConfigValue theirs = k->get(theirs_config), ours = k->get(rc.config);
    ValueOrigin& origin = rc.origins.at(key);
    if (origin.kind == ValueOrigin::Kind::kDefault) {
      std::string note = file + " " + field;
      ConfigValue value = theirs;
      if (key == "model.block" && std::get<int64_t>(theirs) > kUnsetBlockCap) {
        value = kUnsetBlockCap;
        note += fmt::format(" = {}, capped at {}: set model.block to train on longer sequences",
                            std::get<int64_t>(theirs), kUnsetBlockCap);
      }
      k->set(rc.config, value);
      origin = ValueOrigin{ValueOrigin::Kind::kFile, note};
      continue;
    }
    if (ours == theirs) continue;
    const bool smaller_block = key == "model.block" && std::get<int64_t>(ours) < std::get<int64_t>(theirs);
    if (smaller_block) continue;
    throw ConfigError(fmt::format("{} = {} ({}) but model.init_from's {} has {} = {}; {}", key, format_value(ours),
                                  origin.describe(), file, field, format_value(theirs),
                                  key == "model.block" ? "it may be smaller (fewer positions), not larger"
                                                       : "leave it unset to take the checkpoint's"));
  }
  validate_model_config(rc.config.model);
}

std::vector<std::string> hf_weight_files(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::is_regular_file(single, ec)) return {single.string()};
  if (fs::is_regular_file(index, ec)) {
    json j;
    try {
      j = json::parse(read_small_file(index.string()));
    } catch (const json::exception& e) {
      throw ConfigError(fmt::format("{}: not valid JSON: {}", index.string(), e.what()));
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object() || j["weight_map"].empty())
      throw ConfigError(
          fmt::format("{}: expected an object with a \"weight_map\" of tensor names to files", index.string()));
    std::set<std::string> files;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
        hf_json::refuse(index.string(), "weight_map", json{{name, file}},
                        "each tensor must name a file in the same directory");
      files.insert((fs::path(dir) / file.get<std::string>()).string());
    }
    for (const auto& f : files)
      if (!fs::is_regular_file(f, ec))
        throw ConfigError(
            fmt::format("{} names the shard {}, which is missing (an interrupted download?)", index.string(), f));
    return {files.begin(), files.end()};
  }
  const bool bin = fs::exists(fs::path(dir) / "pytorch_model.bin", ec) ||
                   fs::exists(fs::path(dir) / "pytorch_model.bin.index.json", ec);
  throw ConfigError(fmt::format(
      "{} is missing{}", single.string(),
      bin ? "; the directory has pytorch_model.bin, which frugal does not read (pickle): save it again with "
            "model.save_pretrained(DIR, safe_serialization=True)"
          : " (and there is no model.safetensors.index.json of shards)"));
}

namespace {

// Where one Hugging Face tensor goes: rows [row, row + rows) of a parameter.
struct Slot {
  at::Tensor param;
  int64_t row = 0, rows = 0;
  bool transposed = false, may_truncate = false;
  bool filled = false;
  std::string frugal;
};

std::string shape_text(at::IntArrayRef s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// The slots of every Hugging Face name of `layout`, against the model's parameters.
std::unordered_map<std::string, Slot> slots_for(const NamedTensors& params, const HfLayout& layout) {
  std::unordered_map<std::string, at::Tensor> by_name(params.begin(), params.end());
  std::unordered_map<std::string, Slot> slots;
  for (const HfTensor& t : layout.tensors) {
    auto p = by_name.find(t.frugal);
    FRUGAL_INTERNAL_ASSERT(p != by_name.end(), "the layout names '" + t.frugal + "', which the model does not have");
    int64_t row = 0;
    for (size_t k = 0; k < t.hf.size(); ++k) {
      const int64_t n = t.hf.size() == 1 ? p->second.size(0) : t.rows[k];
      slots[t.hf[k]] = Slot{p->second, row, n, t.transposed, t.may_truncate_rows, false, t.frugal};
      row += n;
    }
  }
  return slots;
}

void fill(Slot& slot, const at::Tensor& stored, const std::string& name, const std::string& file) {
  at::Tensor t = slot.transposed ? stored.t() : stored;
  at::Tensor dst = slot.param.narrow(0, slot.row, slot.rows);
  if (slot.may_truncate && t.dim() == dst.dim() && t.size(0) > dst.size(0)) t = t.narrow(0, 0, dst.size(0));
  if (!t.sizes().equals(dst.sizes()))
    throw CheckpointError(
        fmt::format("{}: tensor '{}' has shape {} but the model needs {} (for its '{}'); the "
                    "file does not match config.json",
                    file, name, shape_text(stored.sizes()), shape_text(slot.transposed ? dst.t().sizes() : dst.sizes()),
                    slot.frugal));
  if (slot.filled) throw CheckpointError(fmt::format("{}: tensor '{}' is stored twice", file, name));
  torch::NoGradGuard no_grad;
  dst.copy_(t);
  slot.filled = true;
}

}  // namespace

void load_hf_weights(const NamedTensors& params, const HfLayout& layout, const std::string& dir) {
  auto slots = slots_for(params, layout);
  at::Tensor head;
  std::string head_file;
  const std::vector<std::string> files = hf_weight_files(dir);
  for (const std::string& file : files) {
    const SafetensorsFile f = load_safetensors(file);  // one shard in memory at a time
    for (const auto& [stored_name, t] : f.tensors) {
      const std::string name = layout.canonical ? layout.canonical(stored_name) : stored_name;
      if (layout.skipped && layout.skipped(name)) continue;
      auto it = slots.find(name);
      if (it == slots.end() && !layout.tied_head.empty() && name == layout.tied_head) {
        head = t;
        head_file = file;
        continue;
      }
      if (it == slots.end())
        throw CheckpointError(
            fmt::format("{}: unexpected tensor '{}' that frugal's {} does not have (does "
                        "config.json describe this checkpoint?)",
                        file, stored_name, layout.what));
      fill(it->second, t, stored_name, file);
    }
  }
  for (const auto& [name, slot] : slots)
    if (!slot.filled)
      throw CheckpointError(fmt::format("{}: tensor '{}' is missing; the {} does not match {}/config.json",
                                        files.size() == 1 ? files.front() : dir + " (its shards)", name,
                                        files.size() == 1 ? "file" : "shards", dir));
  if (head.defined()) {
    const at::Tensor& embedding = slots.at(layout.embedding).param;
    if (!head.sizes().equals(embedding.sizes()) || !at::equal(head.to(at::kFloat), embedding.to(at::kFloat)))
      throw CheckpointError(
          fmt::format("{}: {} differs from {}; the model's output head is tied to the token "
                      "embedding (config.json's tie_word_embeddings)",
                      head_file, layout.tied_head, layout.embedding));
  }
}

void load_hf_model(const NamedTensors& params, const ModelConfig& m, const std::string& dir) {
  try {
    load_hf_weights(params, model_family(m.arch).hf_layout(m), dir);
  } catch (const CheckpointError& e) {
    throw ConfigError(fmt::format("model.init_from = \"hf:{}\": {}", dir, e.what()));
  }
}

std::vector<std::string> keep_hf_source_files(const std::string& dir, const std::string& to) {
  static const char* const kFiles[] = {"config.json",           "generation_config.json",  "tokenizer.json",
                                       "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                                       "chat_template.json"};
  std::vector<std::string> kept;
  std::error_code ec;
  for (const char* name : kFiles) {
    const fs::path from = fs::path(dir) / name;
    if (!fs::is_regular_file(from, ec)) continue;
    if (kept.empty()) fs::create_directories(to);
    write_file_atomic((fs::path(to) / name).string(), read_file(from.string()));
    kept.push_back(name);
  }
  return kept;
}

NamedTensors to_hf_tensors(const NamedTensors& params, const HfLayout& layout, c10::ScalarType dtype) {
  std::unordered_map<std::string, at::Tensor> by_name(params.begin(), params.end());
  NamedTensors out;
  for (const HfTensor& t : layout.tensors) {
    auto p = by_name.find(t.frugal);
    FRUGAL_INTERNAL_ASSERT(p != by_name.end(), "the layout names '" + t.frugal + "', which the model does not have");
    const at::Tensor v = p->second.detach().to(at::kCPU, dtype);
    int64_t row = 0;
    for (size_t k = 0; k < t.hf.size(); ++k) {
      const int64_t n = t.hf.size() == 1 ? v.size(0) : t.rows[k];
      at::Tensor part = v.narrow(0, row, n);
      row += n;
      out.emplace_back(t.hf[k], (t.transposed ? part.t() : part).contiguous());
    }
  }
  return out;
}

namespace {
int64_t tensor_bytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// The tensors in shards of at most max_bytes (a tensor larger alone in its own), in order.
std::vector<NamedTensors> shards_of(const NamedTensors& tensors, int64_t max_bytes) {
  std::vector<NamedTensors> shards(1);
  int64_t in_shard = 0;
  for (const auto& nt : tensors) {
    const int64_t b = tensor_bytes(nt.second);
    if (max_bytes > 0 && in_shard > 0 && in_shard + b > max_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(nt);
    in_shard += b;
  }
  return shards;
}

void write_weights(const fs::path& tmp, const NamedTensors& tensors, int64_t max_shard_bytes) {
  // transformers refuses a safetensors file without {"format": "pt"} in its metadata.
  const std::map<std::string, std::string> meta{{"format", "pt"}};
  const auto shards = shards_of(tensors, max_shard_bytes);
  if (shards.size() == 1) {
    save_safetensors((tmp / "model.safetensors").string(), tensors, meta);
    return;
  }
  json index{{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  int64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    save_safetensors((tmp / name).string(), shards[i], meta);
    for (const auto& [tensor, t] : shards[i]) {
      index["weight_map"][tensor] = name;
      total += tensor_bytes(t);
    }
  }
  index["metadata"]["total_size"] = total;
  write_file_atomic((tmp / "model.safetensors.index.json").string(), index.dump(2) + "\n");
}
}  // namespace

void write_new_dir(const std::string& out_dir, const std::map<std::string, std::string>& files,
                   const std::function<void(const std::string&)>& fill) {
  FRUGAL_CHECK(!out_dir.empty(), ConfigError, "the output directory is an empty path; name the directory to write");
  // "out/" names the directory out: without its trailing separators, parent_path() is its parent.
  std::string trimmed = fs::path(out_dir).lexically_normal().string();
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const fs::path out(trimmed);
  if (fs::exists(out))
    throw ConfigError(
        fmt::format("{} already exists; export writes a new directory (remove it or choose another --out)", out_dir));
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  fs::create_directories(parent);
  const fs::path tmp = parent / fmt::format(".tmp-export-{}-{}", out.filename().string(), ::getpid());
  std::error_code ec;
  remove_tree(tmp, ec);
  try {
    fs::create_directories(tmp);
    if (fill) fill(tmp.string());
    for (const auto& [name, bytes] : files) write_file_atomic((tmp / name).string(), bytes);
    fsync_dir(tmp.string());
    fs::rename(tmp, out);
    fsync_dir(parent.string());
  } catch (...) {
    remove_tree(tmp, ec);
    throw;
  }
}

void write_hf_dir(const NamedTensors& tensors, const std::string& config_json, const std::string& out_dir,
                  const std::map<std::string, std::string>& extra_files, int64_t max_shard_bytes) {
  std::map<std::string, std::string> files = extra_files;
  files["config.json"] = config_json;
  write_new_dir(out_dir, files, [&](const std::string& tmp) { write_weights(tmp, tensors, max_shard_bytes); });
}

}  // namespace frugal
