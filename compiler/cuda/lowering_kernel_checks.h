// fp64-reference checks of the lowering's reductions (SumRows, the multi-tensor
// grad norm) on the GPU; prints one line per check. Returns the failure count
// (0 when built without CUDA).
#pragma once

namespace loom::compiler::cuda {

int CheckLoweringKernels();

}  // namespace loom::compiler::cuda
