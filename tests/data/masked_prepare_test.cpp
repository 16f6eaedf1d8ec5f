// `frugal prepare --format chat | prompt-completion` before and around its template helper: a line
// that is not a document (invalid UTF-8, another JSON type, a field missing or of the wrong type)
// is named by file and line before any rendering, and a killed prepare takes the helper with it.
// (The renderings themselves: CTest chat_template_interop, tests/interop/chat_template_check.py.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "frugal/core/errors.h"
#include "frugal/data/prepare.h"
#include "test_util.h"

extern char** environ;

namespace frugal::masked_prepare_test {
namespace {
namespace fs = std::filesystem;

const std::string kChat =
    R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})";

// The message of the DataError that preparing `lines` as `format` throws ("no error" when none). The
// tokenizer is never loaded: the lines are checked first.
std::string refusal(const test::TempDir& dir, InputFormat format, const std::string& lines) {
  test::write_text(dir.file("tokenizer.json"), "{}");
  test::write_text(dir.file("d.jsonl"), lines);
  PrepareOptions o;
  o.inputs = {dir.file("d.jsonl")};
  o.out_dir = dir.file("ds");
  o.format = format;
  o.tokenizer = "hf:" + dir.file("tokenizer.json");
  try {
    prepare_dataset(o);
  } catch (const DataError& e) {
    return e.what();
  }
  return "no error";
}

// True while `pid` exists and has not ended (a zombie has).
bool running(pid_t pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  if (!std::getline(f, stat)) return false;
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z' && stat[close + 2] != 'X';
}

// Latin-1 in a chat line used to be "not a JSON object".
TEST(MaskedPrepare, InvalidUtf8IsNamedByFileLineAndByte) {
  test::TempDir dir;
  const std::string bad = R"({"messages": [{"role": "user", "content": "caf)"
                          "\xe9"
                          R"("}, {"role": "assistant", "content": "oui"}]})";
  const std::string e = refusal(dir, InputFormat::kChat, kChat + "\n" + bad + "\n");
  const size_t byte = kChat.size() + 1 + bad.find('\xe9');
  EXPECT_NE(e.find(fmt::format("{}:2: invalid UTF-8 at byte {} of the file (0xe9)", dir.file("d.jsonl"), byte)),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("iconv -f latin1 -t utf-8"), std::string::npos) << e;
}

// Each used to reach the template helper (which named neither the key nor the type found) or read
// "not a JSON object" whatever the line held.
TEST(MaskedPrepare, ALineThatIsNoDocumentIsNamedWithWhatItHolds) {
  test::TempDir dir;
  const std::string path = dir.file("d.jsonl");
  std::string e = refusal(dir, InputFormat::kChat, kChat + "\n[1, 2]\n");
  EXPECT_NE(e.find(path + ":2: an array ([1,2]), not a JSON object"), std::string::npos) << e;
  e = refusal(dir, InputFormat::kChat, R"({"messages": "hi"})");
  EXPECT_NE(e.find(path + R"(:1: "messages" is a string ("hi"), expected a list of {"role": ..., "content": ...})"),
            std::string::npos)
      << e;
  e = refusal(dir, InputFormat::kChat, R"({"conversation": []})");
  EXPECT_NE(e.find(R"("messages" is missing (the line's fields: "conversation"))"), std::string::npos) << e;
  e = refusal(dir, InputFormat::kPromptCompletion, R"({"prompt": 5, "completion": "x"})");
  EXPECT_NE(e.find(path + R"(:1: "prompt" is a number (5), expected a string (or a list of)"), std::string::npos) << e;
  e = refusal(dir, InputFormat::kPromptCompletion,
              "\n"
              R"({"prompt": "a"})");
  EXPECT_NE(e.find(path + R"(:2: "completion" is missing (the line's fields: "prompt"), expected a string)"),
            std::string::npos)
      << e;
  e = refusal(dir, InputFormat::kPromptCompletion, R"({"prompt": [], "completion": "x"})");
  EXPECT_NE(e.find(R"("completion" is a string ("x"), expected a list of)"), std::string::npos) << e;
  const auto p = test::run_frugal(fmt::format("prepare '{}' --format prompt-completion --tokenizer 'hf:{}' --out '{}'",
                                              path, dir.file("tokenizer.json"), dir.file("ds")));
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_NE(p.output.find("\"completion\" is a string"), std::string::npos) << p.output;
}

// The chat template helper used to run on to its end after a SIGKILL of prepare. Here the helper
// (FRUGAL_PYTHON=/bin/sh running a script in place of frugal_hf_tokenizer.py) writes its pid and
// sleeps; prepare is killed once it is up, and the helper must be gone within a few seconds.
TEST(MaskedPrepare, TheTemplateHelperDiesWithAKilledPrepare) {
  test::TempDir dir;
  test::write_text(dir.file("c.jsonl"), kChat + "\n");
  test::write_text(dir.file("tokenizer.json"), "{}");
  const std::string pid_file = dir.file("helper.pid");
  test::write_text(dir.file("helper.sh"),
                   fmt::format("echo $$ > '{0}.tmp' && mv '{0}.tmp' '{0}'\nexec sleep 60\n", pid_file));
  // Everything the child needs, made before the fork (after it, async-signal-safe calls only).
  std::vector<std::string> args{FRUGAL_BINARY,
                                "prepare",
                                dir.file("c.jsonl"),
                                "--format",
                                "chat",
                                "--tokenizer",
                                "hf:" + dir.file("tokenizer.json"),
                                "--out",
                                dir.file("ds"),
                                "--quiet"};
  std::vector<std::string> env{"FRUGAL_PYTHON=/bin/sh", "FRUGAL_HF_TOKENIZER=" + dir.file("helper.sh")};
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  for (char** e = environ; *e; ++e) envp.push_back(*e);
  envp.push_back(nullptr);
  const pid_t prepare = ::fork();
  ASSERT_GE(prepare, 0);
  if (prepare == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  while (!fs::exists(pid_file) && since() < 60) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(prepare, SIGKILL);
  int status = 0;
  ::waitpid(prepare, &status, 0);
  ASSERT_TRUE(fs::exists(pid_file)) << "the helper never started (prepare exited with status " << status << ")";
  const pid_t helper = std::stoi(test::read_text(pid_file));
  const auto killed = std::chrono::steady_clock::now();
  while (running(helper) && std::chrono::steady_clock::now() - killed < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const bool alive = running(helper);
  if (alive) ::kill(helper, SIGKILL);
  EXPECT_FALSE(alive) << "the template helper (pid " << helper << ") outlived the prepare that started it";
}

}  // namespace
}  // namespace frugal::masked_prepare_test
