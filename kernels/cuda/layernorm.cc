// Argument checks and the launch for layernorm.h; the kernels are in
// layernorm_kernels.cu and layernorm_vec_kernels.cu.
#include "kernels/cuda/layernorm.h"

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/layernorm_kernels.h"

namespace loom::kernels::cuda {
namespace {

absl::Status NonNull(const char* op, const char* name, const void* p) {
  if (p != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, ": null"));
}

}  // namespace

int64_t LayerNormBwdWorkspaceFloats(int64_t rows, int64_t cols) {
  return launch::LayerNormBwdParts(rows) * 2 * cols;  // dw, db partial rows
}

absl::Status LayerNormBackward(const LayerNormBwdArgs& a) {
  const char* op = "layernorm_backward";
  if (a.dtype != DType::kF32 && a.dtype != DType::kBF16)
    return absl::InvalidArgumentError(absl::StrCat(op, ": dtype: expected f32 or bf16, got ", DTypeName(a.dtype)));
  if (a.rows < 0) return absl::InvalidArgumentError(absl::StrCat(op, ": rows: must be >= 0, got ", a.rows));
  if (a.cols <= 0 || a.cols > 16384)
    return absl::InvalidArgumentError(absl::StrCat(op, ": cols: must be in [1, 16384], got ", a.cols));
  if (a.rows == 0) return absl::OkStatus();
  LOOM_RETURN_IF_ERROR(NonNull(op, "dy", a.dy));
  LOOM_RETURN_IF_ERROR(NonNull(op, "x", a.x));
  LOOM_RETURN_IF_ERROR(NonNull(op, "weight", a.weight));
  LOOM_RETURN_IF_ERROR(NonNull(op, "mean", a.mean));
  LOOM_RETURN_IF_ERROR(NonNull(op, "rstd", a.rstd));
  LOOM_RETURN_IF_ERROR(NonNull(op, "dx", a.dx));
  LOOM_RETURN_IF_ERROR(NonNull(op, "dweight", a.dweight));
  LOOM_RETURN_IF_ERROR(NonNull(op, "workspace", a.workspace));
  return CudaStatus(launch::LayerNormBwd(a.dtype == DType::kBF16 ? 1 : 0, a.rows, a.cols, a.dy, a.x, a.weight, a.mean,
                                         a.rstd, a.dresidual, a.dx, a.dweight, a.dbias, a.workspace,
                                         AsStream(a.stream)),
                    op);
}

}  // namespace loom::kernels::cuda
