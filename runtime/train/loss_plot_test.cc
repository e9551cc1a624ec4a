#include "runtime/train/loss_plot.h"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace loom::runtime::train {
namespace {

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(LossCurveText, FallingLossGoesFromTopLeftToBottomRight) {
  std::vector<std::pair<int64_t, double>> train;
  for (int s = 1; s <= 100; ++s) train.emplace_back(s, 5.0 - 3.0 * (s - 1) / 99.0);
  std::string text = LossCurveText(train, {{100, 2.5}}, 20, 6);
  auto lines = Lines(text);
  ASSERT_EQ(lines.size(), 7u) << text;
  // Each column averages 5 steps: the first 5 - 3 * 2/99, the last 2 + 3 * 2/99.
  const size_t margin = std::string("   4.939 |").size();
  EXPECT_EQ(lines[0].substr(0, margin), "   4.939 |") << text;
  EXPECT_EQ(lines[0][margin], '*') << text;                   // first column, top row
  EXPECT_EQ(lines[5].substr(0, margin), "   2.061 |") << text;
  EXPECT_EQ(lines[5].back(), '*') << text;                    // last column, bottom row
  EXPECT_NE(lines[6].find("step 1"), std::string::npos);
  EXPECT_NE(lines[6].find("100"), std::string::npos);
  EXPECT_NE(text.find('o'), std::string::npos) << text;      // the validation point
  int stars = 0;
  for (char c : text) stars += c == '*';
  EXPECT_EQ(stars, 20);                                        // one per column
}

TEST(LossCurveText, DegenerateInputs) {
  EXPECT_EQ(LossCurveText({}, {}), "");
  EXPECT_FALSE(LossCurveText({{1, 3.0}}, {}).empty());         // one point, flat range
  EXPECT_EQ(LossCurveText({{1, NAN}}, {}), "");
}

}  // namespace
}  // namespace loom::runtime::train
