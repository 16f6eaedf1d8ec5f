// TensorBoard event files; see tensorboard.h.
#include "frugal/monitor/tensorboard.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/core/features.h"
#include "frugal/core/wall_clock.h"
#include "frugal/monitor/metrics_writer.h"
#include "frugal/monitor/trackers.h"
#include "frugal_build_config.h"  // FRUGAL_HAVE_TENSORBOARD

#if FRUGAL_HAVE_TENSORBOARD
#include "monitor/internal/tb_events.h"
#endif

namespace frugal {

uint32_t masked_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

#if FRUGAL_HAVE_TENSORBOARD
namespace {

// The seconds field of an event file's name: events.out.tfevents.<seconds>.<host>... (0 if none).
int64_t name_seconds(const std::string& name) {
  const std::string prefix = "events.out.tfevents.";
  if (name.rfind(prefix, 0) != 0) return 0;
  const size_t end = name.find('.', prefix.size());
  const std::string digits = name.substr(prefix.size(), end - prefix.size());
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoll(digits);
}

// A name that sorts after every event file already in `dir` (TensorBoard reads a folder's files
// in name order): the seconds field is now, or one past the newest file's when that is not older.
std::string next_event_file(const std::string& dir) {
  int64_t seconds = static_cast<int64_t>(unix_now());
  for (const auto& e : std::filesystem::directory_iterator(dir))
    seconds = std::max(seconds, name_seconds(e.path().filename().string()) + 1);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  return fmt::format("{}/events.out.tfevents.{:010d}.{}.{}.frugal", dir, seconds, host, ::getpid());
}

std::string scalars_event(int64_t step, const nlohmann::ordered_json& line) {
  std::vector<std::pair<std::string, double>> values;
  for (const TrackedScalar& s : tracked_scalars(line)) values.emplace_back(s.tag, s.value);
  return detail::tb_scalars_event(unix_now(), step, values);
}

}  // namespace

uint32_t crc32c(const std::string& data) { return detail::tb_crc32c(data); }

std::string tf_record(const std::string& data) {
  std::string length(8, '\0');
  const uint64_t n = data.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  auto le32 = [](uint32_t x) {
    std::string b(4, '\0');
    for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((x >> (8 * i)) & 0xff);
    return b;
  };
  return length + le32(masked_crc32c(crc32c(length))) + data + le32(masked_crc32c(crc32c(data)));
}

TensorBoardWriter::TensorBoardWriter(std::string dir, std::string levers)
    : dir_(std::move(dir)), levers_(std::move(levers)) {}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::write_event(const std::string& serialized) {
  const std::string record = tf_record(serialized);
  if (std::fwrite(record.data(), 1, record.size(), f_) != record.size() || std::fflush(f_) != 0) {
    const int err = errno;
    throw IoError(fmt::format("cannot append to {}: {}", path_, std::strerror(err)), err);
  }
}

void TensorBoardWriter::on_train_begin(const RunInfo& info) {
  start_step_ = info.start_step;
  run_dir_ = info.run_dir;
  began_ = true;
}

// The session's file, with its header events: made at the first point, so that a session that
// logs nothing (a finished run resumed) leaves no file.
bool TensorBoardWriter::open_file() {
  if (f_) return true;
  if (failed_ || !began_) return false;
  try {
    std::filesystem::create_directories(dir_);
    path_ = next_event_file(dir_);
    f_ = std::fopen(path_.c_str(), "wb");
    if (!f_) {
      const int err = errno;
      throw IoError(fmt::format("cannot create {}: {}", path_, std::strerror(err)), err);
    }
    write_event(detail::tb_version_event(unix_now(), start_step_));
    // The points earlier sessions logged after the step this one starts from (a killed session's
    // steps past its checkpoint, or a run started over without one) are dropped by the reader.
    write_event(detail::tb_session_start_event(unix_now(), start_step_ + 1));
    const std::string config_path = RunDir(run_dir_).config();
    const std::string config = std::filesystem::exists(config_path) ? read_file(config_path) : "";
    write_event(detail::tb_text_event(unix_now(), start_step_,
                                      {{"config", "```toml\n" + config + "```"}, {"levers", levers_}}));
    return true;
  } catch (const std::exception& e) {
    stop_writing(e.what());
    return false;
  }
}

void TensorBoardWriter::stop_writing(const std::string& why) {
  if (f_) std::fclose(f_);
  f_ = nullptr;
  failed_ = true;
  Console::get().line(
      fmt::format("warning: tensorboard: {}; training goes on without TensorBoard (the points not written are "
                  "counted in summary.json: trackers.tensorboard.dropped)",
                  why));
}

void TensorBoardWriter::write_point(const std::string& serialized) {
  if (!open_file()) {
    ++dropped_;
    return;
  }
  try {
    write_event(serialized);
    ++events_;
  } catch (const std::exception& e) {
    ++dropped_;
    stop_writing(e.what());
  }
}

void TensorBoardWriter::on_step_end(const StepMetrics& m, Control&) {
  if (!m.logged) return;
  const auto start = std::chrono::steady_clock::now();
  write_point(scalars_event(m.step, step_json(m)));
  write_s_ += seconds_since(start);
}

void TensorBoardWriter::on_eval_end(const EvalMetrics& m, Control&) {
  const auto start = std::chrono::steady_clock::now();
  write_point(scalars_event(m.step, eval_json(m)));
  write_s_ += seconds_since(start);
}

void TensorBoardWriter::add_to_summary(nlohmann::ordered_json& summary) {
  summary["trackers"]["tensorboard"] = {
      {"dir", dir_}, {"events", events_}, {"dropped", dropped_}, {"trainer_thread_s", write_s_}};
}

void TensorBoardWriter::on_train_end(const nlohmann::json&) {
  if (f_) std::fclose(f_);
  f_ = nullptr;
}

#else  // no TensorBoard support in this build

uint32_t crc32c(const std::string&) { throw ConfigError("crc32c: this frugal was built without TensorBoard support"); }
std::string tf_record(const std::string&) {
  throw ConfigError("tf_record: this frugal was built without TensorBoard support");
}
TensorBoardWriter::TensorBoardWriter(std::string dir, std::string levers)
    : dir_(std::move(dir)), levers_(std::move(levers)) {
  require_feature("tensorboard", "track.tensorboard");
}
TensorBoardWriter::~TensorBoardWriter() = default;
void TensorBoardWriter::write_event(const std::string&) {}
void TensorBoardWriter::on_train_begin(const RunInfo&) {}
void TensorBoardWriter::on_step_end(const StepMetrics&, Control&) {}
void TensorBoardWriter::on_eval_end(const EvalMetrics&, Control&) {}
void TensorBoardWriter::on_train_end(const nlohmann::json&) {}
void TensorBoardWriter::add_to_summary(nlohmann::ordered_json&) {}

#endif

}  // namespace frugal
