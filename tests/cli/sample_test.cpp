// `frugal sample` speaks the run's own tokenizer: a SentencePiece run's prompt is encoded with the
// dataset's model and its output decoded with it (bytes would print garbage); a run whose
// tokenizer frugal cannot apply is refused with exit 2; without final/ the newest sound
// checkpoint's weights are used; the run keeps its tokenizer, so sample and export work after the
// dataset has moved, from any working directory. --stop cuts the ids where it cuts the text, the end
// of a document stops generation, and special tokens are left out of the text unless shown.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/core/atomic_file.h"
#include "frugal/data/tokenizer.h"
#include "test_util.h"

namespace frugal::sample_test {
namespace {
namespace fs = std::filesystem;

// The JSON object `frugal sample --json` printed (its last line that starts with '{').
nlohmann::json sample_json(const std::string& output) {
  const size_t at = output.rfind("\n{");
  return nlohmann::json::parse(output.substr(at == std::string::npos ? 0 : at + 1));
}

std::string train_sets(const std::string& out_dir, const std::string& source) {
  std::string s = test::tiny_sets(out_dir) + " --set data.source=" + source;
  for (const char* o : {"train.steps=6", "train.eval_every=0", "train.answer_samples=0", "checkpoint.every_steps=3",
                        "checkpoint.keep_last=5"})
    s += std::string(" --set ") + o;
  return s;
}

// A Hugging Face tokenizer.json of four words (ids 1-4) and the special <|endoftext|> (id 0); without
// a decoder, the library joins the words with spaces.
constexpr const char* kWordTokenizer = R"({"version": "1.0", "truncation": null, "padding": null,
 "added_tokens": [{"id": 0, "content": "<|endoftext|>", "single_word": false, "lstrip": false, "rstrip": false,
                   "normalized": false, "special": true}],
 "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": null, "decoder": null,
 "model": {"type": "WordLevel", "vocab": {"<|endoftext|>": 0, "red": 1, "green": 2, "blue": 3, "sky": 4},
           "unk_token": "<|endoftext|>"}})";

// dir/demo: a run on that tokenizer over documents "red green blue sky" (each followed by
// <|endoftext|>), which soon continues "red" with "green blue sky" and the end of the document.
// Returns why the test cannot run ("" when it can): the helper's Python has no `tokenizers`.
std::string train_word_run(const test::TempDir& dir) {
  test::write_text(dir.file("tokenizer.json"), kWordTokenizer);
  std::string docs;
  for (int i = 0; i < 300; ++i) docs += "{\"text\": \"red green blue sky\"}\n";
  test::write_text(dir.file("docs.jsonl"), docs);
  auto prep = test::run_frugal(fmt::format("prepare '{}' --out '{}' --format jsonl --tokenizer 'hf:{}' --dedup none",
                                           dir.file("docs.jsonl"), dir.file("ds"), dir.file("tokenizer.json")));
  if (prep.exit_code != 0 && (prep.output.find("'tokenizers' is not installed") != std::string::npos ||
                              prep.output.find("cannot start Python") != std::string::npos))
    return prep.output;
  EXPECT_EQ(prep.exit_code, 0) << prep.output;
  auto train = test::run_frugal("train" + train_sets(dir.path(), "shards:" + dir.file("ds")) + " --set train.steps=20");
  EXPECT_EQ(train.exit_code, 0) << train.output;
  return "";
}

