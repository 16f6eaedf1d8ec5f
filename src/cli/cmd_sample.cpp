// `frugal sample RUN_DIR --prompt TEXT`: generate from a run's weights with a KV cache, encoding
// the prompt and decoding the output with the tokenizer the run was trained with (bytes, or the
// dataset's SentencePiece model or Hugging Face tokenizer.json); a run whose tokenizer frugal cannot apply is refused, never
// answered with text in the wrong encoding.
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
#include "frugal/model/gpt.h"
#include "frugal/model/scripted_module.h"
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
  bool json = false;
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

namespace fs = std::filesystem;

// The tokenizer the run's data was tokenised with, from its data.source.
std::unique_ptr<Tokenizer> run_tokenizer(const Config& c, const std::string& cfg) {
  const DataSource& src = c.data.source;
  switch (src.kind) {
    case DataSource::Kind::kArith:
    case DataSource::Kind::kText:
      return make_byte_tokenizer();
    case DataSource::Kind::kRecords:
      throw ConfigError(fmt::format("{}: data.source = \"{}\" is an image or table dataset; frugal sample "
                                    "generates text from language-model runs only", cfg, to_string(src)));
    case DataSource::Kind::kShards:
      break;
  }
  const auto m = manifest_tokenizer(src.path);
  if (!m) {
    bool bins = false;
    std::error_code ec;
    if (fs::is_directory(src.path, ec) && !fs::exists(fs::path(src.path) / "manifest.json"))
      for (const auto& e : fs::directory_iterator(src.path, ec)) bins = bins || e.path().extension() == ".bin";
    if (bins)
      throw ConfigError(fmt::format(
          "{}: the run trained on {}, token files without a manifest (llm.c or nanoGPT .bin files, whose "
          "tokenizer they do not record); frugal sample cannot encode or decode them: it knows the byte and "
          "SentencePiece tokenizers of `frugal prepare`",
          cfg, src.path));
    throw ConfigError(fmt::format("{}: the run's dataset {} (data.source) has no readable manifest.json, so its "
                                  "tokenizer is unknown; put the dataset back where the run read it", cfg, src.path));
  }
  if (m->name == "bytes") return make_byte_tokenizer();
  if (m->name == "sentencepiece") {
    const std::string model = (fs::path(src.path) / "tokenizer.model").string();
    if (!fs::is_regular_file(model))
      throw ConfigError(fmt::format("{}: the run's dataset {} was tokenised with SentencePiece but its model {} "
                                    "is missing", cfg, src.path, model));
    require_sentencepiece("frugal sample of a SentencePiece run");
    return load_sentencepiece(model);
  }
  if (m->name == "hf") {
    const std::string json = (fs::path(src.path) / "tokenizer.json").string();
    if (!fs::is_regular_file(json))
      throw ConfigError(fmt::format("{}: the run's dataset {} was tokenised with a Hugging Face tokenizer but its "
                                    "tokenizer.json is missing", cfg, src.path));
    return load_hf_tokenizer(json);
  }
  throw ConfigError(fmt::format("{}: the run's dataset {} names tokenizer '{}', which frugal sample does not know "
                                "(bytes, sentencepiece, hf)", cfg, src.path, m->name));
}


// The text after the first `stop` in `text` is cut off; "" stops never.
std::string cut_at(const std::string& text, const std::string& stop) {
  if (stop.empty()) return text;
  const size_t at = text.find(stop);
  return at == std::string::npos ? text : text.substr(0, at + stop.size());
}

