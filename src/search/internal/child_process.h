// Child processes of `frugal search`: each trial-rung is a `frugal train` process with its output
// in a log file. A child gets SIGTERM when the search process dies (PR_SET_PDEATHSIG), so a
// search killed outright does not leave trials training on: they checkpoint and exit 75, and the
// resumed search continues them.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace frugal::detail {

// Starts `exe args...` with stdin from /dev/null and stdout and stderr appended to log_path. Throws
// IoError when the log cannot be opened or the process cannot be created.
pid_t spawn_logged(const std::string& exe, const std::vector<std::string>& args, const std::string& log_path);

// The child's wait status when it has ended (reaped), nullopt while it runs.
std::optional<int> poll_child(pid_t pid);

// Waits for the child to end and returns its wait status.
int wait_child(pid_t pid);

// "exit 3", "killed by signal 9 (Killed)": a wait status for people.
std::string describe_status(int status);

// The last `lines` non-empty lines of a text file ("" when it cannot be read).
std::string tail_lines(const std::string& path, int lines);

}  // namespace frugal::detail
