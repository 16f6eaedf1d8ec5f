// Decisions kept per machine; see machine_cache.h.
#include "frugal/core/machine_cache.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <torch/version.h>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/core/threads.h"
#include "frugal/core/wall_clock.h"

namespace frugal {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

bool cpu_has_flag(const std::string& flag) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) return (line + " ").find(" " + flag + " ") != std::string::npos;
  return false;
}

bool cpu_has_native_bf16() {
  static const bool yes = cpu_has_flag("avx512_bf16") || cpu_has_flag("amx_bf16");
  return yes;
}

namespace {

// Seconds of CPU time every process has used (user, nice, system, irq, softirq, steal), from the
// first line of /proc/stat; -1 when it cannot be read.
double all_busy_seconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) || cpu != "cpu") return -1;
  const long hz = ::sysconf(_SC_CLK_TCK);
  return static_cast<double>(user + nice + system + irq + softirq + steal) / static_cast<double>(hz > 0 ? hz : 100);
}

double own_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

}  // namespace

std::string machine_cache_path(const std::string& file) {
  if (const char* d = std::getenv("FRUGAL_CACHE_DIR"); d && *d) return std::string(d) + "/" + file;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/frugal/" + file;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/frugal/" + file;
}

nlohmann::json machine_identity() {
  return {{"cpu", cpu_model_name()},
          {"physical_cores", physical_core_count()},
          {"logical_cpus", usable_cpu_count()},
          {"torch", TORCH_VERSION}};
}

std::optional<nlohmann::json> read_machine_decision(const std::string& file) {
  try {
    nlohmann::json j = nlohmann::json::parse(read_small_file(machine_cache_path(file)));
    if (!j.is_object() || !j.contains("machine") || j["machine"] != machine_identity()) return std::nullopt;
    return j;
  } catch (const std::exception&) {
    return std::nullopt;  // none yet, or unreadable: measure
  }
}

void save_machine_decision(const std::string& file, nlohmann::json decision, const std::string& written_by) {
  const std::string path = machine_cache_path(file);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  decision["machine"] = machine_identity();
  decision["measured_utc"] = format_utc(unix_now());
  decision["written_by"] = written_by;
  write_file_atomic(path, decision.dump(1) + "\n");
}

OtherLoadMeter::OtherLoadMeter()
    : busy_s_(all_busy_seconds()), own_s_(own_cpu_seconds()), t0_(std::chrono::steady_clock::now()) {}

double OtherLoadMeter::fraction() const {
  const double busy = all_busy_seconds();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  if (busy_s_ < 0 || busy < 0 || wall <= 0) return 0;
  const double others = (busy - busy_s_) - (own_cpu_seconds() - own_s_);
  return std::clamp(others / (wall * std::max(1, usable_cpu_count())), 0.0, 1.0);
}

}  // namespace frugal
