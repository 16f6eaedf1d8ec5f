// Hugging Face GPT-2 directories in and out; see hf_gpt2.h.
#include "frugal/model/hf_gpt2.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/model/weights.h"

namespace frugal {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// One tensor of a block: frugal's name after "h<i>.", GPT-2's after "h.<i>.", and whether GPT-2
// keeps it transposed (a Conv1D weight, (in, out)).
struct BlockTensor {
  const char* frugal;
  const char* hf;
  bool transposed;
};
constexpr BlockTensor kBlockTensors[] = {
    {"ln1.weight", "ln_1.weight", false},
    {"ln1.bias", "ln_1.bias", false},
    {"attn.qkv.weight", "attn.c_attn.weight", true},
    {"attn.qkv.bias", "attn.c_attn.bias", false},
    {"attn.proj.weight", "attn.c_proj.weight", true},
    {"attn.proj.bias", "attn.c_proj.bias", false},
    {"ln2.weight", "ln_2.weight", false},
    {"ln2.bias", "ln_2.bias", false},
    {"fc.weight", "mlp.c_fc.weight", true},
    {"fc.bias", "mlp.c_fc.bias", false},
    {"fc_proj.weight", "mlp.c_proj.weight", true},
    {"fc_proj.bias", "mlp.c_proj.bias", false},
};
constexpr const char* kTopTensors[][2] = {{"wte.weight", "wte.weight"},
                                          {"wpe.weight", "wpe.weight"},
                                          {"ln_f.weight", "ln_f.weight"},
                                          {"ln_f.bias", "ln_f.bias"}};

// frugal name -> (GPT-2 name without "transformer.", transposed) for a model of `layers` blocks.
std::unordered_map<std::string, std::pair<std::string, bool>> name_map(int64_t layers) {
  std::unordered_map<std::string, std::pair<std::string, bool>> out;
  for (const auto& t : kTopTensors) out[t[0]] = {t[1], false};
  for (int64_t i = 0; i < layers; ++i)
    for (const auto& t : kBlockTensors)
      out[fmt::format("h{}.{}", i, t.frugal)] = {fmt::format("h.{}.{}", i, t.hf), t.transposed};
  return out;
}

template <class T>
T get_key(const json& j, const std::string& key, const std::string& origin, std::optional<T> fallback = {}) {
  if (!j.contains(key) || j[key].is_null()) {
    if (fallback) return *fallback;
    throw ConfigError(fmt::format("{}: key \"{}\" is missing; a GPT-2 config.json names it", origin, key));
  }
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    throw ConfigError(fmt::format("{}: key \"{}\" = {} has the wrong type", origin, key, j[key].dump()));
  }
}

void refuse(const std::string& origin, const std::string& key, const json& value, const std::string& why) {
  throw ConfigError(fmt::format("{}: \"{}\" = {}: {}", origin, key, value.dump(), why));
}

}  // namespace

std::string hf_hub_cache() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v && *v ? v : "";
  };
  if (const std::string c = env("HF_HUB_CACHE"); !c.empty()) return c;
  if (const std::string h = env("HF_HOME"); !h.empty()) return (fs::path(h) / "hub").string();
  if (const std::string x = env("XDG_CACHE_HOME"); !x.empty()) return (fs::path(x) / "huggingface" / "hub").string();
  const std::string home = env("HOME");
  return (fs::path(home.empty() ? "." : home) / ".cache" / "huggingface" / "hub").string();
}

std::string hf_cached_snapshot(const std::string& repo_id) {
  // A hub id is "name" or "org/name"; anything else (a path) is not looked up.
  if (repo_id.empty() || repo_id.front() == '/' || repo_id.front() == '.' ||
      std::count(repo_id.begin(), repo_id.end(), '/') > 1)
    return "";
  std::string folder = "models--";  // huggingface_hub's layout: "org/name" -> models--org--name
  for (char ch : repo_id) folder += ch == '/' ? std::string("--") : std::string(1, ch);
  const fs::path root = fs::path(hf_hub_cache()) / folder;
  std::error_code ec;
  std::string rev;
  if (fs::is_regular_file(root / "refs" / "main", ec)) {
    rev = read_small_file((root / "refs" / "main").string());
    while (!rev.empty() && std::isspace(static_cast<unsigned char>(rev.back()))) rev.pop_back();
  }
  const fs::path snap = root / "snapshots" / rev;
  if (!rev.empty() && fs::is_regular_file(snap / "config.json", ec)) return snap.string();
  return "";
}

