// Checkpoint archives: the plan never archives the newest or the best checkpoint, an archive
// round trip restores the files bitwise, --dry-run changes nothing, and bad input is refused.
#include "frugal/ckpt/archive.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <utime.h>

#include "frugal_build_config.h"  // FRUGAL_HAVE_LIBARCHIVE
#if FRUGAL_HAVE_LIBARCHIVE
#include <archive.h>
#include <archive_entry.h>
#endif

#include <ctime>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/ckpt/retention.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/dir_lock.h"
#include "frugal/core/errors.h"
#include "test_util.h"

namespace frugal::archive_test {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kDay = 86400;

// Writes RUNS/<run>/checkpoints/step-N with metric `metric` and backdates its COMPLETE marker. Its
// config_values record best_mode as the trainer records every key: a TOML literal ('max').
std::string make_checkpoint(const std::string& runs, const std::string& run, int64_t step, double metric,
                            int64_t age_days, const std::string& best_mode = "'min'") {
  CheckpointData d;
  torch::manual_seed(step);
  d.model = {{"w", torch::randn({64, 32})}};
  d.optimizer = {{"g0.exp_avg", torch::randn({2048})}};
  d.state = {{"loop", {{"step", step}}},
             {"metric", {{"name", "val_loss"}, {"value", metric}}},
             {"config_values", {{"checkpoint.best_mode", best_mode}}}};
  d.data_state = {{"cursor", step}};
  const std::string p = write_checkpoint(runs + "/" + run + "/checkpoints", step, d);
  const time_t t = std::time(nullptr) - age_days * kDay;
  struct utimbuf times {
    t, t
  };
  utime((p + "/COMPLETE").c_str(), &times);
  return p;
}

std::map<std::string, std::string> files_of(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename()] = test::read_text(e.path());
  return out;
}

const ArchiveCandidate& find(const std::vector<ArchiveCandidate>& plan, const std::string& run, int64_t step) {
  for (const auto& c : plan)
    if (c.run == run && c.step == step) return c;
  throw std::runtime_error("not in plan");
}

TEST(Archive, DurationParsing) {
  EXPECT_EQ(parse_duration_seconds("90d"), 90 * kDay);
  EXPECT_EQ(parse_duration_seconds("12h"), 12 * 3600);
  EXPECT_EQ(parse_duration_seconds("2w"), 14 * kDay);
  EXPECT_EQ(parse_duration_seconds("0s"), 0);
  for (const char* bad : {"", "d", "90", "9.5d", "90 d", "90y", "-3d"}) {
    try {
      parse_duration_seconds(bad);
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("s, m, h, d or w"), std::string::npos) << e.what();
    }
  }
}

TEST(Archive, PlanNeverTakesTheNewestTheBestOrYoungOnes) {
  test::TempDir dir;
  const std::string runs = dir.file("runs");
  // run a: best (lowest val_loss) is old step 10; newest is old step 40 too.
  make_checkpoint(runs, "a", 10, 0.5, 200);
  make_checkpoint(runs, "a", 20, 0.9, 150);
  make_checkpoint(runs, "a", 30, 0.8, 100);
  make_checkpoint(runs, "a", 40, 0.7, 95);
  // run b maximises its metric: the best is step 20; step 30 is recent.
  make_checkpoint(runs, "b", 10, 0.1, 120, "'max'");
  make_checkpoint(runs, "b", 20, 0.9, 120, "'max'");
  make_checkpoint(runs, "b", 30, 0.2, 10, "'max'");
  make_checkpoint(runs, "b", 40, 0.3, 1, "'max'");
  fs::create_directories(runs + "/b/checkpoints/step-00000050");  // incomplete (no COMPLETE)

  const auto plan = plan_archive(runs, 90 * kDay);
  EXPECT_EQ(plan.size(), 9u);
  EXPECT_EQ(find(plan, "a", 10).reason, "best");
  EXPECT_TRUE(find(plan, "a", 20).archive);
  EXPECT_TRUE(find(plan, "a", 30).archive);
  EXPECT_EQ(find(plan, "a", 40).reason, "newest");
  EXPECT_TRUE(find(plan, "b", 10).archive);
  EXPECT_EQ(find(plan, "b", 20).reason, "best");
  EXPECT_FALSE(find(plan, "b", 30).archive);
  EXPECT_NE(find(plan, "b", 30).reason.find("younger"), std::string::npos);
  EXPECT_EQ(find(plan, "b", 40).reason, "newest");
  EXPECT_EQ(find(plan, "b", 50).reason, "incomplete");
  // Even with an age limit of zero the newest and the best stay.
  for (const auto& c : plan_archive(runs, 0)) {
    if (c.step == 40 || (c.run == "a" && c.step == 10) || (c.run == "b" && c.step == 20)) {
      EXPECT_FALSE(c.archive);
    }
  }
}

