// Sharded optimizer state: staging, the index, verification and assembly; see state_shards.h.
#include "frugal/ckpt/state_shards.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"

namespace frugal {
namespace fs = std::filesystem;

StateShard::Entry& StateShard::entry(const std::string& name, int64_t numel) {
  for (auto& e : entries)
    if (e.name == name) return e;
  entries.push_back(Entry{name, numel, {}, {}});
  return entries.back();
}

nlohmann::json StagedShard::to_json() const {
  return {{"rank", rank},   {"world", world}, {"path", path},   {"file", file},
          {"bytes", bytes}, {"xxh3", xxh3},   {"numel", numel}, {"pieces", pieces}};
}

StagedShard StagedShard::from_json(const nlohmann::json& j) {
  try {
    StagedShard s;
    s.rank = j.at("rank").get<int64_t>();
    s.world = j.at("world").get<int64_t>();
    s.path = j.at("path").get<std::string>();
    s.file = j.at("file").get<std::string>();
    s.bytes = j.at("bytes").get<int64_t>();
    s.xxh3 = j.at("xxh3").get<std::string>();
    s.numel = j.at("numel");
    s.pieces = j.at("pieces");
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(fmt::format("a rank's report of its optimizer shard is malformed: {}", e.what()));
  }
}

std::string shard_file_name(int64_t rank, int64_t world) {
  return fmt::format("optimizer-{:05d}-of-{:05d}.safetensors", rank, world);
}

StagedShard stage_state_shard(const std::string& root, int64_t step, int64_t rank, int64_t world,
                              const StateShard& shard) {
  static std::atomic<int> counter{0};
  StagedShard s;
  s.rank = rank;
  s.world = world;
  s.file = shard_file_name(rank, world);
  NamedTensors tensors;
  for (const auto& e : shard.entries) {
    s.numel[e.name] = e.numel;
    nlohmann::json pieces = nlohmann::json::array();
    for (const auto& [offset, count] : e.pieces) pieces.push_back({offset, count});
    s.pieces[e.name] = pieces;
    std::vector<at::Tensor> flat;
    for (const auto& v : e.values) flat.push_back(v.detach().reshape({-1}));
    // Joined where they are; encode_safetensors copies each tensor to the host once.
    tensors.emplace_back(e.name, flat.empty() ? at::zeros({0}, at::kFloat) : at::cat(flat));
  }
  const std::string bytes = encode_safetensors(tensors, {{"format", "pt"},
                                                         {"frugal_step", std::to_string(step)},
                                                         {"frugal_shard", fmt::format("{} of {}", rank, world)}});
  // Named like a write's temp directory, so retention removes it once this process is gone, and
  // for the rank (processes on other machines may have the same pid). Absolute: rank 0 moves it.
  std::error_code ec;
  const fs::path dir = fs::absolute(fs::path(root), ec) /
                       fmt::format(".tmp-{}-{}-r{}s{}", checkpoint_dir_name(step), ::getpid(), rank, counter++);
  fs::create_directories(dir, ec);
  if (ec)
    throw IoError(fmt::format("cannot create {} for this rank's optimizer shard: {}", dir.string(), ec.message()));
  s.path = (dir / s.file).string();
  try {
    write_file_atomic(s.path, bytes);
  } catch (...) {
    remove_tree(dir.string(), ec);
    throw;
  }
  s.bytes = static_cast<int64_t>(bytes.size());
  s.xxh3 = xxh3_hex(bytes);
  return s;
}

nlohmann::json shards_index(const std::vector<StagedShard>& ranks) {
  nlohmann::json index = {
      {"world_size", ranks.size()}, {"tensors", nlohmann::json::object()}, {"ranks", nlohmann::json::array()}};
  for (size_t r = 0; r < ranks.size(); ++r) {
    const StagedShard& s = ranks[r];
    if (s.rank != static_cast<int64_t>(r) || s.world != static_cast<int64_t>(ranks.size()))
      throw CheckpointError(fmt::format("optimizer shard {} reports rank {} of {}, expected rank {} of {}", s.file,
                                        s.rank, s.world, r, ranks.size()));
    for (const auto& [name, n] : s.numel.items()) {
      if (index["tensors"].contains(name) && index["tensors"][name] != n)
        throw CheckpointError(
            fmt::format("the ranks disagree on the size of optimizer tensor '{}' ({} and {}); "
                        "every rank must hold the same model",
                        name, index["tensors"][name].dump(), n.dump()));
      index["tensors"][name] = n;
    }
    index["ranks"].push_back({{"file", s.file}, {"pieces", s.pieces}});
  }
  return index;
}

std::string shards_index_problem(const nlohmann::json& index, std::vector<std::string>& files) {
  files.clear();
  if (!index.is_object() || !index.contains("world_size") || !index["world_size"].is_number_integer() ||
      !index.contains("tensors") || !index["tensors"].is_object() || !index.contains("ranks") ||
      !index["ranks"].is_array())
    return "\"optimizer_shards\" is not {\"world_size\": n, \"tensors\": {..}, \"ranks\": [..]}";
  const int64_t world = index["world_size"].get<int64_t>();
  if (world < 1 || static_cast<int64_t>(index["ranks"].size()) != world)
    return fmt::format("\"optimizer_shards\" lists {} rank(s) for a world size of {}", index["ranks"].size(), world);
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> covered;
  for (const auto& [name, n] : index["tensors"].items())
    if (!n.is_number_integer() || n.get<int64_t>() < 0)
      return fmt::format("\"optimizer_shards.tensors\" gives '{}' a size that is not a whole number >= 0", name);
  for (int64_t r = 0; r < world; ++r) {
    const auto& one = index["ranks"][static_cast<size_t>(r)];
    if (!one.is_object() || one.value("file", "") != shard_file_name(r, world) || !one.contains("pieces") ||
        !one["pieces"].is_object())
      return fmt::format("\"optimizer_shards.ranks\"[{}] is not {{\"file\": \"{}\", \"pieces\": {{..}}}}", r,
                         shard_file_name(r, world));
    files.push_back(shard_file_name(r, world));
    for (const auto& [name, pieces] : one["pieces"].items()) {
      if (!index["tensors"].contains(name))
        return fmt::format("rank {}'s pieces name '{}', which \"optimizer_shards.tensors\" does not list", r, name);
      const int64_t numel = index["tensors"][name].get<int64_t>();
      if (!pieces.is_array()) return fmt::format("rank {}'s pieces of '{}' are not a list", r, name);
      for (const auto& p : pieces) {
        const bool pair = p.is_array() && p.size() == 2 && p[0].is_number_integer() && p[1].is_number_integer();
        if (!pair || p[0].get<int64_t>() < 0 || p[1].get<int64_t>() < 0 ||
            p[0].get<int64_t>() > numel - p[1].get<int64_t>())
          return fmt::format("rank {}'s piece {} of '{}' is not [offset, count] inside its {} elements", r, p.dump(),
                             name, numel);
        covered[name].emplace_back(p[0].get<int64_t>(), p[1].get<int64_t>());
      }
    }
  }
  for (auto& [name, pieces] : covered) {
    std::sort(pieces.begin(), pieces.end());
    for (size_t i = 1; i < pieces.size(); ++i)
      if (pieces[i - 1].first + pieces[i - 1].second > pieces[i].first)
        return fmt::format("two ranks' pieces of '{}' overlap (at element {})", name, pieces[i].first);
  }
  return "";
}

NamedTensors assemble_state_shards(const std::string& dir, const nlohmann::json& index) {
  NamedTensors out;
  std::map<std::string, size_t> slot;
  for (const auto& [name, n] : index.at("tensors").items()) {
    slot[name] = out.size();
    out.emplace_back(name, at::zeros({n.get<int64_t>()}, at::kFloat));
  }
  for (const auto& one : index.at("ranks")) {
    const std::string path = (fs::path(dir) / one.at("file").get<std::string>()).string();
    const SafetensorsFile f = load_safetensors(path);
    for (const auto& [name, pieces] : one.at("pieces").items()) {
      const at::Tensor* values = f.find(name);
      int64_t total = 0;
      for (const auto& p : pieces) total += p[1].get<int64_t>();
      if (!values || values->dim() != 1 || values->numel() != total)
        throw CheckpointError(fmt::format("{}: tensor '{}' {} where state.json's pieces hold {} elements", path, name,
                                          values ? fmt::format("has {} elements", values->numel()) : "is missing",
                                          total));
      at::Tensor& whole = out[slot.at(name)].second;
      const at::Tensor v = values->to(whole.scalar_type());
      int64_t at = 0;
      for (const auto& p : pieces) {
        const int64_t offset = p[0].get<int64_t>(), count = p[1].get<int64_t>();
        whole.narrow(0, offset, count).copy_(v.narrow(0, at, count));
        at += count;
      }
    }
  }
  return out;
}

}  // namespace frugal
