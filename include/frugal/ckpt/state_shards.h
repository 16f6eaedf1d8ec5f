// Sharded optimizer state (ZeRO on several processes, dist/zero_adamw.h): each rank writes the
// pieces of the optimizer's tensors it owns to a file of its own, in parallel, and the
// checkpoint's state.json indexes them (docs/formats/checkpoint.md, "Sharded optimizer state"):
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
// Each rank stages its file (stage_state_shard: written, fsynced) in a directory of its own under
// the checkpoint root, named like a write's temp directory (".tmp-step-N-<pid>-r<rank>s<n>"), so
// retention removes it when its process is gone. Rank 0 moves every rank's file into the
// checkpoint it writes (write_checkpoint, CheckpointData::optimizer_shards) and lists each with its
// size and xxh3 like the other files; only then is the checkpoint renamed and marked complete.
#pragma once

#include <cstdint>
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
  };
  std::vector<Entry> entries;
  // The entry named `name` (added with `numel` when there is none yet).
  Entry& entry(const std::string& name, int64_t numel);
};

// A rank's file, written and fsynced in its staging directory, waiting to be moved into the
// checkpoint. Travels between processes as JSON (to_json / from_json).
struct StagedShard {
  int64_t rank = 0, world = 1;
  std::string path;  // where it was written
  std::string file;  // its name in the checkpoint
  int64_t bytes = 0;
  std::string xxh3;                                  // 16 hex digits, as state.json's "files" entries
  nlohmann::json numel = nlohmann::json::object();   // {tensor: whole elements}
  nlohmann::json pieces = nlohmann::json::object();  // {tensor: [[offset, count], ...]}
  nlohmann::json to_json() const;
  static StagedShard from_json(const nlohmann::json& j);  // throws CheckpointError when malformed
};

// "optimizer-00001-of-00002.safetensors"
std::string shard_file_name(int64_t rank, int64_t world);

// Writes `shard` as rank `rank`'s file of the checkpoint of `step` under `root` (atomically, in a
// staging directory of its own). Throws IoError.
StagedShard stage_state_shard(const std::string& root, int64_t step, int64_t rank, int64_t world,
                              const StateShard& shard);

// state.json's "optimizer_shards" for every rank's file (rank order). Throws CheckpointError when
// the ranks disagree on a tensor's size, or a rank is missing.
nlohmann::json shards_index(const std::vector<StagedShard>& ranks);

// "" when `index` is a sound "optimizer_shards" (world size, files named for their rank, pieces
// inside their tensor, no element in two pieces); else what is wrong. Sets `files` to the files it
// names.
std::string shards_index_problem(const nlohmann::json& index, std::vector<std::string>& files);

// The whole tensors, assembled from the files of checkpoint `dir` (verified first by the caller).
// Throws CheckpointError naming the file when a file's tensors do not match the index.
NamedTensors assemble_state_shards(const std::string& dir, const nlohmann::json& index);

}  // namespace frugal
