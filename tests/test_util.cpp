#include "test_util.h"

#include "frugal/core/atomic_file.h"
#include "frugal/core/crash_report.h"
#include "frugal/data/shard.h"
#include "frugal/data/tokenizer.h"
#include "data/internal/little_endian.h"
#include "frugal/train/trainer.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <thread>
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

int start_frugal(const std::vector<std::string>& args, const std::string& log, const std::vector<std::string>& env) {
  std::vector<std::string> all = {FRUGAL_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<std::string> vars = env;
  for (char** e = environ; e && *e; ++e) {
    const std::string v = *e;
    bool replaced = false;
    for (const std::string& mine : env)
      replaced = replaced || v.substr(0, v.find('=') + 1) == mine.substr(0, mine.find('=') + 1);
    if (!replaced) vars.push_back(v);
  }
  std::vector<char*> argv, envp;
  for (auto& a : all) argv.push_back(a.data());
  for (auto& v : vars) envp.push_back(v.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  // The stop signals at their default, whatever this process inherited (a test run in the
  // background of a shell ignores SIGINT): the test sends them and checks what frugal makes of them.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, FRUGAL_BINARY, &fa, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot start " + std::string(FRUGAL_BINARY));
  return pid;
}

int wait_for_child(int pid, double limit_s) {
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit_s) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status;
}

std::vector<std::string> entries_starting(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool wait_for_entry(const std::string& dir, const std::string& prefix, double limit_s, const std::string& besides) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const std::vector<std::string> found = entries_starting(dir, prefix);
    if (std::any_of(found.begin(), found.end(), [&](const std::string& e) { return e != besides; })) return true;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
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

void flip_byte(const std::string& path, size_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x5a));
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

ModelConfig rope_model(int64_t D) {
  ModelConfig m;
  m.arch = ModelConfig::Arch::kLlama;
  m.heads = 1;
  m.embd = D;
  m.block = 64;
  m.rope_theta = 500.0;
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

namespace {
std::string record_of(const MaskedDocument& d) {
  std::string rec(4 + 5 * d.ids.size(), '\0');
  auto* p = reinterpret_cast<uint8_t*>(rec.data());
  detail::put_u32(p, static_cast<uint32_t>(d.ids.size()));
  for (size_t k = 0; k < d.ids.size(); ++k) detail::put_u32(p + 4 + 4 * k, static_cast<uint32_t>(d.ids[k]));
  for (size_t k = 0; k < d.mask.size(); ++k) p[4 + 4 * d.ids.size() + k] = d.mask[k];
  return rec;
}

nlohmann::json write_split(const std::string& dir, const std::string& split, const std::vector<MaskedDocument>& docs,
                           const std::string& corrupt) {
  const std::string file = split + "_000000.frs";
  ShardWriter w(dir + "/" + file, ShardKind::kRecords, ShardDtype::kBytes);
  for (const MaskedDocument& d : docs) w.add_record(record_of(d));
  if (!corrupt.empty()) w.add_record(corrupt);
  w.finish();
  return nlohmann::json::array({{{"file", file}, {"bytes", std::filesystem::file_size(dir + "/" + file)}}});
}
}  // namespace

std::string write_documents_dataset(const std::string& dir, const std::vector<MaskedDocument>& train,
                                    const std::vector<MaskedDocument>& val, int64_t vocab, const std::string& corrupt) {
  int64_t train_tokens = 0, val_tokens = 0;
  for (const auto& d : train) train_tokens += static_cast<int64_t>(d.ids.size());
  for (const auto& d : val) val_tokens += static_cast<int64_t>(d.ids.size());
  nlohmann::json m = {{"format", "frugal-dataset"},
                      {"format_version", 1},
                      {"kind", "documents"},
                      {"content", "chat"},
                      {"tokenizer", {{"name", "hf"}, {"vocab", vocab}}},
                      {"counts", {{"train_tokens", train_tokens}, {"val_tokens", val_tokens}}}};
  m["splits"]["train"] = write_split(dir, "train", train, corrupt);
  m["splits"]["val"] = write_split(dir, "val", val, "");
  write_text(dir + "/manifest.json", m.dump());
  return dir;
}

}  // namespace frugal::test
