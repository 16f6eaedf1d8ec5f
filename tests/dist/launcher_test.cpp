// frugal launch: the job files it emits, and how it reports a failed rank.
#include "frugal/dist/launcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <utility>

#include "frugal/core/errors.h"
#include "test_util.h"

namespace frugal::dist::launcher_test {
namespace {
namespace fs = std::filesystem;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Emit, SkyPilotTaskUsesSpotAndResumesAuto) {
  EmitOptions o;
  o.config = "examples/demo.toml";
  o.name = "frugal-demo";
  o.nodes = 2;
  o.procs_per_node = 8;
  o.accelerators = "H100:8";
  o.bucket = "my-ckpts";
  o.sets = {"train.steps=1000"};
  const std::string y = emit_skypilot(o);
  EXPECT_TRUE(has(y, "name: frugal-demo\n"));
  EXPECT_TRUE(has(y, "num_nodes: 2\n"));
  EXPECT_TRUE(has(y, "resources:\n  use_spot: true\n  accelerators: H100:8\n"));
  EXPECT_TRUE(has(y, "file_mounts:\n  /ckpt:\n    name: my-ckpts\n    persistent: true\n    mode: MOUNT\n"));
  EXPECT_TRUE(has(y, "setup: |\n"));
  EXPECT_TRUE(has(y, "run: |\n"));
  EXPECT_TRUE(has(y,
                  "build/frugal launch -n 8 --nodes \"$SKYPILOT_NUM_NODES\" --node-rank \"$SKYPILOT_NODE_RANK\" "
                  "--master-addr \"$MASTER_ADDR\" --port 29500 -- train 'examples/demo.toml' --resume auto "
                  "--set run.device=cuda --set 'train.steps=1000' --set run.out_dir=/ckpt/runs\n"));
  // Every line is YAML: a comment, a key, or an indented block line.
  for (size_t start = 0; start < y.size();) {
    size_t end = y.find('\n', start);
    const std::string line = y.substr(start, end - start);
    EXPECT_TRUE(line.empty() || line[0] == '#' || line[0] == ' ' || line.find(':') != std::string::npos) << line;
    start = end + 1;
  }
}

TEST(Emit, SlurmScriptRequeuesOnPreemption) {
  EmitOptions o;
  o.config = "my run.toml";  // quoted for the shell
  o.name = "job";
  o.nodes = 4;
  o.procs_per_node = 2;
  o.accelerators = "A100:2";
  const std::string s = emit_slurm(o);
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u);
  EXPECT_TRUE(has(s, "#SBATCH --nodes=4\n"));
  EXPECT_TRUE(has(s, "#SBATCH --ntasks-per-node=2\n"));
  EXPECT_TRUE(has(s, "#SBATCH --gpus-per-node=2\n"));
  EXPECT_TRUE(has(s, "#SBATCH --requeue\n"));
  EXPECT_TRUE(has(s, "#SBATCH --signal=TERM@120\n"));
  EXPECT_TRUE(has(s, "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)\n"));
  EXPECT_TRUE(
      has(s, "srun --kill-on-bad-exit=1 build/frugal train 'my run.toml' --resume auto --set run.device=cuda\n"));
  // A SIGTERM before frugal holds the stop signals exits 143: requeued too.
  EXPECT_TRUE(
      has(s, "if [ \"$code\" -eq 75 ] || [ \"$code\" -eq 143 ]; then scontrol requeue \"$SLURM_JOB_ID\"; fi\n"));
}

// The Python of the project's environment (scripts/install-deps.sh installs PyYAML there).
std::string venv_python() { return std::string(FRUGAL_SOURCE_DIR) + "/.venv/bin/python"; }

// Runs a shell command; returns its exit code and output.
std::pair<int, std::string> shell(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {-1, "popen failed"};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// The emitted task read by a real YAML parser (PyYAML), checked key by key.
TEST(Emit, SkyPilotTaskParsesAsYamlWithGpuTrainingAndTheBucketMounted) {
  ASSERT_TRUE(fs::exists(venv_python())) << "run scripts/install-deps.sh (it makes .venv/ with PyYAML)";
  test::TempDir d;
  for (const std::string bucket : {"my-ckpts", "s3://team-bucket/frugal"}) {
    EmitOptions o;
    o.config = "examples/demo.toml";
    o.name = "gpt";
    o.nodes = 2;
    o.procs_per_node = 8;
    o.accelerators = "H100:8";
    o.bucket = bucket;
    test::write_text(d.file("task.yaml"), emit_skypilot(o));
    const std::string check = R"(
import sys, yaml
t = yaml.safe_load(open(sys.argv[1]))
assert t["name"] == "gpt" and t["num_nodes"] == 2, t
assert t["resources"] == {"use_spot": True, "accelerators": "H100:8"}, t["resources"]
m = t["file_mounts"]["/ckpt"]
if "://" in sys.argv[2]:
    assert m == {"source": sys.argv[2], "mode": "MOUNT"}, m
else:
    assert m == {"name": sys.argv[2], "persistent": True, "mode": "MOUNT"}, m
assert t["setup"].splitlines() == ["set -e", "bash scripts/job-setup.sh"], t["setup"]
assert "--set run.device=cuda" in t["run"] and "--resume auto" in t["run"], t["run"]
assert "--set run.out_dir=/ckpt/runs" in t["run"], t["run"]
print("ok")
)";
    test::write_text(d.file("check.py"), check);
    auto [code, out] =
        shell(venv_python() + " " + d.file("check.py") + " " + d.file("task.yaml") + " '" + bucket + "'");
    EXPECT_EQ(code, 0) << out;
    EXPECT_TRUE(has(out, "ok")) << out;
  }
}

