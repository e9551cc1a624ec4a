#include "base/testing/full_sweep.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace loom::testing {
namespace {

// Restores LOOM_FULL as the test found it.
class FullSweepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* v = std::getenv("LOOM_FULL");
    had_ = v != nullptr;
    if (had_) saved_ = v;
  }
  void TearDown() override {
    if (had_) {
      setenv("LOOM_FULL", saved_.c_str(), 1);
    } else {
      unsetenv("LOOM_FULL");
    }
  }
  bool had_ = false;
  std::string saved_;
};

TEST_F(FullSweepTest, OnlyTheValueOneTurnsItOn) {
  unsetenv("LOOM_FULL");
  EXPECT_FALSE(FullSweep());
  for (const char* off : {"", "0", "true", "yes", "10", " 1", "1 "}) {
    setenv("LOOM_FULL", off, 1);
    EXPECT_FALSE(FullSweep()) << "LOOM_FULL='" << off << "'";
  }
  setenv("LOOM_FULL", "1", 1);
  EXPECT_TRUE(FullSweep());
}

}  // namespace
}  // namespace loom::testing
