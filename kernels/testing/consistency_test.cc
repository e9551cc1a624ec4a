// Walks the whole op registry: every op linked into this binary is checked
// against its reference and its gradient rule against finite differences.
// See consistency.h for what is checked.
#include <cstdio>
#include <set>

#include "gtest/gtest.h"
#include "kernels/registry.h"
#include "kernels/testing/consistency.h"

namespace loom::kernels::testing {
namespace {

TEST(OpConsistency, EveryRegisteredOp) {
  const auto names = OpRegistry::Global().Names();
  ASSERT_FALSE(names.empty());
  std::printf("%-24s %-28s %12s %12s %12s\n", "op", "case", "fwd err", "grad-fd err", "grad-kern err");
  int cases = 0;
  for (const std::string& name : names) {
    if (name.rfind("test.", 0) == 0) continue;  // ops registered by tests themselves
    const OpDef* def = OpRegistry::Global().Find(name);
    for (const std::string& f : CheckDefinition(*def)) ADD_FAILURE() << f;
    for (const ConsistencyCase& c : def->cases) {
      CaseReport r = CheckCase(*def, c);
      ++cases;
      std::printf("%-24s %-28s %12.3g %12.3g %12.3g\n", name.c_str(), c.name.c_str(), r.forward_error,
                  r.grad_fd_error, r.grad_kernel_error);
      for (const std::string& f : r.failures) ADD_FAILURE() << f;
    }
  }
  std::printf("%zu ops, %d cases\n", names.size(), cases);
}

// The catalogue every model relies on; an op missing here means a library was
// not linked or an op was renamed.
TEST(OpConsistency, CatalogueIsRegistered) {
  const std::set<std::string> have = [] {
    auto n = OpRegistry::Global().Names();
    return std::set<std::string>(n.begin(), n.end());
  }();
  for (const char* op : {"matmul", "add", "sub", "mul", "div", "exp", "log", "tanh", "sum", "mean",
                         "max", "sum_to", "broadcast_to", "reshape", "permute", "slice", "concat",
                         "cast", "gelu", "silu", "softmax", "log_softmax", "layernorm", "rmsnorm",
                         "embedding", "cross_entropy", "rope", "adamw", "grad_norm", "sdpa"}) {
    EXPECT_TRUE(have.count(op)) << "op '" << op << "' is not registered";
  }
}

TEST(OpConsistency, DetectsABrokenKernel) {
  // A deliberately wrong kernel must be caught: the check can fail.
  OpDef def;
  def.name = "test.broken_double";
  def.infer = [](absl::Span<const TensorMeta> in, const Attrs&) -> absl::StatusOr<std::vector<TensorMeta>> {
    return std::vector<TensorMeta>{in[0]};
  };
  def.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
    for (int64_t i = 0; i < in[0].numel(); ++i) out[0].SetDouble(i, 2 * in[0].GetDouble(i));
    return absl::OkStatus();
  };
  def.kernels[DeviceKind::kCPU] = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
    for (int64_t i = 0; i < in[0].numel(); ++i) out[0].SetDouble(i, 2.001 * in[0].GetDouble(i));
    return absl::OkStatus();
  };
  def.grad = [](GradBuilder& b, const GradContext& ctx) -> absl::StatusOr<std::vector<GradBuilder::Value>> {
    return std::vector<GradBuilder::Value>{ctx.grad_outputs[0]};  // wrong: should be 2 * dy
  };
  def.cases.push_back({"vec", {{{DType::kF32, {7}}}}});
  ASSERT_TRUE(OpRegistry::Global().Register(def).ok());
  CaseReport r = CheckCase(*OpRegistry::Global().Find("test.broken_double"), def.cases[0]);
  bool fwd = false, grad = false;
  for (const auto& f : r.failures) {
    fwd |= f.find("relative error") != std::string::npos && f.find("output 0") != std::string::npos;
    grad |= f.find("finite differences") != std::string::npos;
  }
  EXPECT_TRUE(fwd) << "forward mismatch not detected";
  EXPECT_TRUE(grad) << "wrong gradient not detected";
}

}  // namespace
}  // namespace loom::kernels::testing
