// Checkpoint directories: atomic write, listing, verification and loading; see checkpoint.h and
// docs/formats/checkpoint.md.
#include "frugal/ckpt/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>
#define XXH_INLINE_ALL  // xxHash header-only (third_party/xxhash)
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <mutex>
#include <set>

#include "frugal/core/atomic_file.h"
#include "frugal/core/crash_report.h"
#include "frugal/core/errors.h"

namespace frugal {
namespace fs = std::filesystem;

namespace {

constexpr const char* kMarker = "COMPLETE";
constexpr const char* kState = "state.json";
constexpr const char* kPrefix = "step-";

c10::ScalarType storage_dtype(WeightsDtype d) {
  switch (d) {
    case WeightsDtype::kBf16:
      return c10::kBFloat16;
    case WeightsDtype::kFp16:
      return c10::kHalf;
    case WeightsDtype::kFp32:
      break;
  }
  return c10::kFloat;
}

const char* weights_dtype_name(WeightsDtype d) {
  switch (d) {
    case WeightsDtype::kBf16:
      return "bf16";
    case WeightsDtype::kFp16:
      return "fp16";
    case WeightsDtype::kFp32:
      break;
  }
  return "fp32";
}

std::string marker_text(const std::string& state_bytes) {
  return fmt::format("frugal-checkpoint {} state.json xxh3={} bytes={}\n", kCheckpointVersion, xxh3_hex(state_bytes),
                     state_bytes.size());
}

// Parses "step-00000120"; -1 when the name is not a checkpoint directory.
int64_t parse_step(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0 || name.size() <= 5) return -1;
  const std::string digits = name.substr(5);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 18) return -1;
  return std::stoll(digits);
}

struct ReadState {
  std::string bytes;
  nlohmann::json json;
  std::string problem;   // "" when the marker and state.json agree
  bool definite = true;  // false: a file could not be read (see CheckpointCheck)
};

ReadState read_state(const fs::path& dir) {
  ReadState r;
  if (!fs::exists(dir / kMarker)) {
    r.problem = fmt::format("{}: no {} marker (the write did not finish)", dir.string(), kMarker);
    return r;
  }
  try {
    r.bytes = read_small_file((dir / kState).string());
    const std::string marker = read_small_file((dir / kMarker).string());
    if (marker != marker_text(r.bytes)) {
      r.problem = fmt::format("{}: checksum of {} does not match {}", dir.string(), kState, kMarker);
      return r;
    }
    r.json = nlohmann::json::parse(r.bytes);
  } catch (const nlohmann::json::exception& e) {
    r.problem = fmt::format("{}: cannot read {}: {}", dir.string(), kState, e.what());
    return r;
  } catch (const std::exception& e) {  // an I/O error: the files may well be sound
    r.problem = fmt::format("{}: cannot read {}: {}", dir.string(), kState, e.what());
    r.definite = false;
    return r;
  }
  // A directory copied or renamed to another step's name would resume at the wrong step.
  const int64_t named = parse_step(dir.filename().string());
  const auto& step = r.json.is_object() && r.json.contains("step") ? r.json["step"] : nlohmann::json();
  if (named >= 0 && (!step.is_number_integer() || step.get<int64_t>() != named))
    r.problem = fmt::format(
        "{}: {} records step {} but the directory is named for step {} (was it copied "
        "or renamed?)",
        dir.string(), kState, step.dump(), named);
  return r;
}

// check_checkpoint() without its guard against fields of the wrong type (below).
CheckpointCheck verify_files(const std::string& path);

// The body of write_checkpoint() after its temp directory exists (below).
std::string write_into(const fs::path& tmp, const fs::path& final_dir, const std::string& root, int64_t step,
                       const CheckpointData& data, const WriteOptions& o);

}  // namespace

const char* write_stage_name(WriteStage s) {
  static const char* const names[] = {"temp_dir",   "model", "master",  "optimizer",
                                      "data_state", "state", "renamed", "marker"};
  const auto i = static_cast<size_t>(s);
  return i < std::size(names) ? names[i] : "?";
}

