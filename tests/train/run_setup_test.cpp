// The run setup: batch arithmetic resolved once, the precision a resume continues in, and the
// global batch an elastic resume keeps on another number of processes.
#include "frugal/train/run_setup.h"

#include <gtest/gtest.h>

#include "frugal/core/errors.h"
#include "frugal/train/muon.h"
#include "frugal/train/task.h"
#include "test_util.h"

namespace frugal::run_setup_test {
namespace {

RunSetup setup_for(int64_t micro, int64_t accum, int64_t world) {
  Config c = test::tiny_config();
  c.data.micro_batch = micro;
  c.train.accum = accum;
  c.monitor.grad_noise = true;
  TaskHooks hooks;
  hooks.tokens_per_sample = 16;
  return set_up_run(c, hooks, world, PrecisionPolicy(PrecisionMode::kFp32, c10::Device(c10::kCPU)));
}

TEST(RunSetup, TheGlobalBatchCountsEveryProcess) {
  const RunSetup p = setup_for(8, 2, 2);
  EXPECT_EQ(p.accum, 2);
  EXPECT_EQ(p.global_batch, 32);
  EXPECT_EQ(p.items_per_step, 32 * 16);
  EXPECT_TRUE(p.grad_noise);
  EXPECT_FALSE(p.loss_scaling);
}

TEST(RunSetup, AResumeOnAnotherWorldSizeKeepsTheGlobalBatch) {
  RunSetup one = setup_for(8, 2, 1);  // a 2-process run's checkpoint (global 32), resumed by 1 process
  continue_global_batch(one, 32, 2);
  EXPECT_EQ(one.accum, 4);
  EXPECT_EQ(one.global_batch, 32);
  EXPECT_EQ(one.items_per_step, 32 * 16);
  RunSetup four = setup_for(8, 2, 4);
  continue_global_batch(four, 32, 2);
  EXPECT_EQ(four.accum, 1);
  EXPECT_FALSE(four.grad_noise);  // one micro-batch per step: nothing to estimate the noise from
}

TEST(RunSetup, AWorldSizeThatCannotSplitTheGlobalBatchIsRefusedWithTheOnesThatCan) {
  RunSetup three = setup_for(8, 2, 3);
  try {
    continue_global_batch(three, 32, 2);
    FAIL() << "3 processes of micro-batch 8 accepted a global batch of 32";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("resume with 1, 2, 4 process(es)"), std::string::npos) << what;
    EXPECT_NE(what.find("global batch of 32"), std::string::npos) << what;
    // Only what a resume can change: data.micro_batch is fixed on a resume.
    EXPECT_EQ(what.find("a data.micro_batch that divides"), std::string::npos) << what;
  }
}

TEST(RunSetup, AResumeContinuesInTheCheckpointsPrecisionWhereTheConfigAllowsIt) {
  std::string warning;
  EXPECT_EQ(precision_to_continue(PrecisionMode::kAuto, "bf16", &warning), PrecisionMode::kBf16);
  EXPECT_EQ(precision_to_continue(PrecisionMode::kFp16, "bf16", &warning), PrecisionMode::kBf16);  // fell back
  EXPECT_TRUE(warning.empty());
  EXPECT_EQ(precision_to_continue(PrecisionMode::kFp32, "bf16", &warning), PrecisionMode::kFp32);
  EXPECT_NE(warning.find("will not match"), std::string::npos) << warning;
  warning.clear();
  EXPECT_EQ(precision_to_continue(PrecisionMode::kBf16, "", &warning), PrecisionMode::kBf16);  // a fresh run
  EXPECT_TRUE(warning.empty());
}

// Muon's Newton-Schulz precision is decided once, from the run's device, whatever the number of
// processes (the optimizer no longer guesses it from where its tensors or its collectives live:
// under Gloo on a GPU the sharded path used to pick fp32 where one process picked bf16).
TEST(RunSetup, MuonsPrecisionIsDecidedOnceFromTheRunsDevice) {
  Config c = test::tiny_config();
  c.train.optimizer = OptimizerKind::kMuon;
  c.train.muon_precision = MuonPrecision::kAuto;
  const TaskHooks hooks;
  const PrecisionPolicy gpu(PrecisionMode::kFp32, c10::Device("cuda:1"));  // no GPU needed: fp32 asks nothing of it
  for (int64_t world : {1, 2, 8}) EXPECT_TRUE(set_up_run(c, hooks, world, gpu).muon_bf16) << world;
  const PrecisionPolicy cpu(PrecisionMode::kFp32, c10::Device(c10::kCPU));
  EXPECT_EQ(set_up_run(c, hooks, 2, cpu).muon_bf16, muon_uses_bf16(MuonPrecision::kAuto, c10::Device(c10::kCPU)));
  c.train.muon_precision = MuonPrecision::kFp32;
  EXPECT_FALSE(set_up_run(c, hooks, 2, gpu).muon_bf16);
  c.train.muon_precision = MuonPrecision::kBf16;
  EXPECT_TRUE(set_up_run(c, hooks, 1, cpu).muon_bf16);
  c.train.optimizer = OptimizerKind::kFusedAdamW;
  EXPECT_FALSE(set_up_run(c, hooks, 1, cpu).muon_bf16) << "no Muon, no Newton-Schulz";
}

// The levers decided once, as summary.json records them, and the one line every display renders
// from them: the optimizer with its Newton-Schulz precision, the schedule with its shape.
TEST(RunSetup, TheLeversObjectRecordsTheOptimizerScheduleAndPrecisionAndRendersAsOneLine) {
  Config c = test::tiny_config();
  c.train.optimizer = OptimizerKind::kMuon;
  c.train.muon_precision = MuonPrecision::kBf16;
  c.train.schedule = LrSchedule::kWsd;
  c.train.decay_fraction = 0.25;
  c.train.warmup_steps = 40;
  c.memory.activation_checkpointing = *parse_activation_checkpointing("blocks");
  TaskHooks hooks;
  const RunSetup p = set_up_run(c, hooks, 2, PrecisionPolicy(PrecisionMode::kFp32, c10::Device(c10::kCPU)));
  const nlohmann::ordered_json j = levers_json(p, c);
  EXPECT_EQ(j["optimizer"]["kind"], "muon");
  EXPECT_EQ(j["optimizer"]["muon"]["newton_schulz"], "bf16");
  EXPECT_EQ(j["schedule"]["kind"], "wsd");
  EXPECT_EQ(j["schedule"]["decay_fraction"], 0.25);
  EXPECT_EQ(j["precision"]["mode"], "fp32");
  EXPECT_EQ(j["batch"]["world_size"], 2);
  EXPECT_EQ(j["activation_checkpointing"], "blocks");
  const std::string line = levers_line(p, c);
  for (const char* s :
       {"precision fp32", "x 2 ranks", "activation checkpointing blocks",
        "optimizer muon (Newton-Schulz bf16, momentum 0.95)", "schedule wsd (warm-up 40, decay the last 25%)"})
    EXPECT_NE(line.find(s), std::string::npos) << s << " in: " << line;
  Config offload = test::tiny_config();
  offload.dist.offload = Offload::kOptimizer;
  const RunSetup off = set_up_run(offload, hooks, 1, PrecisionPolicy(PrecisionMode::kFp32, c10::Device(c10::kCPU)));
  EXPECT_EQ(levers_json(off, offload)["offload"], "optimizer");
  EXPECT_NE(levers_line(off, offload).find("in host memory (dist.offload)"), std::string::npos);
  EXPECT_EQ(levers_line(p, c).find("host memory"), std::string::npos);
  hooks.lr_schedule = [](int64_t, int64_t) { return 1e-3; };
  const RunSetup own = set_up_run(c, hooks, 1, PrecisionPolicy(PrecisionMode::kFp32, c10::Device(c10::kCPU)));
  EXPECT_EQ(levers_json(own, c)["schedule"]["kind"], "the task's (TaskHooks::lr_schedule)");
}

// model.kernels = "auto": frugal's kernels only where their GPU check ran them, each other case
// ATen's operators with its reason; "aten" and "frugal" as set. The levers carry the choice, and
// the banner names the kernels when they run.
TEST(RunSetup, AutoKernelsAreFrugalsOnlyWhereTheirGpuCheckRanThem) {
  using K = ModelConfig::Kernels;
  const Config base = test::tiny_config();
  ASSERT_EQ(base.model.kernels, K::kAuto);
  const KernelsChoice yes = choose_kernels(base, true, "", PrecisionMode::kBf16, 1);
  EXPECT_EQ(yes.kernels, K::kFrugal) << yes.reason;
  EXPECT_EQ(choose_kernels(base, true, "", PrecisionMode::kAuto, 1).kernels, K::kFrugal);
  EXPECT_EQ(choose_kernels(base, true, "", PrecisionMode::kFp8, 1).kernels, K::kFrugal);
  Config lora = base, ckpt = base, torchscript = base;
  lora.lora.rank = 8;
  ckpt.memory.activation_checkpointing = *parse_activation_checkpointing("blocks");
  torchscript.model.source = "torchscript:m.pt";
  struct Case {
    const Config* c;
    bool on_gpu;
    std::string unavailable;
    PrecisionMode precision;
    int64_t world;
    const char* why;
  };
  for (const Case& k : {Case{&base, false, "", PrecisionMode::kBf16, 1, "not on a GPU"},
                        Case{&base, true, "compute capability 7.5 is below 8.0", PrecisionMode::kBf16, 1, "7.5"},
                        Case{&base, true, "", PrecisionMode::kFp16, 1, "fp16"},
                        Case{&torchscript, true, "", PrecisionMode::kBf16, 1, "torchscript:m.pt"},
                        Case{&lora, true, "", PrecisionMode::kBf16, 1, "LoRA"},
                        Case{&ckpt, true, "", PrecisionMode::kBf16, 1, "activation checkpointing"},
                        Case{&base, true, "", PrecisionMode::kBf16, 2, "2 processes"}}) {
    const KernelsChoice no = choose_kernels(*k.c, k.on_gpu, k.unavailable, k.precision, k.world);
    EXPECT_EQ(no.kernels, K::kAten) << k.why;
    EXPECT_NE(no.reason.find(k.why), std::string::npos) << no.reason;
    EXPECT_EQ(no.reason.rfind("auto: ATen's operators: ", 0), 0u) << no.reason;
  }
  Config aten = base, frugal = base;
  aten.model.kernels = K::kAten;
  frugal.model.kernels = K::kFrugal;
  EXPECT_EQ(choose_kernels(aten, true, "", PrecisionMode::kBf16, 1).kernels, K::kAten);
  EXPECT_EQ(choose_kernels(frugal, false, "no GPU", PrecisionMode::kFp16, 4).kernels, K::kFrugal);
  // A resume keeps what the checkpoint trained on ("aten" where it names none: before "auto" chose).
  const KernelsChoice kept = choose_kernels(base, true, "", PrecisionMode::kBf16, 1, "aten");
  EXPECT_EQ(kept.kernels, K::kAten);
  EXPECT_NE(kept.reason.find("checkpoint"), std::string::npos) << kept.reason;
  EXPECT_EQ(choose_kernels(base, true, "", PrecisionMode::kBf16, 1, "frugal").kernels, K::kFrugal);
  EXPECT_EQ(choose_kernels(frugal, true, "", PrecisionMode::kBf16, 1, "aten").kernels, K::kFrugal);
  // Once the task is built: "auto" holds frugal's kernels only for a model that runs them.
  TaskHooks decoder, other;
  decoder.frugal_kernels = true;
  EXPECT_EQ(confirm_kernels(yes, base, decoder).kernels, K::kFrugal);
  const KernelsChoice own = confirm_kernels(yes, base, other);
  EXPECT_EQ(own.kernels, K::kAten);
  EXPECT_NE(own.reason.find("not one of frugal's own decoders"), std::string::npos) << own.reason;
  EXPECT_EQ(confirm_kernels({K::kFrugal, "set"}, frugal, other).kernels, K::kFrugal);

  TaskHooks hooks;
  RunSetup p = set_up_run(frugal, hooks, 1, PrecisionPolicy(PrecisionMode::kFp32, c10::Device(c10::kCPU)));
  p.kernels_reason = yes.reason;
  const nlohmann::ordered_json j = levers_json(p, base);
  EXPECT_EQ(j["kernels"], "frugal");
  EXPECT_EQ(j["kernels_reason"], yes.reason);
  EXPECT_NE(levers_line(p, base).find("| kernels frugal"), std::string::npos);
  const RunSetup a = set_up_run(base, hooks, 1, PrecisionPolicy(PrecisionMode::kFp32, c10::Device(c10::kCPU)));
  EXPECT_EQ(levers_json(a, base)["kernels"], "aten");
  EXPECT_EQ(levers_line(a, base).find("kernels"), std::string::npos);
}

}  // namespace
}  // namespace frugal::run_setup_test
