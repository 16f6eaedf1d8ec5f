// frugal prepare: the token stream reproduces the documents, the manifest tells the truth, a
// re-run on unchanged inputs is a no-op, output does not depend on threads, dedup counts are
// reported, SentencePiece works through its helper, and `frugal train` trains from the result.
#include "frugal/data/prepare.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/data/batch_source.h"
#include "frugal/data/document_reader.h"
#include "frugal/data/file_hash.h"
#include "frugal/data/token_dataset.h"
#include "test_util.h"

namespace frugal::prepare_test {
namespace {
namespace fs = std::filesystem;

std::vector<int32_t> all_tokens(const TokenDataset& d) {
  std::vector<int32_t> t(d.train.size() + d.val.size());
  d.train.read(0, d.train.size(), t.data());
  d.val.read(0, d.val.size(), t.data() + d.train.size());
  return t;
}

PrepareOptions small(const std::vector<std::string>& inputs, const std::string& out) {
  PrepareOptions o;
  o.inputs = inputs;
  o.out_dir = out;
  o.val_fraction = 0.1;
  o.shard_tokens = 4096;
  o.threads = 2;
  return o;
}

std::string corpus(int docs, int salt) {
  std::string s;
  for (int i = 0; i < docs; ++i)
    s += fmt::format("Document {} of corpus {}: the quick brown fox {} jumps.\nSecond line {}.\n\n\n", i, salt,
                     i * 7 + salt, i % 5);
  return s;
}

TEST(Prepare, ByteDatasetReproducesTheDocumentsAndTheManifestTellsTheTruth) {
  test::TempDir dir;
  test::write_text(dir.file("a.txt"), "first doc\nstill first\n\n  \nsecond doc\n");
  test::write_text(dir.file("b.txt"), "third doc");
  PrepareOptions o = small({dir.file("a.txt"), dir.file("b.txt")}, dir.file("ds"));
  o.shard_tokens = 16;  // several shards: the stream must continue across them
  PrepareReport r = prepare_dataset(o);
  EXPECT_FALSE(r.up_to_date);
  EXPECT_EQ(r.documents, 3);
  const std::string expect = "first doc\nstill first\n\nsecond doc\n\nthird doc\n\n";
  TokenDataset d = open_token_dataset(dir.file("ds"));
  std::vector<int32_t> t = all_tokens(d);
  EXPECT_EQ(std::string(t.begin(), t.end()), expect);
  EXPECT_EQ(r.tokens, static_cast<int64_t>(expect.size()));
  EXPECT_EQ(r.val_tokens, 5);  // round(0.1 * 48)

  auto m = nlohmann::json::parse(test::read_text(dir.file("ds/manifest.json")));
  EXPECT_EQ(m["format_version"], 1);
  EXPECT_EQ(m["dtype"], "uint16");
  EXPECT_EQ(m["tokenizer"]["vocab"], 256);
  EXPECT_EQ(m["counts"]["documents"], 3);
  EXPECT_EQ(m["sources"][1]["xxh64"], hex64(xxh64_file(dir.file("b.txt"))));
  EXPECT_EQ(m["splits"]["train"].size(), 3u);  // 41 training tokens in shards of 16
  for (const auto& s : m["splits"]["train"])
    EXPECT_EQ(s["xxh64"], hex64(xxh64_file(dir.file("ds/" + s["file"].get<std::string>()))));
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << "temporary folder left behind";
}

// A binary file given as text (to prepare, or as data.source = "text:PATH") is refused with the
// file and the fraction of non-text bytes; text with tabs, CRLF, UTF-8 and a few escapes is not.
TEST(Prepare, BinaryInputIsRefusedNamingTheFileAndTheFraction) {
  test::TempDir dir;
  std::string binary(1000, 'a');
  for (int i = 0; i < 50; ++i) binary[static_cast<size_t>(i) * 20] = '\0';  // 5% NUL
  test::write_text(dir.file("blob.bin"), binary);
  try {
    prepare_dataset(small({dir.file("blob.bin")}, dir.file("ds")));
    ADD_FAILURE() << "a binary file was prepared as text";
  } catch (const DataError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("prepare: '" + dir.file("blob.bin") + "' does not look like text: 5.0% of its 1000 bytes"),
              std::string::npos)
        << m;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("ds/manifest.json")));
  const Config c = resolve_config("", {"data.source=text:" + dir.file("blob.bin")}, {}).config;
  try {
    make_batch_source(c);
    ADD_FAILURE() << "a binary file was read as a text source";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("data.source: '" + dir.file("blob.bin") + "' does not look like text"),
              std::string::npos)
        << e.what();
  }
  std::string text;
  for (int i = 0; i < 40; ++i) text += "caf\xc3\xa9\tline " + std::to_string(i) + "\r\n";
  text += "\x1b[1mbold\x1b[0m\f\n";  // two escapes: under 1%
  EXPECT_NO_THROW(require_text(text, "t.txt", "prepare"));
  EXPECT_THROW(require_text(std::string(100, '\x01'), "c.txt", "prepare"), DataError);
}

