// metrics.jsonl writer; see metrics_writer.h.
#include "frugal/monitor/metrics_writer.h"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/core/errors.h"

namespace frugal {

MetricsWriter::MetricsWriter(std::string path) : path_(std::move(path)) {
  f_ = std::fopen(path_.c_str(), "w");
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

}  // namespace frugal
