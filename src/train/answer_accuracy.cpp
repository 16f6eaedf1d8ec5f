// builtin:arith answer accuracy; see answer_accuracy.h.
#include "frugal/train/answer_accuracy.h"

#include <torch/torch.h>

#include "frugal/data/arith.h"
#include "frugal/data/batch_source.h"

namespace frugal {

AnswerAccuracy arith_answer_accuracy(CausalLm& model, const Config& config, int64_t samples) {
  AnswerAccuracy acc;
  ArithTask task(config.data.arith_digits);
  // A different seed stream from the validation text, so these are not all in val batches.
  for (const auto& p : task.held_out(samples, static_cast<uint64_t>(config.run.seed) + 1)) {
    std::vector<int64_t> prompt;
    for (unsigned char ch : "\n" + p.prompt()) prompt.push_back(ch);
    const int64_t max_new = static_cast<int64_t>(p.answer().size()) + 1;
    auto out = model->generate(prompt, max_new, 0.0, 0, [](int64_t t) { return t == '\n'; });
    std::string text = bytes_to_text(out);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    acc.correct += text == p.answer();
    acc.total += 1;
  }
  return acc;
}

}  // namespace frugal