int run_sample(const SampleArgs& a) {
  const std::string cfg = a.run_dir + "/config.toml";
  if (!fs::is_regular_file(cfg))
    throw ConfigError(fmt::format("{} is not a run directory: {} is missing", a.run_dir, cfg));
  // The run's own resolved file says everything; the environment must not change the model.
  Config c = resolve_config(cfg, {}, {}).config;
  FRUGAL_CHECK(torchscript_path(c.model.source).empty(), ConfigError,
               fmt::format("{}: the run trained model.source = \"{}\"; frugal sample generates from the reference "
                           "GPT only (load the scripted module in Python to generate)", cfg, c.model.source));
  apply_thread_plan(static_cast<int>(c.run.threads));
  const auto tokenizer = run_tokenizer(c, cfg);
  if (tokenizer->vocab() > c.model.vocab)
    throw ConfigError(fmt::format("{}: the run's tokenizer ({}) has {} tokens but model.vocab = {}", cfg,
                                  tokenizer->name(), tokenizer->vocab(), c.model.vocab));
  const std::string weights = a.weights.empty() ? run_weights(a.run_dir, "sample") : a.weights;
  if (!fs::is_regular_file(weights)) throw ConfigError(fmt::format("--weights {}: no such file", weights));
  Gpt model(c.model);
  reading_named_input("the weights " + weights, [&] {
    load_parameters(model->named_parameter_list(), load_safetensors(weights), weights);
  });
  const std::string prompt = unescape(a.prompt);
  if (prompt.empty()) throw ConfigError("--prompt must not be empty");
  const std::string work = (fs::temp_directory_path() / fmt::format("frugal-sample-{}", ::getpid())).string();
  fs::create_directories(work);
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::error_code ec; remove_tree(dir, ec); }
  } cleanup{work};
  const auto encoded = tokenizer->encode({prompt}, 1, work).at(0);
  if (encoded.empty()) throw ConfigError(fmt::format("--prompt '{}' encodes to no tokens", a.prompt));
  const std::vector<int64_t> tokens(encoded.begin(), encoded.end());
  const std::string stop = unescape(a.stop);
  // Byte tokens stop as soon as the text ends with `stop`; other tokenizers decode once at the end.
  const bool bytes = tokenizer->name() == "bytes";
  std::string generated;
  auto out = model->generate(tokens, a.max_tokens, a.temperature, a.seed, [&](int64_t t) {
    if (!bytes) return false;
    generated.push_back(static_cast<char>(t));
    return !stop.empty() && generated.size() >= stop.size() &&
           generated.compare(generated.size() - stop.size(), stop.size(), stop) == 0;
  });
  const std::vector<int32_t> ids(out.begin(), out.end());
  const std::string text = cut_at(tokenizer->decode(ids, work), stop);
  if (a.json) {
    nlohmann::json j{{"weights", weights}, {"tokenizer", tokenizer->name()}, {"prompt", prompt},
                     {"prompt_tokens", encoded}, {"tokens", ids}, {"text", text}};
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }
  fmt::print("{}{}", prompt, text);
  if (text.empty() || text.back() != '\n') fmt::print("\n");
  return 0;
}
}  // namespace

std::string run_weights(const std::string& run_dir, const char* command) {
  const std::string final_weights = run_dir + "/final/model.safetensors";
  if (fs::is_regular_file(final_weights)) return final_weights;
  const std::string root = run_dir + "/checkpoints";
  std::string problems;
  if (fs::is_directory(root)) {
    auto list = list_checkpoints(root);
    std::sort(list.begin(), list.end(), [](const auto& x, const auto& y) { return x.step > y.step; });
    for (const auto& ck : list) {
      const std::string why = ck.complete ? verify_checkpoint(ck.path) : "incomplete";
      if (why.empty()) {
        fmt::print(stderr, "frugal {}: {} has no final/ weights; using the newest sound checkpoint, step {}\n",
                   command, run_dir, ck.step);
        return ck.path + "/model.safetensors";
      }
      problems += fmt::format("; {}: {}", ck.path, why);
    }
  }
  throw ConfigError(fmt::format("no weights in {}: neither final/model.safetensors nor a sound checkpoint under "
                                "{}{} (pass --weights PATH)", run_dir, root, problems));
}

void add_sample_command(CLI::App& app, Run* run) {
  auto args = std::make_shared<SampleArgs>();
  auto* cmd = app.add_subcommand(
      "sample",
      "Generate text from a run's weights (greedy by default, with a KV cache), with the tokenizer the run "
      "was trained with (bytes, or its dataset's SentencePiece model or Hugging Face tokenizer.json). Without "
      "final/ it uses the newest sound checkpoint.");
  cmd->add_option("run_dir", args->run_dir, "run directory, e.g. runs/demo")->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("-p,--prompt", args->prompt, "prompt text; \\n and \\t are unescaped")
      ->capture_default_str();
  cmd->add_option("-n,--max-tokens", args->max_tokens, "tokens to generate at most")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("-t,--temperature", args->temperature, "0 = greedy; >0 samples")
      ->check(CLI::Range(0.0, 100.0))->capture_default_str();
  cmd->add_option("--seed", args->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--stop", args->stop,
                  "stop after generating this text ('' = never; with SentencePiece the text is cut there)")
      ->capture_default_str();
  cmd->add_option("--weights", args->weights,
                  "weights file (default RUN_DIR/final/model.safetensors, else the newest sound checkpoint's)");
  cmd->add_flag("--json", args->json,
                "print one JSON object: weights, tokenizer, prompt, prompt_tokens, tokens (generated) and text");
  cmd->callback([args, run] { *run = [args] { return run_sample(*args); }; });
}

}  // namespace frugal::cli
