// frugal launch: the job files it emits, and how it reports a failed rank.
#include "frugal/dist/launcher.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>
#include <vector>

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

// sbatch refuses a --time it cannot read only when the job is submitted: refused here (it used to
// be written as it came, `#SBATCH --time=abc`).
TEST(Emit, SlurmRefusesATimeSlurmCannotRead) {
  EmitOptions o;
  o.config = "c.toml";
  for (const char* good : {"90", "30:00", "24:00:00", "2-12", "2-12:30", "1-00:00:00", "UNLIMITED"}) {
    o.time = good;
    EXPECT_TRUE(has(emit_slurm(o), std::string("#SBATCH --time=") + good + "\n")) << good;
  }
  for (const char* bad : {"abc", "", "1:2:3:4", "2-", "-5", "1-2:3:4:5", "1h", "24:00:0x", "1--2"}) {
    o.time = bad;
    try {
      emit_slurm(o);
      ADD_FAILURE() << "--time '" << bad << "' was written";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(has(e.what(), "Slurm takes minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS")) << e.what();
    }
  }
}

// The sbatch script runs the frugal that wrote it, by its absolute path, in the folder it was
// written in: submitted from anywhere, it finds frugal, CONFIG and runs/. It used to run
// `build/frugal` relative to wherever sbatch was called.
TEST(Emit, SlurmJobRunsThisFrugalInTheFolderItWasWrittenIn) {
  test::TempDir dir;
  test::write_text(dir.file("c.toml"), "[train]\nsteps = 10\n");
  const auto r = test::run_frugal("launch --emit slurm c.toml", "cd '" + dir.path() + "' &&");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string frugal = fs::canonical(FRUGAL_BINARY).string();
  EXPECT_TRUE(has(r.output, "\ncd " + fs::canonical(dir.path()).string() + " || exit 2\n")) << r.output;
  EXPECT_TRUE(has(r.output, "\ntest -x " + frugal + " || ")) << r.output;
  EXPECT_TRUE(has(r.output, "\nsrun --kill-on-bad-exit=1 " + frugal + " train 'c.toml' --resume auto")) << r.output;
}

// SkyPilot copies the task's workdir to the nodes and builds frugal there: the workdir is the
// frugal checkout, and CONFIG must be inside it. A config outside used to be written as an
// absolute path that no node has, beside `workdir: .` (wherever `sky` ran).
TEST(Emit, SkyPilotTaskRefusesAConfigTheNodesWouldNotHave) {
  test::TempDir dir;
  test::write_text(dir.file("c.toml"), "[train]\nsteps = 10\n");
  const auto outside = test::run_frugal("launch --emit skypilot '" + dir.file("c.toml") + "'",
                                        "cd '" + std::string(FRUGAL_SOURCE_DIR) + "' &&");
  EXPECT_EQ(outside.exit_code, 2) << outside.output;
  EXPECT_TRUE(has(outside.output, "is outside the folder the task copies to the nodes")) << outside.output;
  EXPECT_TRUE(has(outside.output, "copy it into that folder")) << outside.output;
  const auto inside =
      test::run_frugal("launch --emit skypilot demo.toml", "cd '" + std::string(FRUGAL_SOURCE_DIR) + "/examples' &&");
  ASSERT_EQ(inside.exit_code, 0) << inside.output;
  const std::string root = fs::canonical(FRUGAL_SOURCE_DIR).string();
  EXPECT_TRUE(has(inside.output, "\nworkdir: " + root + "\n")) << inside.output;
  EXPECT_TRUE(has(inside.output, "-- train 'examples/demo.toml' --resume auto")) << inside.output;
  // A folder that is no checkout, with a frugal that no checkout holds: nothing to build on the nodes.
  EmitOptions o;
  o.config = "c.toml";
  EXPECT_THROW(locate_job(o, true, dir.file("bin/frugal"), dir.path()), ConfigError);
}

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

