// `frugal`: parse the command line, run one subcommand, map errors to exit codes.
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "frugal/core/console.h"
#include "frugal/core/crash_report.h"
#include "frugal/core/errors.h"
#include "frugal/core/exit_code.h"
#include "frugal/core/omp_env.h"
#include "frugal/train/preemption.h"

namespace {
// `frugal train`: a stop signal must mean exit 75 from the process's first moments. The libraries'
// static initializers run before main (LibTorch's take ~0.3 s), so the stop signals are blocked
// here, in the executable's .preinit_array, which the dynamic loader runs after mapping the
// libraries and before any of their initializers (~25 ms after exec): a signal in between stays
// pending until main has installed the handlers. FRUGAL_FAULT_SIGNAL_AT_START=1 (tests) sends this
// process a SIGTERM right here.
void hold_stop_signals(int argc, char** argv, char** envp) {
  if (argc < 2 || std::strcmp(argv[1], "train") != 0) return;
  sigset_t stops;
  sigemptyset(&stops);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGHUP}) sigaddset(&stops, sig);
  sigprocmask(SIG_BLOCK, &stops, nullptr);
  for (char** e = envp; e && *e; ++e)
    if (std::strcmp(*e, "FRUGAL_FAULT_SIGNAL_AT_START=1") == 0) ::raise(SIGTERM);
}
__attribute__((section(".preinit_array"), used)) void (*const kHoldStopSignals)(int, char**,
                                                                                char**) = hold_stop_signals;
}  // namespace

int main(int argc, char** argv) {
  using namespace frugal;
  install_crash_report("frugal");
  // `frugal train`: a stop signal from the first moment on is a preemption (exit 75, resumable),
  // not a kill (143). The signals are blocked across the OpenMP re-exec (a blocked signal stays
  // pending through exec), then caught; the trainer checks the flag before its first step.
  const bool train = argc > 1 && std::string(argv[1]) == "train";
  sigset_t stops;
  sigemptyset(&stops);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGHUP}) sigaddset(&stops, sig);
  if (train) sigprocmask(SIG_BLOCK, &stops, nullptr);
  choose_openmp_wait_policy(argv);
  std::unique_ptr<SignalHandlers> early_signals;
  if (train) {
    // A log reader that went away (`frugal train ... | tee log` over an ssh session that dropped)
    // must not kill the run before its checkpoint: writes to it fail quietly instead (EPIPE).
    std::signal(SIGPIPE, SIG_IGN);
    early_signals = std::make_unique<SignalHandlers>();
    sigprocmask(SIG_UNBLOCK, &stops, nullptr);
  }
  CLI::App app{
      "frugal: cheaper deep-learning training. Every cost lever is one config switch, measured.\n"
      "Exit codes: 0 done, 2 bad input, 3 stopped by a guard, 75 preempted (resumable)."};
  app.require_subcommand(1);
  app.set_version_flag("--version", FRUGAL_VERSION);
  cli::Run run;
  cli::add_train_command(app, &run);
  cli::add_sample_command(app, &run);
  cli::add_export_command(app, &run);
  cli::add_doctor_command(app, &run);
  cli::add_config_command(app, &run);
  cli::add_report_commands(app, &run);
  cli::add_smoke_command(app, &run);
  cli::add_prepare_command(app, &run);
  cli::add_inspect_command(app, &run);
  cli::add_archive_commands(app, &run);
  cli::add_launch_command(app, &run);
  cli::add_help_command(app, &run);
  cli::add_tune_command(app, &run);
  cli::add_plan_command(app, &run);
  cli::add_search_command(app, &run);
  // Words the parser would misread (an unknown option taken for a file name, say) are named first.
  if (const std::string bad = cli::unknown_words_message(app, std::vector<std::string>(argv + 1, argv + argc));
      !bad.empty()) {
    std::fprintf(stderr, "frugal: %s\n", bad.c_str());
    return exit_status(ExitCode::kBadInput);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return exit_status(ExitCode::kBadInput);
  }
  auto fail = [](const std::string& what, const std::exception& e) {
    Console::get().finish_status();
    std::fprintf(stderr, "frugal: %s: %s\n", error_label(e), what.c_str());
    if (const std::string advice = error_advice(e); !advice.empty())
      std::fprintf(stderr, "frugal: %s\n", advice.c_str());
    return exit_status(exit_code_for(e));
  };
  // `frugal train`: once the run is over its exit code is decided, and a stop signal during the
  // exit (LibTorch's teardown takes a while) must not turn a 3 or a 0 into 143. The early handlers
  // stay installed to the end (released, not restored) and the stop signals are ignored from here.
  // FRUGAL_FAULT_SIGNAL_AT_EXIT=1 (tests) sends this process a SIGTERM after main has returned.
  auto finish = [&](int code) {
    if (train) {
      (void)early_signals.release();  // kept installed until the process ends
      for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGHUP}) std::signal(sig, SIG_IGN);
      if (const char* f = std::getenv("FRUGAL_FAULT_SIGNAL_AT_EXIT"); f && std::string(f) == "1")
        std::atexit([] { ::raise(SIGTERM); });
    }
    return code;
  };
  try {
    return finish(run());
  } catch (const std::filesystem::filesystem_error& e) {
    // The library's text ("filesystem error: status: ... [path]") says neither what the path is
    // nor what to do. A path that cannot be used as given (a loop of symbolic links, a name too
    // long, a file where a directory should be, no permission) is bad input.
    const int code = e.code().value();
    const bool bad_path = code == ELOOP || code == ENAMETOOLONG || code == ENOTDIR || code == EACCES;
    std::string what = fmt::format("the path {} cannot be used: {}", e.path1().string(), e.code().message());
    if (!e.path2().empty()) what += fmt::format(" (with {})", e.path2().string());
    if (bad_path) what += "; check the paths in the config and on the command line";
    return finish(bad_path ? fail(what, DataError(what)) : fail(what, IoError(what, code)));
  } catch (const c10::Error& e) {
    return finish(fail(e.what_without_backtrace(), e));
  } catch (const std::exception& e) {
    return finish(fail(e.what(), e));
  }
}
