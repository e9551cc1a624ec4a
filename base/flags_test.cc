#include "base/flags.h"

#include <cstdlib>
#include <sstream>

#include "gtest/gtest.h"

namespace loom {
namespace {

struct Parsed {
  std::optional<int> rc;
  std::string out, err;
};

struct Fixture {
  std::string name = "none", addr;
  int steps = 0;
  int64_t big = 0;
  double lr = 0;
  bool json = false, fast = true;
  std::vector<std::string> states, files;
  FlagSet fs{"loom test", "FILE...", "A command for the tests."};
  Fixture() {
    fs.String("name", &name, "NAME", "a name")
        .Int("steps", &steps, "N", "steps", 1)
        .Int64("big", &big, "N", "a big count", 0, 1LL << 40)
        .Double("lr", &lr, "X", "a rate", 0, 1)
        .Bool("json", &json, "JSON output")
        .Bool("fast", &fast, "go fast")
        .Repeated("state", &states, "STATE", "a state")
        .String("coordinator", &addr, "HOST:PORT", "the coordinator")
        .Env("LOOM_FLAGS_TEST_ADDR")
        .Positionals(&files, "FILE", 1, 2);
  }
  Parsed Run(const std::vector<std::string>& args) {
    std::ostringstream out, err;
    Parsed p;
    p.rc = fs.Parse(args, out, err);
    p.out = out.str();
    p.err = err.str();
    return p;
  }
};

TEST(Flags, BothFormsBooleansRepeatedAndPositionals) {
  Fixture f;
  Parsed p = f.Run({"a.yaml", "--name", "x", "--steps=7", "--big", "1099511627776", "--lr=0.5", "--json",
                    "--no-fast", "--state", "running", "--state=queued", "b.yaml"});
  ASSERT_FALSE(p.rc.has_value()) << p.err;
  EXPECT_EQ(f.name, "x");
  EXPECT_EQ(f.steps, 7);
  EXPECT_EQ(f.big, 1LL << 40);
  EXPECT_DOUBLE_EQ(f.lr, 0.5);
  EXPECT_TRUE(f.json);
  EXPECT_FALSE(f.fast);
  EXPECT_EQ(f.states, (std::vector<std::string>{"running", "queued"}));
  EXPECT_EQ(f.files, (std::vector<std::string>{"a.yaml", "b.yaml"}));
  EXPECT_TRUE(f.fs.Seen("steps"));
  EXPECT_FALSE(f.fs.Seen("coordinator"));
}

TEST(Flags, BoolTakesAnInlineValueButNeverTheNextArgument) {
  Fixture f;
  ASSERT_FALSE(f.Run({"--json=false", "--fast", "true"}).rc.has_value());
  EXPECT_FALSE(f.json);
  EXPECT_EQ(f.files, (std::vector<std::string>{"true"}));
  Parsed p = Fixture().Run({"a", "--json=maybe"});
  EXPECT_EQ(p.rc, 2);
  EXPECT_NE(p.err.find("--json: expected true or false, got 'maybe'"), std::string::npos) << p.err;
}

TEST(Flags, HelpPrintsUsageFromTheDeclarationsToOut) {
  Fixture f;
  Parsed p = f.Run({"a", "--steps", "bogus", "--help"});
  EXPECT_EQ(p.rc, 0);
  EXPECT_TRUE(p.err.empty());
  EXPECT_EQ(p.out, f.fs.Usage());
  for (const char* s : {"usage: loom test [flags] FILE...", "--steps N", "--[no-]json", "--state STATE",
                        "(repeatable)", "[env LOOM_FLAGS_TEST_ADDR]", "--help"})
    EXPECT_NE(p.out.find(s), std::string::npos) << s << "\n" << p.out;
  EXPECT_EQ(Fixture().Run({"-h"}).rc, 0);
}

TEST(Flags, UnknownFlagSuggestsTheNearest) {
  Parsed p = Fixture().Run({"a", "--setps", "3"});
  EXPECT_EQ(p.rc, 2);
  EXPECT_NE(p.err.find("loom test: unknown flag --setps (did you mean --steps?)"), std::string::npos) << p.err;
  p = Fixture().Run({"a", "--no-jsn"});
  EXPECT_NE(p.err.find("unknown flag --no-jsn (did you mean --no-json?)"), std::string::npos) << p.err;
  p = Fixture().Run({"a", "--completely-different"});
  EXPECT_EQ(p.rc, 2);
  EXPECT_NE(p.err.find("unknown flag --completely-different\n"), std::string::npos) << p.err;
  p = Fixture().Run({"a", "-x"});
  EXPECT_EQ(p.rc, 2);
  EXPECT_NE(p.err.find("unknown flag -x"), std::string::npos) << p.err;
}

TEST(Flags, BadValuesNameTheFlagAndTheValue) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"a", "--steps", "0"}, "--steps: expected a positive integer, got '0'"},
           {{"a", "--steps=x"}, "--steps: expected a positive integer, got 'x'"},
           {{"a", "--lr", "nan"}, "--lr: expected a number in [0, 1], got 'nan'"},
           {{"a", "--big", "-1"}, "--big: expected an integer in [0, 1099511627776], got '-1'"},
           {{"a", "--lr", "2"}, "--lr: expected a number in [0, 1], got '2'"},
           {{"a", "--name"}, "--name: missing value"},
           {{}, "missing FILE"},
           {{"a", "b", "c"}, "unexpected argument 'c'"},
       }) {
    Parsed p = Fixture().Run(c.args);
    EXPECT_EQ(p.rc, 2) << c.message;
    EXPECT_NE(p.err.find("loom test: " + c.message), std::string::npos) << p.err;
    EXPECT_NE(p.err.find("loom test --help"), std::string::npos) << p.err;
  }
}

TEST(Flags, DoubleDashEndsFlagsAndEnvFillsAbsentFlags) {
  setenv("LOOM_FLAGS_TEST_ADDR", "10.0.0.1:7070", 1);
  Fixture f;
  ASSERT_FALSE(f.Run({"--", "--json", "-h"}).rc.has_value());
  EXPECT_EQ(f.files, (std::vector<std::string>{"--json", "-h"}));
  EXPECT_FALSE(f.json);
  EXPECT_EQ(f.addr, "10.0.0.1:7070");
  EXPECT_TRUE(f.fs.Seen("coordinator"));
  Fixture g;
  ASSERT_FALSE(g.Run({"a", "--coordinator=h:1"}).rc.has_value());
  EXPECT_EQ(g.addr, "h:1");  // the command line wins over the environment
  unsetenv("LOOM_FLAGS_TEST_ADDR");
}

TEST(Flags, GreedyRepeatedTakesArgumentsUpToTheNextFlag) {
  std::vector<std::string> inputs, rest;
  bool json = false;
  FlagSet fs("loom test", "");
  fs.Repeated("input", &inputs, "FILE", "inputs").Greedy().Bool("json", &json, "json").Positionals(&rest, "X", 0, 9);
  std::ostringstream out, err;
  ASSERT_FALSE(fs.Parse({"--input", "a", "b", "--json", "c", "--input=d", "e"}, out, err).has_value()) << err.str();
  EXPECT_EQ(inputs, (std::vector<std::string>{"a", "b", "d", "e"}));
  EXPECT_EQ(rest, (std::vector<std::string>{"c"}));
  EXPECT_TRUE(json);
}

TEST(Flags, EditDistance) {
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("steps", "setps"), 2u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("same", "same"), 0u);
}

}  // namespace
}  // namespace loom