std::string xxh3_hex(const std::string& bytes) {
  return fmt::format("{:016x}", static_cast<uint64_t>(XXH3_64bits(bytes.data(), bytes.size())));
}

std::string checkpoint_dir_name(int64_t step) { return fmt::format("{}{:08d}", kPrefix, step); }

std::string write_checkpoint(const std::string& root, int64_t step, const CheckpointData& data, const WriteOptions& o) {
  static std::atomic<int> counter{0};
  const fs::path final_dir = fs::path(root) / checkpoint_dir_name(step);
  const fs::path tmp = fs::path(root) / fmt::format(".tmp-{}-{}-{}", checkpoint_dir_name(step), ::getpid(), counter++);
  std::error_code ec;
  try {
    fs::create_directories(tmp, ec);
    if (ec)
      throw IoError(fmt::format("cannot create checkpoint directory {}: {}", tmp.string(), ec.message()), ec.value());
    return write_into(tmp, final_dir, root, step, data, o);
  } catch (...) {
    // A failed write (a full disk, a bad tensor) removes its own temp directory and the ranks'
    // staged shards, so repeated failures never pile up; a kill leaves them for retention, which
    // removes temp directories of processes that are gone.
    remove_tree(tmp, ec);
    for (const auto* shards : {&data.optimizer_shards, &data.model_shards})
      for (const StagedShard& s : *shards) remove_tree(fs::path(s.path).parent_path().string(), ec);
    throw;
  }
}

namespace {
std::string write_into(const fs::path& tmp, const fs::path& final_dir, const std::string& root, int64_t step,
                       const CheckpointData& data, const WriteOptions& o) {
  auto stage = [&](WriteStage s) {
    if (o.after_stage) o.after_stage(s);
  };
  std::error_code ec;
  stage(WriteStage::kTempDir);

  nlohmann::json files = nlohmann::json::object();
  // Each file's encoding and write is a phase of its own for a crash report (on the thread that
  // drives the run; an async writer's thread is not named).
  auto put = [&](const char* name, const std::string& bytes) {
    write_file_atomic((tmp / name).string(), bytes);
    files[name] = {{"bytes", bytes.size()}, {"xxh3", xxh3_hex(bytes)}};
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"frugal_step", std::to_string(step)}};
  const bool sharded = !data.model_shards.empty();
  const c10::ScalarType dtype = sharded ? sharded_weights_dtype(o) : storage_dtype(o.weights_dtype);
  if (sharded) {
    CrashPhase phase("move the ranks' weight shards in");
    move_staged_shards(data.model_shards, tmp.string(), files);
    stage(WriteStage::kModel);
  } else {
    CrashPhase phase("write model.safetensors");
    NamedTensors stored;
    for (const auto& [n, t] : data.model) stored.emplace_back(n, t.is_floating_point() ? t.to(dtype) : t);
    put("model.safetensors", encode_safetensors(stored, meta));
    stage(WriteStage::kModel);
  }
  const bool master = dtype != c10::kFloat && o.exact_resume;  // never when sharded (fp32 then)
  if (master) {
    CrashPhase phase("write master.safetensors");
    put("master.safetensors", encode_safetensors(data.model, meta));
  }
  stage(WriteStage::kMaster);
  if (data.optimizer_shards.empty()) {
    CrashPhase phase("write optimizer.safetensors");
    put("optimizer.safetensors", encode_safetensors(data.optimizer, meta));
    stage(WriteStage::kOptimizer);
  } else {
    CrashPhase phase("move the ranks' optimizer shards in");
    move_staged_shards(data.optimizer_shards, tmp.string(), files);
    stage(WriteStage::kOptimizer);
  }
  CrashPhase phase("write state.json, rename, mark complete");
  put("data_state.json", (data.data_state.is_null() ? nlohmann::json::object() : data.data_state).dump(2) + "\n");
  stage(WriteStage::kDataState);

