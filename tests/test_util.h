// Helpers shared by the tests: temporary directories, running the CLI, small configs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/core/config.h"
#include "frugal/core/features.h"

// Skips the running test (GTEST_SKIP: CTest lists it as skipped, with the reason) when this build
// of frugal lacks an optional feature (frugal/core/features.h). At the top of a TEST body.
#define FRUGAL_NEED_FEATURE(name)    \
  if (!::frugal::have_feature(name)) \
  GTEST_SKIP() << "this build has no " << (name) << " (frugal doctor lists the features of a build)"

namespace frugal {
struct TrainerOptions;
class Callback;
struct MaskedDocument;
}  // namespace frugal

namespace frugal::test {

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `frugal <args>` (the built binary) through the shell; env_prefix like "FRUGAL_X=1 ".
CommandResult run_frugal(const std::string& args, const std::string& env_prefix = "");

// Starts `frugal <args>` (the built binary) without waiting, its stdout and stderr to `log`, with
// the environment of this process plus `env` ("NAME=value", replacing one of the same name).
// Returns the child's pid.
int start_frugal(const std::vector<std::string>& args, const std::string& log,
                 const std::vector<std::string>& env = {});
// Waits for child `pid` to end and returns its wait status; a child still running after `limit_s`
// seconds (a hang: the caller's test fails on the status) is killed with SIGKILL first.
int wait_for_child(int pid, double limit_s);

// The names of the entries of folder `dir` that start with `prefix`, sorted.
std::vector<std::string> entries_starting(const std::string& dir, const std::string& prefix);
// Waits until folder `dir` holds an entry whose name starts with `prefix`, other than `besides`
// (true), for at most `limit_s` seconds (false).
bool wait_for_entry(const std::string& dir, const std::string& prefix, double limit_s, const std::string& besides = "");

void write_text(const std::string& path, const std::string& text);
std::string read_text(const std::string& path);
// XORs the byte at offset `at` of an existing file with 0x5a (a damaged file of the same size).
void flip_byte(const std::string& path, size_t at);

// --set overrides for a model and run small enough to train in about a second.
std::vector<std::string> tiny_overrides(const std::string& out_dir);
// The same as command-line arguments: " --set k=v --set ...".
std::string tiny_sets(const std::string& out_dir);
// A Config (not resolved from files) for in-process pieces: a 2-layer, 2-head GPT of width 32 with
// block 16, learning rate 1e-2, fp32.
Config tiny_config();
// A 2-layer model of either family, 32 wide, 4 heads, block 16, vocabulary 40; the Llama with 2
// key/value heads, SwiGLU 48 and an untied head: for tests of the model's parameters by name.
ModelConfig tiny_model(ModelConfig::Arch arch);
// A Llama-family config of one head of D channels, block 64, rope_theta 500: rotations fast enough
// over a short sequence to matter, for tests of rotary attention kernels.
ModelConfig rope_model(int64_t D);

// One JSON value per line of a JSON-lines file (metrics.jsonl); empty when the file is missing.
std::vector<nlohmann::json> read_jsonl(const std::string& path);
// The "loss" of every "step" line of a metrics.jsonl that has a number there, in order (a
// non-finite loss is written as null and left out).
std::vector<double> step_losses(const std::string& metrics_path);

// A test run's options: quiet, replacing an earlier run folder of the same name (overwrite =
// false refuses it, as `frugal train` does), with these callbacks.
TrainerOptions quiet_run(std::vector<std::shared_ptr<Callback>> callbacks = {}, bool overwrite = true);

// A documents dataset in `dir` as `frugal prepare --format chat` writes one (docs/formats/shards.md):
// these train and val documents, content "chat", a vocabulary of `vocab`; `corrupt`, where not
// empty, is appended to the train shard as one more record. Returns dir.
std::string write_documents_dataset(const std::string& dir, const std::vector<MaskedDocument>& train,
                                    const std::vector<MaskedDocument>& val, int64_t vocab,
                                    const std::string& corrupt = "");

}  // namespace frugal::test
