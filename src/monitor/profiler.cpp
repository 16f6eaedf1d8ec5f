// The profiler; see profiler.h.
#include "frugal/monitor/profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/compat.h"
#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/core/phase_trace.h"

namespace frugal {
namespace tp = torch::autograd::profiler;
namespace tpi = torch::profiler::impl;

std::vector<OpStat> top_ops_by_self_time(const std::vector<TraceEvent>& events, size_t n) {
  std::map<int64_t, std::vector<const TraceEvent*>> tracks;
  for (const auto& e : events) tracks[e.tid].push_back(&e);
  std::map<std::string, OpStat> by_name;
  for (auto& [tid, evs] : tracks) {
    // Parents before children: earlier start first, the longer one first on a tie.
    std::sort(evs.begin(), evs.end(), [](const TraceEvent* a, const TraceEvent* b) {
      return a->ts_us != b->ts_us ? a->ts_us < b->ts_us : a->dur_us > b->dur_us;
    });
    std::vector<double> child_us(evs.size(), 0);
    std::vector<size_t> stack;  // indices of the open events, innermost last
    for (size_t i = 0; i < evs.size(); ++i) {
      while (!stack.empty() && evs[stack.back()]->ts_us + evs[stack.back()]->dur_us <= evs[i]->ts_us) stack.pop_back();
      if (!stack.empty()) child_us[stack.back()] += static_cast<double>(evs[i]->dur_us);
      stack.push_back(i);
    }
    for (size_t i = 0; i < evs.size(); ++i) {
      OpStat& s = by_name[evs[i]->name];
      s.name = evs[i]->name;
      s.calls += 1;
      s.total_us += static_cast<double>(evs[i]->dur_us);
      s.self_us += std::max(0.0, static_cast<double>(evs[i]->dur_us) - child_us[i]);
    }
  }
  std::vector<OpStat> out;
  for (auto& [name, s] : by_name) out.push_back(s);
  std::sort(out.begin(), out.end(), [](const OpStat& a, const OpStat& b) {
    return a.self_us != b.self_us ? a.self_us > b.self_us : a.name < b.name;
  });
  if (n > 0 && out.size() > n) out.resize(n);
  return out;
}

bool profile_window_opens_after(const ProfileConfig& c, int64_t step) {
  if (c.capture_steps <= 0 || step < c.start_step) return false;
  if (step == c.start_step) return true;
  return c.every_steps > 0 && (step - c.start_step) % c.every_steps == 0;
}

nlohmann::json chrome_trace(const std::vector<TraceEvent>& events, const nlohmann::json& other_data) {
  const int64_t pid = static_cast<int64_t>(::getpid());
  nlohmann::json list = nlohmann::json::array();
  std::set<int64_t> tids;
  for (const auto& e : events) tids.insert(e.tid);
  tids.insert(0);
  list.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", "frugal"}}}});
  for (int64_t t : tids) {
    std::string name = t == 0 ? "frugal phases" : fmt::format("LibTorch ops (thread {})", t);
    list.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", t}, {"args", {{"name", name}}}});
    list.push_back(
        {{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", t}, {"args", {{"sort_index", t}}}});
  }
  for (const auto& e : events) {
    nlohmann::json j = {{"ph", "X"},    {"name", e.name}, {"cat", e.cat},   {"pid", pid},
                        {"tid", e.tid}, {"ts", e.ts_us},  {"dur", e.dur_us}};
    if (e.cat == "phase") j["args"] = {{"step", e.step}};
    if (!e.input_dims.empty()) j["args"] = {{"Input Dims", e.input_dims}};
    list.push_back(std::move(j));
  }
  return {{"traceEvents", std::move(list)}, {"displayTimeUnit", "ms"}, {"otherData", other_data}};
}

namespace {
int64_t unix_us_now() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
int64_t steady_ns_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Profiler::Profiler(const ProfileConfig& config, std::string run_dir, c10::Device device)
    : config_(config), dir_(RunDir(run_dir).profile_dir()), device_(device) {}

Profiler::~Profiler() {
  if (torch_open_) {
    try {
      tp::disableProfiler();
    } catch (...) {  // a destructor must not throw; the run is ending anyway
    }
  }
  if (open_) PhaseTrace::stop();
}

void Profiler::on_train_begin(const RunInfo&) {
  std::error_code ec;
  remove_tree(dir_, ec);  // traces of an earlier run under this name
  if (profile_window_opens_after(config_, 0)) open(0);
}

void Profiler::on_step_end(const StepMetrics& m, Control&) {
  if (open_ && m.step >= opened_after_ + config_.capture_steps) close(m.step);
  if (!open_ && m.step < m.total_steps && profile_window_opens_after(config_, m.step)) open(m.step);
}

void Profiler::open(int64_t after_step) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw IoError(fmt::format("profile: cannot create {}: {}", dir_, ec.message()));
  opened_after_ = after_step;
  torch_open_ = false;
  if (config_.torch_ops) {
    try {
      tpi::ProfilerConfig cfg(tpi::ProfilerState::KINETO, config_.record_shapes);
      std::set<tpi::ActivityType> acts{tpi::ActivityType::CPU};
      if (device_.is_cuda()) acts.insert(tpi::ActivityType::CUDA);
      // On a CPU run, LibTorch's profiler still asks the CUDA driver for devices and logs an
      // "ERROR ... gpuGetDeviceCount failed" line where there is no driver. Its log level is
      // read when it first starts; a level the user set is kept.
      if (!device_.is_cuda()) setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
      tp::prepareProfiler(cfg, acts);
      tp::enableProfiler(cfg, acts);
      torch_open_ = true;
    } catch (const std::exception& e) {
      torch_problem_ = fmt::format("LibTorch's profiler could not start: {}", e.what());
      Console::get().line("profile: " + torch_problem_ + "; the trace has frugal's phase spans only");
    }
  } else {
    torch_problem_ = "profile.torch_ops = false";
  }
  sys_us0_ = unix_us_now();
  steady_ns0_ = steady_ns_now();
  PhaseTrace::start();
  open_ = true;
}

void Profiler::close(int64_t last_step) {
  open_ = false;
  std::vector<TraceEvent> events;
  if (torch_open_) {
    torch_open_ = false;
    std::unique_ptr<tp::ProfilerResult> result = tp::disableProfiler();
    for (const auto& e : result->events()) {
      if (e.isAsync()) continue;
      TraceEvent t;
      t.name = e.name();
      t.cat = "op";
      t.tid = e.deviceType() == c10::DeviceType::CPU
                  ? static_cast<int64_t>(e.startThreadId()) + 1
                  : 1000000 + 1000 * static_cast<int64_t>(e.deviceIndex()) + e.deviceResourceId();
      t.ts_us = compat::profiler_event_start_us(e);
      t.dur_us = compat::profiler_event_duration_us(e);
      if (config_.record_shapes && e.hasShapes())
        for (const auto& dims : e.shapes()) t.input_dims.emplace_back(dims.begin(), dims.end());
      events.push_back(std::move(t));
    }
  }
  const size_t n_ops = events.size();
  std::vector<OpStat> window = top_ops_by_self_time(events, 0);
  for (const auto& s : window) {
    auto it = std::find_if(op_totals_.begin(), op_totals_.end(), [&](const OpStat& o) { return o.name == s.name; });
    if (it == op_totals_.end()) {
      op_totals_.push_back(s);
    } else {
      it->calls += s.calls;
      it->self_us += s.self_us;
      it->total_us += s.total_us;
    }
  }
  for (const auto& sp : PhaseTrace::stop()) {
    TraceEvent t;
    t.name = sp.name;
    t.cat = "phase";
    t.tid = 0;
    t.ts_us = sys_us0_ + (sp.begin_ns - steady_ns0_) / 1000;
    t.dur_us = std::max<int64_t>(0, (sp.end_ns - sp.begin_ns) / 1000);
    t.step = sp.step;
    events.push_back(std::move(t));
  }
  nlohmann::json other = {{"frugal_version", FRUGAL_VERSION}, {"torch_version", TORCH_VERSION},
                          {"first_step", opened_after_ + 1},  {"last_step", last_step},
                          {"torch_ops", n_ops > 0},           {"device", device_.str()}};
  const std::string name = fmt::format("trace-steps-{:06}-{:06}.json", opened_after_ + 1, last_step);
  write_file_atomic(dir_ + "/" + name, chrome_trace(events, other).dump() + "\n");
  traces_.push_back("profile/" + name);
  captured_steps_ += last_step - opened_after_;
  Console::get().line(fmt::format("profile: steps {}-{}: {} operator events, trace {}/{}", opened_after_ + 1, last_step,
                                  n_ops, dir_, name));
}

void Profiler::add_to_summary(nlohmann::ordered_json& summary) {
  if (open_) close(std::max(opened_after_, static_cast<int64_t>(summary.value("steps", opened_after_))));
  if (traces_.empty()) return;
  std::sort(op_totals_.begin(), op_totals_.end(), [](const OpStat& a, const OpStat& b) {
    return a.self_us != b.self_us ? a.self_us > b.self_us : a.name < b.name;
  });
  double self_total = 0;
  for (const auto& s : op_totals_) self_total += s.self_us;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (size_t i = 0; i < op_totals_.size() && i < static_cast<size_t>(config_.top_ops); ++i) {
    const OpStat& s = op_totals_[i];
    nlohmann::ordered_json r;
    r["name"] = s.name;
    r["calls"] = s.calls;
    r["self_ms"] = s.self_us / 1e3;
    r["total_ms"] = s.total_us / 1e3;
    r["self_pct"] = self_total > 0 ? 100.0 * s.self_us / self_total : 0.0;
    r["self_ms_per_step"] = captured_steps_ > 0 ? s.self_us / 1e3 / static_cast<double>(captured_steps_) : 0.0;
    rows.push_back(std::move(r));
  }
  nlohmann::ordered_json p;
  p["traces"] = traces_;
  p["captured_steps"] = captured_steps_;
  p["torch_ops"] = !op_totals_.empty();
  if (op_totals_.empty() && !torch_problem_.empty()) p["torch_ops_problem"] = torch_problem_;
  p["op_self_ms_total"] = self_total / 1e3;
  p["top_ops"] = rows;
  summary["profile"] = p;
}

}  // namespace frugal