  nlohmann::json state = data.state.is_null() ? nlohmann::json::object() : data.state;
  state["format"] = "frugal-checkpoint";
  state["version"] = kCheckpointVersion;
  state["step"] = step;
  state["weights_dtype"] = dtype == c10::kFloat ? "fp32" : weights_dtype_name(o.weights_dtype);
  state["exact"] = dtype == c10::kFloat || master;
  state["files"] = files;
  for (const auto* shards : {&data.optimizer_shards, &data.model_shards}) {
    if (shards->empty()) continue;
    const std::string kind = shards->front().kind, key = kind + "_shards";
    state[key] = shards_index(*shards);
    std::vector<std::string> shard_files;  // what a resume will check, checked before it is marked sound
    if (const std::string bad = shards_index_problem(state[key], shard_files, kind); !bad.empty())
      throw CheckpointError(fmt::format("checkpoint at step {}: the ranks' {} shards: {}", step, kind, bad));
  }
  const std::string state_bytes = state.dump(1) + "\n";
  write_file_atomic((tmp / kState).string(), state_bytes);
  stage(WriteStage::kState);

  // An unfinished write of this step.
  if (fs::exists(final_dir)) remove_tree_hidden_first(final_dir.string());
  fs::rename(tmp, final_dir, ec);
  if (ec)
    throw IoError(fmt::format("cannot rename {} to {}: {}", tmp.string(), final_dir.string(), ec.message()),
                  ec.value());
  fsync_dir(root);
  stage(WriteStage::kRenamed);
  write_file_atomic((final_dir / kMarker).string(), marker_text(state_bytes));
  stage(WriteStage::kMarker);
  return final_dir.string();
}
}  // namespace

std::vector<CheckpointInfo> list_checkpoints(const std::string& root) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const int64_t step = parse_step(entry.path().filename().string());
    if (step < 0 || !entry.is_directory()) continue;
    CheckpointInfo info;
    info.path = entry.path().string();
    info.step = step;
    ReadState r = read_state(entry.path());
    info.complete = r.problem.empty();
    if (info.complete && r.json.contains("metric") && r.json["metric"].is_object() &&
        r.json["metric"]["value"].is_number())
      info.metric = r.json["metric"]["value"].get<double>();
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  return out;
}

std::string verify_checkpoint(const std::string& path) { return check_checkpoint(path).problem; }

CheckpointCheck check_checkpoint(const std::string& path) {
  try {
    return verify_files(path);
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong type
    return {fmt::format("{}: state.json is malformed: {}", path, e.what()), true};
  }
}

