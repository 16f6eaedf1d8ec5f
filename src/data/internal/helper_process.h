// The helper processes of the tokenisers (tokenizer.cpp: frugal-spm, and Python running
// frugal_hf_tokenizer.py): started without a shell, and ended with the process that started them.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace frugal::detail {

// Starts `exe args...` (no shell) with stdout and stderr sent to files and `extra_env` added to
// this process's environment; returns its pid, or sets *error to the errno of what failed (the
// fork, a file, the exec) and returns 0. The child dies with this process (PR_SET_PDEATHSIG,
// SIGTERM): a prepare killed with SIGTERM or SIGKILL leaves no helper running on. The signal
// follows the thread that started the child: wait for it (wait_process) on that thread.
pid_t spawn_process(const std::string& exe, const std::vector<std::string>& args, const std::string& out_file,
                    const std::string& err_file, const std::vector<std::string>& extra_env, int* error);

// Waits for `pid`; returns when it exited 0, else throws with the helper's stderr (`err_file`) as
// "<what> failed: ...": ConfigError for exit status 3 (frugal_hf_tokenizer.py's "a package is
// missing"), DataError otherwise.
void wait_process(pid_t pid, const std::string& err_file, const std::string& what);

}  // namespace frugal::detail
