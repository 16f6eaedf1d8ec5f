// `frugal sample RUN_DIR --prompt TEXT`: generate from a run's weights with a KV cache, encoding
// the prompt and decoding the output with the tokenizer the run was trained with (bytes, or the
// dataset's SentencePiece model or Hugging Face tokenizer.json); a run whose tokenizer frugal cannot apply is refused,
// never answered with text in the wrong encoding. Generation stops at --stop (text and ids cut
// there alike) or at the end of a document; special tokens are left out of the text unless asked.
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>

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
#include "frugal/model/hf_checkpoint.h"
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
  bool show_special = false;
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

using json = nlohmann::json;

// The ids of a Hugging Face tokenizer.json's special tokens (its added tokens marked "special":
// <|endoftext|>, </s>, <|eot_id|>, ...): what transformers' decode(skip_special_tokens=True) leaves
// out. None for bytes and SentencePiece, whose decoding already drops its control tokens (<s>, </s>).
std::set<int32_t> special_ids(const Tokenizer& tok) {
  std::set<int32_t> ids;
  if (tok.name() != "hf") return ids;
  const json j = json::parse(read_file(tok.model_path()), nullptr, false);
  const json added = j.is_object() ? j.value("added_tokens", json::array()) : json::array();
  for (const json& t : added.is_array() ? added : json::array())
    if (t.is_object() && t.value("special", false) && t.contains("id") && t["id"].is_number_integer())
      ids.insert(t["id"].get<int32_t>());
  return ids;
}

// The ids that end a document, where generation stops (as transformers' generate() stops at
// eos_token_id): the dataset's separator where it is one token (SentencePiece's </s>, a Hugging Face
// tokenizer's end-of-text) and, for a run on the very tokenizer.json of the checkpoint it started
// from, that checkpoint's eos_token_id, one id or a list (generation_config.json, else config.json;
// a chat model's end of turn such as <|eot_id|>).
std::set<int64_t> end_tokens(const OpenedRun& run, const Tokenizer& tok) {
  std::set<int64_t> ends;
  const std::vector<int32_t> separator = tok.separator();
  if (tok.name() != "bytes" && separator.size() == 1) ends.insert(separator[0]);
  if (tok.name() != "hf") return ends;
  std::error_code ec;
  for (const fs::path& dir : {fs::path(run.dir.hf_source()), fs::path(hf_init_dir(run.config.model))}) {
    if (dir.empty() || !fs::is_regular_file(dir / "tokenizer.json", ec)) continue;
    if (read_file((dir / "tokenizer.json").string()) != read_file(tok.model_path())) return ends;
    for (const char* name : {"generation_config.json", "config.json"}) {
      if (!fs::is_regular_file(dir / name, ec)) continue;
      const json j = json::parse(read_small_file((dir / name).string()), nullptr, false);
      if (!j.is_object() || !j.contains("eos_token_id") || j["eos_token_id"].is_null()) continue;
      const json& eos = j["eos_token_id"];
      for (const json& id : eos.is_array() ? eos : json::array({eos}))
        if (id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < tok.vocab())
          ends.insert(id.get<int64_t>());
      return ends;
    }
    return ends;
  }
  return ends;
}

// The text `frugal sample` shows of the first n generated ids: decoded by the run's tokenizer,
// without the ids in `hidden`, after the prompt's ids, with the prompt's text taken off the front
// (as transformers' text-generation pipeline does): a tokenizer that drops a leading space when it
// decodes (SentencePiece, Llama's) would otherwise join the prompt's last word to the first one
// generated ("the quick brown foxevening").
struct ShownText {
  const Tokenizer& tok;
  std::string work;
  std::set<int32_t> hidden;
  std::vector<int32_t> prompt;  // the prompt's ids (visible ones)
  std::string prompt_text;      // what they decode to
  void set_prompt(const std::vector<int64_t>& ids) {
    prompt = visible(ids, ids.size());
    prompt_text = tok.decode(prompt, work);
  }
  std::vector<int32_t> visible(const std::vector<int64_t>& ids, size_t n) const {
    std::vector<int32_t> kept;
    for (size_t i = 0; i < n && i < ids.size(); ++i)
      if (!hidden.count(static_cast<int32_t>(ids[i]))) kept.push_back(static_cast<int32_t>(ids[i]));
    return kept;
  }
  std::string of(const std::vector<int64_t>& ids, size_t n) const {
    const std::vector<int32_t> kept = visible(ids, n);
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), kept.begin(), kept.end());
    std::string text = tok.decode(all, work);
    if (text.compare(0, prompt_text.size(), prompt_text) == 0) return text.substr(prompt_text.size());
    return tok.decode(kept, work);  // the prompt's text changed when more followed it
  }
};

