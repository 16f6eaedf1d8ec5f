// What runs on every machine of the GPU support: the build's CUDA facts, the refusal of
// run.device = "cuda" where no GPU is visible, the hex codec of checkpointed random-number
// states, and the GPU config keys.
#include "frugal/core/device.h"

#include <gtest/gtest.h>

#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/core/features.h"
#include "frugal/train/trainer.h"
#include "frugal_build_config.h"
#include "test_util.h"
#include "train/internal/run_state.h"

namespace frugal::device_test {
namespace {

TEST(Device, BuildInfoSaysWhatWasCompiledIn) {
  const device::BuildInfo b = device::build_info();
  EXPECT_EQ(b.cuda_compiled, FRUGAL_HAVE_CUDA == 1);
  EXPECT_EQ(b.nccl_compiled, FRUGAL_HAVE_NCCL == 1);
  EXPECT_EQ(b.cuda_version.empty(), !b.cuda_compiled);
  EXPECT_FALSE(b.torch_version.empty());
  EXPECT_EQ(static_cast<int>(device::cuda_devices().size()), device::cuda_device_count());
}

// The optional features say what CMake compiled in (the generated header), and a missing one is
// refused with a message that names the caller's action, the library, the package and the switch.
TEST(Features, EachFeatureReportsWhatWasCompiledInAndAnAbsentOneRefusesByName) {
  const std::vector<std::pair<std::string, int>> expected = {
      {"zstd", FRUGAL_HAVE_ZSTD},       {"libarchive", FRUGAL_HAVE_LIBARCHIVE},
      {"images", FRUGAL_HAVE_IMAGES},   {"sentencepiece", FRUGAL_HAVE_SENTENCEPIECE},
      {"parquet", FRUGAL_HAVE_PARQUET}, {"tensorboard", FRUGAL_HAVE_TENSORBOARD},
      {"avro", FRUGAL_HAVE_AVRO},       {"tfrecord", FRUGAL_HAVE_TFRECORD}};
  ASSERT_EQ(build_features().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const Feature& f = build_features()[i];
    EXPECT_EQ(f.name, expected[i].first);
    EXPECT_EQ(f.compiled, expected[i].second == 1) << f.name;
    EXPECT_EQ(have_feature(f.name), f.compiled) << f.name;
    if (f.compiled) {
      EXPECT_NO_THROW(require_feature(f.name, "the test"));
      continue;
    }
    try {
      require_feature(f.name, "the test's action");
      ADD_FAILURE() << f.name << " is absent but require_feature did not throw";
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      for (const std::string& part : {std::string("the test's action"), f.library, f.package})
        EXPECT_NE(m.find(part), std::string::npos) << part << " missing from: " << m;
      EXPECT_NE(m.find("-DFRUGAL_WITH_"), std::string::npos) << m;
    }
  }
  EXPECT_THROW(have_feature("zstandard"), std::logic_error);  // a typo in frugal's own code
}

TEST(Device, CudaRunIsRefusedWithTheReasonWhenNoGpuIsVisible) {
  if (device::cuda_available()) GTEST_SKIP() << "a GPU is visible here";
  test::TempDir d;
  auto sets = test::tiny_overrides(d.path());
  sets.push_back("run.device=cuda");
  TrainerOptions o;
  o.quiet = true;
  try {
    Trainer t(resolve_config("", sets, {}), o);
    FAIL() << "run.device = cuda was accepted without a GPU";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("run.device = \"cuda\""), std::string::npos) << msg;
    EXPECT_NE(msg.find(device::build_info().cuda_compiled ? "sees 0 GPU(s)" : "without CUDA"), std::string::npos)
        << msg;
  }
}

TEST(Device, CpuHelpersAreHarmlessOnTheCpu) {
  const c10::Device cpu(c10::kCPU);
  EXPECT_EQ(device::cuda_memory(cpu).allocated_peak, 0);
  device::reset_cuda_peak(cpu);
  device::synchronize(cpu);
  device::EventTimer timer(cpu);
  EXPECT_FALSE(timer.active());
  EXPECT_EQ(timer.mark(), -1);
}

TEST(CheckpointRng, HexCodecRoundTripsEveryByteAndRejectsMalformedText) {
  std::vector<uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  const std::string hex = detail::bytes_to_hex(all);
  EXPECT_EQ(hex.substr(0, 8), "00010203");
  EXPECT_EQ(hex.substr(hex.size() - 4), "feff");
  EXPECT_EQ(detail::hex_to_bytes(hex, "rng.cuda"), all);
  EXPECT_THROW(detail::hex_to_bytes("abc", "rng.cuda"), CheckpointError);
  try {
    detail::hex_to_bytes("0g", "rng.cuda");
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("rng.cuda"), std::string::npos);
  }
}

TEST(Device, GpuConfigKeysParseWithTheirDefaults) {
  Config defaults = resolve_config("", {}, {}).config;
  EXPECT_FALSE(defaults.run.deterministic);
  EXPECT_TRUE(defaults.precision.tf32);
  Config c = resolve_config("", {"run.deterministic=true", "precision.tf32=false"}, {}).config;
  EXPECT_TRUE(c.run.deterministic);
  EXPECT_FALSE(c.precision.tf32);
}

}  // namespace
}  // namespace frugal::device_test