TEST(Prepare, RerunOnUnchangedInputsIsANoOpAndAnyChangeRebuilds) {
  test::TempDir dir;
  test::write_text(dir.file("c.txt"), corpus(30, 1));
  PrepareOptions o = small({dir.file("c.txt")}, dir.file("ds"));
  EXPECT_FALSE(prepare_dataset(o).up_to_date);
  const auto stamp = fs::last_write_time(dir.file("ds/manifest.json"));
  PrepareReport again = prepare_dataset(o);
  EXPECT_TRUE(again.up_to_date);
  EXPECT_EQ(again.documents, 30);
  EXPECT_EQ(fs::last_write_time(dir.file("ds/manifest.json")), stamp);
  o.dedup.mode = DedupMode::kExact;  // other options: rebuild
  EXPECT_FALSE(prepare_dataset(o).up_to_date);
  test::write_text(dir.file("c.txt"), corpus(30, 2));  // same size, other content: rebuild
  EXPECT_FALSE(prepare_dataset(o).up_to_date);
  EXPECT_TRUE(prepare_dataset(o).up_to_date);
}

// A killed prepare leaves OUT.tmp-PID (as large as the dataset); the next prepare of the same
// OUT removes it, but never the temp folder of a prepare that is still running.
TEST(Prepare, RemovesTheTempFolderOfAKilledPrepareButNotOfALiveOne) {
  test::TempDir dir;
  test::write_text(dir.file("c.txt"), corpus(30, 1));
  const std::string dead = dir.file("ds.tmp-99999999"), live = dir.file("ds.tmp-" + std::to_string(::getppid()));
  for (const auto& d : {dead, live}) {
    fs::create_directories(d);
    test::write_text(d + "/train-00000.shard", std::string(4096, 'x'));
  }
  std::vector<std::string> said;
  prepare_dataset(small({dir.file("c.txt")}, dir.file("ds")), [&](const std::string& s) { said.push_back(s); });
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(
      std::any_of(said.begin(), said.end(), [&](const std::string& s) { return s.find(dead) != std::string::npos; }));
}

// "--out ds/" is the folder ds: its temp folder is the sibling ds.tmp-PID (a killed prepare's is
// found and removed), and the dataset lands in ds with nothing temporary inside it.
TEST(Prepare, AnOutFolderWithATrailingSlashIsTheSameFolder) {
  test::TempDir dir;
  test::write_text(dir.file("c.txt"), corpus(30, 1));
  const std::string dead = dir.file("ds.tmp-99999999");
  fs::create_directories(dead);
  prepare_dataset(small({dir.file("c.txt")}, dir.file("ds") + "/"));
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(dir.file("ds/manifest.json")));
  for (const auto& e : fs::directory_iterator(dir.file("ds")))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  for (const char* bad : {".", "..", "/"}) {
    try {
      prepare_dataset(small({dir.file("c.txt")}, bad));
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("name the dataset folder itself"), std::string::npos) << e.what();
    }
  }
}

TEST(Prepare, OutputIsByteIdenticalForOneAndTwoThreads) {
  test::TempDir dir;
  test::write_text(dir.file("c.txt"), corpus(200, 3));
  PrepareOptions o = small({dir.path() + "/c.txt"}, dir.file("one"));
  o.threads = 1;
  prepare_dataset(o);
  o.threads = 2;
  o.out_dir = dir.file("two");
  prepare_dataset(o);
  for (const auto& e : fs::directory_iterator(dir.file("one")))
    if (e.path().extension() == ".frs") {
      EXPECT_EQ(test::read_text(e.path().string()), test::read_text(dir.file("two/" + e.path().filename().string())));
    }
}

TEST(Prepare, JsonlUsesTheNamedFieldAndReportsBadLinesWithFileAndLine) {
  test::TempDir dir;
  test::write_text(dir.file("d.jsonl"), "{\"body\": \"one\"}\n\n{\"body\": \"two\", \"x\": 1}\n");
  PrepareOptions o = small({dir.file("d.jsonl")}, dir.file("ds"));
  o.format = InputFormat::kJsonl;
  o.jsonl_field = "body";
  o.val_fraction = 0.2;
  prepare_dataset(o);
  std::vector<int32_t> t = all_tokens(open_token_dataset(dir.file("ds")));
  EXPECT_EQ(std::string(t.begin(), t.end()), "one\n\ntwo\n\n");
  test::write_text(dir.file("d.jsonl"), "{\"body\": \"one\"}\n{\"body\": 3}\n");
  try {
    prepare_dataset(o);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("d.jsonl:2"), std::string::npos) << e.what();
  }
}