// A process that is gone: no such pid, or a zombie nobody has reaped yet (an orphan's parent is
// init, which may be slow to).
bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  const std::string stat = test::read_text("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

// A SIGKILLed launcher cannot forward anything; its ranks must not train on as orphans (holding
// the rendezvous port the resume needs): each gets SIGTERM when the launcher dies. The ranks used
// to keep running.
TEST(Launch, RanksStopWhenTheLauncherIsKilled) {
  test::TempDir dir;
  LaunchOptions o;
  o.procs_per_node = 2;
  o.master_port = 29706;
  o.args = {"-c", "echo $$ > \"" + dir.file("rank") + ".$RANK.tmp\"; mv \"" + dir.file("rank") + ".$RANK.tmp\" \"" +
                      dir.file("rank") + ".$RANK\"; exec sleep 60"};
  std::fflush(nullptr);
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    if (FILE* null = std::freopen("/dev/null", "w", stderr); null == nullptr) _exit(1);
    _exit(launch(o, "/bin/sh"));
  }
  std::vector<pid_t> ranks;
  for (int i = 0; i < 1000 && ranks.size() < 2; ++i) {
    ranks.clear();
    for (const char* r : {"0", "1"})
      if (fs::exists(dir.file("rank.") + r)) ranks.push_back(std::stoi(test::read_text(dir.file("rank.") + r)));
    if (ranks.size() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(launcher, SIGKILL);
  int status = 0;
  waitpid(launcher, &status, 0);
  ASSERT_EQ(ranks.size(), 2u) << "the ranks did not start";
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = process_gone(ranks[0]) && process_gone(ranks[1]);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "ranks " << ranks[0] << " and " << ranks[1] << " outlived their SIGKILLed launcher";
  if (!gone)
    for (pid_t p : ranks) kill(p, SIGKILL);
}

// Rank 0's port held by another program: refused before any rank starts (exit 2, naming the
// port and --port), not a rank 0 failing at once while the others wait out dist.timeout_s. The
// ranks used to start.
TEST(Launch, APortInUseIsRefusedBeforeTheRanksStart) {
  const int held = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(held, 0);
  const int on = 1;
  setsockopt(held, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);  // as the listener of a rendezvous store
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(29707);
  ASSERT_EQ(bind(held, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  ASSERT_EQ(listen(held, 1), 0);
  test::TempDir dir;
  LaunchOptions o;
  o.procs_per_node = 2;
  o.master_port = 29707;
  o.args = {"-c", "touch \"" + dir.file("started") + ".$RANK\""};
  for (const std::string host : {"127.0.0.1", "localhost"}) {
    o.master_addr = host;
    testing::internal::CaptureStderr();
    try {
      launch(o, "/bin/sh");
      ADD_FAILURE() << "a launch on a port in use started its ranks (master " << host << ")";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(has(e.what(), "port 29707 (--port) is in use")) << e.what();
      EXPECT_TRUE(has(e.what(), "pick another with --port")) << e.what();
    }
    testing::internal::GetCapturedStderr();
    EXPECT_FALSE(fs::exists(dir.file("started.0"))) << host;
  }
  close(held);
  // Another node's launcher does not host the store: nothing to check there.
  o.master_addr = "127.0.0.1";
  o.nodes = 2;
  o.node_rank = 1;
  testing::internal::CaptureStderr();
  EXPECT_EQ(launch(o, "/bin/sh"), 0);
  testing::internal::GetCapturedStderr();
}

// Rank 0 refuses a run directory that holds a run (only rank 0 checks it): rank 1 stops at its
// next collective with one line pointing at rank 0's message, which stays readable. It used to
// print c10d's warnings, each with LibTorch's stack trace (36 `frame #N` lines), after waiting
// 2.5 heartbeat periods.
TEST(Launch, ARefusedRunDirectoryReadsAsOneLinePerRank) {
  test::TempDir dir;
  fs::create_directories(dir.file("z"));
  test::write_text(dir.file("z/metrics.jsonl"), "");
  const auto r = test::run_frugal("launch -n 2 --port 29708 -- train --set run.name=z" + test::tiny_sets(dir.path()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "/z already holds a run; pass --resume auto")) << r.output;
  EXPECT_TRUE(has(r.output, "rank 1 of 2: rank 0 exited (its message above")) << r.output;
  EXPECT_FALSE(has(r.output, "frame #")) << r.output;
  EXPECT_FALSE(has(r.output, "[c10d]")) << r.output;
}

}  // namespace
}  // namespace frugal::dist::launcher_test
