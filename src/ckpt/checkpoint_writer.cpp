// Sync/async checkpoint saves; see checkpoint_writer.h.
#include "frugal/ckpt/checkpoint_writer.h"

#include <ATen/ATen.h>

#include <fmt/format.h>

#include "frugal/core/console.h"
#include "frugal/core/crash_report.h"
#include "frugal/core/device.h"
#include "frugal/core/errors.h"
#include "frugal/core/wall_clock.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

namespace frugal {

CheckpointWriter::CheckpointWriter(std::string root, WriteOptions options, RetentionPolicy retention, bool async)
    : root_(std::move(root)), options_(std::move(options)), retention_(retention), async_(async) {}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();  // errors of a last write are lost only if never waited on
}

void CheckpointWriter::write_now(int64_t step, const CheckpointData& data) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string path = write_checkpoint(root_, step, data, options_);
  CrashPhase phase("retention");
  note_written(path);
  std::vector<std::string> not_removed;
  apply_retention(root_, retention_, "", &not_removed);
  warn_not_removed(not_removed);
  const double seconds = seconds_since(t0);
  std::error_code ec;
  int64_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(path, ec)) bytes += static_cast<int64_t>(e.file_size(ec));
  std::lock_guard<std::mutex> lock(stats_mu_);  // the trainer thread may be reading stats()
  stats_.last_write_s = seconds;
  stats_.write_s_total += seconds;
  stats_.last_bytes = bytes;
}

// Said once per checkpoint: each later save would find it again.
void CheckpointWriter::warn_not_removed(const std::vector<std::string>& not_removed) {
  for (const std::string& what : not_removed) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    if (!warned_.insert(what.substr(0, what.rfind(": "))).second) continue;
    Console::get().line(fmt::format(
        "checkpoint: warning: cannot remove {} (beyond checkpoint.keep_last = {}, keep_best = {}); it stays, "
        "using disk space: fix its permissions (or `chattr -i`) or remove it by hand",
        what, retention_.keep_last, retention_.keep_best));
  }
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
  if (stats_.stall_s_each.size() < CheckpointWriterStats::kStallsListed) stats_.stall_s_each.push_back(seconds);
}

CheckpointWriterStats CheckpointWriter::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void CheckpointWriter::snapshot(CheckpointData& d) {
  join();  // the write in flight holds the staging buffer
  bool on_gpu = false;
  for (const NamedTensors* l : {&d.model, &d.optimizer})
    for (const auto& [n, t] : *l) on_gpu = on_gpu || t.is_cuda();
  if (!on_gpu) {
    d.model = snapshot_tensors(d.model);
    d.optimizer = snapshot_tensors(d.optimizer);
    return;
  }
  std::vector<NamedTensors> copies = staging_.copy({&d.model, &d.optimizer});
  d.model = std::move(copies[0]);
  d.optimizer = std::move(copies[1]);
}

std::vector<NamedTensors> SnapshotBuffer::copy(const std::vector<const NamedTensors*>& lists) {
  constexpr int64_t kAlign = 64;
  // A tensor's slot in the buffer: its bytes, rounded up to the alignment.
  const auto slot = [](const at::Tensor& t) {
    const int64_t n = static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
    return (n + kAlign - 1) / kAlign * kAlign;
  };
  int64_t bytes = 0;
  bool on_gpu = false;
  for (const NamedTensors* l : lists)
    for (const auto& [n, t] : *l) {
      bytes += slot(t);
      on_gpu = on_gpu || t.is_cuda();
    }
  // A new buffer when this one is too small, of the wrong kind, or still held by an earlier
  // snapshot's tensors (then it stays theirs and is freed with them).
  const bool want_pinned = pin_ && on_gpu && !pin_refused_;
  if (!buffer_ || capacity_ < bytes || buffer_.use_count() > 1 || (want_pinned && !pinned_)) {
    buffer_.reset();
    capacity_ = 0;
    pinned_ = false;
    if (want_pinned) {
      buffer_ = device::pinned_host_memory(std::max<int64_t>(bytes, kAlign));
      pinned_ = buffer_ != nullptr;
      pin_refused_ = !pinned_;  // not asked again: plain memory from now on
    }
    if (!buffer_) {
      void* p = std::aligned_alloc(kAlign, static_cast<size_t>(std::max<int64_t>(bytes, kAlign)));
      if (!p)
        throw IoError(
            fmt::format("cannot allocate {:.0f} MB of host memory for the checkpoint's snapshot; "
                        "turn checkpoint.async off or free host memory",
                        static_cast<double>(bytes) / 1e6));
      buffer_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
    }
    capacity_ = std::max<int64_t>(bytes, kAlign);
    ++allocations_;
  }
  const std::shared_ptr<void> keep = buffer_;
  auto* base = static_cast<uint8_t*>(buffer_.get());
  int64_t offset = 0;
  std::vector<c10::Device> gpus;
  std::vector<NamedTensors> out;
  out.reserve(lists.size());
  for (const NamedTensors* l : lists) {
    NamedTensors copies;
    copies.reserve(l->size());
    for (const auto& [n, t] : *l) {
      at::Tensor dst = at::from_blob(
          base + offset, t.sizes(), [keep](void*) {}, at::TensorOptions().dtype(t.scalar_type()).device(at::kCPU));
      // Queued on the tensor's stream when the target is page-locked; waited for below.
      dst.copy_(t.detach(), /*non_blocking=*/t.is_cuda() && pinned_);
      if (t.is_cuda() && std::find(gpus.begin(), gpus.end(), t.device()) == gpus.end()) gpus.push_back(t.device());
      offset += slot(t);
      copies.emplace_back(n, std::move(dst));
    }
    out.push_back(std::move(copies));
  }
  for (const c10::Device& g : gpus) device::synchronize(g);
  return out;
}

NamedTensors snapshot_tensors(const NamedTensors& tensors) {
  NamedTensors out;
  out.reserve(tensors.size());
  for (const auto& [n, t] : tensors)
    out.emplace_back(n, t.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true));
  return out;
}

}  // namespace frugal
