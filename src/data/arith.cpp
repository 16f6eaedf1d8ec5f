// builtin:arith generator; see arith.h.
#include "frugal/data/arith.h"

#include <algorithm>
#include <random>

#include "frugal/data/rng.h"

namespace frugal {

std::string ArithProblem::prompt() const { return std::to_string(a) + "+" + std::to_string(b) + "="; }
std::string ArithProblem::answer() const { return std::to_string(a + b); }
std::string ArithProblem::line() const { return prompt() + answer() + "\n"; }

ArithTask::ArithTask(int64_t digits) : limit_(1) {
  for (int64_t i = 0; i < digits; ++i) limit_ *= 10;
}

bool ArithTask::is_held_out(int64_t a, int64_t b) {
  return splitmix64(static_cast<uint64_t>(a) * 0x1000003ULL + static_cast<uint64_t>(b)) % 10 == 0;
}

std::string ArithTask::train_text(int64_t lines, uint64_t seed) const {
  std::mt19937_64 rng(splitmix64(seed ^ 0xa417c0deULL));
  std::uniform_int_distribution<int64_t> operand(0, limit_ - 1);
  std::string out;
  out.reserve(static_cast<size_t>(lines) * 12);
  for (int64_t i = 0; i < lines;) {
    ArithProblem p{operand(rng), operand(rng)};
    if (is_held_out(p.a, p.b)) continue;
    out += p.line();
    ++i;
  }
  return out;
}

std::vector<ArithProblem> ArithTask::held_out(int64_t count, uint64_t seed) const {
  std::vector<ArithProblem> all;
  for (int64_t a = 0; a < limit_ && limit_ <= 10000; ++a)
    for (int64_t b = 0; b < limit_; ++b)
      if (is_held_out(a, b)) all.push_back({a, b});
  std::mt19937_64 rng(splitmix64(seed ^ 0x4e1dULL));
  if (!all.empty()) {
    std::shuffle(all.begin(), all.end(), rng);
    if (static_cast<int64_t>(all.size()) > count) all.resize(static_cast<size_t>(count));
    return all;
  }
  // Too many pairs to enumerate: rejection-sample distinct held-out problems.
  std::uniform_int_distribution<int64_t> operand(0, limit_ - 1);
  for (int64_t tries = 0; static_cast<int64_t>(all.size()) < count && tries < count * 1000; ++tries) {
    ArithProblem p{operand(rng), operand(rng)};
    if (!is_held_out(p.a, p.b)) continue;
    bool seen = std::any_of(all.begin(), all.end(), [&](const ArithProblem& q) { return q.a == p.a && q.b == p.b; });
    if (!seen) all.push_back(p);
  }
  return all;
}

}  // namespace frugal
