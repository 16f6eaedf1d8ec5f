// Decisions that change a run's speed or numerics and are measured on the machine (the thread
// count, precision.mode = "auto" on the CPU) are measured robustly once, kept with their evidence
// in the user's cache, and reused: every later run, tune and doctor on the machine then decide
// alike instead of re-deciding from a fresh noisy probe. A kept decision applies only to the
// machine it was measured on: its CPU model, core and CPU counts and LibTorch version (a copied
// home directory or a container limit says nothing about this one). `frugal doctor` measures again.
//
// Files: machine_cache_path("threads.json"), machine_cache_path("precision.json"), each a JSON
// object: the decision's own fields, "machine" (machine_identity()), "measured_utc", "written_by".
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <string>

namespace frugal {

// $FRUGAL_CACHE_DIR/<file>, else $XDG_CACHE_HOME/frugal/<file>, else ~/.cache/frugal/<file>.
std::string machine_cache_path(const std::string& file);
// The CPU's model name from /proc/cpuinfo ("unknown" where it does not say).
std::string cpu_model_name();
// Whether /proc/cpuinfo's flags name `flag` ("avx512_bf16", "amx_bf16"); false where it cannot be read.
bool cpu_has_flag(const std::string& flag);
// The CPU multiplies bf16 natively (AVX-512 BF16 or AMX-BF16): a bf16 matmul runs several times
// faster than an fp32 one there, and slower than fp32 where it is emulated.
bool cpu_has_native_bf16();
// {"cpu": model name, "physical_cores", "logical_cpus" (usable by this process), "torch": version}.
nlohmann::json machine_identity();
// The kept decision in `file` when it exists, parses and was measured on this machine.
std::optional<nlohmann::json> read_machine_decision(const std::string& file);
// Keeps `decision` (with machine_identity(), the time and `written_by`) atomically in `file`.
// Throws IoError when the cache cannot be written.
void save_machine_decision(const std::string& file, nlohmann::json decision, const std::string& written_by);

// How busy the other processes kept this machine's CPUs while it ran: (the CPU time /proc/stat
// counts for every process minus this process's own) / (wall time x usable CPUs), from 0 (idle)
// to 1 (every CPU busy with someone else's work). A thread-count measurement taken at 0.5 says
// more about the neighbours than about the machine.
class OtherLoadMeter {
 public:
  OtherLoadMeter();
  double fraction() const;  // since construction; 0 where /proc/stat cannot be read

 private:
  double busy_s_ = -1, own_s_ = 0;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace frugal
