// Runs the shared consistency check (kernels/testing/consistency.h) over the
// ops this package registers, so a broken tensor-op case fails here, next to
// the code, as well as in the registry-wide test.
#include <cstdio>

#include "gtest/gtest.h"
#include "kernels/registry.h"
#include "kernels/testing/consistency.h"

namespace loom::kernels::cpu::testing {
namespace {

TEST(TensorOpsConsistency, EveryCase) {
  int cases = 0;
  for (const std::string& name : OpRegistry::Global().Names()) {
    const OpDef* def = OpRegistry::Global().Find(name);
    for (const std::string& f : kernels::testing::CheckDefinition(*def)) ADD_FAILURE() << f;
    for (const ConsistencyCase& c : def->cases) {
      kernels::testing::CaseReport r = kernels::testing::CheckCase(*def, c);
      ++cases;
      std::printf("%-16s %-26s fwd %9.3g  grad-fd %9.3g  grad-kern %9.3g\n", name.c_str(), c.name.c_str(),
                  r.forward_error, r.grad_fd_error, r.grad_kernel_error);
      for (const std::string& f : r.failures) ADD_FAILURE() << f;
    }
  }
  EXPECT_GT(cases, 80);
}

}  // namespace
}  // namespace loom::kernels::cpu::testing
