// Saves checkpoints synchronously or asynchronously, then applies retention.
//
// Synchronous: save() encodes, writes, fsyncs, renames, marks complete and rotates before it
// returns; the trainer is blocked for all of it. Asynchronous (checkpoint.async): save() takes a
// private snapshot (the caller passes tensors it will not modify, see snapshot_tensors()) and
// returns at once; a background thread writes and rotates. The trainer blocks only for the
// snapshot copy (snapshot(): page-locked and reused for GPU state) and, if the previous write is
// still running, for that write to finish (one write in flight at most). An error on the writer
// thread is kept as an exception_ptr and rethrown on the trainer thread by the next save(),
// wait() or poll().
//
// Owns its thread: the destructor joins it (without throwing). Not thread-safe: call from the
// trainer thread only (stats() may be read while a write runs).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/ckpt/retention.h"

namespace frugal {

// Host copies of a checkpoint's tensors in one buffer that is kept from save to save. For tensors
// on a GPU the buffer is page-locked (device::pinned_host_memory): the copies are queued without
// waiting and waited for once, instead of one blocking copy into fresh pageable memory per tensor.
// Without CUDA, or when the driver refuses to pin, it is plain memory and the copies block.
// The buffer is reused only when no earlier snapshot's tensors still hold it (the returned
// tensors keep it alive); otherwise a new one is allocated, so an earlier snapshot never
// changes.
class SnapshotBuffer {
 public:
  // pin: page-locked memory when a tensor is on a GPU (false: always plain memory).
  explicit SnapshotBuffer(bool pin = true) : pin_(pin) {}

  // Copies of each list, in order, laid out in the buffer (64-byte aligned, contiguous).
  std::vector<NamedTensors> copy(const std::vector<const NamedTensors*>& lists);

  int64_t capacity() const { return capacity_; }
  bool pinned() const { return pinned_; }
  int64_t allocations() const { return allocations_; }  // buffers allocated so far

 private:
  bool pin_;
  std::shared_ptr<void> buffer_;
  int64_t capacity_ = 0;
  bool pinned_ = false;
  bool pin_refused_ = false;  // the driver refused once: plain memory from then on
  int64_t allocations_ = 0;
};

struct CheckpointWriterStats {
  int64_t saves = 0;
  double stall_s_total = 0;  // trainer-blocked time, summed over saves (measured by the caller)
  double stall_s_max = 0;
  // Each save's stall, in order, the first kStallsListed saves (the first async save on a GPU
  // also allocates the page-locked buffer; a save that finds the previous write in flight waits
  // for it): what a mean hides.
  static constexpr size_t kStallsListed = 1000;
  std::vector<double> stall_s_each;
  double write_s_total = 0;  // encode + write + fsync + rename + rotate, on whichever thread
  double last_write_s = 0;
  int64_t last_bytes = 0;
};

class CheckpointWriter {
 public:
  CheckpointWriter(std::string root, WriteOptions options, RetentionPolicy retention, bool async);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Writes (sync) or starts writing (async) root/step-NNNNNNNN; returns its final path.
  std::string save(int64_t step, CheckpointData data);
  // Blocks until no write is in flight; rethrows a writer-thread error.
  void wait();
  // Rethrows a writer-thread error if the last write finished with one; never blocks.
  void poll();
  // Adds the caller-measured trainer stall of the last save to the statistics.
  void record_stall(double seconds);
  // Replaces d's model and optimizer tensors with private host copies, for an asynchronous
  // save. Waits for the write in flight first (its snapshot holds the buffer; rethrows its
  // error). Tensors on a GPU go through the writer's SnapshotBuffer (page-locked, reused);
  // tensors already on the host get fresh copies (snapshot_tensors), so a CPU run holds no
  // second copy of its state between saves.
  void snapshot(CheckpointData& d);

  bool async() const { return async_; }
  const std::string& root() const { return root_; }
  const WriteOptions& options() const { return options_; }
  CheckpointWriterStats stats() const;

 private:
  void write_now(int64_t step, const CheckpointData& data);
  void join();
  void warn_not_removed(const std::vector<std::string>& not_removed);

  std::string root_;
  WriteOptions options_;
  RetentionPolicy retention_;
  bool async_;
  std::thread thread_;
  std::atomic<bool> done_{true};
  std::exception_ptr error_;
  mutable std::mutex stats_mu_;  // stats_ is written by the writer thread, read by the trainer
  CheckpointWriterStats stats_;
  std::set<std::string> warned_;  // checkpoints retention could not remove, said once each
  SnapshotBuffer staging_;
};

// Deep copies to host memory, for an asynchronous save: the trainer may modify the originals as
// soon as this returns. Each tensor gets fresh pageable memory; see SnapshotBuffer for GPU state.
NamedTensors snapshot_tensors(const NamedTensors& tensors);

}  // namespace frugal
