// The scalars the trackers receive; see trackers.h.
#include "frugal/monitor/trackers.h"

namespace frugal {

std::vector<TrackedScalar> tracked_scalars(const nlohmann::ordered_json& line) {
  const bool eval = line.value("event", "") == "eval";
  const std::string own = eval ? "eval/" : "train/";
  std::vector<TrackedScalar> out;
  for (const auto& [key, value] : line.items()) {
    if (key == "event" || key == "step" || key == "total_steps") continue;
    if (value.is_number()) {
      out.push_back({own + key, value.get<double>()});
    } else if (value.is_object() && (key == "user" || key == "metrics")) {
      const std::string group = key == "user" ? "user/" : "task/";
      for (const auto& [name, v] : value.items())
        if (v.is_number()) out.push_back({group + name, v.get<double>()});
    }
  }
  return out;
}

}  // namespace frugal