TEST(Emit, SlurmScriptPassesBashSyntaxCheckAndRequestsTheGpus) {
  test::TempDir d;
  EmitOptions o;
  o.config = "it's.toml";  // a quote inside the path
  o.nodes = 2;
  o.procs_per_node = 4;
  o.accelerators = "H100:4";
  const std::string s = emit_slurm(o);
  test::write_text(d.file("job.sbatch"), s);
  auto [code, out] = shell("bash -n " + d.file("job.sbatch"));
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(has(s, "#SBATCH --gpus-per-node=4\n"));
  EXPECT_TRUE(has(s, "--set run.device=cuda"));
  o.accelerators = "";  // CPU nodes: no GPU request, no device override
  const std::string cpu = emit_slurm(o);
  EXPECT_FALSE(has(cpu, "--gpus-per-node"));
  EXPECT_FALSE(has(cpu, "run.device"));
}

TEST(Emit, AnExplicitDeviceOverrideIsKept) {
  EmitOptions o;
  o.config = "c.toml";
  o.procs_per_node = 2;
  o.accelerators = "A100:2";
  o.sets = {"run.device=cpu"};
  const std::string y = emit_skypilot(o);
  EXPECT_FALSE(has(y, "--set run.device=cuda"));
  EXPECT_TRUE(has(y, "--set 'run.device=cpu'"));
}

TEST(Emit, RejectsGpuCountsThatDisagreeAndMalformedBuckets) {
  EmitOptions o;
  o.config = "c.toml";
  o.procs_per_node = 1;
  o.accelerators = "H100:8";
  try {
    emit_skypilot(o);
    FAIL() << "-n 1 with 8 GPUs per node was accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(has(e.what(), "pass -n 8")) << e.what();
  }
  o.procs_per_node = 8;
  o.accelerators = "H100:x";
  EXPECT_THROW(emit_skypilot(o), ConfigError);
  o.accelerators = "H100:8";
  for (const char* bad : {"My_Bucket", "ab", "-dash", "bucket/path"}) {
    o.bucket = bad;
    EXPECT_THROW(emit_skypilot(o), ConfigError) << bad;
  }
}

TEST(Emit, RejectsAMissingConfig) { EXPECT_THROW(emit_slurm(EmitOptions{}), ConfigError); }

TEST(Launch, ReportsWhichRankFailedAndReturnsItsCode) {
  // Each rank runs a shell: rank 1 fails with 7, rank 0 finishes normally.
  LaunchOptions o;
  o.procs_per_node = 2;
  o.master_port = 29640;
  o.args = {"-c",
            "if [ \"$RANK\" = 1 ]; then exit 7; fi; [ \"$WORLD_SIZE\" = 2 ] && [ \"$MASTER_PORT\" = 29640 ] "
            "&& [ \"$LOCAL_RANK\" = 0 ] && [ -n \"$FRUGAL_RUN_THREADS\" ]"};
  testing::internal::CaptureStderr();
  const int code = launch(o, "/bin/sh");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 7);
  EXPECT_TRUE(has(err, "rank 1 (pid")) << err;
  EXPECT_TRUE(has(err, "exited with code 7")) << err;
}

// Rank 0 refuses its input (exit 2) after rank 1 has failed on its own (as at a collective whose
// peer is gone): the launcher returns the bad input's 2, not the code of the rank reaped first.
TEST(Launch, ABadInputIsTheExitCodeEvenWhenAnotherRankFailedFirst) {
  test::TempDir dir;
  LaunchOptions o;
  o.procs_per_node = 2;
  o.master_port = 29700;
  const std::string mark = dir.file("rank1.failed");
  o.args = {"-c", "if [ \"$RANK\" = 1 ]; then touch \"" + mark + "\"; exit 1; fi; while [ ! -e \"" + mark +
                      "\" ]; do sleep 0.05; done; sleep 0.3; exit 2"};
  testing::internal::CaptureStderr();
  const int code = launch(o, "/bin/sh");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 2) << err;
  EXPECT_TRUE(has(err, "exited with code 1")) << err;
  EXPECT_TRUE(has(err, "exited with code 2")) << err;
  // Where rank 1 was reaped first (nearly always: it exits 0.3 s earlier), the choice is explained.
  if (err.find("rank 1 (pid") < err.find("rank 0 (pid")) {
    EXPECT_TRUE(has(err, "exit code 2 (bad input) as rank 0's")) << err;
  }
}

