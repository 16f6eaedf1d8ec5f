// Shared by the CUDA tests: a tiny run on the GPU, and one run's loss curve held to another's.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "frugal/core/config_loader.h"
#include "frugal/core/device.h"
#include "frugal/train/preemption.h"
#include "frugal/train/trainer.h"
#include "test_util.h"

// Skips the case where no GPU can run it.
#define FRUGAL_REQUIRE_GPU()                                                                  \
  do {                                                                                        \
    if (!device::build_info().cuda_compiled) GTEST_SKIP() << "frugal was built without CUDA"; \
    if (!device::cuda_available()) GTEST_SKIP() << "no CUDA device visible to this process";  \
  } while (0)

namespace frugal::test {

// The tiny demo run of tiny_overrides on the GPU (run.device = cuda), quiet, over `out`.
inline nlohmann::json train_on_gpu(const std::string& out, const std::vector<std::string>& extra,
                                   TrainerOptions o = {}) {
  auto sets = tiny_overrides(out);
  sets.push_back("run.device=cuda");
  sets.insert(sets.end(), extra.begin(), extra.end());
  o.quiet = true;
  o.overwrite = true;
  Trainer t(resolve_config("", sets, {}), o);
  auto s = t.fit();
  clear_preemption();
  return s;
}

// `curve` learned and follows `reference` within `tolerance` (relative) at every logged step.
inline void expect_curve_tracks(const std::vector<double>& curve, const std::vector<double>& reference,
                                double tolerance, const std::string& what) {
  ASSERT_FALSE(reference.empty()) << what;
  ASSERT_EQ(curve.size(), reference.size()) << what;
  EXPECT_LT(curve.back(), curve.front()) << what << " did not learn";
  for (size_t i = 0; i < curve.size(); ++i)
    EXPECT_NEAR(curve[i], reference[i], tolerance * reference[i]) << what << ", log line " << i;
}

}  // namespace frugal::test
