// LoRA runs through the trainer and the CLI: a resumed run reproduces the uninterrupted one bitwise
// (the adapters' dropout included); a fine-tune from a base leaves the base bitwise, keeps
// optimizer state for the adapters only, writes checkpoints of the adapters only, and exports both
// ways (PEFT's adapter directory; the merged model, which computes what the run computes); a QLoRA
// run (an NF4 base) does the same and tracks the bf16 base's run.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "frugal/ckpt/safetensors.h"
#include "frugal/model/lora.h"
#include "frugal/model/model_family.h"
#include "frugal/model/weights.h"
#include "resume_util.h"
#include "test_util.h"

namespace frugal::lora_run_test {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

TEST(LoraRun, AResumedRunReproducesTheUninterruptedOneBitwise) {
  test::TempDir a, b;
  const std::vector<std::string> lora = {"lora.rank=4", "lora.alpha=8", "lora.dropout=0.1", "lora.dora=true"};
  test::interrupted_then_resumed(a.path(), lora, 9);
  const json s = test::train_tiny(b.path(), lora);
  test::expect_identical_runs(a.path(), b.path());
  EXPECT_LT(s["trainable_params"].get<int64_t>() * 10, s["params"].get<int64_t>());
  EXPECT_NE(s["model"].get<std::string>().find("DoRA r=4 alpha=8"), std::string::npos) << s["model"];
}

// The tensors of the newest checkpoint's model.safetensors.
SafetensorsFile newest_checkpoint(const std::string& run) {
  std::string ckpt;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints"))
    if (fs::exists(e.path() / "state.json")) ckpt = std::max(ckpt, e.path().string());
  EXPECT_FALSE(ckpt.empty()) << run;
  return load_safetensors(ckpt + "/model.safetensors");
}

TEST(LoraRun, AFineTuneTrainsTheAdaptersAloneAndExportsThemBothWays) {
  test::TempDir dir;
  const std::string from = test::fine_tune_sets(dir);
  ASSERT_FALSE(from.empty());
  auto r = test::run_frugal("train --quiet" + from +
                            " --set run.name=lora --set lora.rank=4 --set lora.targets=c_attn,c_fc");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const json s = json::parse(test::read_text(dir.file("lora/summary.json")));
  // One block: c_attn (in 32, out 96) and c_fc (in 32, out 128), rank 4.
  const int64_t adapters = 4 * (32 + 96) + 4 * (32 + 128);
  EXPECT_EQ(s["trainable_params"].get<int64_t>(), adapters);
  EXPECT_NE(s["model"].get<std::string>().find("LoRA r=4 alpha=16 on 2 modules"), std::string::npos) << s["model"];
  const SafetensorsFile start = load_safetensors(dir.file("a/final/model.safetensors"));
  const SafetensorsFile end = load_safetensors(dir.file("lora/final/model.safetensors"));
  int64_t adapter_elements = 0;
  for (const auto& [name, t] : end.tensors) {
    if (name.find(".lora.") != std::string::npos) {
      adapter_elements += t.numel();
      continue;
    }
    ASSERT_NE(start.find(name), nullptr) << name;
    // The adapted products' weights are held in bf16 (lora.base_dtype): the base, rounded.
    EXPECT_TRUE(t.equal(start.find(name)->to(t.scalar_type()))) << name << " moved although the base is frozen";
  }
  EXPECT_EQ(adapter_elements, adapters);
  EXPECT_GT(end.find("h0.attn.qkv.lora.c_attn_B")->abs().max().item<double>(), 0) << "B did not train";
  // Checkpoints: the adapters alone (the base is named by its digests), and two moments for each.
  for (const auto& [name, t] : newest_checkpoint(dir.file("lora")).tensors)
    EXPECT_NE(name.find(".lora."), std::string::npos) << name << " stored in a checkpoint of a LoRA run";

  r = test::run_frugal("export " + dir.file("lora") + " --adapter --out " + dir.file("adapter"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json cfg = json::parse(test::read_text(dir.file("adapter/adapter_config.json")));
  EXPECT_EQ(cfg["r"], 4);
  EXPECT_EQ(cfg["target_modules"], json({"c_attn", "c_fc"}));
  EXPECT_EQ(cfg["fan_in_fan_out"], true);
  const SafetensorsFile adapter = load_safetensors(dir.file("adapter/adapter_model.safetensors"));
  ASSERT_NE(adapter.find("base_model.model.transformer.h.0.attn.c_attn.lora_B.weight"), nullptr);
  EXPECT_TRUE(
      adapter.find("base_model.model.transformer.h.0.mlp.c_fc.lora_A.weight")->equal(*end.find("h0.fc.lora.c_fc_A")));
  EXPECT_EQ(adapter.tensors.size(), 4u);
  // A run from that adapter starts where this one ended: its first loss is this run's last.
  r = test::run_frugal("train --quiet" + from + " --set run.name=again --set lora.init_from=" + dir.file("adapter") +
                       " --set train.steps=1 --set train.log_every=1 --set train.lr=0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json again = json::parse(test::read_text(dir.file("again/summary.json")));
  r = test::run_frugal("train --quiet" + from +
                       " --set run.name=bad --set lora.rank=4 --set train.freeze=lm_head.weight");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("adapters freeze the whole base model"), std::string::npos) << r.output;
  r = test::run_frugal("export " + dir.file("a") + " --adapter --out " + dir.file("none"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("trained no adapters"), std::string::npos) << r.output;

  // The merged export computes what the run computes: its weights differ from the base exactly
  // in the adapted products.
  r = test::run_frugal("export " + dir.file("lora") + " --out " + dir.file("merged"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const SafetensorsFile merged = load_safetensors(dir.file("merged/model.safetensors"));
  const SafetensorsFile plain = load_safetensors(dir.file("hf/model.safetensors"));
  for (const auto& [name, t] : merged.tensors) {
    const bool adapted = name == "transformer.h.0.attn.c_attn.weight" || name == "transformer.h.0.mlp.c_fc.weight";
    ASSERT_NE(plain.find(name), nullptr) << name;
    EXPECT_EQ(t.equal(*plain.find(name)), !adapted) << name;
  }
  EXPECT_NEAR(again["final_val_loss"].get<double>(), s["final_val_loss"].get<double>(), 1e-6)
      << "the run from the exported adapter does not start where the adapted run ended";
}

// A relative lora.init_from is stored by its absolute path in the run's config.toml, as
// model.init_from and data.source are: `sample` and `export` of the run work from any directory (they
// exited 2, "adapter_config.json is missing", outside the one the run started in).
TEST(LoraRun, ARelativeAdapterPathIsStoredAbsoluteSoTheRunWorksFromAnyDirectory) {
  test::TempDir dir;
  const std::string tiny = test::tiny_sets(dir.path()) + " --set train.steps=3 --set train.warmup_steps=1";
  auto r = test::run_frugal("train --quiet" + tiny + " --set run.name=lora --set lora.rank=4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_frugal("export " + dir.file("lora") + " --adapter --out " + dir.file("adapter"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string in_dir = "cd '" + dir.path() + "' &&";
  r = test::run_frugal("train --quiet" + tiny + " --set run.name=again --set lora.init_from=adapter", in_dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string toml = test::read_text(dir.file("again/config.toml"));
  const std::string absolute = fs::canonical(dir.file("adapter")).string();
  EXPECT_NE(toml.find("init_from = '" + absolute + "'  # --set"), std::string::npos) << toml;
  r = test::run_frugal("sample " + dir.file("again") + " --prompt '1+1=' --max-tokens 2", "cd / &&");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = test::run_frugal("export " + dir.file("again") + " --adapter --out " + dir.file("again-adapter"), "cd / &&");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // A resume from the run's directory with the same relative path continues it (the recorded path
  // and the one given name the same folder).
  r = test::run_frugal(
      "train --quiet" + tiny + " --set run.name=again --set lora.init_from=adapter --set train.steps=4 --resume auto",
      in_dir);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(LoraRun, AQloraRunResumesBitwiseTracksTheBf16BaseRunAndStoresNoBase) {
  test::TempDir a, b, c;
  const std::vector<std::string> qlora = {"lora.rank=4", "lora.alpha=8", "lora.base_dtype=nf4"};
  test::interrupted_then_resumed(a.path(), qlora, 9);
  const json s = test::train_tiny(b.path(), qlora);
  test::expect_identical_runs(a.path(), b.path());
  const json bf16 = test::train_tiny(c.path(), {"lora.rank=4", "lora.alpha=8"});
  EXPECT_EQ(s["lora"]["base_dtype"], "nf4");
  EXPECT_LT(s["lora"]["base_mb"].get<double>(), 0.27 * s["lora"]["base_mb_bf16"].get<double>());
  EXPECT_EQ(s["params"], bf16["params"]) << "an NF4 base counts its weights";
  EXPECT_EQ(s["trainable_params"], bf16["trainable_params"]);
  EXPECT_NE(s["model"].get<std::string>().find("an NF4 base"), std::string::npos) << s["model"];
  // The 4-bit base costs little: the loss after the same steps within 2% of the bf16 base's.
  const double q = s["final_val_loss"].get<double>(), h = bf16["final_val_loss"].get<double>();
  EXPECT_NE(q, h) << "the NF4 run computed what the bf16 one did: no 4-bit base";
  EXPECT_NEAR(q, h, 0.02 * h);
  // Its merged export holds the dequantised base plus the adapters, in floats.
  const auto r = test::run_frugal("export " + b.file("demo") + " --out " + b.file("merged"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const auto& [name, t] : load_safetensors(b.file("merged/model.safetensors")).tensors)
    EXPECT_TRUE(t.is_floating_point()) << name;

  // A fine-tune from a base: the checkpoints hold the adapters alone, not the codes or scales.
  test::TempDir dir;
  const std::string from = test::fine_tune_sets(dir);
  ASSERT_FALSE(from.empty());
  const auto t =
      test::run_frugal("train --quiet" + from + " --set run.name=q --set lora.rank=4 --set lora.base_dtype=nf4");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  for (const auto& [name, tensor] : newest_checkpoint(dir.file("q")).tensors)
    EXPECT_TRUE(is_adapter_parameter(name)) << name << " stored in a checkpoint of a QLoRA run";
}

}  // namespace
}  // namespace frugal::lora_run_test
