// Runs every ConsistencyCase of every NN op through the shared check
// (kernels/testing/consistency.h) on three input draws, and checks the NN ops'
// structure (cases, backward-op reasons).
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/registry.h"
#include "kernels/testing/consistency.h"

namespace loom::kernels::cpu::nn::testing {
namespace {

const std::vector<std::string> kNnOps = {
    "gelu", "gelu_backward", "silu", "silu_backward", "softmax", "softmax_backward", "log_softmax",
    "log_softmax_backward", "layernorm", "layernorm_backward", "rmsnorm", "rmsnorm_backward", "embedding",
    "embedding_backward", "cross_entropy", "cross_entropy_backward", "rope", "dropout", "grad_norm", "adamw",
};

class NnConsistency : public ::testing::TestWithParam<std::string> {};

TEST_P(NnConsistency, AllCases) {
  const kernels::OpDef* def = kernels::OpRegistry::Global().Find(GetParam());
  ASSERT_NE(def, nullptr) << GetParam() << " not registered";
  EXPECT_GE(def->cases.size(), 2u) << "fewer than 2 consistency cases";
  EXPECT_TRUE(def->grad || !def->no_grad_reason.empty());
  EXPECT_TRUE(def->kernels.count(DeviceKind::kCPU));
  if (GetParam().find("_backward") != std::string::npos) {
    std::string fwd = GetParam().substr(0, GetParam().size() - 9);
    EXPECT_EQ(def->no_grad_reason, "backward op of " + fwd);
  }
  // Several draws per case: the shared consistency test draws its own inputs.
  for (const kernels::ConsistencyCase& c : def->cases) {
    for (uint64_t seed : {1, 7, 12345}) {
      kernels::testing::CaseReport r = kernels::testing::CheckCase(*def, c, {}, seed);
      std::printf("%-22s %-28s seed %-5d fwd %.2e  fd %.2e  kgrad %.2e\n", def->name.c_str(), c.name.c_str(),
                  static_cast<int>(seed), r.forward_error, r.grad_fd_error, r.grad_kernel_error);
      for (const std::string& f : r.failures) ADD_FAILURE() << f << " (seed " << seed << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, NnConsistency, ::testing::ValuesIn(kNnOps),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace loom::kernels::cpu::nn::testing
