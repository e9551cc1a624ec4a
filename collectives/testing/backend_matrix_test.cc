// The correctness-matrix test driver shared by every CPU backend: ranks are
// processes; one rendezvous per world size loops over every op, dtype and size
// (see matrix_worker.cc). The backend spec comes from the test's args, e.g.
//   cc_test(name = "ucx_backend_test", args = ["cpu:ucx"],
//           deps = [":ucx_backend", "//collectives/testing:backend_matrix_test"])
// Further args option=value set ProcessGroupOptions tuning fields on every
// rank (e.g. "channels=3", "gloo_transport=gloo").
#include <string>

#include "collectives/testing/multiprocess.h"
#include "gtest/gtest.h"

namespace loom::collectives::testing {
namespace {

std::string& Spec() {
  static std::string spec = "cpu:tcp";
  return spec;
}

class BackendMatrix : public ::testing::TestWithParam<int> {};

TEST_P(BackendMatrix, AllOps) {
  RunResult r = RunRanks({.worker = "matrix", .world = GetParam(), .arg = Spec(),
                          .deadline = absl::Seconds(90)});
  EXPECT_TRUE(r.ok()) << Spec() << ": " << r.Summary();
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, BackendMatrix, ::testing::Values(1, 2, 3, 4, 8));

}  // namespace
}  // namespace loom::collectives::testing

int main(int argc, char** argv) {
  int rc;
  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  // argv: the backend spec, then optional option=value settings, handed to
  // the ranks with the spec (matrix_worker.cc parses them).
  if (argc > 1) loom::collectives::testing::Spec() = argv[1];
  for (int i = 2; i < argc; ++i) loom::collectives::testing::Spec() += std::string(" ") + argv[i];
  return RUN_ALL_TESTS();
}