// The generated ids and their text, both cut at the first `stop` in the text: the ids through the
// one whose decoding completes it (the fewest whose text holds it, found by bisection: a longer
// prefix's text holds what a shorter one's does), the text right after it.
struct Generated {
  std::vector<int64_t> ids;
  std::string text;
};
Generated cut_at_stop(const ShownText& shown, std::vector<int64_t> ids, const std::string& stop) {
  std::string text = shown.of(ids, ids.size());
  if (stop.empty() || text.find(stop) == std::string::npos) return {std::move(ids), std::move(text)};
  size_t lacks = 0, holds = ids.size();  // the text of `lacks` ids lacks stop, that of `holds` holds it
  while (holds - lacks > 1) {
    const size_t mid = lacks + (holds - lacks) / 2;
    std::string t = shown.of(ids, mid);
    if (t.find(stop) == std::string::npos) {
      lacks = mid;
    } else {
      holds = mid;
      text = std::move(t);
    }
  }
  ids.resize(holds);
  return {std::move(ids), cut_at(text, stop)};
}

// Generates from `tokens` until --max-tokens, an end of a document (`ends`), or `stop` in the text.
// Byte tokens look for `stop` after each token; other tokenizers, whose every decoding runs a helper
// process, after 4, 8, 16, ... tokens, so generation runs at most about twice as far as needed.
Generated generate_text(CausalLmImpl& model, const std::vector<int64_t>& tokens, const SampleArgs& a,
                        const ShownText& shown, const std::set<int64_t>& ends, const std::string& stop) {
  const bool bytes = shown.tok.name() == "bytes";
  std::vector<int64_t> so_far;
  std::string byte_text;
  auto out = model.generate(tokens, a.max_tokens, a.temperature, a.seed, [&](int64_t t) {
    so_far.push_back(t);
    if (ends.count(t)) return true;
    if (stop.empty()) return false;
    if (bytes) {
      byte_text.push_back(static_cast<char>(t));
      return byte_text.size() >= stop.size() &&
             byte_text.compare(byte_text.size() - stop.size(), stop.size(), stop) == 0;
    }
    const size_t n = so_far.size();
    return n >= 4 && (n & (n - 1)) == 0 && shown.of(so_far, n).find(stop) != std::string::npos;
  });
  return cut_at_stop(shown, std::move(out), stop);
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
  // data is prose, which runs to the end of its document or --max-tokens. `--stop ''` runs to
  // --max-tokens, past the end of a document too.
  const bool arith = c.data.source.kind == DataSource::Kind::kArith;
  const std::string stop = a.stop_given ? unescape(a.stop) : arith ? "\n" : "";
  const std::set<int64_t> ends = a.stop_given && stop.empty() ? std::set<int64_t>() : end_tokens(run, *tokenizer);
  ShownText shown{*tokenizer, work, a.show_special ? std::set<int32_t>() : special_ids(*tokenizer), {}, {}};
  shown.set_prompt(tokens);
  const Generated g = generate_text(*model, tokens, a, shown, ends, stop);
  if (a.json) {
    json j{{"weights", weights},
           {"tokenizer", tokenizer->name()},
           {"prompt", prompt},
           {"prompt_tokens", encoded},
           {"prompt_tokens_used", used},
           {"tokens", g.ids},
           {"text", g.text}};
    fmt::print("{}\n", j.dump(-1, ' ', false, json::error_handler_t::replace));
    return 0;
  }
  fmt::print("{}{}", prompt, g.text);
  if (g.text.empty() || g.text.back() != '\n') fmt::print("\n");
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
      ->check(in_range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("-t,--temperature", args->temperature, "0 = greedy; >0 samples")
      ->check(in_range(0.0, 100.0))
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "sampling seed")->capture_default_str();
  auto* stop = cmd->add_option(
      "--stop", args->stop,
      "stop after generating this text, or at the end of a document, whichever comes first ('' = neither: "
      "run to --max-tokens). The text is cut right after the stop text, and --json's tokens after the "
      "generated token that completes it (with SentencePiece or a Hugging Face tokenizer that token's own "
      "text may run past the cut). Default: a newline for builtin:arith runs (one problem per line); for "
      "other data, the end of a document alone: the dataset's separator token and, for a run on the "
      "tokenizer of the checkpoint it started from, that checkpoint's eos_token_id. Escapes as in --prompt");
  cmd->add_option("--weights", args->weights,
                  "a weights file or a checkpoint directory, whose files must match the checksums in its state.json "
                  "(default RUN_DIR/final/model.safetensors, else the newest sound checkpoint's)");
  cmd->add_flag("--show-special-tokens", args->show_special,
                "keep a Hugging Face tokenizer's special tokens (<|endoftext|>, </s>, <|eot_id|>, ...) in the text "
                "(also when looking for --stop); by default they are left out, as transformers' "
                "decode(skip_special_tokens=True) does. --json's tokens hold their ids either way");
  cmd->add_flag("--json", args->json,
                "print one JSON object: weights, tokenizer, prompt, prompt_tokens, prompt_tokens_used (how many of "
                "prompt_tokens, from the end, the model read: all of them when they fit model.block, else the last "
                "block/2; a warning on stderr says so), tokens (the generated ids, through the one that completes "
                "--stop or ends the document, special tokens included) and text (theirs, cut right after --stop)");
  cmd->callback([args, run, stop] {
    args->stop_given = stop->count() > 0;
    *run = [args] { return run_sample(*args); };
  });
}

}  // namespace frugal::cli
