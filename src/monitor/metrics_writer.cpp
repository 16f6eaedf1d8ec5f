// metrics.jsonl writer; see metrics_writer.h.
#include "frugal/monitor/metrics_writer.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"

namespace frugal {

MetricsWriter::MetricsWriter(std::string path, bool append) : path_(std::move(path)), append_(append) {}

void MetricsWriter::open() {
  if (f_) return;
  f_ = std::fopen(path_.c_str(), append_ ? "a" : "w");
  if (!f_) {
    const int err = errno;
    throw IoError(fmt::format("cannot open {} for writing: {}", path_, std::strerror(err)), err);
  }
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const std::string& line) {
  open();
  if (std::fputs(line.c_str(), f_) < 0 || std::fputc('\n', f_) < 0 || std::fflush(f_) != 0) {
    const int err = errno;
    throw IoError(fmt::format("cannot append to {}: {}", path_, std::strerror(err)), err);
  }
}

namespace {
// JSON has no NaN/inf: such values are written as null.
nlohmann::ordered_json finite_or_null(double x) {
  return std::isfinite(x) ? nlohmann::ordered_json(x) : nlohmann::ordered_json(nullptr);
}
}  // namespace

nlohmann::ordered_json step_json(const StepMetrics& m) {
  nlohmann::ordered_json j;
  j["event"] = "step";
  j["step"] = m.step;
  j["total_steps"] = m.total_steps;
  j["loss"] = finite_or_null(m.loss);
  j["lr"] = m.lr;
  j["grad_norm"] = finite_or_null(m.grad_norm);
  j["tokens_per_s"] = m.tokens_per_s;
  j["samples_per_s"] = m.samples_per_s;
  j["mfu"] = m.mfu;
  j["step_s"] = m.step_s;
  j["data_wait_s"] = m.phases.data_s;
  j["elapsed_s"] = m.elapsed_s;
  j["tokens"] = m.tokens;
  j["forward_s"] = m.phases.forward_s;
  j["backward_s"] = m.phases.backward_s;
  j["optimizer_s"] = m.phases.optimizer_s;
  j["eval_s"] = m.eval_s;
  j["checkpoint_s"] = m.checkpoint_s;
  j["cost_usd"] = m.cost_usd;
  j["energy_kwh"] = m.energy_kwh;
  j["kg_co2"] = m.kg_co2;
  j["rss_mb"] = m.rss_mb;
  j["loss_scale"] = m.loss_scale;
  j["skipped_steps"] = m.skipped_steps;
  j["grad_noise_scale"] = finite_or_null(m.grad_noise_scale);
  j["micro_batch"] = m.micro_batch;
  j["oom_backoffs"] = m.oom_backoffs;
  if (!m.user.empty()) {
    nlohmann::ordered_json u = nlohmann::ordered_json::object();
    for (const auto& [name, value] : m.user) u[name] = finite_or_null(value);
    j["user"] = u;
  }
  return j;
}

bool valid_metric_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 &&
         name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-/") ==
             std::string::npos;
}

nlohmann::ordered_json eval_json(const EvalMetrics& m) {
  nlohmann::ordered_json j;
  j["event"] = "eval";
  j["step"] = m.step;
  j["val_loss"] = finite_or_null(m.val_loss);
  j["best_val_loss"] = finite_or_null(m.best_val_loss);
  j["eval_s"] = m.eval_s;
  if (!m.task.empty()) {
    nlohmann::ordered_json t = nlohmann::ordered_json::object();
    for (const auto& [name, value] : m.task) t[name] = finite_or_null(value);
    j["metrics"] = t;
  }
  return j;
}

void MetricsWriter::on_step_end(const StepMetrics& m, Control&) {
  if (m.logged) write(step_json(m).dump());
}

void MetricsWriter::on_eval_end(const EvalMetrics& m, Control&) { write(eval_json(m).dump()); }

void truncate_metrics_after(const std::string& path, int64_t step) {
  if (!std::filesystem::exists(path)) return;
  std::istringstream in(read_file(path));
  std::string line, kept;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no trailing newline: torn by a crash
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    if (j["step"].get<int64_t>() <= step) kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

}  // namespace frugal
