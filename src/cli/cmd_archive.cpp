// `frugal archive RUNS_DIR --older-than 90d --to DIR [--dry-run]` and
// `frugal restore ARCHIVE... [--runs RUNS_DIR]`.
#include <fmt/format.h>

#include <memory>

#include "cli/commands.h"
#include "frugal/ckpt/archive.h"
#include "frugal/core/errors.h"

namespace frugal::cli {
namespace {

std::string mb(uint64_t bytes) { return fmt::format("{:.1f} MB", static_cast<double>(bytes) / 1e6); }

}  // namespace

void add_archive_commands(CLI::App& app, Run* run) {
  struct Args {
    std::string runs_dir, older_than = "90d", to;
    bool dry_run = false;
  };
  auto a = std::make_shared<Args>();
  auto* archive =
      app.add_subcommand("archive",
                         "Move stale checkpoints out of RUNS_DIR/*/checkpoints into compressed archives "
                         "(DIR/<run>/step-NNNNNNNN.tar.zst). Never touches a run's newest complete checkpoint, its "
                         "best one (checkpoint.best_metric), or an incomplete one. Each archive is read back and "
                         "checked before the checkpoint is deleted. `frugal restore` puts one back.");
  archive->add_option("runs_dir", a->runs_dir, "directory holding run directories, e.g. runs")
      ->required()
      ->check(CLI::ExistingDirectory);
  archive->add_option("--older-than", a->older_than,
                      "archive checkpoints completed longer ago than this: a number and s, m, h, d "
                      "or w (default 90d)");
  archive->add_option("--to", a->to, "directory the archives go to (created if missing)")->required();
  archive->add_flag("--dry-run", a->dry_run, "print what would be archived and kept, change nothing");
  archive->callback([a, run] {
    *run = [a] {
      const auto plan = plan_archive(a->runs_dir, parse_duration_seconds(a->older_than));
      if (!a->dry_run)
        for (const auto& p : remove_dead_checkpoint_debris(a->runs_dir))
          fmt::print("removed  {}  (left by a process killed while it wrote or removed a checkpoint)\n", p);
      uint64_t moved = 0;
      int n = 0;
      for (const auto& c : plan) {
        if (!c.archive) {
          fmt::print("keep     {}  ({})\n", c.path, c.reason);
          continue;
        }
        if (a->dry_run) {
          fmt::print("would archive {}  ({})\n", c.path, mb(c.bytes));
        } else {
          const std::string to = archive_checkpoint(c, a->to);
          if (to.empty()) {
            fmt::print("skipped  {}  (removed meanwhile, by its run's checkpoint retention)\n", c.path);
            continue;
          }
          fmt::print("archived {} -> {}  ({})\n", c.path, to, mb(c.bytes));
          fmt::print("         restore: frugal restore {} --runs {}\n", to, a->runs_dir);
        }
        moved += c.bytes;
        ++n;
      }
      fmt::print("{} {} checkpoint(s), {} of {} listed; {}\n", a->dry_run ? "would archive" : "archived", n, mb(moved),
                 plan.size(), a->dry_run ? "nothing was changed (--dry-run)" : "done");
      return 0;
    };
  });

  auto archives = std::make_shared<std::vector<std::string>>();
  auto runs_dir = std::make_shared<std::string>("runs");
  auto* restore = app.add_subcommand(
      "restore",
      "Put archived checkpoints back: extracts each ARCHIVE (written by `frugal archive`) to "
      "RUNS_DIR/<run>/checkpoints/step-NNNNNNNN, verifies its checksums, never overwrites (a checkpoint "
      "already restored is said and skipped, so a rerun over the same archives finishes them).");
  restore->add_option("archives", *archives, "archive files (.tar.zst)")->required()->check(CLI::ExistingFile);
  restore->add_option("--runs", *runs_dir, "runs directory to restore into (default runs)");
  restore->callback([archives, runs_dir, run] {
    *run = [archives, runs_dir] {
      for (const auto& f : *archives) {
        bool already = false;
        const std::string to =
            reading_named_input("the archive " + f, [&] { return restore_checkpoint(f, *runs_dir, &already); });
        fmt::print("{} {} -> {}\n", already ? "already restored" : "restored", f, to);
      }
      return 0;
    };
  });
}

}  // namespace frugal::cli
