// The configuration a run trains with, settled in one place for every entry point (train, tune,
// smoke, plan, search, and a program that builds a Trainer):
//
// complete_config() fills what the inputs decide: the absolute paths of the dataset, the checkpoint,
// the scripted module and the adapter a run starts from (so config.toml names the same files from
// any working directory), the model shape from model.init_from's Hugging Face config.json and the
// vocabulary from the dataset (a shards manifest, nanoGPT's meta.pkl), for each key left at its
// default; a key set on purpose is checked against them instead.
//
// reconcile_resume_config() settles a resume. A resume continues the run as it was written:
// the checkpoint records every resolved value (state.json's config_values), and
//  - a key this invocation left at its default takes the run's value (so `frugal train --set
//    run.name=r --resume auto` continues r on r's data, shape and schedule, not on the demo's);
//  - a key set on purpose (file, environment, --set, code) to another value is a deliberate change:
//    allowed for the keys resume_may_change() names (steps, evaluation and checkpoint cadence,
//    budget, monitoring, devices and threads...) and recorded, refused with exit 2 for the keys that
//    define what the checkpoint continues (model shape, data, seed, batch, optimizer), every one
//    named with both values and where the new one came from.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "frugal/core/config_loader.h"

namespace frugal {

// Makes the paths data.source, model.init_from, model.source and lora.init_from name absolute (a
// relative lora.init_from, model.init_from or model.source where it names what exists here); fills
// model.* from model.init_from and model.vocab from data.source where they are left at their
// defaults (origin: the file they came from); ConfigError when a key set on purpose disagrees with
// model.init_from. Idempotent: the Trainer calls it again on what it is given.
void complete_config(ResolvedConfig& rc);

// resolve_config (config_loader.h) followed by complete_config: what every command that trains,
// probes or writes a config to train with starts from.
ResolvedConfig resolve_run_config(const std::string& file, const std::vector<std::string>& overrides,
                                  const std::map<std::string, std::string>& env);

// What every short probe run (tune's candidates, plan's probe, the smoke test) changes in the
// user's config: its own run directory and step count, every step logged. What a probe must not do
// (act on the world, stop early) is not a list of keys here: the probe runs with
// TrainerOptions::probe, and the callback connector leaves those callbacks out. Each caller adds
// what is its own (tune: no evaluations or checkpoints; smoke: a tiny batch and a checkpoint every
// step).
std::vector<std::string> probe_overrides(const std::string& out_dir, const std::string& name, int64_t steps);

// One deliberate change of a safe key on a resume, as the run records it.
struct ConfigChange {
  std::string key;
  std::string from, to;  // TOML literals: the run's value, this resume's
  std::string origin;    // where the new value came from ("--set", "file demo.toml:4", ...)
  nlohmann::json to_json(int64_t at_step) const;
};

// True for a key a resume may change on purpose; false for the keys that define the model, the
// data and its order, the batch and the optimizer that the checkpoint continues. The schema says
// which (KeySpec::on_resume, declared with each key in config_keys.cpp).
bool resume_may_change(const std::string& key);

// Reconciles `rc` with `saved` (key -> TOML literal: the checkpoint's config_values) as described
// above; `checkpoint` names the checkpoint in origins and messages. Returns the deliberate changes.
// Throws ConfigError (exit 2) naming every refused key before anything is written. run.name and
// run.out_dir (they found the run) and secrets (never saved) are left alone; a key the checkpoint
// does not record (written by an older frugal) keeps this invocation's value.
// A key that reaches out (KeySpec::reaches_out: a command, a URL, a listening address) is taken
// from the checkpoint only when `checkpoint` lies in the run's own directory; otherwise it keeps
// this invocation's value and its name is added to `not_taken` (when given).
std::vector<ConfigChange> reconcile_resume_config(ResolvedConfig& rc, const nlohmann::json& saved,
                                                  const std::string& checkpoint,
                                                  std::vector<std::string>* not_taken = nullptr);

}  // namespace frugal
