// Saves checkpoints synchronously or asynchronously, then applies retention.
//
// Synchronous: save() encodes, writes, fsyncs, renames, marks complete and rotates before it
// returns; the trainer is blocked for all of it. Asynchronous (checkpoint.async): save() takes a
// private snapshot (the caller passes tensors it will not modify, see snapshot_tensors()) and
// returns at once; a background thread writes and rotates. The trainer blocks only for the
// snapshot copy and, if the previous write is still running, for that write to finish (one
// write in flight at most). An error on the writer thread is kept as an exception_ptr and
// rethrown on the trainer thread by the next save(), wait() or poll().
//
// Owns its thread: the destructor joins it (without throwing). Not thread-safe: call from the
// trainer thread only (stats() may be read while a write runs).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/ckpt/retention.h"

namespace frugal {

struct CheckpointWriterStats {
  int64_t saves = 0;
  double stall_s_total = 0;   // trainer-blocked time, summed over saves (measured by the caller)
  double stall_s_max = 0;
  double write_s_total = 0;   // encode + write + fsync + rename + rotate, on whichever thread
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

  bool async() const { return async_; }
  const std::string& root() const { return root_; }
  CheckpointWriterStats stats() const;

 private:
  void write_now(int64_t step, const CheckpointData& data);
  void join();

  std::string root_;
  WriteOptions options_;
  RetentionPolicy retention_;
  bool async_;
  std::thread thread_;
  std::atomic<bool> done_{true};
  std::exception_ptr error_;
  mutable std::mutex stats_mu_;  // stats_ is written by the writer thread, read by the trainer
  CheckpointWriterStats stats_;
};

// Deep copies to host memory, for an asynchronous save: the trainer may modify the originals as
// soon as this returns.
NamedTensors snapshot_tensors(const NamedTensors& tensors);

}  // namespace frugal
