// The trainer's side of multi-process data parallel, as an interface in the training layer: the
// Trainer drives data parallel through it, and src/dist implements it (dist::DataParallel), so
// the training layer never names the process groups above it. The step's side is GradSync
// (grad_sync.h).
//
//   TrainerOptions o;
//   o.data_parallel = dist::data_parallel_factory(dist::connect(env, config.dist, device));
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/core/callback.h"
#include "frugal/core/config.h"
#include "frugal/train/grad_sync.h"

namespace frugal {

class DataParallelism : public GradSync {
 public:
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  bool is_writer() const { return rank() == 0; }  // rank 0 writes every file of the run
  // Every rank continues from rank 0's parameters.
  virtual void broadcast_parameters(const std::vector<at::Tensor>& params) = 0;
  // A stop requested on any rank becomes every rank's stop, with the same kind and the requesting
  // rank's reason; a checkpoint requested on any rank is taken by all.
  virtual void agree(Control& control) = 0;
  // Rank 0 gets every rank's string (rank order); the others get {}.
  virtual std::vector<std::string> gather_strings(const std::string& mine, const std::string& tag) = 0;
  // The trainer brackets each training step (TrainStep::run) with these, so that the per-step
  // figures of add_to_summary count the steps' communication alone, not an evaluation's gathers.
  virtual void begin_step() = 0;
  virtual void end_step() = 0;
  // Figures for summary.json ("dist": world, backend, exposed communication per step).
  virtual void add_to_summary(nlohmann::ordered_json& summary, double step_s_total, int64_t steps) const = 0;
};

// How a Trainer joins a multi-process run: this process's rank, known before the config is final
// (rank 0 alone locks and writes the run directory), and how to build the data-parallel side from
// the final config. The default (no `make`) is a single process.
struct DataParallelFactory {
  int64_t rank = 0;
  std::function<std::unique_ptr<DataParallelism>(const Config&)> make;
};

}  // namespace frugal
