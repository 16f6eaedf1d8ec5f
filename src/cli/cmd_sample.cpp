// `frugal sample RUN_DIR --prompt TEXT`: generate from a run's final weights with a KV cache.
#include <torch/torch.h>

#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/core/threads.h"
#include "frugal/data/batch_source.h"
#include "frugal/model/gpt.h"
#include "frugal/model/weights.h"

namespace frugal::cli {

namespace {
struct SampleArgs {
  std::string run_dir;
  std::string prompt = "\n";
  int64_t max_tokens = 64;
  double temperature = 0;
  uint64_t seed = 0;
  std::string stop = "\\n";
  std::string weights;
};

std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      char n = s[++i];
      out += n == 'n' ? '\n' : n == 't' ? '\t' : n;
    } else {
      out += s[i];
    }
  }
  return out;
}

int run_sample(const SampleArgs& a) {
  namespace fs = std::filesystem;
  const std::string cfg = a.run_dir + "/config.toml";
  if (!fs::is_regular_file(cfg))
    throw ConfigError(fmt::format("{} is not a run directory: {} is missing", a.run_dir, cfg));
  // The run's own resolved file says everything; the environment must not change the model.
  Config c = resolve_config(cfg, {}, {}).config;
  apply_thread_plan(static_cast<int>(c.run.threads));
  const std::string weights = a.weights.empty() ? a.run_dir + "/final/model.safetensors" : a.weights;
  if (!fs::is_regular_file(weights))
    throw ConfigError(fmt::format("no weights at {}: did the run finish? (pass --weights PATH)", weights));
  Gpt model(c.model);
  load_parameters(model->named_parameter_list(), load_safetensors(weights), weights);
  const std::string prompt = unescape(a.prompt);
  if (prompt.empty()) throw ConfigError("--prompt must not be empty");
  std::vector<int64_t> tokens;
  for (unsigned char ch : prompt) tokens.push_back(ch);
  const std::string stop = unescape(a.stop);
  std::string generated;
  auto out = model->generate(tokens, a.max_tokens, a.temperature, a.seed, [&](int64_t t) {
    generated.push_back(static_cast<char>(t));
    return !stop.empty() && generated.size() >= stop.size() &&
           generated.compare(generated.size() - stop.size(), stop.size(), stop) == 0;
  });
  fmt::print("{}{}", prompt, bytes_to_text(out));
  if (generated.empty() || generated.back() != '\n') fmt::print("\n");
  return 0;
}
}  // namespace

void add_sample_command(CLI::App& app, Run* run) {
  auto args = std::make_shared<SampleArgs>();
  auto* cmd = app.add_subcommand(
      "sample", "Generate text from a finished run's weights (greedy by default, with a KV cache).");
  cmd->add_option("run_dir", args->run_dir, "run directory, e.g. runs/demo")->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("-p,--prompt", args->prompt, "prompt text; \\n and \\t are unescaped")
      ->capture_default_str();
  cmd->add_option("-n,--max-tokens", args->max_tokens, "tokens to generate at most")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("-t,--temperature", args->temperature, "0 = greedy; >0 samples")
      ->check(CLI::Range(0.0, 100.0))->capture_default_str();
  cmd->add_option("--seed", args->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--stop", args->stop, "stop after generating this text ('' = never)")
      ->capture_default_str();
  cmd->add_option("--weights", args->weights, "weights file (default RUN_DIR/final/model.safetensors)");
  cmd->callback([args, run] { *run = [args] { return run_sample(*args); }; });
}

}  // namespace frugal::cli
