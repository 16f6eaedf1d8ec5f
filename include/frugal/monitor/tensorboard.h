// TensorBoard event files ([track] tensorboard = true): runs/<name>/tb/events.out.tfevents.*,
// read by `tensorboard --logdir runs` beside a team's other runs.
//
// What a run writes (rank 0 alone):
//   - at each log step and each evaluation, every scalar of that metrics.jsonl line under the
//     names of monitor/trackers.h (train/loss, eval/val_loss, user/..., task/...), at its step;
//   - at the start of each session, two text summaries: "config" (the resolved config.toml) and
//     "levers" (the banner's levers line).
// The records are TensorBoard's: Event messages of TensorBoard's own schema (serialised with
// protobuf), each framed as TFRecord specifies: length (u64 LE), masked CRC-32C of the length,
// the bytes, masked CRC-32C of the bytes.
//
// A tracker never stops training: a file that cannot be made or written (a full disk) is warned
// about once, and the points after it are counted as dropped in summary.json.
//
// Resume: every session that logs writes a new file whose name sorts after the others (made at its
// first point: resuming a finished run adds none), and starts it with a
// SessionLog START event at (the step it starts from + 1): TensorBoard's reader drops the earlier
// files' points from that step on (the steps a killed session logged after its last checkpoint,
// which the resumed session logs again), so no step is shown twice and none is missing.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "frugal/core/callback.h"

namespace frugal {

class TensorBoardWriter : public Callback {
 public:
  // dir: runs/<name>/tb (made when the run begins). levers: levers_line(). ConfigError when this
  // build has no TensorBoard support (frugal doctor lists the features).
  TensorBoardWriter(std::string dir, std::string levers);
  ~TensorBoardWriter() override;
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void on_train_begin(const RunInfo& info) override;
  void on_step_end(const StepMetrics& m, Control& control) override;
  void on_eval_end(const EvalMetrics& m, Control& control) override;
  void on_train_end(const nlohmann::json& summary) override;
  // trackers.tensorboard: the folder, this session's events (and those dropped after a write
  // failed) and the trainer thread's time in them.
  void add_to_summary(nlohmann::ordered_json& summary) override;

  const std::string& path() const { return path_; }  // this session's event file ("" before its first point)

 private:
  void write_event(const std::string& serialized);
  bool open_file();  // at the first point; false once writing failed
  void write_point(const std::string& serialized);
  void stop_writing(const std::string& why);
  std::string dir_, levers_, path_, run_dir_;
  int64_t start_step_ = 0;
  std::FILE* f_ = nullptr;
  bool failed_ = false, began_ = false;
  int64_t events_ = 0, dropped_ = 0;
  double write_s_ = 0;  // the trainer thread's time in on_step_end / on_eval_end
};

// The TFRecord framing of one record (exposed for tests).
std::string tf_record(const std::string& data);
// CRC-32C (Castagnoli) of `data`, and the TFRecord mask of a CRC: ((crc >> 15) | (crc << 17)) +
// 0xa282ead8.
uint32_t crc32c(const std::string& data);
uint32_t masked_crc32c(uint32_t crc);

}  // namespace frugal
