// Local process launcher; see launcher.h.
#include "frugal/dist/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "frugal/core/errors.h"
#include "frugal/core/exit_code.h"
#include "frugal/core/wall_clock.h"

namespace frugal::dist {
namespace {

std::atomic<int> g_pending_signal{0};
void remember_signal(int sig) { g_pending_signal.store(sig); }

struct Child {
  int64_t rank = 0;
  pid_t pid = -1;
  bool done = false;
  int code = 0;  // exit code, or 128 + signal
};

std::string describe_status(int status) {
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("exited with code {}", WEXITSTATUS(status));
}

// Whether `host` names this machine: localhost, this host's name, or an IPv4 address of it (a
// socket binds to it: 127.x.x.x, an interface's). Another name is not resolved: false.
bool is_this_host(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0 && host == name) return true;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return false;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool local = bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;  // port 0: any
  close(fd);
  return local;
}

// 0 when rank 0's rendezvous store could listen on `port` here, else the errno. As the store does
// (c10d's TCPStore, libuv): any IPv4 address, SO_REUSEADDR (a port in TIME_WAIT is free), listen.
int port_error(int64_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;  // no socket to try with: rank 0 will tell
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int err = 0;
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 1) != 0) err = errno;
  close(fd);
  return err;
}

// On the node of rank 0, a port another program holds would fail rank 0 at once and leave the
// others waiting out dist.timeout_s: refused before any rank starts, with a free port to use.
void check_port_free(const LaunchOptions& o) {
  if (o.node_rank != 0 || !is_this_host(o.master_addr)) return;
  const int err = port_error(o.master_port);
  if (err == 0) return;
  std::string instead;
  for (int64_t p = o.master_port + 1; p <= 65535 && p < o.master_port + 100 && instead.empty(); ++p)
    if (port_error(p) == 0) instead = fmt::format(", e.g. --port {}", p);
  if (err == EADDRINUSE)
    throw ConfigError(
        fmt::format("frugal launch: port {} (--port) is in use on this machine: another program, or a run still going, "
                    "listens on it; pick another with --port{}",
                    o.master_port, instead));
  throw ConfigError(
      fmt::format("frugal launch: port {} (--port) cannot be listened on here: {}; pick another with --port{}",
                  o.master_port, std::strerror(err), instead));
}

// A rank's whole process group: a rank that is a script has its own children (a shell's sleep, a
// Python wrapper's frugal), which a signal to the rank's process alone would leave running, holding
// the job's output open. The rank alone where its group is gone.
void signal_rank(const Child& c, int sig) {
  if (kill(-c.pid, sig) != 0) kill(c.pid, sig);
}

// Forks rank node_rank x procs_per_node + local and runs `exe` in it with torchrun's variables;
// the child gets its own process group, so a Ctrl-C reaches the launcher only, which forwards it once.
// A launcher that dies without forwarding anything (SIGKILL, the OOM killer) still stops its ranks:
// each gets SIGTERM (it checkpoints and exits 75) instead of training on, an orphan holding the
// rendezvous port that the resume needs.
Child start_rank(const LaunchOptions& o, const std::string& exe, int64_t local, int64_t world,
                 const std::string& threads, bool hangup_ignored) {
  Child c;
  c.rank = o.node_rank * o.procs_per_node + local;
  std::fflush(nullptr);
  const pid_t launcher = getpid();
  c.pid = fork();
  if (c.pid < 0) throw Error(fmt::format("frugal launch: fork failed: {}", std::strerror(errno)));
  if (c.pid > 0) setpgid(c.pid, c.pid);  // also here: a signal may come before the child ran its own
  if (c.pid == 0) {
    setpgid(0, 0);
    for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGPIPE}) signal(sig, SIG_DFL);
    signal(SIGHUP, hangup_ignored ? SIG_IGN : SIG_DFL);  // `nohup frugal launch`: the ranks too
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != launcher) _exit(75);  // the launcher died before the line above: do not train
    setenv("RANK", std::to_string(c.rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
    setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
    setenv("LOCAL_WORLD_SIZE", std::to_string(o.procs_per_node).c_str(), 1);
    setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
    setenv("MASTER_PORT", std::to_string(o.master_port).c_str(), 1);
    setenv("FRUGAL_RUN_THREADS", threads.c_str(), 0);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(exe.c_str()));
    for (const auto& a : o.args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    std::fprintf(stderr, "frugal launch: cannot run %s: %s\n", exe.c_str(), std::strerror(errno));
    _exit(127);
  }
  return c;
}

}  // namespace

