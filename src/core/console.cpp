// Console; see console.h.
#include "frugal/core/console.h"

#include <unistd.h>

#include <cstdio>
#include <mutex>

namespace frugal {
namespace {
std::mutex g_console_mu;
}

Console& Console::get() {
  static Console c;
  return c;
}

Console::Console() : tty_(::isatty(STDOUT_FILENO) == 1) {}

void Console::line(const std::string& text) {
  if (quiet_) return;
  std::lock_guard<std::mutex> lock(g_console_mu);
  std::FILE* out = json_mode_ ? stderr : stdout;
  if (status_shown_) std::fputs("\r\033[K", stdout);
  std::fputs(text.c_str(), out);
  std::fputc('\n', out);
  status_shown_ = false;
  std::fflush(out);
}

void Console::json(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_console_mu);
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void Console::status(const std::string& text) {
  if (quiet_ || !tty_ || json_mode_) return;
  std::lock_guard<std::mutex> lock(g_console_mu);
  std::fputs("\r\033[K", stdout);
  std::fputs(text.c_str(), stdout);
  status_shown_ = true;
  std::fflush(stdout);
}

void Console::finish_status() {
  std::lock_guard<std::mutex> lock(g_console_mu);
  if (status_shown_) std::fputc('\n', stdout);
  status_shown_ = false;
  std::fflush(stdout);
}

std::string shell_word(const std::string& word) {
  const bool safe = !word.empty() && word.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789_-./:=,+@%") == std::string::npos;
  if (safe) return word;
  std::string out = "'";
  for (char ch : word) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

}  // namespace frugal
