// `frugal sample RUN_DIR --prompt TEXT`: generate from a run's weights with a KV cache, encoding
// the prompt and decoding the output with the tokenizer the run was trained with (bytes, or the
// dataset's SentencePiece model or Hugging Face tokenizer.json); a run whose tokenizer frugal cannot apply is refused,
// never answered with text in the wrong encoding.
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "frugal/ckpt/checkpoint.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/core/threads.h"
#include "frugal/data/token_dataset.h"
#include "frugal/data/tokenizer.h"
#include "frugal/model/model_family.h"
#include "frugal/model/scripted_module.h"
#include "frugal/model/weights.h"
#include "frugal/train/open_run.h"

namespace frugal::cli {

namespace {
struct SampleArgs {
  std::string run_dir;
  std::string prompt = "\n";
  int64_t max_tokens = 64;
  double temperature = 0;
  uint64_t seed = 0;
  std::string stop;  // with stop_given; else by the run's data (stop_by_default)
  bool stop_given = false;
  std::string weights;
  bool json = false;
};

// --prompt and --stop as typed: \n is a newline, \t a tab, \\ one backslash; any other backslash
// (\x41, a trailing one) is kept as it stands.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char n = s[i] == '\\' && i + 1 < s.size() ? s[i + 1] : '\0';
    if (n == 'n' || n == 't' || n == '\\') {
      out += n == 'n' ? '\n' : n == 't' ? '\t' : '\\';
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

namespace fs = std::filesystem;

// The text after the first `stop` in `text` is cut off; "" stops never.
std::string cut_at(const std::string& text, const std::string& stop) {
  if (stop.empty()) return text;
  const size_t at = text.find(stop);
  return at == std::string::npos ? text : text.substr(0, at + stop.size());
}

int run_sample(const SampleArgs& a) {
  const OpenedRun run = open_run(a.run_dir);
  const Config& c = run.config;
  const std::string& cfg = run.config_file;
  FRUGAL_CHECK(torchscript_path(c.model.source).empty(), ConfigError,
               fmt::format("{}: the run trained model.source = \"{}\"; frugal sample generates from the reference "
                           "GPT only (load the scripted module in Python to generate)",
                           cfg, c.model.source));
  apply_thread_settings(static_cast<int>(c.run.threads));
  const auto tokenizer = run_tokenizer(run);
  if (tokenizer->vocab() > c.model.vocab)
    throw ConfigError(fmt::format("{}: the run's tokenizer ({}) has {} tokens but model.vocab = {}", cfg,
                                  tokenizer->name(), tokenizer->vocab(), c.model.vocab));
  const std::string weights = a.weights.empty() ? run_weights(a.run_dir, "sample") : named_weights(a.weights);
  CausalLm model = make_causal_lm(c.model);
  reading_named_input("the weights " + weights, [&] { load_run_weights(*model, c, weights); });
  const std::string prompt = unescape(a.prompt);
  if (prompt.empty()) throw ConfigError("--prompt must not be empty");
  const std::string work = (fs::temp_directory_path() / fmt::format("frugal-sample-{}", ::getpid())).string();
  fs::create_directories(work);
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      remove_tree(dir, ec);
    }
  } cleanup{work};
  auto encoded = tokenizer->encode({prompt}, 1, work).at(0);
  // No prompt (the default "\n", which a SentencePiece model encodes to nothing): generation starts
  // where a document starts in the training stream, after the dataset's document separator.
  if (encoded.empty() && a.prompt == SampleArgs().prompt) encoded = tokenizer->separator();
  if (encoded.empty()) throw ConfigError(fmt::format("--prompt '{}' encodes to no tokens", a.prompt));
  const std::vector<int64_t> tokens(encoded.begin(), encoded.end());
  // A prompt longer than the context: generate() reads only its newest tokens; say so.
  const int64_t prompt_size = static_cast<int64_t>(tokens.size());
  const int64_t used = model->prompt_tokens_used(prompt_size);
  if (used < prompt_size)
    fmt::print(stderr,
               "frugal sample: the prompt is {} tokens but the model's context is model.block = {} ({}); only its "
               "last {} tokens are used, the first {} are dropped. Shorten the prompt to {} tokens or fewer\n",
               prompt_size, c.model.block, cfg, used, prompt_size - used, c.model.block);
  // Without --stop: the arithmetic demo's lines are one problem each (stop at the newline); other
  // data is prose, which runs to the end of its document (the dataset's separator token) or
  // --max-tokens.
  const bool arith = c.data.source.kind == DataSource::Kind::kArith;
  const std::string stop = a.stop_given ? unescape(a.stop) : arith ? "\n" : "";
  const bool bytes = tokenizer->name() == "bytes";
  const std::vector<int32_t> separator = tokenizer->separator();
  const bool stop_at_document_end = !a.stop_given && !bytes && separator.size() == 1;
  // Byte tokens stop as soon as the text ends with `stop`; other tokenizers decode once at the end.
  std::string generated;
  auto out = model->generate(tokens, a.max_tokens, a.temperature, a.seed, [&](int64_t t) {
    if (stop_at_document_end && t == separator[0]) return true;
    if (!bytes) return false;
    generated.push_back(static_cast<char>(t));
    return !stop.empty() && generated.size() >= stop.size() &&
           generated.compare(generated.size() - stop.size(), stop.size(), stop) == 0;
  });
  const std::vector<int32_t> ids(out.begin(), out.end());
  const std::string text = cut_at(tokenizer->decode(ids, work), stop);
  if (a.json) {
    nlohmann::json j{{"weights", weights},
                     {"tokenizer", tokenizer->name()},
                     {"prompt", prompt},
                     {"prompt_tokens", encoded},
                     {"prompt_tokens_used", used},
                     {"tokens", ids},
                     {"text", text}};
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }
  fmt::print("{}{}", prompt, text);
  if (text.empty() || text.back() != '\n') fmt::print("\n");
  return 0;
}
}  // namespace

