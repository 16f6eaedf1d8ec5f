#include "test_util.h"

#include "frugal/core/atomic_file.h"
#include "frugal/core/crash_report.h"
#include "frugal/train/trainer.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace frugal::test {
namespace fs = std::filesystem;

namespace {
// Every test process (and the frugal processes it starts) keeps frugal's per-machine cache (the
// thread choice `frugal doctor` saves) in a directory of its own, never in the user's home.
struct PrivateCacheDir {
  PrivateCacheDir() {
    const fs::path dir = fs::temp_directory_path() / ("frugal-test-cache-" + std::to_string(::getpid()));
    ::setenv("FRUGAL_CACHE_DIR", dir.c_str(), /*overwrite=*/1);
  }
  ~PrivateCacheDir() {
    std::error_code ec;
    remove_tree(fs::temp_directory_path() / ("frugal-test-cache-" + std::to_string(::getpid())), ec);
  }
} const private_cache_dir;

// A test that crashes (a fatal signal) prints a backtrace, as the frugal command does.
struct CrashReport {
  CrashReport() { install_crash_report("frugal_tests"); }
} const crash_report;
}  // namespace

TempDir::TempDir() {
  std::random_device rd;
  for (int i = 0; i < 100; ++i) {
    fs::path p = fs::temp_directory_path() / ("frugal-test-" + std::to_string(rd()));
    if (fs::create_directory(p)) {
      path_ = p.string();
      return;
    }
  }
  throw std::runtime_error("cannot create a temporary directory");
}

TempDir::~TempDir() {
  std::error_code ec;
  remove_tree(path_, ec);
}

CommandResult run_frugal(const std::string& args, const std::string& env_prefix) {
  std::string cmd = env_prefix + " '" + std::string(FRUGAL_BINARY) + "' " + args + " 2>&1";
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> tiny_overrides(const std::string& out_dir) {
  return {"run.out_dir=" + out_dir, "run.threads=1",          "model.layers=1",      "model.heads=2",
          "model.embd=32",          "model.block=16",         "data.micro_batch=8",  "data.arith_lines=2000",
          "train.steps=30",         "train.warmup_steps=5",   "train.eval_every=15", "train.eval_batches=2",
          "train.log_every=5",      "train.answer_samples=5", "precision.mode=fp32"};
}

std::string tiny_sets(const std::string& out_dir) {
  std::string s;
  for (const auto& o : tiny_overrides(out_dir)) s += " --set " + o;
  return s;
}

ModelConfig tiny_model(ModelConfig::Arch arch) {
  ModelConfig m;
  m.arch = arch;
  m.layers = 2;
  m.heads = 4;
  m.kv_heads = arch == ModelConfig::Arch::kLlama ? 2 : 4;
  m.embd = 32;
  m.block = 16;
  m.vocab = 40;
  if (arch == ModelConfig::Arch::kLlama) {
    m.mlp_width = 48;
    m.tie_embeddings = false;
  }
  return m;
}

Config tiny_config() {
  Config c;
  c.model.layers = 2;
  c.model.heads = 2;
  c.model.embd = 32;
  c.model.block = 16;
  c.train.lr = 1e-2;
  c.precision.mode = PrecisionMode::kFp32;
  return c;
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::vector<double> step_losses(const std::string& metrics_path) {
  std::vector<double> out;
  for (const auto& j : read_jsonl(metrics_path))
    if (j.value("event", "") == "step" && j["loss"].is_number()) out.push_back(j["loss"].get<double>());
  return out;
}

TrainerOptions quiet_run(std::vector<std::shared_ptr<Callback>> callbacks, bool overwrite) {
  TrainerOptions o;
  o.overwrite = overwrite;
  o.quiet = true;
  o.callbacks = std::move(callbacks);
  return o;
}

}  // namespace frugal::test