namespace {
// The size of LibTorch's CPU generator state (what state.json's rng.cpu holds, as hex).
size_t cpu_rng_bytes() {
  static const size_t bytes = [] {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    return static_cast<size_t>(gen.get_state().numel());
  }();
  return bytes;
}

// What a checkpoint's state.json and data_state.json must hold besides their checksums: the
// fields resume relies on, by type and range, and exactly the files write_checkpoint writes. A
// state.json re-signed by hand (its COMPLETE recomputed) with `files: {}` skipped every file's
// checksum; one with a negative elapsed time, world_size 0 or dtype "fp64" was taken as it was.
// "" when sound, else what is wrong. Fields the Trainer adds (loop, world_size, ...) are checked
// where present: a checkpoint written by the library alone has none of them.
std::string state_problem(const nlohmann::json& s) {
  auto is_int_at_least = [](const nlohmann::json& v, int64_t min) {
    return v.is_number_integer() && v.get<int64_t>() >= min;
  };
  auto is_finite_at_least = [](const nlohmann::json& v, double min) {
    return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= min;
  };
  auto one_of = [](const nlohmann::json& v, std::initializer_list<const char*> allowed) {
    if (!v.is_string()) return false;
    for (const char* a : allowed)
      if (v.get<std::string>() == a) return true;
    return false;
  };
  if (!s.contains("step") || !is_int_at_least(s["step"], 0)) return "\"step\" is not a whole number >= 0";
  if (!s.contains("weights_dtype") || !one_of(s["weights_dtype"], {"fp32", "bf16", "fp16"}))
    return "\"weights_dtype\" is not one of fp32, bf16, fp16";
  if (!s.contains("exact") || !s["exact"].is_boolean()) return "\"exact\" is not true or false";
  std::set<std::string> want = {"model.safetensors", "optimizer.safetensors", "data_state.json"};
  if (s["weights_dtype"] != "fp32" && s["exact"].get<bool>()) want.insert("master.safetensors");
  if (std::string bad = shard_files_problem(s, want); !bad.empty()) return bad;  // files per rank instead
  std::set<std::string> listed;
  for (const auto& [name, f] : s["files"].items()) {
    listed.insert(name);
    if (!f.is_object() || !f.contains("bytes") || !is_int_at_least(f["bytes"], 0) || !f.contains("xxh3") ||
        !f["xxh3"].is_string() || f["xxh3"].get<std::string>().size() != 16 ||
        f["xxh3"].get<std::string>().find_first_not_of("0123456789abcdef") != std::string::npos)
      return fmt::format("the entry of {} in \"files\" is not {{\"bytes\": n, \"xxh3\": 16 hex digits}}", name);
  }
  if (listed != want)
    return fmt::format("\"files\" lists {} where a checkpoint of weights_dtype {} (exact {}) has {}",
                       listed.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(listed, ", ")),
                       s["weights_dtype"].get<std::string>(), s["exact"].get<bool>(), fmt::join(want, ", "));
  if (s.contains("loop")) {
    const auto& l = s["loop"];
    if (!l.is_object()) return "\"loop\" is not an object";
    if (l.contains("step") && l["step"] != s["step"]) return "\"loop.step\" differs from \"step\"";
    for (const char* k : {"elapsed_s", "startup_s", "window_s"})
      if (l.contains(k) && !is_finite_at_least(l[k], 0)) return fmt::format("\"loop.{}\" is not a time >= 0", k);
    for (const char* k : {"tokens", "window_steps", "window_tokens", "rollbacks", "end_step", "decay_from"})
      if (l.contains(k) && !is_int_at_least(l[k], 0)) return fmt::format("\"loop.{}\" is not a whole number >= 0", k);
    // The product of guard.lr_factor (each in (0, 1]) over the rollbacks.
    if (l.contains("lr_scale") &&
        !(is_finite_at_least(l["lr_scale"], 0) && l["lr_scale"].get<double>() > 0 && l["lr_scale"].get<double>() <= 1))
      return "\"loop.lr_scale\" is not a number in (0, 1]";
    if (l.contains("last_eval_step") && !is_int_at_least(l["last_eval_step"], -1))  // -1: none yet
      return "\"loop.last_eval_step\" is not a step (or -1)";
  }
  for (const char* k : {"world_size", "global_batch", "threads"})
    if (s.contains(k) && !is_int_at_least(s[k], 1)) return fmt::format("\"{}\" is not a whole number >= 1", k);
  if (s.contains("optimizer_steps") && !is_int_at_least(s["optimizer_steps"], 0))
    return "\"optimizer_steps\" is not a whole number >= 0";
  if (s.contains("precision") && !one_of(s["precision"], {"fp32", "bf16", "fp16", "fp8"}))
    return "\"precision\" is not one of fp32, bf16, fp16, fp8";
  if (s.contains("kernels") && !one_of(s["kernels"], {"aten", "frugal"})) return "\"kernels\" is not aten or frugal";
  if (s.contains("loss_scaler")) {
    const auto& ls = s["loss_scaler"];
    if (!ls.is_object()) return "\"loss_scaler\" is not an object";
    if (ls.contains("scale") && !(is_finite_at_least(ls["scale"], 0) && ls["scale"].get<double>() > 0))
      return "\"loss_scaler.scale\" is not a number > 0";
    for (const char* k : {"growth_tracker", "skipped", "skipped_at_floor"})
      if (ls.contains(k) && !is_int_at_least(ls[k], 0))
        return fmt::format("\"loss_scaler.{}\" is not a whole number >= 0", k);
  }
  if (s.contains("frozen")) {  // a fine-tune's frozen tensors, named instead of stored (model/freeze.h)
    const auto& f = s["frozen"];
    if (!f.is_object() || !f.contains("init_from") || !f["init_from"].is_string() || !f.contains("tensors") ||
        !f["tensors"].is_object())
      return "\"frozen\" is not {\"init_from\": base, \"tensors\": {name: digest}}";
    for (const auto& [name, digest] : f["tensors"].items())
      if (!digest.is_string() || digest.get<std::string>().size() != 16 ||
          digest.get<std::string>().find_first_not_of("0123456789abcdef") != std::string::npos)
        return fmt::format("\"frozen.tensors\" holds {} without a digest of 16 hex digits", name);
  }
  if (s.contains("rng")) {
    const auto& rng = s["rng"];
    auto is_hex = [](const nlohmann::json& v) {
      return v.is_string() && v.get<std::string>().find_first_not_of("0123456789abcdef") == std::string::npos;
    };
    if (!rng.is_object()) return "\"rng\" is not an object";
    if (rng.contains("cpu") && !(is_hex(rng["cpu"]) && rng["cpu"].get<std::string>().size() == 2 * cpu_rng_bytes()))
      return fmt::format("\"rng.cpu\" is not the CPU generator's state ({} bytes as hex digits)", cpu_rng_bytes());
    if (rng.contains("cuda")) {
      if (!rng["cuda"].is_array()) return "\"rng.cuda\" is not a list";
      for (const auto& g : rng["cuda"])
        if (!is_hex(g) || g.get<std::string>().empty() || g.get<std::string>().size() % 2 != 0)
          return "\"rng.cuda\" holds an entry that is not a generator state in hex digits";
    }
  }
  return "";
}

