// `frugal prepare --tokenizer hf:X` finds X as model.init_from = "hf:X" finds a model
// (core/hf_hub.h): a folder by that name, else hub id X's snapshot in the local Hugging Face cache
// ($HF_HOME/hub); a name that is neither is refused saying where it looked, and nothing is
// downloaded.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "frugal/core/errors.h"
#include "frugal/core/hf_hub.h"
#include "frugal/data/prepare.h"
#include "test_util.h"

namespace frugal::prepare_hub_test {
namespace {
namespace fs = std::filesystem;

// The environment variable `name` set to `value` (unset where nullopt) for the scope.
class EnvFor {
 public:
  EnvFor(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~EnvFor() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  EnvFor(const EnvFor&) = delete;
  EnvFor& operator=(const EnvFor&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// What prepare_dataset threw (its kind and message), "" when it threw nothing.
std::string error_of(const PrepareOptions& o, bool* config_error) {
  try {
    prepare_dataset(o);
  } catch (const ConfigError& e) {
    *config_error = true;
    return e.what();
  } catch (const Error& e) {
    *config_error = false;
    return e.what();
  }
  return "";
}

TEST(PrepareHub, AHubIdTokenizerIsTheCachedSnapshotsAsForModelInitFrom) {
  test::TempDir dir;
  // huggingface_hub's layout: $HF_HOME/hub/models--me--tiny-llama/{refs/main,snapshots/<hash>/}.
  const std::string repo = dir.file("hf/hub/models--me--tiny-llama");
  const std::string snapshot = repo + "/snapshots/abc123";
  fs::create_directories(snapshot);
  fs::create_directories(repo + "/refs");
  test::write_text(repo + "/refs/main", "abc123\n");
  test::write_text(snapshot + "/config.json", "{}");
  test::write_text(snapshot + "/tokenizer.json", "{}");  // never loaded: the input is refused first
  const EnvFor cache("HF_HUB_CACHE", std::nullopt), home("HF_HOME", dir.file("hf"));
  EXPECT_EQ(hf_resolve_dir("me/tiny-llama", "tokenizer.json"), snapshot);
  EXPECT_EQ(hf_resolve_dir("me/tiny-llama"), snapshot) << "model.init_from finds another folder";

  // Text that is not UTF-8 is refused before the tokenizer loads: the refusal shows that the hub id
  // was found (it was "me/tiny-llama is not a file").
  test::write_text(dir.file("l.txt"), "caf\xe9\n");
  PrepareOptions o;
  o.inputs = {dir.file("l.txt")};
  o.out_dir = dir.file("ds");
  o.tokenizer = "hf:me/tiny-llama";
  bool config_error = false;
  std::string e = error_of(o, &config_error);
  EXPECT_FALSE(config_error) << e;
  EXPECT_NE(e.find("invalid UTF-8"), std::string::npos) << e;

  // A hub id the cache does not hold: where it looked, that nothing is downloaded, how to get it.
  o.tokenizer = "hf:me/absent";
  e = error_of(o, &config_error);
  EXPECT_TRUE(config_error) << e;
  EXPECT_NE(e.find("--tokenizer hf:me/absent: no file or folder"), std::string::npos) << e;
  EXPECT_NE(e.find("the Hugging Face cache " + dir.file("hf/hub") + " has no snapshot of \"me/absent\""),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("nothing is downloaded"), std::string::npos) << e;
  EXPECT_NE(e.find("huggingface-cli download me/absent"), std::string::npos) << e;
  // A snapshot without a tokenizer.json is none for a tokenizer.
  fs::remove(snapshot + "/tokenizer.json");
  o.tokenizer = "hf:me/tiny-llama";
  e = error_of(o, &config_error);
  EXPECT_TRUE(config_error) << e;
  EXPECT_NE(e.find("has no snapshot of \"me/tiny-llama\" holding a tokenizer.json"), std::string::npos) << e;
  // A path (not a hub id) that names nothing says so, with the path it tried.
  o.tokenizer = "hf:" + dir.file("nowhere/tokenizer.json");
  e = error_of(o, &config_error);
  EXPECT_TRUE(config_error) << e;
  EXPECT_NE(e.find("no such file or folder (" + dir.file("nowhere/tokenizer.json") + ")"), std::string::npos) << e;
  EXPECT_EQ(e.find("huggingface-cli"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir.file("ds")));
}

}  // namespace
}  // namespace frugal::prepare_hub_test
