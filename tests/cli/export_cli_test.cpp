// `frugal export` through the CLI at its edges: --out spelled with a trailing slash or empty, the
// flags --adapter does not take, the adapter's target_modules under the default "all-linear", and
// a merged LoRA export whose base changed or is gone. The numbers against peft are
// tests/interop/peft_check.py.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <filesystem>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "frugal/ckpt/safetensors.h"
#include "test_util.h"
#include "train/resume_util.h"

namespace frugal::export_cli_test {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// A LoRA run over the tiny run's random start (no base directory), named `lora`.
bool train_lora(const test::TempDir& dir) {
  const auto r = test::run_frugal("train --quiet" + test::tiny_sets(dir.path()) +
                                  " --set run.name=lora --set lora.rank=4 --set train.steps=5");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.exit_code == 0;
}

// A LoRA fine-tune (lora.targets and lora.base_dtype at their defaults: "all-linear", bf16) of the
// tiny run exported to dir/hf, named `lora`.
bool fine_tune_lora(const test::TempDir& dir) {
  const std::string from = test::fine_tune_sets(dir);
  if (from.empty()) return false;
  const auto r = test::run_frugal("train --quiet" + from + " --set run.name=lora --set lora.rank=4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.exit_code == 0;
}

// Nothing but `names` in `dir` (no temporary folder left behind).
void expect_only(const std::string& dir, std::set<std::string> names) {
  std::set<std::string> found;
  for (const auto& e : fs::directory_iterator(dir)) found.insert(e.path().filename().string());
  EXPECT_EQ(found, names) << dir;
}

TEST(ExportCli, AnOutEndingInASlashNamesTheDirectoryAndAnEmptyOneIsRefused) {
  test::TempDir dir;
  ASSERT_TRUE(train_lora(dir));
  const std::string out = dir.file("out");
  fs::create_directories(out);
  auto r = test::run_frugal("export " + dir.file("lora") + " --out " + out + "/merged/");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_regular_file(out + "/merged/config.json"));
  r = test::run_frugal("export " + dir.file("lora") + " --adapter --out " + out + "/adapter//");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_regular_file(out + "/adapter/adapter_config.json"));
  expect_only(out, {"merged", "adapter"});

  r = test::run_frugal("export " + dir.file("lora") + " --out ''");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--out must not be empty"), std::string::npos) << r.output;
  r = test::run_frugal("export " + dir.file("lora") + " --out " + out + "/merged/");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("already exists"), std::string::npos) << r.output;
  expect_only(out, {"merged", "adapter"});
}

