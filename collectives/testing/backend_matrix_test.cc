// The correctness-matrix test driver shared by every CPU backend: ranks are
// processes; one rendezvous per world size loops over every op, dtype and size
// (see matrix_worker.cc). The backend spec comes from the test's args, e.g.
//   cc_test(name = "ucx_backend_test", args = ["cpu:ucx"],
//           deps = [":ucx_backend", "//collectives/testing:backend_matrix_test"])
// Further args NAME=VALUE are set in the environment the ranks inherit.
#include <cstdlib>
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
  // argv: the backend spec, then optional NAME=VALUE settings exported to the
  // ranks (e.g. LOOM_GLOO_TRANSPORT=gloo).
  if (argc > 1) loom::collectives::testing::Spec() = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string kv = argv[i];
    size_t eq = kv.find('=');
    if (eq != std::string::npos) setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  }
  return RUN_ALL_TESTS();
}
