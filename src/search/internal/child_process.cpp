// Child processes of `frugal search`; see child_process.h.
#include "search/internal/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "frugal/core/errors.h"

namespace frugal::detail {

pid_t spawn_logged(const std::string& exe, const std::vector<std::string>& args, const std::string& log_path) {
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) throw IoError(fmt::format("cannot open {}: {}", log_path, std::strerror(errno)));
  std::vector<std::string> argv_text = {exe};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(log);
    throw IoError(fmt::format("cannot start a trial process ({}): {}", exe, std::strerror(err)));
  }
  if (pid == 0) {  // the child: async-signal-safe calls only, then exec
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(75);  // the search died before the line above: do not train
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int in = ::open("/dev/null", O_RDONLY);
    if (in >= 0) ::dup2(in, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::execv(exe.c_str(), argv.data());
    static const char kMsg[] = "frugal search: cannot execute the trainer\n";
    [[maybe_unused]] ssize_t n = ::write(2, kMsg, sizeof(kMsg) - 1);
    ::_exit(127);
  }
  ::close(log);
  return pid;
}

std::optional<int> poll_child(pid_t pid) {
  int status = 0;
  pid_t r;
  do r = ::waitpid(pid, &status, WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == 0) return std::nullopt;
  if (r < 0) throw IoError(fmt::format("waitpid({}): {}", pid, std::strerror(errno)));
  return status;
}

int wait_child(pid_t pid) {
  int status = 0;
  pid_t r;
  do r = ::waitpid(pid, &status, 0);
  while (r < 0 && errno == EINTR);
  if (r < 0) throw IoError(fmt::format("waitpid({}): {}", pid, std::strerror(errno)));
  return status;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("wait status {}", status);
}

std::string tail_lines(const std::string& path, int lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > static_cast<size_t>(lines) ? all.size() - static_cast<size_t>(lines) : 0; i < all.size();
       ++i)
    out += (out.empty() ? "" : "\n") + all[i];
  return out;
}

}  // namespace frugal::detail