TEST(Prepare, DedupCountsReachTheReportAndTheManifest) {
  test::TempDir dir;
  std::string text = corpus(20, 4);
  text += "Document 3 of corpus 4: the QUICK brown   fox 25 jumps.\nSecond line 3.\n\n";       // exact (normalised)
  text += "Document 3 of corpus 4: the quick brown fox 25 jumps.\nSecond line 3 indeed.\n\n";  // near
  test::write_text(dir.file("c.txt"), text);
  PrepareOptions o = small({dir.file("c.txt")}, dir.file("ds"));
  o.dedup.mode = DedupMode::kNear;
  o.dedup.near_threshold = 0.6;
  o.dedup.shingle_words = 2;
  PrepareReport r = prepare_dataset(o);
  EXPECT_EQ(r.documents_in, 22);
  EXPECT_EQ(r.exact_removed, 1);
  EXPECT_EQ(r.near_removed, 1);
  EXPECT_EQ(r.documents, 20);
  auto m = nlohmann::json::parse(test::read_text(dir.file("ds/manifest.json")));
  EXPECT_EQ(m["counts"]["exact_duplicates"], 1);
  EXPECT_EQ(m["counts"]["near_duplicates"], 1);
}

TEST(Prepare, RefusesToReplaceAFolderThatIsNotADataset) {
  test::TempDir dir;
  test::write_text(dir.file("c.txt"), corpus(5, 5));
  fs::create_directories(dir.file("precious"));
  test::write_text(dir.file("precious/notes.txt"), "keep me");
  EXPECT_THROW(prepare_dataset(small({dir.file("c.txt")}, dir.file("precious"))), ConfigError);
  EXPECT_EQ(test::read_text(dir.file("precious/notes.txt")), "keep me");
}

// No temporary folder left in `folder`.
void expect_no_temp_dirs(const std::string& folder) {
  for (const auto& e : fs::directory_iterator(folder))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

// --out as a symbolic link (to a bigger disk): the link stays, and the dataset is written, and
// replaced, where it points; a link that dangles gets its folder made.
TEST(Prepare, ASymlinkedOutIsKeptAndTheDatasetLandsWhereItPoints) {
  test::TempDir dir;
  fs::create_directories(dir.file("bigdisk/ds"));
  fs::create_symlink(dir.file("bigdisk/ds"), dir.file("ds"));
  fs::create_symlink("bigdisk/later", dir.file("dangling"));  // relative to the link's folder
  for (const char* out : {"ds", "dangling"}) {
    test::write_text(dir.file("c.txt"), corpus(10, 1));
    const PrepareOptions o = small({dir.file("c.txt")}, dir.file(out));
    EXPECT_FALSE(prepare_dataset(o).up_to_date);
    test::write_text(dir.file("c.txt"), corpus(10, 2));  // an older dataset to swap out
    EXPECT_FALSE(prepare_dataset(o).up_to_date);
    EXPECT_TRUE(prepare_dataset(o).up_to_date) << out;
    EXPECT_TRUE(fs::is_symlink(dir.file(out))) << out << " was replaced by a folder";
    const auto m = nlohmann::json::parse(test::read_text(dir.file(out) + "/manifest.json"));
    EXPECT_EQ(m["sources"][0]["xxh64"], hex64(xxh64_file(dir.file("c.txt")))) << out << ": not the newer dataset";
  }
  EXPECT_TRUE(fs::exists(dir.file("bigdisk/ds/manifest.json")));
  EXPECT_TRUE(fs::exists(dir.file("bigdisk/later/manifest.json")));
  expect_no_temp_dirs(dir.path());
  expect_no_temp_dirs(dir.file("bigdisk"));
}

// An --out that is a file (empty or not), or that lies below one, is refused naming --out; the
// file stays as it was.
TEST(Prepare, AnOutThatIsAFileOrLiesBelowOneIsRefusedByName) {
  test::TempDir dir;
  test::write_text(dir.file("c.txt"), corpus(5, 5));
  test::write_text(dir.file("empty"), "");
  test::write_text(dir.file("notes"), "keep me");
  for (const char* name : {"empty", "notes"}) {
    try {
      prepare_dataset(small({dir.file("c.txt")}, dir.file(name)));
      ADD_FAILURE() << name << " was replaced";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--out " + dir.file(name) + " is a file; give a folder path"),
                std::string::npos)
          << e.what();
    }
    EXPECT_TRUE(fs::is_regular_file(dir.file(name))) << name;
  }
  EXPECT_EQ(test::read_text(dir.file("notes")), "keep me");
  for (const char* below : {"notes/ds", "notes/sub/ds"}) {
    try {
      prepare_dataset(small({dir.file("c.txt")}, dir.file(below)));
      ADD_FAILURE() << below << " was accepted";
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--out " + dir.file(below) + ": " + dir.file("notes") + " is a file, not a folder"),
                std::string::npos)
          << m;
    }
  }
  expect_no_temp_dirs(dir.path());
}

