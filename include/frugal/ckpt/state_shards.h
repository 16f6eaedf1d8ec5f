// Sharded optimizer state and weights (ZeRO on several processes, dist/zero_adamw.h): each rank
// writes the pieces of the optimizer's tensors and of the weights it owns to files of its own, in
// parallel, and the checkpoint's state.json indexes them (docs/formats/checkpoint.md, "Sharded
// checkpoints"):
//
//   optimizer-00000-of-00002.safetensors   rank 0's pieces: per tensor, one 1-D fp32 tensor
//   optimizer-00001-of-00002.safetensors   rank 1's
//   state.json "optimizer_shards": {"world_size": 2,
//                                   "tensors": {"g0.exp_avg": 1234, ...},  (whole elements)
//                                   "ranks": [{"file": "optimizer-00000-of-00002.safetensors",
//                                              "pieces": {"g0.exp_avg": [[0, 617]], ...}}, ...]}
//
// A piece [offset, count] is elements offset .. offset + count - 1 of the whole (flattened)
// tensor; a file's tensor is its pieces concatenated in the listed order. Elements no piece
// covers are 0 (the padding between a split group's parameters). The whole tensors are those
// Optimizer::state_tensors() names, so a checkpoint resumes on any number of processes and with
// any ZeRO stage.
//
// The weights' files ("model-RRRRR-of-WWWWW.safetensors", index "model_shards") are the same
// format for the model's tensors by name, with their shapes ("shapes": {"wte.weight": [256, 64]})
// and in the dtype they were written in; every element of a weight is in exactly one piece.
//
// Each rank stages its file (stage_state_shard: written, fsynced) in a directory of its own under
// the checkpoint root, named like a write's temp directory (".tmp-step-N-<pid>-r<rank>s<n>"), so
// retention removes it when its process is gone. Rank 0 moves every rank's file into the
// checkpoint it writes (write_checkpoint, CheckpointData::optimizer_shards) and lists each with its
// size and xxh3 like the other files; only then is the checkpoint renamed and marked complete.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/ckpt/safetensors.h"

namespace frugal {

// One rank's pieces of the optimizer state.
struct StateShard {
  struct Entry {
    std::string name;                                 // the whole tensor's, e.g. "g0.exp_avg"
    int64_t numel = 0;                                // the whole tensor's elements
    std::vector<std::pair<int64_t, int64_t>> pieces;  // [offset, count] in the whole
    std::vector<at::Tensor> values;                   // one 1-D tensor per piece (any device)
    std::vector<int64_t> shape;                       // the whole tensor's (weights); empty = 1-D
  };
  std::vector<Entry> entries;
  // The entry named `name` (added with `numel` when there is none yet).
  Entry& entry(const std::string& name, int64_t numel);
};

// The two kinds of sharded files: "optimizer" and "model" (the prefix of their names; the index is
// state.json's "<kind>_shards").
inline constexpr const char* kOptimizerShards = "optimizer";
inline constexpr const char* kModelShards = "model";

// A rank's file, written and fsynced in its staging directory, waiting to be moved into the
// checkpoint. Travels between processes as JSON (to_json / from_json).
struct StagedShard {
  std::string kind = kOptimizerShards;
  int64_t rank = 0, world = 1;
  std::string path;  // where it was written
  std::string file;  // its name in the checkpoint
  int64_t bytes = 0;
  std::string xxh3;                                  // 16 hex digits, as state.json's "files" entries
  nlohmann::json numel = nlohmann::json::object();   // {tensor: whole elements}
  nlohmann::json pieces = nlohmann::json::object();  // {tensor: [[offset, count], ...]}
  nlohmann::json shapes = nlohmann::json::object();  // {tensor: [dims]} (weights only)
  nlohmann::json to_json() const;
  static StagedShard from_json(const nlohmann::json& j);  // throws CheckpointError when malformed
};

// "optimizer-00001-of-00002.safetensors" (kind "model": "model-00001-of-00002.safetensors")
std::string shard_file_name(int64_t rank, int64_t world, const std::string& kind = kOptimizerShards);

// Writes `shard` as rank `rank`'s file of `kind` of the checkpoint of `step` under `root`
// (atomically, in a staging directory of its own). Throws IoError.
StagedShard stage_state_shard(const std::string& root, int64_t step, int64_t rank, int64_t world,
                              const StateShard& shard, const std::string& kind = kOptimizerShards);

// state.json's "<kind>_shards" for every rank's file (rank order). Throws CheckpointError when
// the ranks disagree on a tensor's size or shape, or a rank is missing.
nlohmann::json shards_index(const std::vector<StagedShard>& ranks);

// "" when `index` is a sound "<kind>_shards" (world size, files named for their rank, pieces
// inside their tensor, no element in two pieces; for the weights, a shape per tensor and every
// element in a piece); else what is wrong. Sets `files` to the files it names.
std::string shards_index_problem(const nlohmann::json& index, std::vector<std::string>& files,
                                 const std::string& kind = kOptimizerShards);

// For a checkpoint's state.json `state` (its "weights_dtype" and "exact" checked): each shard index
// checked, and in `files` (the files the checkpoint must list) the whole files it replaces
// (optimizer.safetensors; model.safetensors and master.safetensors) replaced by the ranks' files.
// "" when sound, else what is wrong.
std::string shard_files_problem(const nlohmann::json& state, std::set<std::string>& files);

// Moves every rank's staged file into `dir` (a checkpoint's temp directory), removes the emptied
// staging directories and lists each file in `files` (state.json's) with its size and xxh3.
// Throws IoError.
void move_staged_shards(const std::vector<StagedShard>& shards, const std::string& dir, nlohmann::json& files);

// Fills `want` (pieces of the whole tensors, such as a process's own: Optimizer::state_shard())
// with their values from the files of checkpoint `dir` (verified first by the caller): each
// entry's values become fp32 host tensors, 0 where no rank's piece covers. One rank's file is in
// memory at a time, so a process holds its own pieces and one file, never the whole tensors.
// Throws CheckpointError naming the tensor when the index has no tensor of that name and size, or
// as assemble_state_shards.
void read_state_pieces(const std::string& dir, const nlohmann::json& index, StateShard& want);

// The whole tensors, assembled from the files of checkpoint `dir` (verified first by the caller):
// fp32 where no piece says otherwise, else the pieces' dtype; the weights in their shapes. Throws
// CheckpointError naming the file when a file's tensors do not match the index.
NamedTensors assemble_state_shards(const std::string& dir, const nlohmann::json& index);

// CheckpointError naming the weight when one of the assembled `weights` (floating) is not in the
// dtype state.json's "weights_dtype" names (a re-signed index, or ranks that wrote other dtypes).
void check_shard_dtypes(const NamedTensors& weights, const std::string& weights_dtype, const std::string& dir);

}  // namespace frugal
