// Fuzz target: a checkpoint archive as `frugal restore` reads it (docs/formats/checkpoint.md,
// "Archives"): a tar, zstd-compressed or not, whose members are a checkpoint's files and the index
// frugal-archive.json. The input is the archive's bytes; restore extracts, checks the index and the
// member names, verifies the checkpoint and moves it into place, which the target then removes so
// that every input starts from the same empty runs folder.
#include <ATen/ATen.h>

#include <filesystem>

#include "frugal/ckpt/archive.h"
#include "frugal/ckpt/checkpoint.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "fuzz_util.h"

using namespace frugal;

namespace {
std::string g_archive, g_runs;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // A valid archive to start from: a checkpoint written and archived as `frugal archive` does.
  const std::string runs = fuzz::scratch() + "/source-runs";
  CheckpointData d;
  d.model = {{"w", at::arange(6, at::kFloat)}};
  d.optimizer = {{"g0.exp_avg", at::zeros({6})}};
  d.state = {{"loop", {{"step", 3}}}};
  d.data_state = {{"kind", "index"}, {"next_micro_batch", 3}};
  ArchiveCandidate c;
  c.run = "demo";
  c.path = write_checkpoint(runs + "/demo/checkpoints", 3, d);
  c.step = 3;
  c.archive = true;
  const std::string made = archive_checkpoint(c, fuzz::scratch() + "/cold");
  if (const char* s = fuzz::seed_dir()) fuzz::write_whole(std::string(s) + "/step-00000003.tar.zst", read_file(made));
  g_archive = fuzz::scratch() + "/input.tar.zst";
  g_runs = fuzz::scratch() + "/runs";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::write_whole(g_archive, std::string(reinterpret_cast<const char*>(data), size));
  try {
    restore_checkpoint(g_archive, g_runs);
  } catch (const Error&) {
  }
  std::error_code ec;
  remove_tree(g_runs, ec);
  return 0;
}
