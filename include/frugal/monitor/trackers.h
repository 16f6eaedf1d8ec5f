// What frugal sends to the trackers a team already watches (TensorBoard, MLflow; [track]): every
// number of a metrics.jsonl line, each under one name, so that a run's figures are the same in
// metrics.jsonl, TensorBoard and MLflow (docs/observability.md, "Trackers").
//
//   step line  {"loss": 2.31, "lr": 6e-4, "user": {"acc": 0.5}}  ->  train/loss, train/lr, user/acc
//   eval line  {"val_loss": 1.02, "metrics": {"accuracy": 0.9}}    ->  eval/val_loss, task/accuracy
//
// A null (a non-finite value) is no point at all: the trackers get nothing for it at that step.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace frugal {

struct TrackedScalar {
  std::string tag;  // "train/loss"
  double value = 0;
};

// The scalars of one metrics.jsonl object (step_json / eval_json): its "step", "total_steps" and
// "event" are not scalars of their own (the step is every point's step).
std::vector<TrackedScalar> tracked_scalars(const nlohmann::ordered_json& line);

}  // namespace frugal
