// train.freeze: globs over the Hugging Face names pick the parameters a run leaves as they are.
// In the model: which tensors a glob freezes, and the refusals (a glob that matches nothing, part
// of a tensor frugal holds as one, everything). Through the CLI: a run from another run's export
// ends with its frozen tensors bitwise those of the export, the others trained, and its
// checkpoints hold optimizer state for the trained ones only.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/safetensors.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/model/freeze.h"
#include "frugal/model/model_family.h"
#include "resume_util.h"
#include "test_util.h"

namespace frugal::freeze_test {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

std::string error_of(CausalLmImpl& model, const std::string& patterns) {
  try {
    freeze_parameters(model, patterns);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Freeze, GlobsOverTheHuggingFaceNamesFreezeWholeTensorsOfEitherFamily) {
  EXPECT_EQ(freeze_patterns(" a.*, ,b ,"), (std::vector<std::string>{"a.*", "b"}));

  CausalLm llama = make_causal_lm(test::tiny_model(ModelConfig::Arch::kLlama));
  const int64_t all = llama->parameter_count();
  FrozenParameters f = freeze_parameters(*llama, "model.embed_tokens.weight, model.layers.0.self_attn.[qkv]_proj.*");
  // The embedding, and layer 0's q, k and v projections: one tensor in frugal (stacked rows).
  EXPECT_EQ(f.tensors, 2);
  EXPECT_EQ(f.hf_names.size(), 4u);
  EXPECT_EQ(f.frozen_elements + f.trainable_elements, all);
  int64_t frozen = 0;
  for (const auto& [name, p] : llama->named_parameter_list())
    if (!p.requires_grad()) frozen += p.numel();
  EXPECT_EQ(frozen, f.frozen_elements);
  EXPECT_EQ(frozen, 40 * 32 + (32 + 2 * 16) * 32);  // the embedding; q (4 heads) + k, v (2 kv heads) of 8 dims

  // The refusals name the setting, the pattern and what to do.
  CausalLm fresh = make_causal_lm(test::tiny_model(ModelConfig::Arch::kLlama));
  std::string e = error_of(*fresh, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_NE(e.find("k_proj"), std::string::npos) << e;
  EXPECT_NE(e.find("one tensor"), std::string::npos) << e;
  e = error_of(*fresh, "model.layer.*");
  EXPECT_NE(e.find("\"model.layer.*\" matches no parameter"), std::string::npos) << e;
  EXPECT_NE(e.find("model.embed_tokens.weight"), std::string::npos) << e;  // an example of the names
  e = error_of(*fresh, "*");
  EXPECT_NE(e.find("nothing would train"), std::string::npos) << e;
  for (const auto& [name, p] : fresh->named_parameter_list()) EXPECT_TRUE(p.requires_grad()) << name;

  // GPT-2 names; the tied head is the embedding: naming either freezes the one tensor.
  CausalLm tied = make_causal_lm(test::tiny_model(ModelConfig::Arch::kGpt));
  f = freeze_parameters(*tied, "lm_head.weight");
  EXPECT_EQ(f.tensors, 1);
  EXPECT_EQ(f.hf_names, (std::vector<std::string>{"transformer.wte.weight", "lm_head.weight"}));
  CausalLm gpt = make_causal_lm(test::tiny_model(ModelConfig::Arch::kGpt));
  e = error_of(*gpt, "transformer.h.0.attn.c_attn.bias, transformer.h.9.*");
  EXPECT_NE(e.find("\"transformer.h.9.*\" matches no parameter"), std::string::npos) << e;
  gpt = make_causal_lm(test::tiny_model(ModelConfig::Arch::kGpt));
  f = freeze_parameters(*gpt, "transformer.wte.weight,transformer.h.1.*");
  EXPECT_GE(f.tensors, 3);
  bool some_frozen_in_h1 = false;
  for (const std::string& n : f.hf_names) some_frozen_in_h1 |= n.rfind("transformer.h.1.", 0) == 0;
  EXPECT_TRUE(some_frozen_in_h1);
  for (const std::string& n : f.hf_names) EXPECT_EQ(n.find("transformer.h.0."), std::string::npos) << n;
}

TEST(Freeze, AConfigFileMayListTheGlobs) {
  test::TempDir dir;
  test::write_text(dir.file("c.toml"), "[train]\nfreeze = [\"model.embed_tokens.*\", \"model.layers.0.*\"]\n");
  const ResolvedConfig rc = resolve_config(dir.file("c.toml"), {}, {});
  EXPECT_EQ(rc.config.train.freeze, "model.embed_tokens.*, model.layers.0.*");
  test::write_text(dir.file("none.toml"), "[train]\nfreeze = []\n");
  EXPECT_EQ(resolve_config(dir.file("none.toml"), {}, {}).config.train.freeze, "");
  test::write_text(dir.file("bad.toml"), "[train]\nfreeze = [\"a\", 3]\n");
  try {
    resolve_config(dir.file("bad.toml"), {}, {});
    ADD_FAILURE() << "a list holding a number was taken";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.freeze"), std::string::npos) << e.what();
  }
}

// The elements of every tensor of a checkpoint's optimizer state.
int64_t optimizer_elements(const std::string& run) {
  int64_t n = 0;
  for (const auto& entry : fs::directory_iterator(run + "/checkpoints")) {
    if (!fs::exists(entry.path() / "optimizer.safetensors")) continue;
    for (const auto& [name, t] : load_safetensors((entry.path() / "optimizer.safetensors").string()).tensors)
      n += t.numel();
    return n;
  }
  ADD_FAILURE() << "no checkpoint in " << run;
  return 0;
}

// The frozen run's checkpoints name the frozen tensors (the base, model.init_from, holds them)
// instead of storing them; export and a resume take them from the base, and refuse a base that
// changed since.
void expect_checkpoints_name_the_frozen_tensors(const test::TempDir& dir, const std::string& from,
                                                const SafetensorsFile& start, int64_t frozen_elements) {
  test::CommandResult r;
  std::string ckpt;
  for (const auto& e : fs::directory_iterator(dir.file("frozen/checkpoints")))
    if (fs::exists(e.path() / "state.json")) ckpt = std::max(ckpt, e.path().string());
  ASSERT_FALSE(ckpt.empty());
  const SafetensorsFile stored = load_safetensors(ckpt + "/model.safetensors");
  EXPECT_EQ(stored.find("wte.weight"), nullptr);
  EXPECT_EQ(stored.find("h0.attn.qkv.weight"), nullptr);
  EXPECT_NE(stored.find("h0.fc.weight"), nullptr);
  const json state = json::parse(test::read_text(ckpt + "/state.json"));
  EXPECT_TRUE(state["frozen"]["tensors"].contains("wte.weight")) << state["frozen"].dump();
  std::string full_ckpt;  // the same step of the run that trains everything
  for (const auto& e : fs::directory_iterator(dir.file("all/checkpoints")))
    if (e.path().filename() == fs::path(ckpt).filename()) full_ckpt = e.path().string();
  ASSERT_FALSE(full_ckpt.empty());
  // At least 2 bytes an element (bf16 weights; fp32 masters where kept) fewer.
  EXPECT_LE(fs::file_size(ckpt + "/model.safetensors") + 2 * static_cast<uintmax_t>(frozen_elements),
            fs::file_size(full_ckpt + "/model.safetensors"));
  r = test::run_frugal("export " + dir.file("frozen") + " --weights " + ckpt + " --out " + dir.file("hf-ckpt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(load_safetensors(dir.file("hf-ckpt/model.safetensors"))
                  .find("transformer.wte.weight")
                  ->equal(*load_safetensors(dir.file("hf/model.safetensors")).find("transformer.wte.weight")));
  r = test::run_frugal("train --quiet" + from + " --set run.name=frozen --set train.steps=40 --resume auto" +
                       " --set 'train.freeze=transformer.wte.weight, transformer.h.0.attn.*'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(load_safetensors(dir.file("frozen/final/model.safetensors"))
                  .find("wte.weight")
                  ->equal(*start.find("wte.weight")));
  SafetensorsFile changed = load_safetensors(dir.file("hf/model.safetensors"));
  for (auto& [name, t] : changed.tensors)
    if (name == "transformer.wte.weight") t = t + 1e-3;
  save_safetensors(dir.file("hf/model.safetensors"), changed.tensors, changed.metadata);
  r = test::run_frugal("train --quiet" + from + " --set run.name=frozen --set train.steps=50 --resume auto" +
                       " --set 'train.freeze=transformer.wte.weight, transformer.h.0.attn.*'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("frozen tensor wte.weight"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the base"), std::string::npos) << r.output;
}

TEST(Freeze, AFineTuneLeavesItsFrozenTensorsBitwiseAndKeepsNoOptimizerStateForThem) {
  test::TempDir dir;
  const std::string from = test::fine_tune_sets(dir);
  ASSERT_FALSE(from.empty());
  test::CommandResult r;
  r = test::run_frugal("train --quiet" + from + " --set run.name=all");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_frugal("train --quiet" + from + " --set run.name=frozen" +
                       " --set 'train.freeze=transformer.wte.weight, transformer.h.0.attn.*'");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const json s = json::parse(test::read_text(dir.file("frozen/summary.json")));
  EXPECT_LT(s["trainable_params"].get<int64_t>(), s["params"].get<int64_t>());
  EXPECT_NE(s["model"].get<std::string>().find("tensors frozen"), std::string::npos) << s["model"];
  const int64_t frozen_elements = s["params"].get<int64_t>() - s["trainable_params"].get<int64_t>();
  r = test::run_frugal("report " + dir.file("frozen"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string trainable = std::to_string(s["trainable_params"].get<int64_t>());
  const std::string shown =
      trainable.size() > 3 ? trainable.substr(0, trainable.size() - 3) + "," + trainable.substr(trainable.size() - 3)
                           : trainable;
  EXPECT_NE(test::read_text(dir.file("frozen/report.html")).find("<span id='trainable'>" + shown + "</span>"),
            std::string::npos)
      << shown;

  const SafetensorsFile start = load_safetensors(dir.file("a/final/model.safetensors"));
  const SafetensorsFile end = load_safetensors(dir.file("frozen/final/model.safetensors"));
  int64_t unchanged = 0;
  for (const auto& [name, t] : end.tensors) {
    const at::Tensor* before = start.find(name);
    ASSERT_NE(before, nullptr) << name;
    const bool frozen = name.rfind("wte.", 0) == 0 || name.rfind("h0.attn.", 0) == 0;
    if (frozen) {
      EXPECT_TRUE(t.equal(*before)) << name << " moved although frozen";
      unchanged += t.numel();
    } else if (t.dim() >= 2) {
      EXPECT_FALSE(t.equal(*before)) << name << " did not train";
    }
  }
  EXPECT_EQ(unchanged, frozen_elements) << "the tensors compared as frozen are the ones the run froze";
  // AdamW keeps two moments an element: the frozen run's state is smaller by two per frozen element.
  EXPECT_EQ(optimizer_elements(dir.file("all")) - optimizer_elements(dir.file("frozen")), 2 * frozen_elements);

  expect_checkpoints_name_the_frozen_tensors(dir, from, start, frozen_elements);

  // plan says what the run holds: from the run directory, and from a probe of the same config.
  r = test::run_frugal("plan --from " + dir.file("frozen") + " --json-out " + dir.file("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json plan = json::parse(test::read_text(dir.file("plan.json")));
  EXPECT_EQ(plan["figures"]["trainable_params"], s["trainable_params"]);
  EXPECT_EQ(plan["figures"]["params"], s["params"]);
  EXPECT_GT(plan["figures"]["checkpoint_bytes"].get<int64_t>(), 0);
  EXPECT_NE(r.output.find("of them train (the rest frozen"), std::string::npos) << r.output;
  r = test::run_frugal("plan" + from + " --set 'train.freeze=transformer.wte.weight, transformer.h.0.attn.*'" +
                       " --set plan.probe_steps=3 --json-out " + dir.file("probe.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  plan = json::parse(test::read_text(dir.file("probe.json")));
  EXPECT_EQ(plan["figures"]["trainable_params"], s["trainable_params"]);
  EXPECT_NEAR(plan["figures"]["optimizer_state_mb"].get<double>(), s["optimizer_state_mb"].get<double>(), 1e-9);

  r = test::run_frugal("train --quiet" + from + " --set run.name=bad --set train.freeze=transformer.h.9.*");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("matches no parameter"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace frugal::freeze_test
