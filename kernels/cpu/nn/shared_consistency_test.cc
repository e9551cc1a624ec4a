// The NN ops through the shared consistency check (kernels/testing), so a
// change here is caught in this package without linking every op library.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/registry.h"
#include "kernels/testing/consistency.h"

namespace loom::ops::testing {
namespace {

TEST(NnSharedConsistency, AllNnOps) {
  const std::vector<std::string> ops = {
      "gelu", "gelu_backward", "silu", "silu_backward", "softmax", "softmax_backward", "log_softmax",
      "log_softmax_backward", "layernorm", "layernorm_backward", "rmsnorm", "rmsnorm_backward", "embedding",
      "embedding_backward", "cross_entropy", "cross_entropy_backward", "rope", "grad_norm", "adamw"};
  for (const std::string& name : ops) {
    const OpDef* def = OpRegistry::Global().Find(name);
    ASSERT_NE(def, nullptr) << name;
    for (const std::string& f : CheckDefinition(*def)) ADD_FAILURE() << f;
    for (const ConsistencyCase& c : def->cases) {
      CaseReport r = CheckCase(*def, c);
      for (const std::string& f : r.failures) ADD_FAILURE() << f;
    }
  }
}

}  // namespace
}  // namespace loom::ops::testing
