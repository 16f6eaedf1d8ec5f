// Test helper: the tiny in-process runs the resume and stop tests train and compare, and the
// comparison itself (weights, and metrics.jsonl without the fields that measure time).
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/core/config_loader.h"
#include "frugal/train/preemption.h"
#include "frugal/train/trainer.h"
#include "signal_at.h"
#include "test_util.h"

namespace frugal::test {

// metrics.jsonl without the fields that measure time.
inline std::vector<nlohmann::json> metrics_without_timing(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    for (const char* k :
         {"tokens_per_s", "step_s", "elapsed_s", "eval_s", "data_s", "forward_s", "backward_s", "optimizer_s",
          "data_wait_s", "rss_mb", "cost_usd", "energy_kwh", "kg_co2", "samples_per_s", "mfu", "checkpoint_s"})
      j.erase(k);
    out.push_back(j);
  }
  return out;
}

// The tiny demo run of tiny_overrides with dropout (it draws from the CPU generator) and a
// checkpoint every 7 steps (which splits log windows of 5), quiet, in this process.
inline nlohmann::json train_tiny(const std::string& out, std::vector<std::string> extra, TrainerOptions o = {}) {
  auto sets = tiny_overrides(out);
  for (const char* s : {"model.dropout=0.1", "checkpoint.every_steps=7", "checkpoint.keep_last=5"}) sets.push_back(s);
  sets.insert(sets.end(), extra.begin(), extra.end());
  o.quiet = true;
  Trainer t(resolve_config("", sets, {}), o);
  auto s = t.fit();
  clear_preemption();
  return s;
}

inline void expect_identical_runs(const std::string& a, const std::string& b) {
  EXPECT_EQ(read_text(a + "/demo/final/model.safetensors"), read_text(b + "/demo/final/model.safetensors"))
      << "final weights differ";
  auto ma = metrics_without_timing(a + "/demo/metrics.jsonl");
  auto mb = metrics_without_timing(b + "/demo/metrics.jsonl");
  ASSERT_EQ(ma.size(), mb.size());
  for (size_t i = 0; i < ma.size(); ++i) EXPECT_EQ(ma[i], mb[i]) << "metrics line " << i + 1;
}

// Stopped by SIGUSR1 after step `stop_at` (a checkpoint and exit 75), then resumed to the end.
inline void interrupted_then_resumed(const std::string& dir, std::vector<std::string> extra, int64_t stop_at,
                                     const std::string& final_kind = "completed") {
  TrainerOptions o;
  o.handle_signals = true;
  o.callbacks = {std::make_shared<SignalAt>(stop_at, SIGUSR1)};
  auto s = train_tiny(dir, extra, o);
  ASSERT_EQ(s["stop_kind"], "preempted");
  ASSERT_EQ(s["steps"], stop_at);
  EXPECT_FALSE(std::filesystem::exists(dir + "/demo/final"));
  TrainerOptions r;
  r.resume = "auto";
  auto done = train_tiny(dir, extra, r);
  EXPECT_EQ(done["stop_kind"], final_kind);
  EXPECT_EQ(done["checkpoint"]["resumed_from"].get<std::string>(),
            dir + "/demo/checkpoints/" + checkpoint_dir_name(stop_at));
}

// The tiny run `a` trained in `dir` (a checkpoint every 10 steps) and exported to dir/hf: the
// --set arguments of a fine-tune from it (model.init_from = hf:dir/hf), or "" (with a failure
// recorded) when either command failed.
inline std::string fine_tune_sets(const TempDir& dir) {
  const std::string base = tiny_sets(dir.path()) + " --set checkpoint.every_steps=10";
  for (const std::string& cmd :
       {"train --quiet" + base + " --set run.name=a", "export " + dir.file("a") + " --out " + dir.file("hf")}) {
    const CommandResult r = run_frugal(cmd);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (r.exit_code != 0) return "";
  }
  return base + " --set model.init_from=hf:" + dir.file("hf");
}

}  // namespace frugal::test
