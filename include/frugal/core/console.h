// Terminal output shared by the progress display and log lines. On a TTY a status line is
// redrawn in place and log lines print above it; otherwise only log lines are printed, plainly.
// Thread-safe.
#pragma once

#include <string>

namespace frugal {

class Console {
 public:
  static Console& get();
  bool is_tty() const { return tty_; }
  void set_quiet(bool q) { quiet_ = q; }
  bool quiet() const { return quiet_; }
  // A permanent line (ends with a newline).
  void line(const std::string& text);
  // The transient status line (TTY only; ignored otherwise).
  void status(const std::string& text);
  // Ends the status line so later output starts on a fresh line.
  void finish_status();
  // Machine-readable mode (`frugal train --json`): human lines go to stderr, stdout carries only
  // json() lines.
  void set_json_mode(bool on) { json_mode_ = on; }
  bool json_mode() const { return json_mode_; }
  // One line of JSON on stdout (also when quiet).
  void json(const std::string& line);

 private:
  Console();
  bool tty_;
  bool quiet_ = false;
  bool status_shown_ = false;
  bool json_mode_ = false;
};

// A word as a POSIX shell reads it back unchanged: as it is when it holds only safe characters
// (letters, digits, and _ - . / : = , + @ %), else in single quotes. Every printed command hint
// quotes its words with it, so that a user can paste the hint verbatim.
std::string shell_word(const std::string& word);

}  // namespace frugal
