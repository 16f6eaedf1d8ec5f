// The levers a run decided once, as summary.json's "levers" object holds them (train/run_setup.h:
// levers_json), rendered in one way for everything that shows them: the banner's "levers:" line,
// report.html, `frugal compare` and the trackers' tags.
//
//   {"precision": {"mode", "reason", "loss_scaling"},
//    "batch": {"micro_batch", "accum", "world_size", "global_batch"},
//    "activation_checkpointing": "none",
//    "optimizer": {"kind", "lr", "weight_decay", "betas", "grad_clip", "muon": {...}},
//    "schedule": {"kind", "warmup_steps", "min_lr_ratio", "decay_fraction"},
//    "zero": 0, "kernels": "aten", "checkpoints": "async"}
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace frugal {

// "precision bf16 (auto: ...) | micro_batch 8 x accum 2 | activation checkpointing none |
// optimizer muon (Newton-Schulz bf16, momentum 0.95) | schedule wsd (warm-up 50, decay the last
// 20%) | checkpoints async"
std::string describe_levers(const nlohmann::json& levers);

// One lever's short label ("optimizer": "muon (Newton-Schulz bf16)", "schedule": "wsd (warm-up
// 50, decay the last 20%)", "precision": "bf16"); "-" where the object has none.
std::string lever_label(const nlohmann::json& levers, const std::string& which);

}  // namespace frugal
