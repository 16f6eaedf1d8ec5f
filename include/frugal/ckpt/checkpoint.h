// A checkpoint is a directory holding everything a run needs to continue bitwise where it was
// (docs/formats/checkpoint.md):
//
//   checkpoints/step-00000120/
//     model.safetensors      weights in checkpoint.weights_dtype (readable by Python safetensors)
//     master.safetensors     exact fp32 weights, only when weights_dtype != fp32 and exact_resume
//     optimizer.safetensors  optimizer moments
//                            On several ZeRO processes, each rank's pieces instead, in files of
//                            its own: optimizer-RRRRR-of-WWWWW.safetensors for the moments and
//                            model-RRRRR-of-WWWWW.safetensors for the weights (ckpt/state_shards.h)
//     data_state.json        the data source's cursor (JSON)
//     state.json             step, RNG, scaler, callbacks, config, per-file xxh3-64 checksums
//     COMPLETE               marker written last; holds the checksum of state.json
//
// Writing is atomic: files go to a hidden temp directory, each is fsynced, the directory is
// renamed to step-NNNNNNNN, then COMPLETE is written (atomically). A crash at any point leaves
// the previous checkpoint as the newest complete one; directories without a valid COMPLETE are
// never resumed from and are removed by retention.
//
// Thread safety: free functions, safe to call from a writer thread on distinct directories.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/ckpt/safetensors.h"
#include "frugal/ckpt/state_shards.h"
#include "frugal/core/config.h"

namespace frugal {

inline constexpr int kCheckpointVersion = 1;

// What goes into a checkpoint. The tensors may live anywhere (they are copied to the CPU while
// encoding); for an asynchronous save they must be a private snapshot.
struct CheckpointData {
  NamedTensors model;         // the parameters in training precision (fp32 masters)
  NamedTensors optimizer;     // Optimizer::state_tensors()
  nlohmann::json state;       // trainer state; the writer adds format, version, step, files
  nlohmann::json data_state;  // the data source's cursor ({} for pure-function sources)
  // Instead of `optimizer` (left empty): every rank's file of its pieces of it, staged
  // (stage_state_shard), in rank order; moved into the checkpoint and indexed in state.json.
  std::vector<StagedShard> optimizer_shards;
  // Likewise instead of `model`: every rank's file of its pieces of the weights, written in
  // sharded_weights_dtype() (so no master.safetensors is needed).
  std::vector<StagedShard> model_shards;
};

// The stages of a write, in order. WriteOptions::after_stage is called after each (tests throw
// from it to simulate a crash there).
enum class WriteStage { kTempDir, kModel, kMaster, kOptimizer, kDataState, kState, kRenamed, kMarker };
const char* write_stage_name(WriteStage s);

struct WriteOptions {
  WeightsDtype weights_dtype = WeightsDtype::kFp32;
  bool exact_resume = true;
  std::function<void(WriteStage)> after_stage;  // test hook; may throw
};

// "step-00000120"
std::string checkpoint_dir_name(int64_t step);

// The dtype the ranks write their weight shards in: fp32 when exact_resume (the shards are then
// the masters), else checkpoint.weights_dtype's.
c10::ScalarType sharded_weights_dtype(const WriteOptions& options);

// Writes root/step-NNNNNNNN (root is created) and returns its path. Throws IoError or
// CheckpointError; on failure the partial temp directory is left for retention to remove.
std::string write_checkpoint(const std::string& root, int64_t step, const CheckpointData& data,
                             const WriteOptions& options = {});

struct CheckpointInfo {
  std::string path;
  int64_t step = 0;
  bool complete = false;         // COMPLETE present, state.json matches its checksum and its step
                                 // matches the directory's name
  std::optional<double> metric;  // state.json "metric".value, when recorded
  bool corrupt = false;          // complete, but verify_checkpoint() found a damaged file (set by
                                 // apply_retention(), which verifies; list_checkpoints() does not)
  bool unverified = false;       // complete, but its files could not be read (an I/O error) or it
                                 // is another checkpoint version's: neither sound nor corrupt
};

// step-* directories under root, newest (highest step) first. Cheap: reads COMPLETE and
// state.json, not the tensor files. A missing root gives an empty list.
std::vector<CheckpointInfo> list_checkpoints(const std::string& root);

// Full check: COMPLETE, state.json's checksum, every file's size and xxh3-64. Returns "" when the
// checkpoint is sound, else what is wrong, naming the file.
std::string verify_checkpoint(const std::string& path);

// verify_checkpoint() with the kind of problem: `definite` when the bytes were read and are wrong
// (a size or checksum mismatch, a missing file, a step that disagrees with the directory name),
// not when a file could not be read or the checkpoint is another version's. Retention deletes
// only definitely corrupt checkpoints.
struct CheckpointCheck {
  std::string problem;  // "" when sound
  bool definite = true;
};
CheckpointCheck check_checkpoint(const std::string& path);

// The newest checkpoint under root that verifies. Each newer one that does not is reported
// through `warn` (path and problem). nullopt when none verifies.
std::optional<std::string> find_resumable(const std::string& root, const std::function<void(const std::string&)>& warn);

struct LoadedCheckpoint {
  std::string path;
  int64_t step = 0;
  NamedTensors weights;    // exact fp32 masters when stored, else model.safetensors as written
  bool exact = true;       // false when only reduced-precision weights were stored
  NamedTensors optimizer;  // whole; empty when the checkpoint holds it in shards (state.json's
                           // "optimizer_shards": Optimizer::load_state_shards reads them)
  nlohmann::json state;
  nlohmann::json data_state;
};

// Verifies, then reads. Throws CheckpointError naming the path and the problem.
LoadedCheckpoint load_checkpoint(const std::string& path);

// The weights of checkpoint `dir` as model.safetensors holds them, or assembled from the ranks'
// weight shards (one model, whole). Does not verify; throws CheckpointError or IoError.
NamedTensors checkpoint_weights(const std::string& dir);

// xxh3-64 of bytes as 16 lowercase hex digits.
std::string xxh3_hex(const std::string& bytes);

}  // namespace frugal