// A best_mode the newest checkpoint does not record readably keeps the best by either mode.
TEST(Archive, AnUnreadableBestModeKeepsTheBestByEitherMode) {
  test::TempDir dir;
  const std::string runs = dir.file("runs");
  make_checkpoint(runs, "c", 10, 0.1, 200, "'max'");
  make_checkpoint(runs, "c", 20, 0.5, 200, "'max'");
  make_checkpoint(runs, "c", 30, 0.9, 200, "'max'");
  make_checkpoint(runs, "c", 40, 0.6, 200, "'maximum'");  // no mode frugal knows
  const auto plan = plan_archive(runs, 0);
  EXPECT_EQ(find(plan, "c", 10).reason, "best");
  EXPECT_TRUE(find(plan, "c", 20).archive);
  EXPECT_EQ(find(plan, "c", 30).reason, "best");
  EXPECT_EQ(find(plan, "c", 40).reason, "newest");
}

// `frugal archive` on a real run whose best is by max keeps that best one: the run records
// best_mode as the TOML literal 'max', which archive once compared with "max" and so kept the
// best by min instead.
TEST(Archive, ARunsBestByMaxIsKept) {
  test::TempDir dir;
  auto train = test::run_frugal("train -q" + test::tiny_sets(dir.path()) +
                                " --set train.steps=40 --set checkpoint.every_steps=5 --set train.eval_every=10"
                                " --set checkpoint.keep_last=2 --set checkpoint.keep_best=1"
                                " --set checkpoint.best_mode=max");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  const std::vector<CheckpointInfo> listing = list_checkpoints(dir.file("demo/checkpoints"));  // newest first
  ASSERT_FALSE(listing.empty());
  const std::string best = best_checkpoint(listing, MetricMode::kMax);
  ASSERT_NE(best, "");
  ASSERT_NE(best, listing.front().path) << "the test needs a best by max that is not the newest";
  auto dry = test::run_frugal("archive " + dir.path() + " --older-than 0s --to " + dir.file("cold") + " --dry-run");
  EXPECT_EQ(dry.exit_code, 0) << dry.output;
  EXPECT_NE(dry.output.find("keep     " + best + "  (best)"), std::string::npos) << dry.output;
}

// What a killed `frugal archive` (or train) left under checkpoints/ (a whole checkpoint moved aside
// as .trash-*) goes at the next archive; a live process's stays, and so does all of a run that is
// training (its own trainer clears it).
TEST(Archive, DebrisOfKilledProcessesGoesUnlessItsWriterLivesOrItsRunTrains) {
  test::TempDir dir;
  const std::string runs = dir.file("runs");
  make_checkpoint(runs, "a", 10, 0.5, 1);
  const std::string dead = runs + "/a/checkpoints/.trash-step-00000005-4999999-0";  // above any Linux pid
  const std::string live = runs + "/a/checkpoints/.trash-step-00000006-1-0";        // init: alive
  for (const std::string& d : {dead, live}) {
    fs::create_directories(d);
    test::write_text(d + "/model.safetensors", "x");
  }
  {
    DirLock held(runs + "/a");  // as a training run holds it
    EXPECT_TRUE(remove_dead_checkpoint_debris(runs).empty());
    EXPECT_TRUE(fs::exists(dead));
  }
  EXPECT_EQ(remove_dead_checkpoint_debris(runs), std::vector<std::string>{dead});
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_EQ(verify_checkpoint(runs + "/a/checkpoints/step-00000010"), "");
}