TEST(Launch, AllRanksSucceedingReturnsZero) {
  LaunchOptions o;
  o.procs_per_node = 3;
  o.master_port = 29641;
  o.args = {"-c", "[ \"$RANK\" = \"$LOCAL_RANK\" ] && [ \"$WORLD_SIZE\" = 3 ]"};
  testing::internal::CaptureStderr();
  EXPECT_EQ(launch(o, "/bin/sh"), 0);
  testing::internal::GetCapturedStderr();
}

// Rank 1 dies; rank 0, a script whose own child sleeps, is stopped after the grace period: the
// signal goes to its process group, so the child goes too (a signal to the script alone left the
// sleep running, holding the job's output open for its 30 s).
TEST(Launch, KilledRankIsNamedWithItsSignalAndTheOthersScriptsChildrenStopToo) {
  test::TempDir dir;
  LaunchOptions o;
  o.procs_per_node = 2;
  o.master_port = 29642;
  o.grace_s = 0.5;  // rank 0 sleeps; it gets SIGTERM after the grace period
  const std::string pid_file = dir.file("sleep.pid");
  // Rank 1 dies once rank 0's sleep has started (its pid written).
  o.args = {"-c", "if [ \"$RANK\" = 1 ]; then while [ ! -s \"" + pid_file +
                      "\" ]; do sleep 0.05; done; kill -9 $$; fi; " + "sleep 30 & echo $! > \"" + pid_file +
                      ".tmp\"; mv \"" + pid_file + ".tmp\" \"" + pid_file + "\"; wait"};
  testing::internal::CaptureStderr();
  const int code = launch(o, "/bin/sh");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 128 + 9);
  EXPECT_TRUE(has(err, "rank 1 (pid")) << err;
  EXPECT_TRUE(has(err, "was killed by signal 9")) << err;
  const pid_t child = std::stoi(test::read_text(pid_file));
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = kill(child, 0) != 0;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "rank 0's sleep (pid " << child << ") outlived the launcher";
  if (!gone) kill(child, SIGKILL);
}

TEST(Launch, ForwardsAStopSignalToEveryRank) {
  // Each rank exits 75 on SIGTERM, as frugal train does after its checkpoint; the launcher itself
  // receives the signal (as from a scheduler) and must pass it on.
  LaunchOptions o;
  o.procs_per_node = 2;
  o.master_port = 29643;
  o.args = {"-c", "sleep 60 & p=$!; trap 'kill $p; exit 75' TERM; touch \"$MARK.$RANK\"; wait"};
  test::TempDir dir;
  setenv("MARK", dir.file("ready").c_str(), 1);
  std::thread sender([&] {
    // Signal once both ranks have their trap installed.
    for (int i = 0; i < 3000; ++i) {
      if (access(dir.file("ready.0").c_str(), F_OK) == 0 && access(dir.file("ready.1").c_str(), F_OK) == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(getpid(), SIGTERM);
  });
  testing::internal::CaptureStderr();
  const int code = launch(o, "/bin/sh");
  testing::internal::GetCapturedStderr();
  sender.join();
  unsetenv("MARK");
  EXPECT_EQ(code, 75);
}

// `nohup frugal launch ...`: the hang-up was ignored when the launcher started, so it neither
// forwards one (it used to: the ranks then died of it, exit 129) nor lets the ranks see one (each
// rank sends itself a SIGHUP and goes on).
TEST(Launch, UnderNohupAHangUpStopsNeitherTheLauncherNorItsRanks) {
  LaunchOptions o;
  o.procs_per_node = 2;
  o.master_port = 29705;
  o.args = {"-c", "touch \"$MARK.$RANK\"; while [ ! -e \"$MARK.go\" ]; do sleep 0.05; done; kill -HUP $$; exit 0"};
  test::TempDir dir;
  setenv("MARK", dir.file("ready").c_str(), 1);
  struct sigaction ignore {
  }, before{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGHUP, &ignore, &before);
  std::thread sender([&] {
    for (int i = 0; i < 3000; ++i) {
      if (access(dir.file("ready.0").c_str(), F_OK) == 0 && access(dir.file("ready.1").c_str(), F_OK) == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(getpid(), SIGHUP);  // the terminal went away
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    test::write_text(dir.file("ready.go"), "");
  });
  testing::internal::CaptureStderr();
  const int code = launch(o, "/bin/sh");
  const std::string err = testing::internal::GetCapturedStderr();
  sender.join();
  struct sigaction after {};
  sigaction(SIGHUP, &before, &after);
  unsetenv("MARK");
  EXPECT_EQ(code, 0) << err;
  EXPECT_EQ(after.sa_handler, SIG_IGN) << "the launcher must leave an ignored SIGHUP ignored";
}

}  // namespace
}  // namespace frugal::dist::launcher_test