// What `frugal sample --json` printed, the exit status checked.
nlohmann::json sample_ok(const std::string& args) {
  auto r = test::run_frugal("sample " + args + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.exit_code == 0 ? sample_json(r.output) : nlohmann::json::object();
}

using Ids = std::vector<int32_t>;
Ids ids_of(const nlohmann::json& j) { return j.value("tokens", nlohmann::json::array()).get<Ids>(); }
std::string text_of(const nlohmann::json& j) { return j.value("text", std::string("(no text)")); }

TEST(Sample, AStopCutsTheTokensWhereItCutsTheText) {
  test::TempDir dir;
  const std::string skip = train_word_run(dir);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_FALSE(HasFailure());
  const std::string run = "'" + dir.file("demo") + "' --prompt red --max-tokens 10";
  // The whole continuation, past the end of each document.
  auto j = sample_ok(run + " --stop ''");
  EXPECT_EQ(ids_of(j), (Ids{2, 3, 4, 0, 1, 2, 3, 4, 0, 1})) << j.dump();
  // "blue sk" ends inside "sky": the ids run through the one that completes it, the text stops there.
  // The text is what follows the prompt's when both are decoded together: " green", as the
  // library's decoder joins the words (the plain output reads "red green ...", not "redgreen ...").
  j = sample_ok(run + " --stop 'blue sk'");
  EXPECT_EQ(text_of(j), " green blue sk") << j.dump();
  EXPECT_EQ(ids_of(j), (Ids{2, 3, 4})) << j.dump();
  // A stop at a word's end keeps that word's id and no other.
  j = sample_ok(run + " --stop green");
  EXPECT_EQ(text_of(j), " green") << j.dump();
  EXPECT_EQ(ids_of(j), (Ids{2})) << j.dump();
  // A stop the document never reaches: its end stops generation all the same.
  j = sample_ok(run + " --stop 'sky red'");
  EXPECT_EQ(text_of(j), " green blue sky") << j.dump();
  EXPECT_EQ(ids_of(j), (Ids{2, 3, 4, 0})) << j.dump();
  auto plain = test::run_frugal("sample " + run + " --stop 'blue sk'");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("red green blue sk\n"), std::string::npos) << plain.output;
  EXPECT_EQ(plain.output.find("sky"), std::string::npos) << plain.output;
}

TEST(Sample, SpecialTokensAreLeftOutOfTheTextUnlessShown) {
  test::TempDir dir;
  const std::string skip = train_word_run(dir);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_FALSE(HasFailure());
  const std::string run = "'" + dir.file("demo") + "' --prompt red --max-tokens 10";
  // Without --stop generation ends with the document: the end token's id is the last token, and
  // the text leaves it out, in --json and in the plain output alike.
  auto j = sample_ok(run);
  EXPECT_EQ(ids_of(j), (Ids{2, 3, 4, 0})) << j.dump();
  EXPECT_EQ(text_of(j), " green blue sky") << j.dump();
  auto plain = test::run_frugal("sample " + run);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("red green blue sky\n"), std::string::npos) << plain.output;
  EXPECT_EQ(plain.output.find("<|endoftext|>"), std::string::npos) << plain.output;
  // --stop '' runs on past the end: the ids are all there, the text without the special token.
  j = sample_ok(run + " --stop ''");
  EXPECT_EQ(ids_of(j), (Ids{2, 3, 4, 0, 1, 2, 3, 4, 0, 1})) << j.dump();
  EXPECT_EQ(text_of(j), " green blue sky red green blue sky red") << j.dump();
  // --show-special-tokens keeps it; the ids are the same.
  j = sample_ok(run + " --stop '' --show-special-tokens");
  EXPECT_EQ(text_of(j), " green blue sky <|endoftext|> red green blue sky <|endoftext|> red") << j.dump();
  EXPECT_EQ(ids_of(j), (Ids{2, 3, 4, 0, 1, 2, 3, 4, 0, 1})) << j.dump();
  j = sample_ok(run + " --show-special-tokens");
  EXPECT_EQ(text_of(j), " green blue sky <|endoftext|>") << j.dump();
  EXPECT_EQ(ids_of(j), (Ids{2, 3, 4, 0})) << j.dump();
}

