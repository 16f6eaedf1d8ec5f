// The levers' one rendering; see levers.h.
#include "frugal/monitor/levers.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace frugal {
namespace {

std::string text(const nlohmann::json& j, const char* key, const std::string& fallback = "?") {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : fallback;
}

double number(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

std::string optimizer_label(const nlohmann::json& o) {
  const std::string kind = text(o, "kind");
  if (!o.contains("muon") || !o["muon"].is_object()) return kind;
  const auto& m = o["muon"];
  return fmt::format("{} (Newton-Schulz {}, momentum {:g})", kind, text(m, "newton_schulz"), number(m, "momentum"));
}

std::string schedule_label(const nlohmann::json& s) {
  const std::string kind = text(s, "kind");
  if (kind == "wsd")
    return fmt::format("wsd (warm-up {:g}, decay the last {:g}%)", number(s, "warmup_steps"),
                       100 * number(s, "decay_fraction"));
  if (kind == "cosine")
    return fmt::format("cosine (warm-up {:g}, to {:g} x lr)", number(s, "warmup_steps"), number(s, "min_lr_ratio"));
  return kind;
}

}  // namespace

std::string lever_label(const nlohmann::json& levers, const std::string& which) {
  if (!levers.is_object() || !levers.contains(which)) return "-";
  const nlohmann::json& v = levers[which];
  if (which == "optimizer") return optimizer_label(v);
  if (which == "schedule") return schedule_label(v);
  if (which == "precision") return text(v, "mode");
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string describe_levers(const nlohmann::json& levers) {
  if (!levers.is_object()) return "";
  const auto& b = levers.value("batch", nlohmann::json::object());
  const double world = number(b, "world_size");
  std::string batch = fmt::format("micro_batch {:g} x accum {:g}", number(b, "micro_batch"), number(b, "accum"));
  if (world > 1) batch += fmt::format(" x {:g} ranks (dist.zero {})", world, levers.value("zero", 0));
  const auto& p = levers.value("precision", nlohmann::json::object());
  std::string optimizer = lever_label(levers, "optimizer");
  if (levers.value("offload", "none") == "optimizer") optimizer += " in host memory (dist.offload)";
  return fmt::format(
      "precision {} ({}) | {} | activation checkpointing {} | optimizer {} | schedule {} | checkpoints {}{}",
      text(p, "mode"), text(p, "reason", ""), batch, levers.value("activation_checkpointing", "none"), optimizer,
      lever_label(levers, "schedule"), levers.value("checkpoints", "?"),
      levers.value("kernels", "aten") == "frugal" ? " | kernels frugal" : "");
}

}  // namespace frugal
