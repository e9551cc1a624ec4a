// The cast policy hook: decides each node's compute dtype (mixed precision).
//
// A CastPolicy looks at a node and returns the dtype its kernel should compute
// in, or nullopt to leave the node alone. CastPolicyPass writes the answers
// into Node::compute_dtype; lowerings that support mixed precision (CUDA)
// read it, the CPU executor ignores it. Two stock policies:
//
//   KeepPrecision()           // never assigns anything
//   ComputeIn(DType::kBF16, {"matmul", "sdpa"})   // these ops in bf16
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>

#include "compiler/passes/pass.h"

namespace loom::compiler::passes {

using CastPolicy = std::function<std::optional<DType>(const ir::Graph& g, const ir::Node& node)>;

CastPolicy KeepPrecision();
// Floating ops named in `ops` compute in `dtype`.
CastPolicy ComputeIn(DType dtype, std::set<std::string> ops);

class CastPolicyPass : public Pass {
 public:
  explicit CastPolicyPass(CastPolicy policy) : policy_(std::move(policy)) {}
  absl::string_view name() const override { return "cast-policy"; }
  absl::StatusOr<bool> Run(ir::Graph& g) override;

 private:
  CastPolicy policy_;
};

}  // namespace loom::compiler::passes
