// Correctness matrix for backend "tcp" (shared algorithms over TcpTransport):
// ranks are processes; one rendezvous per world size loops over every op,
// dtype and size (see testing/matrix_worker.cc).
#include "collectives/testing/multiprocess.h"
#include "gtest/gtest.h"

namespace loom::collectives::testing {
namespace {

class TcpMatrix : public ::testing::TestWithParam<int> {};

TEST_P(TcpMatrix, AllOps) {
  RunResult r = RunRanks({.worker = "matrix", .world = GetParam(), .arg = "cpu:tcp",
                          .deadline = absl::Seconds(90)});
  EXPECT_TRUE(r.ok()) << r.Summary();
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, TcpMatrix, ::testing::Values(1, 2, 3, 4, 8));

}  // namespace
}  // namespace loom::collectives::testing

int main(int argc, char** argv) {
  int rc;
  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
