// Config resolution: precedence, origins, round trip, and every error path.
#include "frugal/core/config_loader.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "frugal/core/errors.h"
#include "test_util.h"

namespace frugal::config_loader_test {
namespace {

using test::TempDir;
using test::write_text;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no ConfigError>";
}

TEST(ConfigLoader, DefaultsComeFromTheStructs) {
  auto rc = resolve_config("", {}, {});
  EXPECT_EQ(rc.config.run.name, "demo");
  EXPECT_EQ(rc.config.model.layers, Config{}.model.layers);
  EXPECT_EQ(rc.origins.at("train.lr").kind, ValueOrigin::Kind::kDefault);
}

TEST(ConfigLoader, PrecedenceIsDefaultThenEnvThenFileThenSet) {
  TempDir dir;
  write_text(dir.file("c.toml"), "[train]\nsteps = 30\nlr = 0.01\n");
  std::map<std::string, std::string> env = {
      {"FRUGAL_TRAIN_STEPS", "20"}, {"FRUGAL_TRAIN_WARMUP_STEPS", "7"}, {"FRUGAL_TRAIN_LR", "0.5"}};
  auto rc = resolve_config(dir.file("c.toml"), {"train.lr=0.002"}, env);
  EXPECT_EQ(rc.config.train.warmup_steps, 7);   // env beats default
  EXPECT_EQ(rc.config.train.steps, 30);         // file beats env
  EXPECT_DOUBLE_EQ(rc.config.train.lr, 0.002);  // --set beats file
  EXPECT_EQ(rc.config.model.embd, Config{}.model.embd);
  EXPECT_EQ(rc.origins.at("train.warmup_steps").describe(), "env FRUGAL_TRAIN_WARMUP_STEPS");
  EXPECT_EQ(rc.origins.at("train.steps").describe(), "file " + dir.file("c.toml") + ":2");
  EXPECT_EQ(rc.origins.at("train.lr").describe(), "--set");
}

// The banner lists what differs from the defaults, with its origin, not every key (100+ lines).
TEST(ConfigLoader, TheSummaryListsOnlyTheValuesThatAreNotDefaults) {
  const std::string some =
      resolve_config("", {"train.lr=0.002", "model.layers=6"}, {{"FRUGAL_TRAIN_STEPS", "77"}}).summary();
  EXPECT_NE(some.find("train.lr"), std::string::npos) << some;
  EXPECT_NE(some.find("(--set)"), std::string::npos) << some;
  EXPECT_NE(some.find("train.steps"), std::string::npos) << some;
  EXPECT_NE(some.find("FRUGAL_TRAIN_STEPS"), std::string::npos) << some;
  EXPECT_EQ(some.find("model.heads"), std::string::npos) << some;
  EXPECT_EQ(std::count(some.begin(), some.end(), '\n'), 3) << some;
  EXPECT_EQ(resolve_config("", {}, {}).summary(), "  (all defaults)\n");
}

TEST(ConfigLoader, ResolvedTomlLoadsBackToTheSameConfig) {
  TempDir dir;
  auto rc = resolve_config(
      "", {"run.name=x-1", "train.lr=0.00125", "model.dropout=0.1", "data.source=text:/tmp/a b.txt"}, {});
  write_text(dir.file("r.toml"), rc.to_toml());
  auto back = resolve_config(dir.file("r.toml"), {}, {});
  for (const auto& k : config_schema())
    EXPECT_EQ(format_value(k.get(back.config)), format_value(k.get(rc.config))) << k.key;
  EXPECT_EQ(back.config.run.name, "x-1");
  EXPECT_DOUBLE_EQ(back.config.train.lr, 0.00125);
  EXPECT_DOUBLE_EQ(back.config.model.dropout, 0.1);
  EXPECT_EQ(to_string(back.config.data.source), "text:/tmp/a b.txt");
  EXPECT_NE(rc.to_toml().find("lr = 0.00125  # --set"), std::string::npos);
}

TEST(ConfigLoader, ShippedDemoConfigEqualsTheBuiltInDefaults) {
  auto demo = resolve_config(std::string(FRUGAL_SOURCE_DIR) + "/examples/demo.toml", {}, {});
  auto builtin = resolve_config("", {}, {});
  for (const auto& k : config_schema())
    EXPECT_EQ(format_value(k.get(demo.config)), format_value(k.get(builtin.config))) << k.key;
}

TEST(ConfigLoader, UnknownKeyInFileNamesKeyFileLineAndSuggestion) {
  TempDir dir;
  write_text(dir.file("c.toml"), "[train]\nsteps = 3\nlrr = 0.1\n");
  auto msg = error_of([&] { resolve_config(dir.file("c.toml"), {}, {}); });
  EXPECT_NE(msg.find("unknown config key 'train.lrr'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("c.toml:3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'train.lr'"), std::string::npos) << msg;
}

TEST(ConfigLoader, UnknownSectionIsRejected) {
  TempDir dir;
  write_text(dir.file("c.toml"), "[trian]\nsteps = 3\n");
  auto msg = error_of([&] { resolve_config(dir.file("c.toml"), {}, {}); });
  EXPECT_NE(msg.find("unknown config section [trian]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean [train]"), std::string::npos) << msg;
}

TEST(ConfigLoader, WrongTypeNamesExpectedAndGot) {
  TempDir dir;
  write_text(dir.file("c.toml"), "[train]\nsteps = \"many\"\n");
  auto msg = error_of([&] { resolve_config(dir.file("c.toml"), {}, {}); });
  EXPECT_NE(msg.find("train.steps"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected an integer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("c.toml:2"), std::string::npos) << msg;
}

TEST(ConfigLoader, FractionalIntegerIsRejectedButFloatAcceptsInteger) {
  TempDir dir;
  write_text(dir.file("c.toml"), "[train]\nsteps = 2.5\n");
  EXPECT_NE(error_of([&] { resolve_config(dir.file("c.toml"), {}, {}); }).find("expected an integer"),
            std::string::npos);
  write_text(dir.file("d.toml"), "[train]\nlr = 1\n");
  EXPECT_DOUBLE_EQ(resolve_config(dir.file("d.toml"), {}, {}).config.train.lr, 1.0);
}

TEST(ConfigLoader, OutOfRangeNamesValueAndAllowedRange) {
  auto msg = error_of([&] { resolve_config("", {"train.lr=-1"}, {}); });
  EXPECT_NE(msg.find("train.lr = -1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a number in [0, 10]"), std::string::npos) << msg;
}

TEST(ConfigLoader, BadEnvValueNamesTheVariable) {
  auto msg = error_of([&] { resolve_config("", {}, {{"FRUGAL_TRAIN_STEPS", "ten"}}); });
  EXPECT_NE(msg.find("env FRUGAL_TRAIN_STEPS"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not an integer"), std::string::npos) << msg;
}

TEST(ConfigLoader, UnknownEnvVariableInAKnownSectionIsAnError) {
  auto msg = error_of([&] { resolve_config("", {}, {{"FRUGAL_TRAIN_STPES", "3"}}); });
  EXPECT_NE(msg.find("FRUGAL_TRAIN_STPES names no config key"), std::string::npos) << msg;
  // Variables outside the config's sections are not ours to judge.
  EXPECT_NO_THROW(resolve_config("", {}, {{"FRUGAL_HOME", "/x"}}));
}

TEST(ConfigLoader, SetWithoutEqualsOrUnknownKey) {
  EXPECT_NE(error_of([&] { resolve_config("", {"train.lr"}, {}); }).find("expected section.key=value"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_config("", {"model.emdb=3"}, {}); }).find("did you mean 'model.embd'"),
            std::string::npos);
}

// A name cut short is completed within its section, in a file as in --set (before a nearer key:
// train.eval is train.eval_every, not train.beta1); otherwise the nearest key is suggested.
TEST(ConfigLoader, ShortenedKeySuggestsTheKeyItStarts) {
  auto msg = error_of([&] { resolve_config("", {"train.warmup=2"}, {}); });
  EXPECT_NE(msg.find("did you mean 'train.warmup_steps'"), std::string::npos) << msg;
  TempDir dir;
  write_text(dir.file("c.toml"), "[checkpoint]\nevery = 10\n");
  msg = error_of([&] { resolve_config(dir.file("c.toml"), {}, {}); });
  EXPECT_NE(msg.find("did you mean 'checkpoint.every_steps'"), std::string::npos) << msg;
  msg = error_of([&] { resolve_config("", {"train.eval=2"}, {}); });
  EXPECT_NE(msg.find("did you mean 'train.eval_every'"), std::string::npos) << msg;
  msg = error_of([&] { resolve_config("", {"lora.rnk=2"}, {}); });
  EXPECT_NE(msg.find("did you mean 'lora.rank'"), std::string::npos) << msg;
}

TEST(ConfigLoader, StringChecksRejectBadSourceAndName) {
  EXPECT_NE(error_of([&] { resolve_config("", {"data.source=csv:x"}, {}); }).find("builtin:arith"), std::string::npos);
  EXPECT_NE(error_of([&] { resolve_config("", {"run.name=a/b"}, {}); }).find("names a folder"), std::string::npos);
  EXPECT_NE(error_of([&] { resolve_config("", {"run.device=tpu"}, {}); }).find("cuda"), std::string::npos);
}

// A list key (lora.targets, train.freeze) takes a TOML list in --set and the environment as in a file
// (--set kept it as one string, '["q_proj","v_proj"]', which the run then refused as a target).
TEST(ConfigLoader, AListKeyTakesATomlListInSetAndEnvAsInAFile) {
  TempDir dir;
  write_text(dir.file("c.toml"), "[lora]\ntargets = [\"q_proj\", \"v_proj\"]\n");
  const std::string from_file = resolve_config(dir.file("c.toml"), {}, {}).config.lora.targets;
  EXPECT_EQ(from_file, "q_proj, v_proj");
  EXPECT_EQ(resolve_config("", {R"(lora.targets=["q_proj","v_proj"])"}, {}).config.lora.targets, from_file);
  EXPECT_EQ(resolve_config("", {R"(lora.targets=[ "q_proj", 'v_proj' ])"}, {}).config.lora.targets, from_file);
  EXPECT_EQ(resolve_config("", {}, {{"FRUGAL_LORA_TARGETS", R"(["q_proj", "v_proj"])"}}).config.lora.targets,
            from_file);
  EXPECT_EQ(resolve_config("", {"train.freeze=[]"}, {}).config.train.freeze, "");
  EXPECT_EQ(resolve_config("", {"lora.targets=q_proj,v_proj"}, {}).config.lora.targets, "q_proj,v_proj");
  // The shell took the quotes away: say so, with both spellings that work.
  std::string msg = error_of([&] { resolve_config("", {"lora.targets=[q_proj,v_proj]"}, {}); });
  EXPECT_NE(msg.find("lora.targets = '[q_proj,v_proj]' (--set lora.targets): a list of unquoted names"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(R"(--set 'lora.targets=["a", "b"]')"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--set lora.targets=a,b"), std::string::npos) << msg;
  msg = error_of([&] { resolve_config("", {R"(train.freeze=["a", 3])"}, {}); });
  EXPECT_NE(msg.find("train.freeze"), std::string::npos) << msg;
  EXPECT_NE(msg.find("other than strings"), std::string::npos) << msg;
  // A key that is not a list keeps its text as it is.
  EXPECT_EQ(resolve_config("", {"run.out_dir=[x]"}, {}).config.run.out_dir, "[x]");
}

TEST(ConfigLoader, CrossKeyCheckHeadsDivideEmbd) {
  auto msg = error_of([&] { resolve_config("", {"model.heads=3", "model.embd=64"}, {}); });
  EXPECT_NE(msg.find("model.heads = 3 must divide model.embd = 64"), std::string::npos) << msg;
}

TEST(ConfigLoader, TomlSyntaxErrorNamesFileLineAndColumn) {
  TempDir dir;
  write_text(dir.file("c.toml"), "[train]\nsteps = = 3\n");
  auto msg = error_of([&] { resolve_config(dir.file("c.toml"), {}, {}); });
  EXPECT_NE(msg.find("c.toml:2:"), std::string::npos) << msg;
}

TEST(ConfigLoader, KeyOutsideASectionIsRejected) {
  TempDir dir;
  write_text(dir.file("c.toml"), "steps = 3\n");
  auto msg = error_of([&] { resolve_config(dir.file("c.toml"), {}, {}); });
  EXPECT_NE(msg.find("must be a [section] table"), std::string::npos) << msg;
}

TEST(ConfigSchema, DocsConfigMdIsUpToDate) {
  std::string path = std::string(FRUGAL_SOURCE_DIR) + "/docs/config.md";
  EXPECT_EQ(test::read_text(path), config_reference_markdown())
      << "regenerate with: build/frugal config --markdown > docs/config.md";
}

TEST(ConfigSchema, EveryKeyHasHelpEnvNameAndAValidDefault) {
  Config defaults;
  for (const auto& k : config_schema()) {
    EXPECT_FALSE(k.help.empty()) << k.key;
    EXPECT_EQ(k.env_name().rfind("FRUGAL_", 0), 0u) << k.key;
    EXPECT_EQ(find_key(k.key), &k);
  }
  EXPECT_EQ(find_key("train.warmup_steps")->env_name(), "FRUGAL_TRAIN_WARMUP_STEPS");
  EXPECT_NO_THROW(validate_config(defaults));
}

}  // namespace
}  // namespace frugal::config_loader_test