void add_sample_command(CLI::App& app, Run* run) {
  auto args = std::make_shared<SampleArgs>();
  auto* cmd = app.add_subcommand(
      "sample",
      "Generate text from a run's weights (greedy by default, with a KV cache), with the tokenizer the run "
      "was trained with (bytes, or its dataset's SentencePiece model or Hugging Face tokenizer.json). Without "
      "final/ it uses the newest sound checkpoint.");
  cmd->add_option("run_dir", args->run_dir, "run directory, e.g. runs/demo")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("-p,--prompt", args->prompt,
                  "prompt text; \\n becomes a newline, \\t a tab and \\\\ one backslash; any other backslash is kept "
                  "as typed (\\x41 stays \\x41)")
      ->capture_default_str();
  cmd->add_option("-n,--max-tokens", args->max_tokens, "tokens to generate at most")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("-t,--temperature", args->temperature, "0 = greedy; >0 samples")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "sampling seed")->capture_default_str();
  auto* stop = cmd->add_option("--stop", args->stop,
                               "stop after generating this text ('' = never; with SentencePiece or a Hugging Face "
                               "tokenizer the text is cut there). Default: a newline for builtin:arith runs (one "
                               "problem per line); for other data, the end of a document (the dataset's separator "
                               "token). Escapes as in --prompt");
  cmd->add_option("--weights", args->weights,
                  "a weights file or a checkpoint directory, whose files must match the checksums in its state.json "
                  "(default RUN_DIR/final/model.safetensors, else the newest sound checkpoint's)");
  cmd->add_flag("--json", args->json,
                "print one JSON object: weights, tokenizer, prompt, prompt_tokens, prompt_tokens_used (how many of "
                "prompt_tokens, from the end, the model read: all of them when they fit model.block, else the last "
                "block/2; a warning on stderr says so), tokens (generated) and text");
  cmd->callback([args, run, stop] {
    args->stop_given = stop->count() > 0;
    *run = [args] { return run_sample(*args); };
  });
}

}  // namespace frugal::cli
