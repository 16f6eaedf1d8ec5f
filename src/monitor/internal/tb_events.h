// TensorBoard's Event messages, serialised with protobuf (its generated code for TensorBoard's own
// schema). Standard types only at this boundary: this file and the generated code build apart from
// the rest of frugal, whose include path (LibTorch's) carries another protobuf's headers.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace frugal::detail {

// CRC-32C (Castagnoli), as TFRecord frames records with it.
uint32_t tb_crc32c(const std::string& data);

// Serialised tensorboard.Event messages at `step`, stamped `wall_time` (Unix seconds):
std::string tb_version_event(double wall_time, int64_t step);        // file_version "brain.Event:2"
std::string tb_session_start_event(double wall_time, int64_t step);  // SessionLog START
// Text summaries (TensorBoard's text plugin), one per (tag, text).
std::string tb_text_event(double wall_time, int64_t step,
                          const std::vector<std::pair<std::string, std::string>>& texts);
// Scalars as simple_value (float32), one per (tag, value).
std::string tb_scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& values);

}  // namespace frugal::detail
