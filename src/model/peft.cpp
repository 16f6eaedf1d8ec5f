// PEFT's adapter directories in and out; see peft.h.
#include "frugal/model/peft.h"

#include <torch/torch.h>

#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/model/hf_checkpoint.h"
#include "frugal/model/weights.h"

namespace frugal {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {
constexpr const char* kPrefix = "base_model.model.";

bool set_and_not(const json& j, const char* key, const json& allowed) {
  return j.contains(key) && !j[key].is_null() && j[key] != allowed;
}

bool non_empty(const json& j, const char* key) { return j.contains(key) && !j[key].is_null() && !j[key].empty(); }

// Each adapter tensor under PEFT's name, in the model's order.
NamedTensors peft_tensors(CausalLmImpl& model) {
  NamedTensors out;
  for (const AdaptableProduct& p : model.adaptable_products()) {
    if (!*p.adapters) continue;
    for (const LoraSiteImpl::Part& part : (*p.adapters)->parts()) {
      const std::string m = kPrefix + part.hf_module;
      out.emplace_back(m + ".lora_A.weight", part.a);
      out.emplace_back(m + ".lora_B.weight", part.b);
      if (part.magnitude.defined()) out.emplace_back(m + ".lora_magnitude_vector", part.magnitude);
    }
  }
  return out;
}
}  // namespace

json read_peft_config(const std::string& dir) {
  const std::string file = (fs::path(dir) / "adapter_config.json").string();
  FRUGAL_CHECK(fs::is_regular_file(file), ConfigError,
               fmt::format("lora.init_from = \"{}\": {} is missing (an adapter directory holds adapter_config.json "
                           "and adapter_model.safetensors, as PeftModel.save_pretrained writes them)",
                           dir, file));
  const json j = json::parse(read_small_file(file), nullptr, false);
  FRUGAL_CHECK(j.is_object(), ConfigError, fmt::format("{}: not a JSON object", file));
  auto refuse = [&](bool bad, const std::string& what) {
    FRUGAL_CHECK(!bad, ConfigError,
                 fmt::format("{}: {}; frugal trains and loads plain LoRA and DoRA adapters", file, what));
  };
  refuse(j.value("peft_type", "") != "LORA",
         fmt::format("peft_type is {}, not \"LORA\"", j.value("peft_type", json()).dump()));
  refuse(!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<int64_t>() < 1, "r must be a positive integer");
  refuse(!j.contains("target_modules") || !(j["target_modules"].is_array() || j["target_modules"].is_string()),
         "target_modules must be a list of module names or a regular expression");
  refuse(non_empty(j, "rank_pattern") || non_empty(j, "alpha_pattern"),
         "rank_pattern / alpha_pattern give modules "
         "ranks of their own");
  refuse(set_and_not(j, "bias", "none") || j.value("lora_bias", false), "the adapter trains biases (bias, lora_bias)");
  refuse(non_empty(j, "layers_to_transform") || non_empty(j, "modules_to_save") || non_empty(j, "exclude_modules") ||
             non_empty(j, "target_parameters") || non_empty(j, "trainable_token_indices"),
         "the adapter restricts or adds to its modules (layers_to_transform, modules_to_save, exclude_modules, "
         "target_parameters or trainable_token_indices)");
  refuse(j.value("use_qalora", false) || non_empty(j, "layer_replication"),
         "a variant (use_qalora, layer_replication)");
  return j;
}

void load_peft_adapter(CausalLmImpl& model, const std::string& dir) {
  const std::string file = (fs::path(dir) / "adapter_model.safetensors").string();
  FRUGAL_CHECK(fs::is_regular_file(file), ConfigError,
               fmt::format("lora.init_from = \"{}\": {} is missing (adapter_model.bin, the pickled form, is not read: "
                           "save with safe_serialization=True)",
                           dir, file));
  reading_named_input("lora.init_from = \"" + dir + "\"", [&] {
    torch::NoGradGuard no_grad;
    load_parameters(peft_tensors(model), load_safetensors(file), file);
  });
}

void write_peft_adapter(CausalLmImpl& model, const LoraSetup& setup, const std::string& base,
                        const std::string& hf_class, const std::string& out_dir,
                        const std::map<std::string, std::string>& extra) {
  json config{{"peft_type", "LORA"},
              {"task_type", "CAUSAL_LM"},
              {"base_model_name_or_path", base.empty() ? json() : json(base)},
              {"r", setup.rank},
              {"lora_alpha", setup.alpha},
              {"lora_dropout", setup.dropout},
              // The modules adapted, by name, as a list even of one: PEFT reads a string as a regular
              // expression over whole names, and "all-linear" only as a string.
              {"target_modules", peft_target_modules(model)},
              {"use_dora", setup.dora},
              {"use_rslora", setup.rslora},
              {"bias", "none"},
              {"fan_in_fan_out", model.config().arch == ModelConfig::Arch::kGpt},
              {"init_lora_weights", true},
              {"inference_mode", true},
              {"auto_mapping", {{"base_model_class", hf_class}, {"parent_library", "transformers"}}}};
  NamedTensors tensors;
  for (const auto& [name, t] : peft_tensors(model)) tensors.emplace_back(name, t.detach().to(at::kCPU, at::kFloat));
  std::map<std::string, std::string> files = extra;
  files["adapter_config.json"] = config.dump(2) + "\n";
  files["adapter_model.safetensors"] = encode_safetensors(tensors, {{"format", "pt"}});
  write_new_dir(out_dir, files);
}

}  // namespace frugal
