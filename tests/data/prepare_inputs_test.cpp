// The inputs of `frugal prepare`: a folder's hidden entries are no data, a file is read once
// however it is named (twice, spelled two ways, inside a folder also given), and a JSONL line of
// the wrong shape is named by file and line with what was found.
#include <gtest/gtest.h>

#include <filesystem>

#include <fmt/format.h>

#include "frugal/core/errors.h"
#include "frugal/data/document_reader.h"
#include "frugal/data/prepare.h"
#include "test_util.h"

namespace frugal::prepare_inputs_test {
namespace {
namespace fs = std::filesystem;

// The message of the ConfigError that expand_inputs throws ("no error" when none).
std::string refusal(const std::vector<std::string>& inputs) {
  try {
    expand_inputs(inputs);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

// The message of the DataError that split_documents throws on one JSONL text ("no error" when none).
std::string jsonl_error(const std::string& text, const std::string& field = "text") {
  std::vector<std::string> docs;
  try {
    split_documents(text, "d.jsonl", InputFormat::kJsonl, field, &docs);
  } catch (const DataError& e) {
    return e.what();
  }
  return "no error";
}

// .DS_Store, editor swap and lock files and .git/ used to be read as documents.
TEST(PrepareInputs, HiddenFilesAndFoldersOfAFolderAreSkippedButANamedOneIsRead) {
  test::TempDir dir;
  fs::create_directories(dir.file("in/.git"));
  fs::create_directories(dir.file("in/sub"));
  test::write_text(dir.file("in/a.txt"), "first document\n");
  test::write_text(dir.file("in/sub/b.txt"), "second document\n");
  for (const char* hidden : {".DS_Store", ".a.txt.swp", ".~lock.x.csv#", ".git/objects", "sub/.notes"})
    test::write_text(dir.file(std::string("in/") + hidden), "not data\n");
  EXPECT_EQ(expand_inputs({dir.file("in")}),
            (std::vector<std::string>{dir.file("in/a.txt"), dir.file("in/sub/b.txt")}));
  EXPECT_EQ(expand_inputs({dir.file("in/.DS_Store")}), std::vector<std::string>{dir.file("in/.DS_Store")});
  PrepareOptions o;
  o.inputs = {dir.file("in")};
  o.out_dir = dir.file("ds");
  const PrepareReport r = prepare_dataset(o);
  EXPECT_EQ(r.sources, 2);
  EXPECT_EQ(r.documents, 2);
  // A folder of hidden entries only is empty, and the message says why.
  fs::create_directories(dir.file("only"));
  test::write_text(dir.file("only/.DS_Store"), "x");
  try {
    expand_inputs({dir.file("only")});
    ADD_FAILURE() << "a folder of hidden files was read";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("the folder is empty but for 1 hidden entries"), std::string::npos)
        << e.what();
  }
}

// `frugal prepare data --out data/ds`, run again (after new files came in): it used to read its own
// shards as input and fail ("'data/ds/train_000000.frs' does not look like text"). The folder it
// writes is no input.
TEST(PrepareInputs, TheOutputFolderInsideAnInputFolderIsNoInput) {
  test::TempDir dir;
  fs::create_directories(dir.file("data"));
  test::write_text(dir.file("data/a.txt"), "first document\n\nsecond document\n");
  PrepareOptions o;
  o.inputs = {dir.file("data")};
  o.out_dir = dir.file("data/ds");
  o.val_fraction = 0.5;
  EXPECT_EQ(prepare_dataset(o).sources, 1);
  test::write_text(dir.file("data/b.txt"), "third document\n");
  const PrepareReport again = prepare_dataset(o);
  EXPECT_EQ(again.sources, 2);
  EXPECT_FALSE(again.up_to_date);
  EXPECT_EQ(expand_inputs({dir.file("data")}, dir.file("data/ds")),
            (std::vector<std::string>{dir.file("data/a.txt"), dir.file("data/b.txt")}));
}

// Each of these used to read a file twice, doubling its documents without a word.
TEST(PrepareInputs, AFileReadTwiceIsRefusedNamingBothInputs) {
  test::TempDir dir;
  fs::create_directories(dir.file("in/sub"));
  test::write_text(dir.file("in/a.txt"), "a document\n");
  test::write_text(dir.file("in/sub/b.txt"), "another\n");
  const std::string a = dir.file("in/a.txt"), in = dir.file("in");
  std::string e = refusal({a, a});
  EXPECT_NE(e.find("input '" + a + "' is given twice"), std::string::npos) << e;
  EXPECT_NE(e.find("give each file or folder once"), std::string::npos) << e;
  e = refusal({a, in + "/../in/a.txt"});
  EXPECT_NE(e.find("input '" + a + "' and input '" + in + "/../in/a.txt' are the same file (" +
                   fs::weakly_canonical(a).string() + ")"),
            std::string::npos)
      << e;
  e = refusal({in, a});
  EXPECT_NE(e.find("'" + a + "' (under input '" + in + "') and input '" + a + "' are the same file"), std::string::npos)
      << e;
  e = refusal({in + "/sub", in});
  EXPECT_NE(e.find("'" + in + "/sub/b.txt' (under input '" + in + "/sub') and '" + in + "/sub/b.txt' (under input '" +
                   in + "') are the same file"),
            std::string::npos)
      << e;
  e = refusal({in, in});
  EXPECT_NE(e.find("input '" + in + "' is given twice"), std::string::npos) << e;
  EXPECT_EQ(refusal({a, in + "/sub"}), "no error");
  // From the command line: exit 2, nothing published.
  const auto p = test::run_frugal(fmt::format("prepare '{}' '{}' --out '{}' --quiet", in, a, dir.file("ds")));
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_NE(p.output.find("are the same file"), std::string::npos) << p.output;
  EXPECT_FALSE(fs::exists(dir.file("ds")));
}

// A line of another JSON type used to be "not a JSON object" whatever it was, and a field of the
// wrong type "no string field": now both say what they found.
TEST(PrepareInputs, AJsonlLineOfTheWrongShapeSaysWhatItHolds) {
  std::string e = jsonl_error("{\"text\": \"ok\"}\n[1, 2]\n");
  EXPECT_NE(e.find("d.jsonl:2: an array ([1,2]), not a JSON object"), std::string::npos) << e;
  e = jsonl_error("{\"text\": 5}\n");
  EXPECT_NE(e.find("d.jsonl:1: field \"text\" is a number (5), expected a string"), std::string::npos) << e;
  e = jsonl_error("\n{\"body\": \"x\", \"id\": 3}\n");
  EXPECT_NE(e.find("d.jsonl:2: no field \"text\" (the line's fields: \"body\", \"id\")"), std::string::npos) << e;
  e = jsonl_error("{\"text\": }\n");
  EXPECT_NE(e.find("d.jsonl:1: not valid JSON (column 10"), std::string::npos) << e;
  EXPECT_EQ(jsonl_error("{\"body\": \"x\"}\n", "body"), "no error");
}

}  // namespace
}  // namespace frugal::prepare_inputs_test