// data_state.json's own fields (its bytes are checked against state.json's entry first).
std::string data_state_problem(const nlohmann::json& d) {
  if (!d.is_object()) return "data_state.json is not a JSON object";
  if (d.contains("kind") && d["kind"] != "index")
    return fmt::format("data_state.json's \"kind\" is {}, not \"index\"", d["kind"].dump());
  for (const char* k : {"next_sample", "next_micro_batch"})
    if (d.contains(k) && !(d[k].is_number_integer() && d[k].get<int64_t>() >= 0))
      return fmt::format("data_state.json's \"{}\" is not a whole number >= 0", k);
  if (d.contains("world_size") && !(d["world_size"].is_number_integer() && d["world_size"].get<int64_t>() >= 1))
    return "data_state.json's \"world_size\" is not a whole number >= 1";
  return "";
}

CheckpointCheck verify_files(const std::string& path) {
  const fs::path dir(path);
  ReadState r = read_state(dir);
  if (!r.problem.empty()) return {r.problem, r.definite};
  if (!r.json.is_object()) return {fmt::format("{}: state.json is not a JSON object", path)};
  if (r.json.value("format", "") != "frugal-checkpoint")
    return {fmt::format("{}: state.json is not a frugal checkpoint", path)};
  if (r.json.value("version", 0) != kCheckpointVersion)  // another frugal's: not ours to judge
    return {fmt::format("{}: checkpoint version {} but this frugal reads version {}", path, r.json.value("version", 0),
                        kCheckpointVersion),
            false};
  if (!r.json.contains("files") || !r.json["files"].is_object())
    return {fmt::format("{}: state.json lists no files", path)};
  if (const std::string bad = state_problem(r.json); !bad.empty())
    return {fmt::format("{}: state.json: {} (damaged or edited by hand)", path, bad)};
  for (const auto& [name, f] : r.json["files"].items()) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
      return {fmt::format("{}: state.json lists \"{}\", which is not a file name inside the checkpoint", path, name)};
    std::error_code ec;
    if (!fs::is_regular_file(dir / name, ec))
      return {fmt::format("{}/{}: missing or not a regular file", path, name),
              !ec || ec == std::errc::no_such_file_or_directory};
    std::string bytes;
    try {
      bytes = read_file((dir / name).string());
    } catch (const std::exception& e) {  // an I/O error: the file may well be sound
      return {fmt::format("{}: {}", path, e.what()), false};
    }
    if (bytes.size() != f["bytes"].get<size_t>())
      return {fmt::format("{}/{}: {} bytes, state.json says {} (truncated or replaced)", path, name, bytes.size(),
                          f["bytes"].get<size_t>())};
    if (xxh3_hex(bytes) != f["xxh3"].get<std::string>())
      return {fmt::format("{}/{}: xxh3 {} does not match state.json's {} (the file is corrupt)", path, name,
                          xxh3_hex(bytes), f["xxh3"].get<std::string>())};
    if (name == "data_state.json") {
      const nlohmann::json d = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
      if (const std::string bad = d.is_discarded() ? "data_state.json is not JSON" : data_state_problem(d);
          !bad.empty())
        return {fmt::format("{}: {} (damaged or edited by hand)", path, bad)};
    }
  }
  return {};
}
}  // namespace

