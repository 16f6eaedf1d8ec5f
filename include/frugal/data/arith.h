// builtin:arith — a deterministic, seeded generator of addition problems, one per line:
//
//   line    := operand "+" operand "=" sum "\n"
//   operand := a decimal integer in [0, 10^digits), no leading zeros
//
// A fixed tenth of all (a, b) pairs, chosen by a hash of the pair (not by the seed), is held out:
// those problems never appear in the training text, so answer_accuracy measures generalisation.
// docs/data.md documents the grammar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace frugal {

struct ArithProblem {
  int64_t a = 0;
  int64_t b = 0;
  std::string prompt() const;  // "a+b="
  std::string answer() const;  // "c"
  std::string line() const;    // "a+b=c\n"
};

class ArithTask {
 public:
  explicit ArithTask(int64_t digits);

  // True for the held-out tenth of problems; the same for every seed.
  static bool is_held_out(int64_t a, int64_t b);

  // `lines` training problems drawn uniformly (with replacement) from the non-held-out pairs.
  std::string train_text(int64_t lines, uint64_t seed) const;
  // Up to `count` distinct held-out problems in a seeded order.
  std::vector<ArithProblem> held_out(int64_t count, uint64_t seed) const;

  int64_t limit() const { return limit_; }

 private:
  int64_t limit_;  // operands are in [0, limit_)
};

}  // namespace frugal
