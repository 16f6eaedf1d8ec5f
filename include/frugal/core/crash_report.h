// What a process says when it dies of a bug: a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE)
// prints its name, where to report it and a backtrace to standard error, then the process dies of
// the same signal (same exit status and core dump as without the report).
#pragma once

namespace frugal {

// Installs the report for `program` (the name it prints). Idempotent; call early in main.
void install_crash_report(const char* program);

}  // namespace frugal
