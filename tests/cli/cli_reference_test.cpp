// docs/cli.md is generated from the CLI's option tables (`frugal help --markdown`); this test fails
// when a command or flag changed without regenerating it.
#include <gtest/gtest.h>

#include "test_util.h"

namespace frugal::cli_reference_test {
namespace {

TEST(CliReference, DocsCliMdMatchesTheBinarysOwnTables) {
  test::CommandResult r = test::run_frugal("help --markdown");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(test::read_text(std::string(FRUGAL_SOURCE_DIR) + "/docs/cli.md"), r.output)
      << "regenerate with: build/frugal help --markdown > docs/cli.md";
}

TEST(CliReference, EveryCommandAndFlagHasHelpText) {
  test::CommandResult r = test::run_frugal("help --markdown");
  ASSERT_EQ(r.exit_code, 0);
  for (const char* cmd : {"## frugal train", "## frugal prepare", "## frugal config", "## frugal help"})
    EXPECT_NE(r.output.find(cmd), std::string::npos) << cmd;
  // A table row with an empty description ends in "|  |".
  EXPECT_EQ(r.output.find("|  |\n"), std::string::npos) << "an option without help text";
  EXPECT_NE(r.output.find("| `--set` | KEY=VALUE ... |"), std::string::npos);
}

}  // namespace
}  // namespace frugal::cli_reference_test
