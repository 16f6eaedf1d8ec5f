// Sharded optimizer state and weights: staging, the index, verification and assembly; see
// state_shards.h.
#include "frugal/ckpt/state_shards.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <set>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"

namespace frugal {
namespace fs = std::filesystem;

StateShard::Entry& StateShard::entry(const std::string& name, int64_t numel) {
  for (auto& e : entries)
    if (e.name == name) return e;
  entries.push_back(Entry{name, numel, {}, {}, {}});
  return entries.back();
}

nlohmann::json StagedShard::to_json() const {
  return {{"kind", kind},   {"rank", rank}, {"world", world}, {"path", path},     {"file", file},
          {"bytes", bytes}, {"xxh3", xxh3}, {"numel", numel}, {"pieces", pieces}, {"shapes", shapes}};
}

StagedShard StagedShard::from_json(const nlohmann::json& j) {
  try {
    StagedShard s;
    s.kind = j.value("kind", std::string(kOptimizerShards));
    s.rank = j.at("rank").get<int64_t>();
    s.world = j.at("world").get<int64_t>();
    s.path = j.at("path").get<std::string>();
    s.file = j.at("file").get<std::string>();
    s.bytes = j.at("bytes").get<int64_t>();
    s.xxh3 = j.at("xxh3").get<std::string>();
    s.numel = j.at("numel");
    s.pieces = j.at("pieces");
    s.shapes = j.value("shapes", nlohmann::json::object());
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(fmt::format("a rank's report of its shard is malformed: {}", e.what()));
  }
}

std::string shard_file_name(int64_t rank, int64_t world, const std::string& kind) {
  return fmt::format("{}-{:05d}-of-{:05d}.safetensors", kind, rank, world);
}

StagedShard stage_state_shard(const std::string& root, int64_t step, int64_t rank, int64_t world,
                              const StateShard& shard, const std::string& kind) {
  static std::atomic<int> counter{0};
  StagedShard s;
  s.kind = kind;
  s.rank = rank;
  s.world = world;
  s.file = shard_file_name(rank, world, kind);
  NamedTensors tensors;
  for (const auto& e : shard.entries) {
    s.numel[e.name] = e.numel;
    if (kind == kModelShards) s.shapes[e.name] = e.shape;  // [] for a scalar
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
    throw IoError(fmt::format("cannot create {} for this rank's {} shard: {}", dir.string(), kind, ec.message()),
                  ec.value());
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
  const std::string kind = ranks.empty() ? kOptimizerShards : ranks.front().kind;
  if (kind == kModelShards) index["shapes"] = nlohmann::json::object();
  auto agree = [&](const char* field, const std::string& name, const nlohmann::json& v) {
    if (index[field].contains(name) && index[field][name] != v)
      throw CheckpointError(fmt::format(
          "the ranks disagree on the {} of {} tensor '{}' ({} and {}); every rank must hold the "
          "same model",
          field == std::string("tensors") ? "size" : "shape", kind, name, index[field][name].dump(), v.dump()));
    index[field][name] = v;
  };
  for (size_t r = 0; r < ranks.size(); ++r) {
    const StagedShard& s = ranks[r];
    if (s.rank != static_cast<int64_t>(r) || s.world != static_cast<int64_t>(ranks.size()) || s.kind != kind)
      throw CheckpointError(fmt::format("{} shard {} reports rank {} of {}, expected rank {} of {}", s.kind, s.file,
                                        s.rank, s.world, r, ranks.size()));
    for (const auto& [name, n] : s.numel.items()) agree("tensors", name, n);
    if (kind == kModelShards)
      for (const auto& [name, shape] : s.shapes.items()) agree("shapes", name, shape);
    index["ranks"].push_back({{"file", s.file}, {"pieces", s.pieces}});
  }
  return index;
}

std::string shards_index_problem(const nlohmann::json& index, std::vector<std::string>& files,
                                 const std::string& kind) {
  files.clear();
  const std::string key = kind + "_shards";
  const bool weights = kind == kModelShards;
  if (!index.is_object() || !index.contains("world_size") || !index["world_size"].is_number_integer() ||
      !index.contains("tensors") || !index["tensors"].is_object() || !index.contains("ranks") ||
      !index["ranks"].is_array() || (weights && !(index.contains("shapes") && index["shapes"].is_object())))
    return fmt::format("\"{}\" is not {{\"world_size\": n, \"tensors\": {{..}}, {}\"ranks\": [..]}}", key,
                       weights ? "\"shapes\": {..}, " : "");
  const int64_t world = index["world_size"].get<int64_t>();
  if (world < 1 || static_cast<int64_t>(index["ranks"].size()) != world)
    return fmt::format("\"{}\" lists {} rank(s) for a world size of {}", key, index["ranks"].size(), world);
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> covered;
  for (const auto& [name, n] : index["tensors"].items()) {
    if (!n.is_number_integer() || n.get<int64_t>() < 0)
      return fmt::format("\"{}.tensors\" gives '{}' a size that is not a whole number >= 0", key, name);
    if (!weights) continue;
    const nlohmann::json& shape = index["shapes"].value(name, nlohmann::json());
    int64_t product = 1;
    bool dims = shape.is_array();
    for (const auto& d : shape) {
      dims = dims && d.is_number_integer() && d.get<int64_t>() >= 0 &&
             !__builtin_mul_overflow(product, d.get<int64_t>(), &product);
    }
    if (!dims || product != n.get<int64_t>())
      return fmt::format("\"{}.shapes\" gives '{}' {} where it has {} elements", key, name,
                         shape.is_null() ? std::string("no shape") : shape.dump(), n.get<int64_t>());
    covered[name];  // every element of a weight must be in a piece
  }
  if (weights)
    for (const auto& [name, shape] : index["shapes"].items())
      if (!index["tensors"].contains(name))
        return fmt::format("\"{}.shapes\" gives a shape to '{}', which \"{}.tensors\" does not list", key, name, key);
  for (int64_t r = 0; r < world; ++r) {
    const auto& one = index["ranks"][static_cast<size_t>(r)];
    if (!one.is_object() || one.value("file", "") != shard_file_name(r, world, kind) || !one.contains("pieces") ||
        !one["pieces"].is_object())
      return fmt::format("\"{}.ranks\"[{}] is not {{\"file\": \"{}\", \"pieces\": {{..}}}}", key, r,
                         shard_file_name(r, world, kind));
    files.push_back(shard_file_name(r, world, kind));
    for (const auto& [name, pieces] : one["pieces"].items()) {
      if (!index["tensors"].contains(name))
        return fmt::format("rank {}'s pieces name '{}', which \"{}.tensors\" does not list", r, name, key);
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
    int64_t next = 0;  // the first element no piece so far covers
    for (const auto& [offset, count] : pieces) {
      if (offset < next) return fmt::format("two ranks' pieces of '{}' overlap (at element {})", name, offset);
      if (weights && offset > next) break;
      next = offset + count;
    }
    if (weights && next != index["tensors"][name].get<int64_t>())
      return fmt::format("no rank's pieces hold element {} of weight '{}'", next, name);
  }
  return "";
}

std::string shard_files_problem(const nlohmann::json& state, std::set<std::string>& files) {
  for (const char* kind : {kOptimizerShards, kModelShards}) {
    const std::string key = std::string(kind) + "_shards";
    if (!state.contains(key)) continue;
    std::vector<std::string> shards;
    if (std::string bad = shards_index_problem(state[key], shards, kind); !bad.empty()) return bad;
    files.erase(std::string(kind) + ".safetensors");
    if (kind == std::string(kModelShards) && state["weights_dtype"] != "fp32") {
      if (state["exact"].get<bool>()) return "\"exact\" is true for weight shards in reduced precision";
      files.erase("master.safetensors");
    }
    files.insert(shards.begin(), shards.end());
  }
  return "";
}

void move_staged_shards(const std::vector<StagedShard>& shards, const std::string& dir, nlohmann::json& files) {
  std::error_code ec;
  for (const StagedShard& s : shards) {
    fs::rename(s.path, fs::path(dir) / s.file, ec);
    if (ec) throw IoError(fmt::format("cannot move {} into {}: {}", s.path, dir, ec.message()), ec.value());
    fs::remove(fs::path(s.path).parent_path(), ec);  // its staging directory, now empty
    files[s.file] = {{"bytes", s.bytes}, {"xxh3", s.xxh3}};
  }
  fsync_dir(dir);
}

namespace {
// Rank file `path`'s tensor `name`, checked against the pieces its index lists for it.
const at::Tensor& piece_values(const SafetensorsFile& f, const std::string& path, const std::string& name,
                               const nlohmann::json& pieces) {
  const at::Tensor* values = f.find(name);
  int64_t total = 0;
  for (const auto& p : pieces) total += p[1].get<int64_t>();
  if (!values || values->dim() != 1 || values->numel() != total)
    throw CheckpointError(fmt::format("{}: tensor '{}' {} where state.json's pieces hold {} elements", path, name,
                                      values ? fmt::format("has {} elements", values->numel()) : "is missing", total));
  return *values;
}
}  // namespace

void read_state_pieces(const std::string& dir, const nlohmann::json& index, StateShard& want) {
  std::map<std::string, size_t> which;
  for (size_t i = 0; i < want.entries.size(); ++i) {
    StateShard::Entry& e = want.entries[i];
    const nlohmann::json& n = index.at("tensors").value(e.name, nlohmann::json());
    if (!n.is_number_integer() || n.get<int64_t>() != e.numel)
      throw CheckpointError(
          fmt::format("{}: the checkpoint's shards {} '{}'{}; the model or its parameter grouping differs from the "
                      "checkpoint's",
                      dir, n.is_null() ? "have no tensor" : "hold", e.name,
                      n.is_null() ? "" : fmt::format(" with {} elements, this run's has {}", n.dump(), e.numel)));
    which[e.name] = i;
    int64_t total = 0;
    for (const auto& p : e.pieces) total += p.second;
    const at::Tensor buf = at::zeros({total}, at::kFloat);
    e.values.clear();
    int64_t at = 0;
    for (const auto& p : e.pieces) {
      e.values.push_back(buf.narrow(0, at, p.second));
      at += p.second;
    }
  }
  for (const auto& one : index.at("ranks")) {
    const std::string path = (fs::path(dir) / one.at("file").get<std::string>()).string();
    const SafetensorsFile f = load_safetensors(path);  // released before the next rank's file
    for (const auto& [name, pieces] : one.at("pieces").items()) {
      const auto it = which.find(name);
      if (it == which.end()) continue;
      const at::Tensor& values = piece_values(f, path, name, pieces);
      StateShard::Entry& e = want.entries[it->second];
      int64_t at = 0;  // the file piece's first element in `values`
      for (const auto& fp : pieces) {
        const int64_t fo = fp[0].get<int64_t>(), fc = fp[1].get<int64_t>();
        for (size_t k = 0; k < e.pieces.size(); ++k) {
          const auto [wo, wc] = e.pieces[k];
          const int64_t lo = std::max(fo, wo), hi = std::min(fo + fc, wo + wc);
          if (lo < hi) e.values[k].narrow(0, lo - wo, hi - lo).copy_(values.narrow(0, at + lo - fo, hi - lo));
        }
        at += fc;
      }
    }
  }
}

void check_shard_dtypes(const NamedTensors& weights, const std::string& weights_dtype, const std::string& dir) {
  const c10::ScalarType want = weights_dtype == "bf16"   ? c10::kBFloat16
                               : weights_dtype == "fp16" ? c10::kHalf
                                                         : c10::kFloat;
  for (const auto& [name, t] : weights)
    if (t.is_floating_point() && t.numel() > 0 && t.scalar_type() != want)
      throw CheckpointError(fmt::format("{}: weight '{}' is stored as {} where state.json says weights_dtype {}", dir,
                                        name, c10::toString(t.scalar_type()), weights_dtype));
}

NamedTensors assemble_state_shards(const std::string& dir, const nlohmann::json& index) {
  NamedTensors out;
  std::map<std::string, size_t> slot;
  const nlohmann::json shapes = index.value("shapes", nlohmann::json::object());
  for (const auto& [name, n] : index.at("tensors").items()) {
    slot[name] = out.size();
    out.emplace_back(name, at::Tensor());  // allocated in the dtype of its first piece
  }
  for (const auto& one : index.at("ranks")) {
    const std::string path = (fs::path(dir) / one.at("file").get<std::string>()).string();
    const SafetensorsFile f = load_safetensors(path);
    for (const auto& [name, pieces] : one.at("pieces").items()) {
      const at::Tensor& values = piece_values(f, path, name, pieces);
      at::Tensor& whole = out[slot.at(name)].second;
      if (values.numel() == 0) continue;  // no dtype to go by (written as an empty fp32 tensor)
      if (!whole.defined()) whole = at::zeros({index["tensors"][name].get<int64_t>()}, values.scalar_type());
      if (values.scalar_type() != whole.scalar_type())
        throw CheckpointError(fmt::format("{}: tensor '{}' is {} where another rank's file has it as {}", path, name,
                                          c10::toString(values.scalar_type()), c10::toString(whole.scalar_type())));
      const at::Tensor v = values.to(whole.scalar_type());
      int64_t at = 0;
      for (const auto& p : pieces) {
        const int64_t offset = p[0].get<int64_t>(), count = p[1].get<int64_t>();
        whole.narrow(0, offset, count).copy_(v.narrow(0, at, count));
        at += count;
      }
    }
  }
  for (auto& [name, whole] : out) {
    if (!whole.defined()) whole = at::zeros({index["tensors"][name].get<int64_t>()}, at::kFloat);
    if (shapes.contains(name)) whole = whole.view(shapes[name].get<std::vector<int64_t>>());
  }
  return out;
}

}  // namespace frugal