// A run that is training (its directory locked by a live process) keeps every checkpoint: its
// retention removes checkpoints meanwhile (archive racing it failed with raw "directory iterator
// cannot open directory"). A checkpoint gone since the plan is skipped, not an error. A killed
// archive's temporary file is removed by the next run, one of a live process is left alone.
TEST(Archive, ALiveRunIsLeftAloneAndWhatVanishesOrWasLeftBehindIsHandled) {
  FRUGAL_NEED_FEATURE("libarchive");
  test::TempDir dir;
  const std::string runs = dir.file("runs");
  make_checkpoint(runs, "live", 10, 0.5, 200);  // the best
  make_checkpoint(runs, "live", 20, 0.9, 150);
  make_checkpoint(runs, "live", 25, 0.95, 120);
  make_checkpoint(runs, "live", 30, 0.8, 100);  // the newest
  {
    DirLock held(runs + "/live");  // as a training run holds it
    const auto plan = plan_archive(runs, 90 * kDay);
    for (const auto& c : plan) {
      EXPECT_FALSE(c.archive) << c.path;
      EXPECT_NE(c.reason.find("training"), std::string::npos) << c.reason;
    }
  }
  auto plan = plan_archive(runs, 90 * kDay);
  const ArchiveCandidate& gone = find(plan, "live", 20);
  ASSERT_TRUE(gone.archive) << gone.reason;
  remove_tree(gone.path);  // the run's retention, between the plan and the archive
  EXPECT_EQ(archive_checkpoint(gone, dir.file("arch")), "");

  const std::string stale = dir.file("arch/live/.tmp-step-00000020-999999999.tar.zst");
  const std::string mine = dir.file("arch/live/.tmp-step-00000020-" + std::to_string(::getpid()) + ".tar.zst");
  test::write_text(stale, std::string(1000, 'x'));
  test::write_text(mine, "in flight");
  const ArchiveCandidate& old = find(plan, "live", 25);
  ASSERT_TRUE(old.archive) << old.reason;
  EXPECT_FALSE(archive_checkpoint(old, dir.file("arch")).empty());
  EXPECT_FALSE(fs::exists(stale)) << "a dead archive's temporary file was left behind";
  EXPECT_TRUE(fs::exists(mine)) << "a live process's temporary file was removed";
}

TEST(Archive, RoundTripRestoresTheCheckpointBitwise) {
  FRUGAL_NEED_FEATURE("libarchive");
  test::TempDir dir;
  const std::string runs = dir.file("runs");
  const std::string old = make_checkpoint(runs, "a", 10, 0.9, 100);
  make_checkpoint(runs, "a", 20, 0.5, 1);
  const auto before = files_of(old);

  const auto plan = plan_archive(runs, 90 * kDay);
  const auto& c = find(plan, "a", 10);
  ASSERT_TRUE(c.archive);
  const std::string arc = archive_checkpoint(c, dir.file("cold"));
  EXPECT_EQ(arc, dir.file("cold") + "/a/step-00000010.tar.zst");
  EXPECT_FALSE(fs::exists(old));
  EXPECT_LT(fs::file_size(arc), 64 * 32 * 4 + 2048 * 4 + 4096);          // compressed tar, not a blow-up
  for (const auto& e : fs::directory_iterator(runs + "/a/checkpoints"))  // no debris left behind
    EXPECT_EQ(e.path().filename().string().rfind('.', 0), std::string::npos) << e.path();

  EXPECT_EQ(restore_checkpoint(arc, runs), old);
  EXPECT_EQ(files_of(old), before);
  EXPECT_EQ(verify_checkpoint(old), "");
  // Restoring again (a rerun over several archives) finds the same checkpoint there: left as it
  // is, said so. One with other files there is never overwritten: bad input (exit 2), named.
  bool already = false;
  EXPECT_EQ(restore_checkpoint(arc, runs, &already), old);
  EXPECT_TRUE(already);
  EXPECT_EQ(files_of(old), before);
  test::write_text(old + "/COMPLETE", test::read_text(old + "/COMPLETE") + " ");
  try {
    restore_checkpoint(arc, runs);
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
  }
  remove_tree(old);
  EXPECT_EQ(restore_checkpoint(arc, runs), old);
  // A rerun after a kill between the archive's rename and the checkpoint's removal finds an
  // archive that holds exactly the checkpoint's files: it completes the move.
  EXPECT_EQ(archive_checkpoint(c, dir.file("cold")), arc);
  EXPECT_FALSE(fs::exists(old));
  EXPECT_EQ(restore_checkpoint(arc, runs), old);
  // An archive there that does not hold these files is refused and the checkpoint stays.
  const std::string good_archive = test::read_text(arc);
  test::write_text(arc, good_archive.substr(0, good_archive.size() / 2));
  try {
    archive_checkpoint(c, dir.file("cold"));
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("left in place"), std::string::npos) << e.what();
  }
  EXPECT_EQ(verify_checkpoint(old), "");
}

