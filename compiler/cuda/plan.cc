// PlanCuda (plan.h): the pipeline of plan passes, in order. Each pass is one
// file with its own test (plan_<pass>.{h,cc}, plan_<pass>_test.cc); they share
// the PlanState of plan_state.h.
#include "compiler/cuda/plan.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/cuda/plan_add_layernorm.h"
#include "compiler/cuda/plan_arena.h"
#include "compiler/cuda/plan_attention.h"
#include "compiler/cuda/plan_copies.h"
#include "compiler/cuda/plan_copy_back.h"
#include "compiler/cuda/plan_dtypes.h"
#include "compiler/cuda/plan_fuse_ce.h"
#include "compiler/cuda/plan_gemm.h"
#include "compiler/cuda/plan_gemm_accumulate.h"
#include "compiler/cuda/plan_lower.h"
#include "compiler/cuda/plan_residual_grad.h"
#include "compiler/cuda/plan_split.h"
#include "compiler/cuda/plan_state.h"

namespace loom::compiler::cuda::plan_internal {

std::vector<std::unique_ptr<PlanPass>> PlanPipeline(const PlanOptions& o) {
  std::vector<std::unique_ptr<PlanPass>> passes;
  passes.push_back(std::make_unique<StorageDTypesPass>());
  // Fusion passes: they only decide (claims in PlanState).
  passes.push_back(std::make_unique<GemmEpiloguesPass>());
  if (o.attn_views) passes.push_back(std::make_unique<AttentionViewsPass>());
  if (o.compose_copies) passes.push_back(std::make_unique<ComposeCopiesPass>());
  if (o.fold_residual_grad) passes.push_back(std::make_unique<ResidualGradPass>());
  if (o.add_layernorm) passes.push_back(std::make_unique<AddLayerNormPass>());
  if (o.accumulate_gemms) passes.push_back(std::make_unique<GemmAccumulatePass>());
  // The launch list, then what rewrites it, then memory.
  passes.push_back(std::make_unique<LowerNodesPass>());
  passes.push_back(std::make_unique<CopyBackPass>());
  if (o.fuse_cross_entropy) passes.push_back(std::make_unique<FuseCrossEntropyPass>());
  passes.push_back(std::make_unique<SplitMasterPass>());
  passes.push_back(std::make_unique<AssignArenaPass>());
  return passes;
}

}  // namespace loom::compiler::cuda::plan_internal

namespace loom::compiler::cuda {

namespace {

// What no pass lowers, refused by name before any pass claims it (the copy and
// attention-view passes would otherwise take a stepped slice for a window).
absl::Status RefuseUnsupported(const ir::Graph& g) {
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const ir::Node& n = g.nodes()[i];
    if ((n.op == "slice" || n.op == "slice_backward") && n.attrs.GetInt("step", 1) != 1)
      return plan_internal::Unsupported(g, static_cast<int>(i), "slices with a step other than 1 are not supported");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CudaPlan> PlanCuda(const ir::Graph& g, bool bf16, const PlanOptions& options) {
  LOOM_RETURN_IF_ERROR(RefuseUnsupported(g));
  plan_internal::PlanState s(g, bf16, options);
  for (const auto& pass : plan_internal::PlanPipeline(options)) {
    absl::StatusOr<bool> changed = pass->Run(s);
    if (!changed.ok()) return changed.status();
  }
  return std::move(s.p);
}

}  // namespace loom::compiler::cuda
