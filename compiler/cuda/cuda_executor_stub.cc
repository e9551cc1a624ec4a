// CudaExecutor in builds without the CUDA toolkit: plans (so unsupported ops
// are still reported by name), then reports CUDA as unavailable.
#include "compiler/cuda/cuda_executor.h"

#include "base/status.h"

namespace loom::compiler::cuda {

absl::StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::Create(const ir::Graph& g, const CudaOptions& o) {
  LOOM_ASSIGN_OR_RETURN(CudaPlan plan, PlanCuda(g, o.bf16, PlanOptionsFor(o)));
  (void)plan;
  return absl::UnavailableError("CudaExecutor: this build has no CUDA toolkit (LOOM_NO_CUDA)");
}

absl::StatusOr<CudaBuildStats> DryBuild(const ir::Graph& g, const CudaOptions& o) {
  LOOM_ASSIGN_OR_RETURN(CudaPlan plan, PlanCuda(g, o.bf16, PlanOptionsFor(o)));
  (void)plan;
  return absl::UnavailableError("DryBuild: this build has no CUDA toolkit (LOOM_NO_CUDA)");
}

}  // namespace loom::compiler::cuda