std::string hf_init_dir(const ModelConfig& m) {
  if (m.init_from.rfind("hf:", 0) != 0) return "";
  const std::string dir = m.init_from.substr(3);
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return dir;
  const std::string cached = hf_cached_snapshot(dir);
  return cached.empty() ? dir : cached;
}

ModelConfig read_hf_gpt2_config(const std::string& dir) {
  const std::string origin = (fs::path(dir) / "config.json").string();
  if (!fs::is_directory(dir))
    throw ConfigError(fmt::format(
        "model.init_from = \"hf:{0}\": no such directory, and the Hugging Face cache {1} has no snapshot of a "
        "model \"{0}\" (a Hugging Face GPT-2 directory holds config.json and model.safetensors); get one with "
        "`huggingface-cli download {0}` (then hf:{0} finds it in the cache) or save one with "
        "GPT2LMHeadModel.from_pretrained(\"{0}\").save_pretrained(\"DIR\") and set model.init_from = \"hf:DIR\"",
        dir, hf_hub_cache()));
  if (!fs::is_regular_file(origin))
    throw ConfigError(
        fmt::format("model.init_from = \"hf:{}\": {} is missing (save the model with "
                    "GPT2LMHeadModel.save_pretrained)",
                    dir, origin));
  json j;
  try {
    j = json::parse(read_small_file(origin));
  } catch (const json::parse_error& e) {
    throw ConfigError(fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
  if (!j.is_object()) throw ConfigError(fmt::format("{}: expected a JSON object", origin));
  const std::string type = get_key<std::string>(j, "model_type", origin);
  if (type != "gpt2")
    refuse(origin, "model_type", j["model_type"], "frugal reads GPT-2 checkpoints (model_type \"gpt2\") only");
  ModelConfig m;
  m.vocab = get_key<int64_t>(j, "vocab_size", origin);
  m.block = get_key<int64_t>(j, "n_positions", origin);
  m.embd = get_key<int64_t>(j, "n_embd", origin);
  m.layers = get_key<int64_t>(j, "n_layer", origin);
  m.heads = get_key<int64_t>(j, "n_head", origin);
  m.norm_eps = get_key<double>(j, "layer_norm_epsilon", origin, 1e-5);
  const std::pair<const char*, int64_t> sizes[] = {{"vocab_size", m.vocab},
                                                   {"n_positions", m.block},
                                                   {"n_embd", m.embd},
                                                   {"n_layer", m.layers},
                                                   {"n_head", m.heads}};
  for (const auto& [key, v] : sizes)
    if (v < 1) refuse(origin, key, j[key], "must be positive");
  if (m.embd % m.heads != 0) refuse(origin, "n_head", j["n_head"], fmt::format("does not divide n_embd = {}", m.embd));
  const std::string act = get_key<std::string>(j, "activation_function", origin, std::string("gelu_new"));
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
    m.activation = ModelConfig::Activation::kGeluTanh;
  else if (act == "gelu")
    m.activation = ModelConfig::Activation::kGelu;
  else
    refuse(origin, "activation_function", act,
           "frugal's GPT has GELU only: \"gelu_new\", \"gelu_pytorch_tanh\", \"gelu_fast\" (tanh) or \"gelu\" (exact)");
  if (j.contains("n_inner") && !j["n_inner"].is_null() && j["n_inner"] != json(4 * m.embd))
    refuse(origin, "n_inner", j["n_inner"], fmt::format("frugal's MLP is 4 x n_embd = {} wide", 4 * m.embd));
  if (!get_key<bool>(j, "tie_word_embeddings", origin, true))
    refuse(origin, "tie_word_embeddings", false, "frugal's output head is tied to the token embedding");
  if (get_key<bool>(j, "add_cross_attention", origin, false))
    refuse(origin, "add_cross_attention", true, "frugal's GPT is a decoder without cross-attention");
  if (!get_key<bool>(j, "scale_attn_weights", origin, true))
    refuse(origin, "scale_attn_weights", false, "frugal scales attention scores by 1/sqrt(head size)");
  if (get_key<bool>(j, "scale_attn_by_inverse_layer_idx", origin, false))
    refuse(origin, "scale_attn_by_inverse_layer_idx", true, "frugal scales every layer's attention alike");
  return m;
}

void adopt_hf_gpt2_shape(ResolvedConfig& rc) {
  ModelConfig& m = rc.config.model;
  const std::string dir = hf_init_dir(m);
  if (dir.empty()) return;
  const ModelConfig hf = read_hf_gpt2_config(dir);
  const std::string file = (fs::path(dir) / "config.json").string();
  auto adopt = [&](const char* key, const char* hf_key, auto& ours, const auto& theirs, bool may_be_smaller,
                   const std::string& shown_ours, const std::string& shown_theirs) {
    ValueOrigin& origin = rc.origins.at(key);
    if (origin.kind == ValueOrigin::Kind::kDefault) {
      ours = theirs;
      origin = ValueOrigin{ValueOrigin::Kind::kFile, file + " " + hf_key};
      return;
    }
    if (ours == theirs || (may_be_smaller && ours < theirs)) return;
    throw ConfigError(fmt::format("{} = {} ({}) but model.init_from's {} has {} = {}; {}", key, shown_ours,
                                  origin.describe(), file, hf_key, shown_theirs,
                                  may_be_smaller ? "it may be smaller (fewer positions), not larger"
                                                 : "leave it unset to take the checkpoint's"));
  };
  adopt("model.layers", "n_layer", m.layers, hf.layers, false, std::to_string(m.layers), std::to_string(hf.layers));
  adopt("model.heads", "n_head", m.heads, hf.heads, false, std::to_string(m.heads), std::to_string(hf.heads));
  adopt("model.embd", "n_embd", m.embd, hf.embd, false, std::to_string(m.embd), std::to_string(hf.embd));
  adopt("model.block", "n_positions", m.block, hf.block, true, std::to_string(m.block), std::to_string(hf.block));
  adopt("model.vocab", "vocab_size", m.vocab, hf.vocab, false, std::to_string(m.vocab), std::to_string(hf.vocab));
  auto act_name = [](ModelConfig::Activation a) {
    return std::string(a == ModelConfig::Activation::kGeluTanh ? "\"gelu_tanh\"" : "\"gelu\"");
  };
  adopt("model.activation", "activation_function", m.activation, hf.activation, false, act_name(m.activation),
        act_name(hf.activation));
  adopt("model.norm_eps", "layer_norm_epsilon", m.norm_eps, hf.norm_eps, false, fmt::format("{}", m.norm_eps),
        fmt::format("{}", hf.norm_eps));
}

namespace {
void load_hf_gpt2_file(const NamedTensors& params, const ModelConfig& m, const std::string& dir) {
  const std::string path = (fs::path(dir) / "model.safetensors").string();
  if (!fs::is_regular_file(path)) {
    const bool bin = fs::exists(fs::path(dir) / "pytorch_model.bin");
    const bool sharded = fs::exists(fs::path(dir) / "model.safetensors.index.json");
    throw CheckpointError(fmt::format(
        "{} is missing{}", path,
        bin       ? "; the directory has pytorch_model.bin, which frugal does not read (pickle): save it again with "
                    "model.save_pretrained(DIR, safe_serialization=True)"
        : sharded ? "; the weights are split over several files (model.safetensors.index.json), which frugal "
                    "does not read: save the model with a max_shard_size above its size"
                  : ""));
  }
  const SafetensorsFile file = load_safetensors(path);
  std::unordered_map<std::string, const at::Tensor*> stored;
  const at::Tensor* head = nullptr;
  for (const auto& [name, t] : file.tensors) {
    std::string n = name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
    // Buffers older transformers versions saved (the causal mask), and the head save_pretrained
    // writes only when it is not tied.
    if (n.size() > 10 && (n.compare(n.size() - 10, 10, ".attn.bias") == 0 ||
                          (n.size() > 17 && n.compare(n.size() - 17, 17, ".attn.masked_bias") == 0)))
      continue;
    if (name == "lm_head.weight") {
      head = &t;
      continue;
    }
    stored.emplace(std::move(n), &t);
  }
  // frugal's view of the file: its tensors renamed and turned (out, in), checked by the strict
  // loader against the model's parameters.
  SafetensorsFile renamed;
  const auto names = name_map(m.layers);
  for (const auto& [ours, theirs] : names) {
    auto it = stored.find(theirs.first);
    if (it == stored.end())
      throw CheckpointError(
          fmt::format("{}: tensor '{}' (or 'transformer.{}') is missing; the file does not "
                      "match {}/config.json's n_layer = {}",
                      path, theirs.first, theirs.first, dir, m.layers));
    at::Tensor t = *it->second;
    if (theirs.second) t = t.t();
    if (ours == "wpe.weight" && t.dim() == 2 && t.size(0) > m.block) t = t.narrow(0, 0, m.block);
    renamed.tensors.emplace_back(ours, t);
    stored.erase(it);
  }
  if (!stored.empty())
    throw CheckpointError(
        fmt::format("{}: unexpected tensor '{}' that frugal's GPT does not have (is this a "
                    "GPT-2 checkpoint?)",
                    path, stored.begin()->first));
  if (head) {
    const at::Tensor* wte = renamed.find("wte.weight");
    if (head->sizes() != wte->sizes() || !at::equal(head->to(at::kFloat), wte->to(at::kFloat)))
      throw CheckpointError(
          fmt::format("{}: lm_head.weight differs from wte.weight; frugal's output head is "
                      "tied to the token embedding",
                      path));
  }
  load_parameters(params, renamed, path);
}
}  // namespace

// A checkpoint that does not fit is the user's input, not a broken run: bad input (exit 2).
void load_hf_gpt2(const NamedTensors& params, const ModelConfig& m, const std::string& dir) {
  try {
    load_hf_gpt2_file(params, m, dir);
  } catch (const CheckpointError& e) {
    throw ConfigError(fmt::format("model.init_from = \"hf:{}\": {}", dir, e.what()));
  }
}

NamedTensors to_hf_gpt2_tensors(const NamedTensors& params, const ModelConfig& m, c10::ScalarType dtype) {
  const auto names = name_map(m.layers);
  NamedTensors out;
  for (const auto& [ours, t] : params) {
    auto it = names.find(ours);
    FRUGAL_INTERNAL_ASSERT(it != names.end(), "parameter '" + ours + "' of the GPT has no GPT-2 name");
    at::Tensor v = t.detach().to(at::kCPU, dtype);
    if (it->second.second) v = v.t();
    out.emplace_back("transformer." + it->second.first, v.contiguous());
  }
  return out;
}

std::string hf_gpt2_config_json(const ModelConfig& m) {
  const bool tanh = m.activation == ModelConfig::Activation::kGeluTanh;
  json j = {{"architectures", json::array({"GPT2LMHeadModel"})},
            {"model_type", "gpt2"},
            {"vocab_size", m.vocab},
            {"n_positions", m.block},
            {"n_embd", m.embd},
            {"n_layer", m.layers},
            {"n_head", m.heads},
            {"n_inner", nullptr},
            {"activation_function", tanh ? "gelu_new" : "gelu"},
            {"layer_norm_epsilon", m.norm_eps},
            {"resid_pdrop", m.dropout},
            {"embd_pdrop", m.dropout},
            {"attn_pdrop", m.dropout},
            {"initializer_range", 0.02},
            {"scale_attn_weights", true},
            {"tie_word_embeddings", true},
            {"bos_token_id", nullptr},
            {"eos_token_id", nullptr},
            {"use_cache", true}};
  return j.dump(2) + "\n";
}

void write_hf_gpt2(const NamedTensors& params, const ModelConfig& m, const std::string& out_dir, c10::ScalarType dtype,
                   const std::map<std::string, std::string>& extra_files) {
  const fs::path out = fs::path(out_dir).lexically_normal();
  if (fs::exists(out))
    throw ConfigError(
        fmt::format("{} already exists; export writes a new directory (remove it or choose another "
                    "--out)",
                    out_dir));
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  fs::create_directories(parent);
  const fs::path tmp = parent / fmt::format(".tmp-export-{}-{}", out.filename().string(), ::getpid());
  std::error_code ec;
  remove_tree(tmp, ec);
  try {
    fs::create_directories(tmp);
    // transformers refuses a safetensors file without {"format": "pt"} in its metadata.
    save_safetensors((tmp / "model.safetensors").string(), to_hf_gpt2_tensors(params, m, dtype), {{"format", "pt"}});
    write_file_atomic((tmp / "config.json").string(), hf_gpt2_config_json(m));
    for (const auto& [name, bytes] : extra_files) write_file_atomic((tmp / name).string(), bytes);
    fsync_dir(tmp.string());
    fs::rename(tmp, out);
    fsync_dir(parent.string());
  } catch (...) {
    remove_tree(tmp, ec);
    throw;
  }
}

}  // namespace frugal
