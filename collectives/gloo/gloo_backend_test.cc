// Correctness matrix for backend "gloo":
// ranks are processes; one rendezvous per world size loops over every op,
// dtype and size (see testing/matrix_worker.cc).
#include "collectives/testing/multiprocess.h"
#include "gtest/gtest.h"

namespace loom::collectives::testing {
namespace {

class GlooMatrix : public ::testing::TestWithParam<int> {};

TEST_P(GlooMatrix, AllOps) {
  RunResult r = RunRanks({.worker = "matrix", .world = GetParam(), .arg = "cpu:gloo",
                          .deadline = absl::Seconds(90)});
  EXPECT_TRUE(r.ok()) << r.Summary();
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooMatrix, ::testing::Values(1, 2, 3, 4, 8));

}  // namespace
}  // namespace loom::collectives::testing

int main(int argc, char** argv) {
  int rc;
  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
