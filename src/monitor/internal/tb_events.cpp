// TensorBoard's Event messages; see tb_events.h.
#include "monitor/internal/tb_events.h"

#include <boost/crc.hpp>

#include "tensorboard/compat/proto/event.pb.h"

namespace frugal::detail {
namespace {

tensorboard::Event tb_event_at(double wall_time, int64_t step) {
  tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  return e;
}

}  // namespace

uint32_t tb_crc32c(const std::string& data) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data.data(), data.size());
  return crc.checksum();
}

std::string tb_version_event(double wall_time, int64_t step) {
  tensorboard::Event e = tb_event_at(wall_time, step);
  e.set_file_version("brain.Event:2");
  return e.SerializeAsString();
}

std::string tb_session_start_event(double wall_time, int64_t step) {
  tensorboard::Event e = tb_event_at(wall_time, step);
  e.mutable_session_log()->set_status(tensorboard::SessionLog::START);
  return e.SerializeAsString();
}

std::string tb_text_event(double wall_time, int64_t step,
                          const std::vector<std::pair<std::string, std::string>>& texts) {
  tensorboard::Event e = tb_event_at(wall_time, step);
  for (const auto& [tag, text] : texts) {
    tensorboard::Summary::Value* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
    tensorboard::TensorProto* t = v->mutable_tensor();
    t->set_dtype(tensorboard::DT_STRING);
    t->mutable_tensor_shape();  // a scalar
    t->add_string_val(text);
  }
  return e.SerializeAsString();
}

std::string tb_scalars_event(double wall_time, int64_t step,
                             const std::vector<std::pair<std::string, double>>& values) {
  tensorboard::Event e = tb_event_at(wall_time, step);
  for (const auto& [tag, value] : values) {
    tensorboard::Summary::Value* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return e.SerializeAsString();
}

}  // namespace frugal::detail