int launch(const LaunchOptions& o, const std::string& exe) {
  if (o.procs_per_node < 1 || o.nodes < 1 || o.node_rank < 0 || o.node_rank >= o.nodes)
    throw ConfigError(
        fmt::format("frugal launch: need -n >= 1, --nodes >= 1 and 0 <= --node-rank < --nodes "
                    "(got -n {}, --nodes {}, --node-rank {})",
                    o.procs_per_node, o.nodes, o.node_rank));
  if (o.args.empty()) throw ConfigError("frugal launch: no command; e.g. frugal launch -n 2 -- train my.toml");
  check_port_free(o);
  const int64_t world = o.procs_per_node * o.nodes;
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  const std::string threads = std::to_string(std::max<long>(1, cores / o.procs_per_node));

  struct sigaction sa {};
  sa.sa_handler = remember_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1}) sigaction(sig, &sa, nullptr);
  // Under `nohup` a hang-up stays ignored, here and in the ranks; else it is forwarded as a stop.
  struct sigaction hup {};
  const bool hangup_ignored = sigaction(SIGHUP, nullptr, &hup) == 0 && hup.sa_handler == SIG_IGN;
  if (!hangup_ignored) sigaction(SIGHUP, &sa, nullptr);
  // A closed log pipe (`frugal launch ... | tee log` when the session drops) must not end the
  // launcher while its ranks checkpoint: its writes fail quietly instead.
  signal(SIGPIPE, SIG_IGN);

  std::vector<Child> children;
  for (int64_t local = 0; local < o.procs_per_node; ++local) {
    children.push_back(start_rank(o, exe, local, world, threads, hangup_ignored));
  }
  std::fprintf(stderr, "frugal launch: started %lld process(es) (ranks %lld..%lld of %lld), master %s:%lld\n",
               static_cast<long long>(o.procs_per_node), static_cast<long long>(children.front().rank),
               static_cast<long long>(children.back().rank), static_cast<long long>(world), o.master_addr.c_str(),
               static_cast<long long>(o.master_port));

  using Clock = std::chrono::steady_clock;
  const Child* first_failure = nullptr;
  const Child* bad_input = nullptr;  // the first rank that refused its input (exit 2)
  Clock::time_point failed_at;
  bool termed = false, killed = false;
  size_t running = children.size();
  while (running > 0) {
    if (int sig = g_pending_signal.exchange(0); sig != 0) {
      for (auto& c : children)
        if (!c.done) signal_rank(c, sig);
    }
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (auto& c : children) {
        if (c.pid != pid) continue;
        c.done = true;
        --running;
        c.code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
        const bool failed = !(WIFEXITED(status) &&
                              (c.code == exit_status(ExitCode::kDone) || c.code == exit_status(ExitCode::kPreempted)));
        if (failed && !bad_input && WIFEXITED(status) && c.code == exit_status(ExitCode::kBadInput)) bad_input = &c;
        if (failed && !first_failure) {
          first_failure = &c;
          failed_at = Clock::now();
          std::fprintf(
              stderr, "frugal launch: rank %lld (pid %d) %s; waiting up to %.0f s for the other ranks to stop\n",
              static_cast<long long>(c.rank), static_cast<int>(c.pid), describe_status(status).c_str(), o.grace_s);
        } else if (failed) {
          std::fprintf(stderr, "frugal launch: rank %lld (pid %d) %s\n", static_cast<long long>(c.rank),
                       static_cast<int>(c.pid), describe_status(status).c_str());
        }
      }
      continue;
    }
    if (first_failure) {
      const double waited = seconds_since(failed_at);
      if (!termed && waited > o.grace_s) {
        for (auto& c : children)
          if (!c.done) signal_rank(c, SIGTERM);
        termed = true;
      } else if (!killed && waited > o.grace_s + 10) {
        for (auto& c : children)
          if (!c.done) signal_rank(c, SIGKILL);
        killed = true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGPIPE}) signal(sig, SIG_DFL);
  if (!hangup_ignored) signal(SIGHUP, SIG_DFL);
  // Bad input on one rank (a config or run directory only rank 0 checks) makes the others fail at
  // their next collective, and either may exit first: the cause's code, whichever came first.
  if (bad_input && bad_input != first_failure)
    std::fprintf(stderr, "frugal launch: exit code 2 (bad input) as rank %lld's; the other failures follow from it\n",
                 static_cast<long long>(bad_input->rank));
  if (bad_input) return bad_input->code;
  if (first_failure) return first_failure->code;
  for (const auto& c : children)
    if (c.code == exit_status(ExitCode::kPreempted)) return c.code;
  return exit_status(ExitCode::kDone);
}

}  // namespace frugal::dist