// An archive unpacked and repacked by plain tar ("./" prefixes, directory entries) restores.
TEST(Archive, ARepackByPlainTarRestores) {
  FRUGAL_NEED_FEATURE("libarchive");
  if (std::system("tar --version >/dev/null 2>&1 && zstd --version >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs tar and zstd on PATH";
  test::TempDir dir;
  const std::string runs = dir.file("runs");
  const std::string old = make_checkpoint(runs, "a", 10, 0.9, 100);
  make_checkpoint(runs, "a", 20, 0.5, 1);
  const auto before = files_of(old);
  const std::string arc = archive_checkpoint(find(plan_archive(runs, 90 * kDay), "a", 10), dir.file("cold"));
  fs::create_directories(dir.file("x"));
  const std::string repacked = dir.file("repacked.tar.zst");
  ASSERT_EQ(std::system(("tar --zstd -xf '" + arc + "' -C '" + dir.file("x") + "' && tar --zstd -C '" + dir.file("x") +
                         "' -cf '" + repacked + "' .")
                            .c_str()),
            0);
  EXPECT_EQ(restore_checkpoint(repacked, runs), old);
  EXPECT_EQ(files_of(old), before);
}

#if FRUGAL_HAVE_LIBARCHIVE
// Writes a .tar.zst of regular files (name, content), as a forger would.
void write_archive(const std::string& path, const std::vector<std::pair<std::string, std::string>>& files) {
  struct archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_add_filter_zstd(a);
  archive_write_open_filename(a, path.c_str());
  for (const auto& [name, data] : files) {
    struct archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
    archive_write_header(a, e);
    archive_write_data(a, data.data(), data.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
}

// Archives no `frugal archive` writes are refused by what is wrong, before anything lands: 16,000
// members (each extracted took 112 s in all), a 100 KB member name (exit 1 from the file system),
// a meta file of another version. A killed restore's staging folder goes at the next restore; a
// live process's stays.
TEST(Archive, RestoreRefusesForgedArchivesAndClearsWhatKilledRestoresLeft) {
  test::TempDir dir;
  const std::string runs = dir.file("runs");
  auto refused = [&](const std::string& arc, const std::string& why) {
    try {
      restore_checkpoint(arc, runs);
      ADD_FAILURE() << arc << " was restored";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  std::vector<std::pair<std::string, std::string>> many;
  for (int i = 0; i < 1000; ++i) many.emplace_back(fmt::format("step-00000010/f{}", i), "");
  write_archive(dir.file("many.tar.zst"), many);
  refused(dir.file("many.tar.zst"), "holds more than 64 members");
  write_archive(dir.file("long.tar.zst"), {{"step-00000010/" + std::string(100000, 'x'), "1"}});
  refused(dir.file("long.tar.zst"), "holds a member name of 100014 bytes");
  const nlohmann::json meta = {
      {"format", "frugal-checkpoint-archive"}, {"version", 2}, {"run", "a"}, {"checkpoint", "step-00000010"}};
  write_archive(dir.file("v2.tar.zst"), {{"frugal-archive.json", meta.dump()}});
  refused(dir.file("v2.tar.zst"), "is a checkpoint archive of version 2; this frugal restores version 1");
  EXPECT_FALSE(fs::exists(runs + "/a"));

  fs::create_directories(runs + "/.tmp-restore-4999999/step-00000010");  // above any Linux pid: dead
  fs::create_directories(runs + "/.tmp-restore-1");                      // init: alive
  make_checkpoint(runs, "a", 10, 0.9, 100);
  make_checkpoint(runs, "a", 20, 0.5, 1);
  const std::string arc = archive_checkpoint(find(plan_archive(runs, 0), "a", 10), dir.file("cold"));
  EXPECT_NE(restore_checkpoint(arc, runs), "");
  EXPECT_FALSE(fs::exists(runs + "/.tmp-restore-4999999"));
  EXPECT_TRUE(fs::exists(runs + "/.tmp-restore-1"));
}

// A hand-made archive whose member escapes the staging directory.
TEST(Archive, RestoreRejectsUnsafeMemberNamesAndDamage) {
  test::TempDir dir;
  const std::string evil = dir.file("evil.tar.zst");
  {
    struct archive* a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    archive_write_add_filter_zstd(a);
    archive_write_open_filename(a, evil.c_str());
    struct archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, "../../outside.txt");
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, 2);
    archive_write_header(a, e);
    archive_write_data(a, "hi", 2);
    archive_entry_free(e);
    archive_write_close(a);
    archive_write_free(a);
  }
  try {
    restore_checkpoint(evil, dir.file("runs"));
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("unsafe member name \"../../outside.txt\""), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.path() + "/../outside.txt"));

  const std::string runs = dir.file("runs");
  make_checkpoint(runs, "a", 10, 0.9, 100);
  make_checkpoint(runs, "a", 20, 0.5, 1);
  const std::string arc = archive_checkpoint(find(plan_archive(runs, 0), "a", 10), dir.file("cold"));
  const std::string cut = dir.file("cut.tar.zst");
  test::write_text(cut, test::read_text(arc).substr(0, fs::file_size(arc) / 2));
  EXPECT_THROW(restore_checkpoint(cut, dir.file("runs2")), CheckpointError);
  EXPECT_FALSE(fs::exists(dir.file("runs2") + "/a"));
}
#endif

TEST(Archive, CliDryRunChangesNothingAndRealRunPrintsRestoreCommand) {
  FRUGAL_NEED_FEATURE("libarchive");
  test::TempDir dir;
  const std::string runs = dir.file("runs");
  make_checkpoint(runs, "a", 10, 0.9, 100);
  make_checkpoint(runs, "a", 20, 0.5, 100);
  make_checkpoint(runs, "a", 30, 0.7, 100);
  const std::string trash = runs + "/a/checkpoints/.trash-step-00000040-4999999-0";  // a killed archive's
  fs::create_directories(trash);
  test::write_text(trash + "/model.safetensors", "x");
  auto dry = test::run_frugal("archive " + runs + " --older-than 90d --to " + dir.file("cold") + " --dry-run");
  EXPECT_EQ(dry.exit_code, 0) << dry.output;
  EXPECT_NE(dry.output.find("would archive " + runs + "/a/checkpoints/step-00000010"), std::string::npos) << dry.output;
  EXPECT_NE(dry.output.find("keep     " + runs + "/a/checkpoints/step-00000020  (best)"), std::string::npos)
      << dry.output;
  EXPECT_TRUE(fs::exists(runs + "/a/checkpoints/step-00000010/COMPLETE"));
  EXPECT_FALSE(fs::exists(dir.file("cold")));
  EXPECT_TRUE(fs::exists(trash));

  auto bad = test::run_frugal("archive " + runs + " --older-than 3 --to " + dir.file("cold"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--older-than \"3\""), std::string::npos) << bad.output;

  auto real = test::run_frugal("archive " + runs + " --older-than 90d --to " + dir.file("cold"));
  EXPECT_EQ(real.exit_code, 0) << real.output;
  const std::string arc = dir.file("cold") + "/a/step-00000010.tar.zst";
  EXPECT_NE(real.output.find("restore: frugal restore " + arc), std::string::npos) << real.output;
  EXPECT_FALSE(fs::exists(runs + "/a/checkpoints/step-00000010"));
  EXPECT_FALSE(fs::exists(trash)) << "a killed archive's half-removed checkpoint was left behind";
  EXPECT_NE(real.output.find("removed  " + trash), std::string::npos) << real.output;
  auto back = test::run_frugal("restore " + arc + " --runs " + runs);
  EXPECT_EQ(back.exit_code, 0) << back.output;
  EXPECT_EQ(verify_checkpoint(runs + "/a/checkpoints/step-00000010"), "");
  // A rerun finds it there, the same: said, and the rest of the list goes on.
  auto again = test::run_frugal("restore " + arc + " --runs " + runs);
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("already restored " + arc), std::string::npos) << again.output;
  // Another checkpoint of that name there (its files changed): never overwritten, bad input.
  test::write_text(runs + "/a/checkpoints/step-00000010/COMPLETE", "changed\n");
  auto other = test::run_frugal("restore " + arc + " --runs " + runs);
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("already exists"), std::string::npos) << other.output;
}

}  // namespace
}  // namespace frugal::archive_test
