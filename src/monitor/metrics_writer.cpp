// metrics.jsonl writer; see metrics_writer.h.
#include "frugal/monitor/metrics_writer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"

namespace frugal {

MetricsWriter::MetricsWriter(std::string path, bool append) : path_(std::move(path)) {
  f_ = std::fopen(path_.c_str(), append ? "a" : "w");
  if (!f_) throw IoError(fmt::format("cannot open {} for writing: {}", path_, std::strerror(errno)));
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const std::string& line) {
  if (std::fputs(line.c_str(), f_) < 0 || std::fputc('\n', f_) < 0 || std::fflush(f_) != 0)
    throw IoError(fmt::format("cannot append to {}: {}", path_, std::strerror(errno)));
}

void MetricsWriter::on_step_end(const StepMetrics& m, Control&) {
  if (!m.logged) return;
  nlohmann::ordered_json j;
  j["event"] = "step";
  j["step"] = m.step;
  j["loss"] = m.loss;
  j["lr"] = m.lr;
  j["grad_norm"] = m.grad_norm;
  j["tokens_per_s"] = m.tokens_per_s;
  j["step_s"] = m.step_s;
  j["data_wait_s"] = m.data_wait_s;
  j["elapsed_s"] = m.elapsed_s;
  j["tokens"] = m.tokens;
  j["forward_s"] = m.forward_s;
  j["backward_s"] = m.backward_s;
  j["optimizer_s"] = m.optimizer_s;
  j["cost_usd"] = m.cost_usd;
  j["rss_mb"] = m.rss_mb;
  j["loss_scale"] = m.loss_scale;
  j["skipped_steps"] = m.skipped_steps;
  j["micro_batch"] = m.micro_batch;
  j["oom_backoffs"] = m.oom_backoffs;
  write(j.dump());
}

void MetricsWriter::on_eval_end(const EvalMetrics& m, Control&) {
  nlohmann::ordered_json j;
  j["event"] = "eval";
  j["step"] = m.step;
  j["val_loss"] = m.val_loss;
  j["best_val_loss"] = m.best_val_loss;
  j["eval_s"] = m.eval_s;
  write(j.dump());
}

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
