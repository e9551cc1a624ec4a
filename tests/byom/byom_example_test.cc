// The loop docs/user-guide.md ("Bring your own model") and
// examples/byom/tiny-lm.yaml describe, run as written from a fresh folder:
//
//   /usr/bin/python3 tools/loom_export.py examples/byom/tiny_lm.py:build --out tiny_lm.onnx
//   loom run examples/byom/tiny-lm.yaml
//
// (30 steps instead of the spec's 300). The job must succeed and learn: the
// loss at step 30 is below the first step's.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/loom_cli.h"

namespace loom::tests::byom {
namespace {

double StepLoss(const std::string& metrics, int step) {
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("loss") && j["step"] == step) return j["loss"];
  }
  return NAN;
}

TEST(ByomExample, ExportThenLoomRunTrains) {
  const std::string root = std::filesystem::current_path().string();
  const std::string dir = absl::StrCat(::testing::TempDir(), "/byom_example_", getpid());
  std::filesystem::create_directories(dir);
  testing::CliResult r = testing::Shell(absl::StrCat(
      "cd ", dir, " && OMP_NUM_THREADS=1 timeout 300 /usr/bin/python3 ", root, "/tools/loom_export.py ", root,
      "/examples/byom/tiny_lm.py:build --out tiny_lm.onnx && timeout 300 ", root, "/runtime/loom run ", root,
      "/examples/byom/tiny-lm.yaml --steps 30 --run-dir run"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("SUCCEEDED"), std::string::npos) << r.output;
  const double first = StepLoss(dir + "/run/metrics.jsonl", 1), last = StepLoss(dir + "/run/metrics.jsonl", 30);
  std::printf("tiny_lm: loss %.4f at step 1, %.4f at step 30\n", first, last);
  EXPECT_LT(last, first - 1.0) << r.output;
}

}  // namespace
}  // namespace loom::tests::byom