std::optional<std::string> find_resumable(const std::string& root,
                                          const std::function<void(const std::string&)>& warn) {
  for (const auto& c : list_checkpoints(root)) {
    std::string problem = verify_checkpoint(c.path);
    if (problem.empty()) return c.path;
    if (warn) warn(fmt::format("skipping checkpoint {}: {}", c.path, problem));
  }
  return std::nullopt;
}

c10::ScalarType sharded_weights_dtype(const WriteOptions& o) {
  return o.exact_resume ? c10::kFloat : storage_dtype(o.weights_dtype);
}

NamedTensors checkpoint_weights(const std::string& dir) {
  const nlohmann::json state = nlohmann::json::parse(read_small_file((fs::path(dir) / kState).string()));
  if (state.contains("model_shards")) {
    NamedTensors w = assemble_state_shards(dir, state["model_shards"]);
    check_shard_dtypes(w, state.value("weights_dtype", "fp32"), dir);
    return w;
  }
  return load_safetensors((fs::path(dir) / "model.safetensors").string()).tensors;
}

LoadedCheckpoint load_checkpoint(const std::string& path) {
  // A path that names nothing is bad input (exit 2), not a damaged checkpoint.
  if (!fs::is_directory(path))
    throw ConfigError(
        fmt::format("cannot resume from {}: {}; --resume takes a checkpoint directory or "
                    "auto (the newest sound checkpoint of the run)",
                    path, fs::exists(path) ? "it is not a directory" : "no such directory"));
  std::string problem = verify_checkpoint(path);
  if (!problem.empty())
    throw CheckpointError(
        fmt::format("cannot resume from {}: {}; pick another checkpoint or use "
                    "--resume auto to take the newest sound one",
                    path, problem));
  const fs::path dir(path);
  LoadedCheckpoint c;
  c.path = path;
  try {
    c.state = nlohmann::json::parse(read_small_file((dir / kState).string()));
    c.step = c.state.at("step").get<int64_t>();
    c.exact = c.state.value("exact", false);
    const bool master = c.state.at("files").contains("master.safetensors");
    c.weights = master ? load_safetensors((dir / "master.safetensors").string()).tensors : checkpoint_weights(path);
    if (!c.state.contains("optimizer_shards"))  // else read by Optimizer::load_state_shards
      c.optimizer = load_safetensors((dir / "optimizer.safetensors").string()).tensors;
    c.data_state = nlohmann::json::parse(read_small_file((dir / "data_state.json").string()));
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(
        fmt::format("cannot resume from {}: state.json or data_state.json is malformed: {}", path, e.what()));
  } catch (const IoError& e) {
    throw CheckpointError(fmt::format("cannot resume from {}: {}", path, e.what()));
  } catch (const c10::Error& e) {  // a size no memory holds (an index edited and re-signed)
    throw CheckpointError(fmt::format("cannot resume from {}: {}", path, e.what_without_backtrace()));
  }
  return c;
}

}  // namespace frugal
