// Loop state and RNG (de)serialisation; see run_state.h.
#include "train/internal/run_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <algorithm>
#include <mutex>

#include "frugal/core/errors.h"

namespace frugal::detail {

nlohmann::json json_double(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

double double_from_json(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  const std::string s = j.is_string() ? j.get<std::string>() : "nan";
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  return std::numeric_limits<double>::quiet_NaN();
}

nlohmann::json to_json(const LoopState& s) {
  return {{"step", s.step},
          {"tokens", s.tokens},
          {"loss_sum", json_double(s.loss_sum)},
          {"window_steps", s.window_steps},
          {"window_tokens", s.window_tokens},
          {"window_s", s.window_s},
          {"final_val", json_double(s.final_val)},
          {"best_val", json_double(s.best_val)},
          {"final_train", json_double(s.final_train)},
          {"last_eval_step", s.last_eval_step},
          {"eval_pending", s.eval_pending},
          {"elapsed_s", s.elapsed_s},
          {"startup_s", s.startup_s},
          {"lr_scale", s.lr_scale},
          {"rollbacks", s.rollbacks},
          {"end_step", s.end_step},
          {"end_reason", s.end_reason},
          {"decay_from", s.decay_from}};
}

LoopState loop_state_from_json(const nlohmann::json& j) {
  try {
    LoopState s;
    s.step = j.at("step").get<int64_t>();
    s.tokens = j.at("tokens").get<int64_t>();
    s.loss_sum = double_from_json(j.at("loss_sum"));
    s.window_steps = j.at("window_steps").get<int64_t>();
    s.window_tokens = j.at("window_tokens").get<int64_t>();
    s.window_s = j.at("window_s").get<double>();
    s.final_val = double_from_json(j.at("final_val"));
    s.best_val = double_from_json(j.at("best_val"));
    s.final_train = double_from_json(j.at("final_train"));
    s.last_eval_step = j.at("last_eval_step").get<int64_t>();
    s.eval_pending = j.at("eval_pending").get<bool>();
    s.elapsed_s = j.at("elapsed_s").get<double>();
    s.startup_s = j.value("startup_s", 0.0);  // absent in checkpoints of earlier versions
    s.lr_scale = j.at("lr_scale").get<double>();
    s.rollbacks = j.at("rollbacks").get<int64_t>();
    s.end_step = j.value("end_step", int64_t{0});  // absent in checkpoints of earlier versions
    s.end_reason = j.value("end_reason", std::string());
    s.decay_from = j.value("decay_from", int64_t{0});
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(fmt::format("state.json \"loop\" is incomplete: {}", e.what()));
  }
}

std::string bytes_to_hex(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (uint8_t b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 0xf];
  }
  return out;
}

std::vector<uint8_t> hex_to_bytes(const std::string& hex, const std::string& what) {
  if (hex.size() % 2 != 0) throw CheckpointError("state.json " + what + ": odd number of hex digits");
  auto nibble = [&](char ch) -> uint8_t {
    if (ch >= '0' && ch <= '9') return static_cast<uint8_t>(ch - '0');
    if (ch >= 'a' && ch <= 'f') return static_cast<uint8_t>(ch - 'a' + 10);
    if (ch >= 'A' && ch <= 'F') return static_cast<uint8_t>(ch - 'A' + 10);
    throw CheckpointError("state.json " + what + ": '" + std::string(1, ch) + "' is not a hex digit");
  };
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  return out;
}

std::string cpu_rng_state_hex() {
  auto gen = at::detail::getDefaultCPUGenerator();
  at::Tensor t;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    t = gen.get_state();
  }
  const uint8_t* p = t.data_ptr<uint8_t>();
  return bytes_to_hex(std::vector<uint8_t>(p, p + t.numel()));
}

void set_cpu_rng_state_hex(const std::string& hex) {
  const std::vector<uint8_t> bytes = hex_to_bytes(hex, "rng.cpu");
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::copy(bytes.begin(), bytes.end(), t.data_ptr<uint8_t>());
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  try {
    gen.set_state(t);
  } catch (const c10::Error& e) {  // the right size, but no state the generator takes
    throw CheckpointError(
        fmt::format("state.json rng.cpu is not a CPU generator state: {}", e.what_without_backtrace()));
  }
}

}  // namespace frugal::detail
