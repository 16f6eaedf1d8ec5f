// Sync/async checkpoint saves; see checkpoint_writer.h.
#include "frugal/ckpt/checkpoint_writer.h"

#include <ATen/ATen.h>

#include "frugal/core/crash_report.h"

#include <chrono>
#include <filesystem>

namespace frugal {

CheckpointWriter::CheckpointWriter(std::string root, WriteOptions options, RetentionPolicy retention,
                                   bool async)
    : root_(std::move(root)), options_(std::move(options)), retention_(retention), async_(async) {}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();  // errors of a last write are lost only if never waited on
}

void CheckpointWriter::write_now(int64_t step, const CheckpointData& data) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string path = write_checkpoint(root_, step, data, options_);
  CrashPhase phase("retention");
  note_written(path);
  apply_retention(root_, retention_);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::error_code ec;
  int64_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(path, ec))
    bytes += static_cast<int64_t>(e.file_size(ec));
  std::lock_guard<std::mutex> lock(stats_mu_);  // the trainer thread may be reading stats()
  stats_.last_write_s = seconds;
  stats_.write_s_total += seconds;
  stats_.last_bytes = bytes;
}

void CheckpointWriter::join() {
  if (thread_.joinable()) thread_.join();
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

std::string CheckpointWriter::save(int64_t step, CheckpointData data) {
  join();  // one write in flight at most; surfaces the previous write's error
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.saves;
  }
  if (!async_) {
    write_now(step, data);
  } else {
    done_ = false;
    thread_ = std::thread([this, step, d = std::move(data)]() {
      try {
        write_now(step, d);
      } catch (...) {
        error_ = std::current_exception();
      }
      done_ = true;
    });
  }
  return (std::filesystem::path(root_) / checkpoint_dir_name(step)).string();
}

void CheckpointWriter::wait() { join(); }

void CheckpointWriter::poll() {
  if (done_ && thread_.joinable()) join();
}

void CheckpointWriter::record_stall(double seconds) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.stall_s_total += seconds;
  stats_.stall_s_max = std::max(stats_.stall_s_max, seconds);
}

CheckpointWriterStats CheckpointWriter::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

NamedTensors snapshot_tensors(const NamedTensors& tensors) {
  NamedTensors out;
  out.reserve(tensors.size());
  for (const auto& [n, t] : tensors) out.emplace_back(n, t.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true));
  return out;
}

}  // namespace frugal