// The checkpoint a run started from (model.init_from, its small files kept in RUN/hf_source) names
// the ids that end generation in its generation_config.json (a chat model's end of turn): where it
// has the run's very tokenizer, generation stops at them as at the document's end.
TEST(Sample, TheEosOfTheCheckpointTheRunStartedFromEndsGeneration) {
  test::TempDir dir;
  const std::string skip = train_word_run(dir);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_FALSE(HasFailure());
  const std::string source = dir.file("demo/hf_source");
  fs::create_directories(source);
  fs::copy_file(dir.file("demo/tokenizer/tokenizer.json"), source + "/tokenizer.json");
  test::write_text(source + "/config.json", R"({"eos_token_id": 0})");
  test::write_text(source + "/generation_config.json", R"({"eos_token_id": [3, 0]})");
  const std::string run = "'" + dir.file("demo") + "' --prompt red --max-tokens 10";
  auto j = sample_ok(run);
  EXPECT_EQ(ids_of(j), (Ids{2, 3})) << j.dump();
  EXPECT_EQ(text_of(j), " green blue") << j.dump();
  // --stop '' runs past every end.
  EXPECT_EQ(ids_of(sample_ok(run + " --stop ''")).size(), 10u);
  // Another tokenizer's ids say nothing about this one's.
  test::write_text(source + "/tokenizer.json", test::read_text(source + "/tokenizer.json") + "\n");
  EXPECT_EQ(ids_of(sample_ok(run)), (Ids{2, 3, 4, 0}));
}

