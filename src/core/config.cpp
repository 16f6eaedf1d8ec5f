// The spellings of the config values that are more than a number or a word; see config.h.
#include "frugal/core/config.h"

namespace frugal {

std::string to_string(const ActivationCheckpointing& a) {
  switch (a.mode) {
    case ActivationCheckpointing::Mode::kNone:
      return "none";
    case ActivationCheckpointing::Mode::kBlocks:
      return "blocks";
    case ActivationCheckpointing::Mode::kEvery:
      return "every:" + std::to_string(a.every);
  }
  return "none";
}

std::optional<ActivationCheckpointing> parse_activation_checkpointing(const std::string& s) {
  using Mode = ActivationCheckpointing::Mode;
  if (s == "none") return ActivationCheckpointing{Mode::kNone, 0};
  if (s == "blocks") return ActivationCheckpointing{Mode::kBlocks, 0};
  const std::string digits = s.rfind("every:", 0) == 0 ? s.substr(6) : "";
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  const int64_t n = std::stoll(digits);
  if (n < 1) return std::nullopt;
  return ActivationCheckpointing{Mode::kEvery, n};
}

const char* metric_name(Metric m) {
  switch (m) {
    case Metric::kValLoss:
      return "val_loss";
    case Metric::kLoss:
      return "loss";
    case Metric::kGradNorm:
      return "grad_norm";
  }
  return "?";
}

std::string to_string(const DataSource& s) {
  switch (s.kind) {
    case DataSource::Kind::kArith:
      return "builtin:arith";
    case DataSource::Kind::kText:
      return "text:" + s.path;
    case DataSource::Kind::kShards:
      return "shards:" + s.path;
    case DataSource::Kind::kRecords:
      return "records:" + s.path;
  }
  return "builtin:arith";
}

std::optional<DataSource> parse_data_source(const std::string& s) {
  if (s == "builtin:arith") return DataSource{DataSource::Kind::kArith, ""};
  for (auto [prefix, kind] :
       {std::pair{"text:", DataSource::Kind::kText}, std::pair{"shards:", DataSource::Kind::kShards},
        std::pair{"records:", DataSource::Kind::kRecords}}) {
    const std::string p = prefix;
    if (s.rfind(p, 0) == 0 && s.size() > p.size()) return DataSource{kind, s.substr(p.size())};
  }
  return std::nullopt;
}

}  // namespace frugal
