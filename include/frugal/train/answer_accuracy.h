// Exact-match accuracy of greedy completions on held-out builtin:arith problems: the prompt
// "\n<a>+<b>=" is completed until a newline, and the text before it must equal a+b.
#pragma once

#include <cstdint>

#include "frugal/core/config.h"
#include "frugal/model/causal_lm.h"

namespace frugal {

struct AnswerAccuracy {
  int64_t correct = 0;
  int64_t total = 0;
  double fraction() const { return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0; }
};

AnswerAccuracy arith_answer_accuracy(CausalLm& model, const Config& config, int64_t samples);

}  // namespace frugal
