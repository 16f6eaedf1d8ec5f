// Every file and folder of a run directory, <run.out_dir>/<run.name>/, named in one place (the
// way leveldb's db/filename.h names every file of a database). docs/formats/run_dir.md specifies
// each one: who writes it, when, and in what format.
//
//   const RunDir dir = RunDir::of(config);
//   write_file_atomic(dir.summary(), ...);
#pragma once

#include <string>
#include <utility>

namespace frugal {

struct Config;

class RunDir {
 public:
  explicit RunDir(std::string root) : root_(std::move(root)) {}
  static RunDir of(const Config& c);  // <run.out_dir>/<run.name>

  const std::string& root() const { return root_; }
  std::string config() const { return at("config.toml"); }     // the resolved config, with origins
  std::string metrics() const { return at("metrics.jsonl"); }  // one JSON object per log step / evaluation
  std::string summary() const { return at("summary.json"); }   // the run's figures, at its end or stop
  std::string report() const { return at("report.html"); }     // the self-contained report
  std::string final_dir() const { return at("final"); }
  std::string final_weights() const { return at("final/model.safetensors"); }
  std::string checkpoints() const { return at("checkpoints"); }  // step-NNNNNNNN/ (docs/formats/checkpoint.md)
  // The dataset's tokenizer, kept with the run so that sample and export need not find the dataset:
  // manifest.json (the dataset's "tokenizer" entry and where the dataset was) and its model file.
  std::string tokenizer_dir() const { return at("tokenizer"); }
  // model.init_from's descriptive files (config.json, tokenizer_config.json with its chat template,
  // generation_config.json, ...), kept so that `frugal export` writes them after the checkpoint
  // directory or the hub cache has gone.
  std::string hf_source() const { return at("hf_source"); }
  std::string auto_tune() const { return at("auto_tune.json"); }  // train.auto_tune's choice
  std::string plan() const { return at("plan.json"); }            // plan.before_train's projection
  std::string tuned_config() const { return at("tuned.toml"); }   // `frugal tune`'s default output
  std::string profile_dir() const { return at("profile"); }       // profile.* traces
  std::string tensorboard() const { return at("tb"); }            // [track] tensorboard's event files
  std::string mlflow() const { return at("mlflow.json"); }        // the MLflow run this run logs to
  std::string lock() const { return at(".lock"); }                // held by the process writing the run

  // True when the directory holds a run (its metrics, summary, final weights or checkpoints).
  // std::filesystem::filesystem_error when a path cannot be looked at.
  bool holds_run() const;

 private:
  std::string at(const char* name) const { return root_ + "/" + name; }
  std::string root_;
};

}  // namespace frugal