// --dedup drops duplicate text documents; the formats without them refuse it rather than ignore it.
TEST(Prepare, DedupIsRefusedForFormatsWithoutTextDocuments) {
  test::TempDir dir;
  test::write_text(dir.file("c.txt"), corpus(5, 5));
  for (InputFormat f : {InputFormat::kChat, InputFormat::kPromptCompletion, InputFormat::kCsv, InputFormat::kImages}) {
    PrepareOptions o = small({dir.file("c.txt")}, dir.file("ds"));
    o.format = f;
    o.dedup.mode = DedupMode::kExact;
    try {
      prepare_dataset(o);
      ADD_FAILURE() << "--dedup was ignored";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--dedup exact applies to text documents"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir.file("ds")));
  }
}

// Bytes that are not UTF-8: a JSONL line says so (not "not a JSON object"), and text for a Hugging
// Face tokenizer (whose helper would put U+FFFD in their place unseen) is refused by file and byte.
TEST(Prepare, InvalidUtf8IsNamedByFileAndByte) {
  test::TempDir dir;
  test::write_text(dir.file("a.jsonl"), "{\"text\": \"ok\"}\n{\"text\": \"caf\xe9\"}\n");
  PrepareOptions o = small({dir.file("a.jsonl")}, dir.file("ds"));
  o.format = InputFormat::kJsonl;
  try {
    prepare_dataset(o);
    ADD_FAILURE() << "Latin-1 JSONL was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("a.jsonl") + ":2: invalid UTF-8 at byte 28"), std::string::npos)
        << e.what();
  }
  test::write_text(dir.file("l.txt"), "fine\n\ncaf\xe9 au lait\n");
  test::write_text(dir.file("tokenizer.json"), "{}");  // never loaded: the input is refused first
  o = small({dir.file("l.txt")}, dir.file("ds"));
  o.tokenizer = "hf:" + dir.file("tokenizer.json");
  try {
    prepare_dataset(o);
    ADD_FAILURE() << "Latin-1 text was tokenised";
  } catch (const DataError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(dir.file("l.txt") + ":3: invalid UTF-8 at byte 9"), std::string::npos) << m;
    EXPECT_NE(m.find("iconv -f latin1 -t utf-8"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(dir.file("ds")));
  const size_t npos = std::string_view::npos;
  EXPECT_EQ(invalid_utf8_at("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x99\x82"), npos);
  EXPECT_EQ(invalid_utf8_at("\xc0\xaf"), 0u);            // overlong '/'
  EXPECT_EQ(invalid_utf8_at("a\xed\xa0\x80"), 1u);       // a surrogate
  EXPECT_EQ(invalid_utf8_at("ab\xf4\x90\x80\x80"), 2u);  // above U+10FFFF
  EXPECT_EQ(invalid_utf8_at("abc\xe2\x82"), 3u);         // cut short
  EXPECT_EQ(invalid_utf8_at("\xe2\x82\xac\x80"), 3u);    // a stray continuation byte
}

TEST(Prepare, SentencePieceTrainsAModelAndTokenisesTheSameWithOneOrTwoThreads) {
  FRUGAL_NEED_FEATURE("sentencepiece");
  test::TempDir dir;
  test::write_text(dir.file("c.txt"), corpus(300, 6));
  PrepareOptions o = small({dir.file("c.txt")}, dir.file("sp"));
  o.tokenizer = "sentencepiece";
  o.vocab = 400;  // byte fallback reserves 256 pieces, plus one per distinct character
  PrepareReport r = prepare_dataset(o);
  EXPECT_EQ(r.tokenizer, "sentencepiece");
  EXPECT_GT(r.vocab, 256);
  EXPECT_LE(r.vocab, 400);
  EXPECT_LT(r.tokens, r.bytes_in);  // pieces span several bytes
  TokenDataset d = open_token_dataset(dir.file("sp"));
  const auto t = all_tokens(d);
  auto m = nlohmann::json::parse(test::read_text(dir.file("sp/manifest.json")));
  const int32_t eos = m["tokenizer"]["separator"][0];
  EXPECT_EQ(std::count(t.begin(), t.end(), eos), 300);  // one separator per document
  for (int32_t x : t) ASSERT_LT(x, r.vocab);

  PrepareOptions reuse = o;  // the trained model, loaded, with one thread: same tokens
  reuse.tokenizer = "sentencepiece:" + dir.file("sp/tokenizer.model");
  reuse.threads = 1;
  reuse.out_dir = dir.file("sp1");
  prepare_dataset(reuse);
  EXPECT_EQ(all_tokens(open_token_dataset(dir.file("sp1"))), t);
}

TEST(Prepare, CliPreparesOnceThenTrainsFromTheShards) {
  test::TempDir dir;
  std::string text;
  for (int i = 0; i < 300; ++i) text += fmt::format("{}+{}={}\n\n", i % 17, i % 13, i % 17 + i % 13);
  test::write_text(dir.file("arith.txt"), text);
  const std::string args =
      fmt::format("prepare '{}' --out '{}' --dedup exact --quiet", dir.file("arith.txt"), dir.file("ds"));
  auto p = test::run_frugal(args);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("exact duplicates"), std::string::npos) << p.output;
  auto again = test::run_frugal(args);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("up to date"), std::string::npos) << again.output;

  std::string train = "train --overwrite --quiet";
  for (const auto& s : test::tiny_overrides(dir.path())) train += " --set " + s;
  train += fmt::format(" --set 'data.source=shards:{}' --set data.workers=2", dir.file("ds"));
  auto t = test::run_frugal(train);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  auto summary = nlohmann::json::parse(test::read_text(dir.file("demo/summary.json")));
  EXPECT_EQ(summary["steps"], 30);
  EXPECT_NE(summary["data"].get<std::string>().find("shards:"), std::string::npos);
  const double wait = summary["data_wait_fraction"];
  EXPECT_TRUE(wait >= 0.0 && wait <= 1.0) << wait;
  const std::string metrics = test::read_text(dir.file("demo/metrics.jsonl"));
  EXPECT_NE(metrics.find("\"data_wait_s\""), std::string::npos);
  auto exported = test::run_frugal(fmt::format("export '{}' --out '{}'", dir.file("demo"), dir.file("hf")));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;

  // model.vocab left at its default follows the manifest's tokenizer.vocab (here raised to 300,
  // as a tokenizer with more symbols would have it); set on purpose, it is checked against it.
  auto m = nlohmann::json::parse(test::read_text(dir.file("ds/manifest.json")));
  m["tokenizer"]["vocab"] = 300;
  test::write_text(dir.file("ds/manifest.json"), m.dump(1));
  auto wide = test::run_frugal(train);
  ASSERT_EQ(wide.exit_code, 0) << wide.output;
  const std::string toml = test::read_text(dir.file("demo/config.toml"));
  EXPECT_NE(toml.find("vocab = 300  # file " + dir.file("ds/manifest.json") + " tokenizer.vocab"), std::string::npos)
      << toml;
  // `frugal config` shows the run as `train` would run it: the dataset's vocabulary, not 256.
  auto shown = test::run_frugal(fmt::format("config --set 'data.source=shards:{}'", dir.file("ds")));
  ASSERT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_NE(shown.output.find("vocab = 300  # file " + dir.file("ds/manifest.json") + " tokenizer.vocab"),
            std::string::npos)
      << shown.output;
  auto narrow = test::run_frugal(train + " --set model.vocab=256");
  EXPECT_EQ(narrow.exit_code, 2) << narrow.output;
  EXPECT_NE(narrow.output.find("set model.vocab = 300"), std::string::npos) << narrow.output;
  // From a checkpoint of 256 ids, no model.vocab helps: the advice is to tokenise with its tokenizer.
  auto from = test::run_frugal(train + " --set model.init_from=hf:" + dir.file("hf"));
  EXPECT_EQ(from.exit_code, 2) << from.output;
  EXPECT_NE(from.output.find("a vocabulary of 300"), std::string::npos) << from.output;
  EXPECT_NE(from.output.find("--tokenizer hf:" + dir.file("hf") + "/tokenizer.json"), std::string::npos) << from.output;
  EXPECT_EQ(from.output.find("set model.vocab"), std::string::npos) << from.output;

  auto bad = test::run_frugal(
      fmt::format("prepare '{}' --out '{}' --format jsonl --quiet", dir.file("arith.txt"), dir.file("j")));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("arith.txt:1"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace frugal::prepare_test
