// Helper processes of the tokenisers; see internal/helper_process.h.
#include "data/internal/helper_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <utility>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"

extern char** environ;

namespace frugal::detail {

namespace {

// Writes the errno `e` to `fd` and exits: a child that could not start its program (async-signal-safe).
[[noreturn]] void report_and_exit(int fd, int e) {
  [[maybe_unused]] const ssize_t n = ::write(fd, &e, sizeof e);
  ::_exit(127);
}

}  // namespace

pid_t spawn_process(const std::string& exe, const std::vector<std::string>& args, const std::string& out_file,
                    const std::string& err_file, const std::vector<std::string>& extra_env, int* error) {
  std::vector<char*> argv{const_cast<char*>(exe.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e; ++e) envp.push_back(*e);
  for (const auto& e : extra_env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const std::pair<int, const char*> redirect[] = {{1, out_file.c_str()}, {2, err_file.c_str()}};
  int report[2];  // the child's errno when it cannot exec; closed by a successful exec
  if (::pipe2(report, O_CLOEXEC) != 0) {
    *error = errno;
    return 0;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {  // the child: async-signal-safe calls only, then exec
    ::close(report[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(75);  // this process died before the line above
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGTERM, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (const auto& [fd, file] : redirect) {
      const int f = ::open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (f < 0 || ::dup2(f, fd) < 0) report_and_exit(report[1], errno);
      ::close(f);
    }
    ::execve(exe.c_str(), argv.data(), envp.data());
    report_and_exit(report[1], errno);
  }
  const int fork_error = errno;
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    *error = fork_error;
    return 0;
  }
  int child_error = 0;
  ssize_t n;
  while ((n = ::read(report[0], &child_error, sizeof child_error)) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  *error = n == static_cast<ssize_t>(sizeof child_error) ? child_error : 0;
  if (*error != 0) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return 0;
  }
  return pid;
}

void wait_process(pid_t pid, const std::string& err_file, const std::string& what) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  std::string err;
  try {
    err = read_file(err_file);
  } catch (const IoError&) {
  }
  while (!err.empty() && err.back() == '\n') err.pop_back();
  // frugal_hf_tokenizer.py's "a package is missing" (frugal-spm exits 0 or 1).
  if (WIFEXITED(status) && WEXITSTATUS(status) == 3) throw ConfigError(fmt::format("{} failed: {}", what, err));
  throw DataError(fmt::format("{} failed: {}", what, err.empty() ? "no message" : err));
}

}  // namespace frugal::detail