// `export --adapter` of a LoRA run on a Hugging Face tokenizer writes the run's tokenizer files
// beside the adapters, as a fine-tune's output folder holds them; it used to write the adapters
// alone, so a chat fine-tune's template was lost with them.
TEST(Sample, AnAdapterExportCarriesTheRunsTokenizer) {
  test::TempDir dir;
  const std::string skip = train_word_run(dir);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_FALSE(HasFailure());
  auto r = test::run_frugal("export '" + dir.file("demo") + "' --out '" + dir.file("base") + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_frugal("train" + train_sets(dir.path(), "shards:" + dir.file("ds")) +
                       " --set run.name=lora --set lora.rank=2 --set model.init_from=hf:" + dir.file("base"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_frugal("export '" + dir.file("lora") + "' --adapter --json --out '" + dir.file("ad") + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(r.output.rfind("\n{") + 1));
  const auto files = j["files"].get<std::vector<std::string>>();
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    EXPECT_NE(std::find(files.begin(), files.end(), f), files.end()) << f << " not listed: " << j.dump();
  EXPECT_EQ(test::read_text(dir.file("ad/tokenizer.json")), test::read_text(dir.file("lora/tokenizer/tokenizer.json")));
}

TEST(Sample, ASentencePieceRunEncodesAndDecodesWithItsOwnModel) {
  FRUGAL_NEED_FEATURE("sentencepiece");
  test::TempDir dir;
  // Lines of 9 words from 27 in varying order: enough variety for SentencePiece to learn words.
  const std::vector<std::string> words = {"the",     "quick",  "brown",  "fox",    "jumps",    "over",   "lazy",
                                          "dog",     "number", "seven",  "river",  "mountain", "green",  "yellow",
                                          "market",  "street", "window", "garden", "table",    "letter", "morning",
                                          "evening", "winter", "summer", "happy",  "silver",   "golden"};
  std::string corpus;
  for (size_t i = 0; i < 600; ++i) {
    for (size_t k = 0; k < 9; ++k) corpus += (k ? " " : "") + words[(i * 7 + k * k * 3 + i / 5) % words.size()];
    corpus += "\n\n";
  }
  test::write_text(dir.file("corpus.txt"), corpus);
  auto prep = test::run_frugal(fmt::format("prepare '{}' --out '{}' --tokenizer sentencepiece --vocab 600 --quiet",
                                           dir.file("corpus.txt"), dir.file("ds")));
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  auto train = test::run_frugal("train" + train_sets(dir.path(), "shards:" + dir.file("ds")));
  ASSERT_EQ(train.exit_code, 0) << train.output;

  const std::string prompt = "the quick brown fox";
  auto r = test::run_frugal(
      fmt::format("sample '{}' --prompt '{}' --max-tokens 6 --stop '' --json", dir.file("demo"), prompt));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = sample_json(r.output);
  EXPECT_EQ(j["tokenizer"], "sentencepiece");
  const auto spm = load_sentencepiece(dir.file("ds/tokenizer.model"));
  const auto expected_prompt = spm->encode({prompt}, 1, dir.path()).at(0);
  EXPECT_EQ(j["prompt_tokens"].get<std::vector<int32_t>>(), expected_prompt);
  EXPECT_LT(expected_prompt.size(), prompt.size());  // pieces, not bytes
  EXPECT_EQ(spm->decode(expected_prompt, dir.path()), prompt);
  const auto tokens = j["tokens"].get<std::vector<int32_t>>();
  ASSERT_EQ(tokens.size(), 6u);
  // The text is what follows the prompt's when both are decoded together (transformers' pipeline):
  // SentencePiece drops the leading space of a text it decodes alone, which used to join the
  // prompt's last word to the first generated one.
  std::vector<int32_t> both = expected_prompt;
  both.insert(both.end(), tokens.begin(), tokens.end());
  const std::string whole = spm->decode(both, dir.path());
  ASSERT_EQ(whole.rfind(prompt, 0), 0u) << whole;
  EXPECT_EQ(j["text"].get<std::string>(), whole.substr(prompt.size()));

  // The plain output is the prompt and the same decoded text.
  auto plain =
      test::run_frugal(fmt::format("sample '{}' --prompt '{}' --max-tokens 6 --stop ''", dir.file("demo"), prompt));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output.rfind(prompt + j["text"].get<std::string>(), 0), 0u) << plain.output;

  // Without --stop, prose runs to the end of a document: generation stops at the separator token
  // (an undertrained model would otherwise repeat it up to --max-tokens), and no newline cuts it.
  auto doc = test::run_frugal(fmt::format("sample '{}' --max-tokens 64 --json", dir.file("demo")));
  ASSERT_EQ(doc.exit_code, 0) << doc.output;
  const auto doc_tokens = sample_json(doc.output)["tokens"].get<std::vector<int32_t>>();
  ASSERT_EQ(spm->separator().size(), 1u);
  const int32_t end = spm->separator()[0];
  const auto ends = std::count(doc_tokens.begin(), doc_tokens.end(), end);
  EXPECT_LE(ends, 1) << doc.output;
  if (ends == 1) {
    EXPECT_EQ(doc_tokens.back(), end) << doc.output;
  }
  // With a --stop the text never reaches, the end of the document stops generation all the same.
  auto unmet = test::run_frugal(fmt::format("sample '{}' --max-tokens 64 --stop zzz --json", dir.file("demo")));
  ASSERT_EQ(unmet.exit_code, 0) << unmet.output;
  const auto unmet_tokens = sample_json(unmet.output)["tokens"].get<std::vector<int32_t>>();
  EXPECT_LE(std::count(unmet_tokens.begin(), unmet_tokens.end(), end), 1) << unmet.output;

  // The run keeps its tokenizer: with the dataset moved away and from another working directory,
  // sample (without a prompt: from a document start) and export still work, and export writes the
  // tokenizer's model beside the weights.
  fs::rename(dir.file("ds"), dir.file("ds-moved"));
  auto moved =
      test::run_frugal(fmt::format("sample '{}' --max-tokens 4 --stop '' --json", dir.file("demo")), "cd / &&");
  ASSERT_EQ(moved.exit_code, 0) << moved.output;
  EXPECT_EQ(sample_json(moved.output)["tokens"].size(), 4u) << moved.output;
  auto exported =
      test::run_frugal(fmt::format("export '{}' --out '{}' --json", dir.file("demo"), dir.file("hf")), "cd / &&");
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_NE(exported.output.find("tokenizer.model"), std::string::npos) << exported.output;
  EXPECT_NE(exported.output.find("sentencepiece.SentencePieceProcessor"), std::string::npos) << exported.output;
  EXPECT_EQ(test::read_text(dir.file("hf/tokenizer.model")), test::read_text(dir.file("ds-moved/tokenizer.model")));
  fs::rename(dir.file("ds-moved"), dir.file("ds"));

  // A tokenizer frugal does not know: refused before any generation, exit 2, naming it.
  auto manifest = nlohmann::json::parse(test::read_text(dir.file("demo/tokenizer/manifest.json")));
  manifest["tokenizer"]["name"] = "gpt2-hf";
  test::write_text(dir.file("demo/tokenizer/manifest.json"), manifest.dump());
  auto unknown = test::run_frugal(fmt::format("sample '{}' --prompt 'the'", dir.file("demo")));
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("tokenizer in " + dir.file("demo/tokenizer") + " is 'gpt2-hf'"), std::string::npos)
      << unknown.output;
  // Token files without a manifest (llm.c's GPT-2 ids), and no copy kept with the run: refused too.
  remove_tree(dir.file("demo/tokenizer"));
  fs::remove(dir.file("ds/manifest.json"));
  test::write_text(dir.file("ds/train.bin"), std::string(64, '\0'));
  auto llmc = test::run_frugal(fmt::format("sample '{}' --prompt 'the'", dir.file("demo")));
  EXPECT_EQ(llmc.exit_code, 2) << llmc.output;
  EXPECT_NE(llmc.output.find("without a manifest"), std::string::npos) << llmc.output;
}

TEST(Sample, WithoutFinalWeightsTheNewestSoundCheckpointIsUsed) {
  test::TempDir dir;
  auto train = test::run_frugal("train" + train_sets(dir.path(), "builtin:arith"));
  ASSERT_EQ(train.exit_code, 0) << train.output;
  remove_tree(dir.file("demo/final"));
  // The newest checkpoint is damaged: the one before it is used.
  const std::string newest = dir.file("demo/checkpoints/step-00000006/model.safetensors");
  ASSERT_TRUE(fs::exists(newest));
  std::string bytes = test::read_text(newest);
  bytes[bytes.size() - 1] ^= 0x5a;
  test::write_text(newest, bytes);
  auto r = test::run_frugal(fmt::format("sample '{}' --prompt '1+2=' --max-tokens 3 --json", dir.file("demo")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(sample_json(r.output)["weights"], dir.file("demo/checkpoints/step-00000003/model.safetensors"));
  EXPECT_EQ(sample_json(r.output)["tokenizer"], "bytes");
  EXPECT_NE(r.output.find("newest sound checkpoint, step 3"), std::string::npos) << r.output;
  // The note names the newer checkpoint it skipped and why.
  EXPECT_NE(r.output.find("skipped " + dir.file("demo/checkpoints/step-00000006") + ": " + newest), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("does not match state.json's"), std::string::npos) << r.output;
  // The damaged checkpoint named with --weights is refused, by sample and export alike, naming the
  // file whose checksum is wrong.
  for (const char* command : {"sample '{}' --weights '{}' --prompt '1+2=' --max-tokens 3",
                              "export '{}' --weights '{}' --out '{}/hf-corrupt'"}) {
    auto corrupt = test::run_frugal(
        fmt::format(fmt::runtime(command), dir.file("demo"), dir.file("demo/checkpoints/step-00000006"), dir.path()));
    EXPECT_EQ(corrupt.exit_code, 2) << command << "\n" << corrupt.output;
    EXPECT_NE(corrupt.output.find("is not a sound checkpoint: " + newest), std::string::npos) << corrupt.output;
    EXPECT_NE(corrupt.output.find("does not match state.json's"), std::string::npos) << corrupt.output;
  }
  EXPECT_FALSE(fs::exists(dir.file("hf-corrupt/model.safetensors")));
  // --weights takes a checkpoint directory as well as a file; a directory without weights is named.
  auto named = test::run_frugal(fmt::format("sample '{}' --weights '{}' --prompt '1+2=' --max-tokens 3 --json",
                                            dir.file("demo"), dir.file("demo/checkpoints/step-00000003")));
  ASSERT_EQ(named.exit_code, 0) << named.output;
  EXPECT_EQ(sample_json(named.output)["weights"], dir.file("demo/checkpoints/step-00000003/model.safetensors"));
  auto not_weights =
      test::run_frugal(fmt::format("sample '{}' --weights '{}' --prompt '1+2='", dir.file("demo"), dir.file("demo")));
  EXPECT_EQ(not_weights.exit_code, 2) << not_weights.output;
  EXPECT_NE(not_weights.output.find("is a directory without model.safetensors"), std::string::npos)
      << not_weights.output;
  remove_tree(dir.file("demo/checkpoints"));
  auto none = test::run_frugal(fmt::format("sample '{}' --prompt '1+2='", dir.file("demo")));
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_NE(none.output.find("no weights in"), std::string::npos) << none.output;
}

TEST(Sample, APromptLongerThanTheContextSaysHowMuchOfItIsUsed) {
  test::TempDir dir;
  auto train = test::run_frugal("train" + train_sets(dir.path(), "builtin:arith"));
  ASSERT_EQ(train.exit_code, 0) << train.output;
  // 40 byte tokens into a context of model.block = 16: generate() reads the last 8 (block/2).
  const std::string prompt = "1+2=3\\n4+5=9\\n1+1=2\\n3+3=6\\n7+1=8\\n2+2=4\\n1+3=";
  auto r = test::run_frugal(fmt::format("sample '{}' --prompt '{}' --max-tokens 2 --json", dir.file("demo"), prompt));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = sample_json(r.output);
  ASSERT_EQ(j["prompt_tokens"].size(), 40u) << r.output;
  EXPECT_EQ(j["prompt_tokens_used"], 8) << r.output;
  EXPECT_NE(r.output.find("the prompt is 40 tokens but the model's context is model.block = 16"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("only its last 8 tokens are used, the first 32 are dropped"), std::string::npos) << r.output;
  // A prompt that fits is read whole, without a warning.
  auto fits = test::run_frugal(fmt::format("sample '{}' --prompt '1+2=' --max-tokens 2 --json", dir.file("demo")));
  ASSERT_EQ(fits.exit_code, 0) << fits.output;
  EXPECT_EQ(sample_json(fits.output)["prompt_tokens_used"], 4) << fits.output;
  EXPECT_EQ(fits.output.find("model.block"), std::string::npos) << fits.output;
}

TEST(Sample, APromptKeepsTheBackslashOfAnEscapeItDoesNotKnow) {
  test::TempDir dir;
  auto train = test::run_frugal("train" + train_sets(dir.path(), "builtin:arith"));
  ASSERT_EQ(train.exit_code, 0) << train.output;
  // Typed (inside the shell's single quotes): a\x41\\b\tc\ -- \x41 kept, \\ one backslash, \t a
  // tab, a trailing backslash kept.
  auto r =
      test::run_frugal(fmt::format("sample '{}' --prompt 'a\\x41\\\\b\\tc\\' --max-tokens 1 --json", dir.file("demo")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = sample_json(r.output);
  const std::string expected = "a\\x41\\b\tc\\";
  EXPECT_EQ(j["prompt"], expected) << r.output;
  EXPECT_EQ(j["prompt_tokens"].get<std::vector<int32_t>>(), std::vector<int32_t>(expected.begin(), expected.end()));
}

}  // namespace
}  // namespace frugal::sample_test
