// Whole `frugal train` runs for the data-parallel tests: their arguments and what they leave
// (dist_train_test.cpp, zero3_train_test.cpp).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/safetensors.h"
#include "test_util.h"

namespace frugal::dist_runs {

inline std::vector<std::string> train_args(const std::string& out, const std::string& name,
                                           const std::vector<std::string>& extra) {
  std::vector<std::string> a{"train", "-q", "--set", "run.name=" + name, "--set", "dist.timeout_s=30"};
  for (const auto& s : test::tiny_overrides(out)) {
    a.push_back("--set");
    a.push_back(s);
  }
  for (const auto& s : extra) {
    a.push_back("--set");
    a.push_back(s);
  }
  return a;
}

inline std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += " '" + a + "'";
  return s;
}

inline double max_abs_diff(const std::string& a, const std::string& b) {
  SafetensorsFile fa = load_safetensors(a), fb = load_safetensors(b);
  double worst = 0;
  EXPECT_EQ(fa.tensors.size(), fb.tensors.size());
  for (const auto& [name, t] : fa.tensors) {
    const at::Tensor* u = fb.find(name);
    EXPECT_NE(u, nullptr) << name;
    if (u) worst = std::max(worst, (t - *u).abs().max().item<double>());
  }
  return worst;
}

inline nlohmann::json summary_of(const std::string& run_dir) {
  return nlohmann::json::parse(test::read_text(run_dir + "/summary.json"));
}

// Run `name` under `out` with `common` and `more` set: `frugal launch -n ranks` (one plain process
// for 1 rank). Returns its summary.json; an exit other than 0 fails the test, naming the run.
inline nlohmann::json launched(const std::string& out, const std::string& name, int ranks, int port,
                               std::vector<std::string> common, const std::vector<std::string>& more) {
  common.insert(common.end(), more.begin(), more.end());
  const std::string args = joined(train_args(out, name, common));
  auto r = test::run_frugal(
      ranks > 1 ? "launch -n " + std::to_string(ranks) + " --port " + std::to_string(port) + " --" + args : args);
  EXPECT_EQ(r.exit_code, 0) << name << "\n" << r.output;
  return summary_of(out + "/" + name);
}

}  // namespace frugal::dist_runs