TEST(ExportCli, AnAdapterRefusesTheFlagsOfTheMergedModel) {
  test::TempDir dir;
  ASSERT_TRUE(train_lora(dir));
  for (const std::string flag : {"--dtype bf16", "--dtype fp16", "--max-shard-size 1KB"}) {
    const auto r = test::run_frugal("export " + dir.file("lora") + " --adapter --out " + dir.file("ad") + " " + flag);
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.output;
    const std::string name = flag.substr(0, flag.find(' '));
    EXPECT_NE(r.output.find(name + " does not apply with --adapter"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("fp32"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir.file("ad"))) << flag;
  }
  // fp32 is what the adapter is written in: asking for it is no conflict.
  const auto r = test::run_frugal("export " + dir.file("lora") + " --adapter --dtype fp32 --out " + dir.file("ad"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(ExportCli, AnAdapterOfAllLinearNamesTheModulesItAdaptsAndAllLinearStillLoads) {
  test::TempDir dir;
  ASSERT_TRUE(fine_tune_lora(dir));
  auto r = test::run_frugal("export " + dir.file("lora") + " --adapter --out " + dir.file("ad"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json cfg = json::parse(test::read_text(dir.file("ad/adapter_config.json")));
  ASSERT_TRUE(cfg["target_modules"].is_array()) << cfg.dump();
  // PEFT takes "all-linear" only as a string: the list names GPT-2's projections themselves.
  EXPECT_EQ(cfg["target_modules"].get<std::set<std::string>>(), (std::set<std::string>{"c_attn", "c_proj", "c_fc"}));

  // An adapter that says "all-linear" (PEFT's string, or the list older exports wrote) still loads.
  const std::string from = test::tiny_sets(dir.path()) + " --set model.init_from=hf:" + dir.file("hf");
  int k = 0;
  for (const json& targets : {json("all-linear"), json::array({"all-linear"})}) {
    const std::string ad = dir.file("ad-all-linear-" + std::to_string(++k));
    fs::copy(dir.file("ad"), ad);
    json c = cfg;
    c["target_modules"] = targets;
    test::write_text(ad + "/adapter_config.json", c.dump());
    r = test::run_frugal("train --quiet" + from + " --set run.name=again-" + std::to_string(k) +
                         " --set train.steps=1 --set lora.init_from=" + ad);
    EXPECT_EQ(r.exit_code, 0) << targets.dump() << ": " << r.output;
  }
}

TEST(ExportCli, AMergedExportRefusesABaseThatChangedSinceTheRun) {
  test::TempDir dir;
  ASSERT_TRUE(fine_tune_lora(dir));
  const std::string base = dir.file("hf/model.safetensors");
  NamedTensors changed;
  for (const auto& [name, t] : load_safetensors(base).tensors) changed.emplace_back(name, t * 1.01);
  test::write_text(base, encode_safetensors(changed, {{"format", "pt"}}));
  auto r = test::run_frugal("export " + dir.file("lora") + " --out " + dir.file("merged"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const std::string& part : {std::string("the base changed since"), std::string("--adapter"), dir.file("hf")})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << " not in: " << r.output;
  EXPECT_FALSE(fs::exists(dir.file("merged")));
  // The adapters alone do not depend on the base.
  r = test::run_frugal("export " + dir.file("lora") + " --adapter --out " + dir.file("ad"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(ExportCli, AMergedExportWithoutItsBaseMergesOntoTheRunsOwnCopies) {
  test::TempDir dir;
  ASSERT_TRUE(fine_tune_lora(dir));
  auto r = test::run_frugal("export " + dir.file("lora") + " --out " + dir.file("onto-base"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("holds no weights"), std::string::npos) << r.output;
  fs::rename(dir.file("hf"), dir.file("hf-moved"));
  r = test::run_frugal("export " + dir.file("lora") + " --out " + dir.file("onto-copies"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("holds no weights any more"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bf16"), std::string::npos) << r.output;

  const SafetensorsFile exact = load_safetensors(dir.file("onto-base/model.safetensors"));
  const SafetensorsFile copies = load_safetensors(dir.file("onto-copies/model.safetensors"));
  ASSERT_EQ(exact.tensors.size(), copies.tensors.size());
  for (const auto& [name, t] : exact.tensors) {
    const at::Tensor* c = copies.find(name);
    ASSERT_NE(c, nullptr) << name;
    const bool adapted = name.find(".attn.") != std::string::npos || name.find(".mlp.") != std::string::npos;
    if (!adapted || name.find(".weight") == std::string::npos) {
      EXPECT_TRUE(c->equal(t)) << name << ": a tensor no adapter touches differs";
      continue;
    }
    // The adapted weights differ by the base's rounding to bf16 alone (2^-9 of each value).
    const double d = (*c - t).abs().max().item<double>();
    EXPECT_LE(d, t.abs().max().item<double>() / 256) << name;
  }
}

// --max-shard-size takes a positive size: 0 (once taken as "one file"), a negative, a fraction of a
// byte, more bytes than a file holds, and what is no size at all are refused with exit 2 naming the
// flag, the value and the form a size takes.
TEST(ExportCli, AMaxShardSizeOfZeroOrLessIsRefused) {
  test::TempDir dir;
  auto r = test::run_frugal("train --quiet" + test::tiny_sets(dir.path()) +
                            " --set train.steps=2 --set train.eval_every=0 --set train.answer_samples=0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string size : {"0", "0GB", "-1", "0.5", ".", "1..5GB", "99999999999GB"}) {
    r = test::run_frugal("export " + dir.file("demo") + " --out " + dir.file("hf") + " --max-shard-size '" + size +
                         "'");
    EXPECT_EQ(r.exit_code, 2) << size << ": " << r.output;
    EXPECT_NE(r.output.find("--max-shard-size " + size + ": "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("a positive size such as 5GB, 500MB, 2GiB"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir.file("hf"))) << size;
  }
  // A size of a few bytes is still a size: a shard per tensor.
  r = test::run_frugal("export " + dir.file("demo") + " --out " + dir.file("hf") + " --max-shard-size 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_regular_file(dir.file("hf/model.safetensors.index.json")));
}

// Every GPT-2 export has a generation_config.json. A run from random weights takes its eos from
// what ends its documents: builtin:arith's newline (one problem a line), in config.json too;
// byte-level text has no one such id, and the file names none.
TEST(ExportCli, AGpt2ExportWritesAGenerationConfigWithTheRunsEndToken) {
  test::TempDir dir;
  test::write_text(dir.file("text.txt"), std::string(4000, 'a') + "\n\nsome text\n");
  for (const std::string& data : {std::string("builtin:arith"), "text:" + dir.file("text.txt")}) {
    const std::string name = data == "builtin:arith" ? "arith" : "text";
    auto r = test::run_frugal("train --quiet" + test::tiny_sets(dir.path()) + " --set run.name=" + name +
                              " --set train.steps=2 --set train.eval_every=0 --set data.source=" + data);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = test::run_frugal("export " + dir.file(name) + " --out " + dir.file(name + "-hf"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("generation_config.json"), std::string::npos) << r.output;  // in the files listed
    ASSERT_TRUE(fs::is_regular_file(dir.file(name + "-hf/generation_config.json"))) << name;
    const json g = json::parse(test::read_text(dir.file(name + "-hf/generation_config.json")));
    const json cfg = json::parse(test::read_text(dir.file(name + "-hf/config.json")));
    EXPECT_EQ(cfg["model_type"], "gpt2");
    if (name == "arith") {
      EXPECT_EQ(g["eos_token_id"], 10) << g.dump();
      EXPECT_EQ(cfg["eos_token_id"], 10) << cfg.dump();
    } else {
      EXPECT_FALSE(g.contains("eos_token_id")) << g.dump();
      EXPECT_TRUE(cfg["eos_token_id"].is_null()) << cfg.dump();
    }
  }
}

}  // namespace
}  // namespace frugal::export_cli_test
