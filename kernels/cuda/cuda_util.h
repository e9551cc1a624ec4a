// Internal helpers for Loom's CUDA sources: CUDA error -> absl::Status.
//
// LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpy(...)) returns Unavailable for "no
// device / no driver" errors and Internal for every other failure, with the
// failing expression and CUDA's message.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::kernels::cuda {

inline absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  std::string msg = absl::StrCat(what, ": ", cudaGetErrorString(e));
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

inline cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace loom::kernels::cuda

#define LOOM_CUDA_RETURN_IF_ERROR(expr) LOOM_RETURN_IF_ERROR(::loom::kernels::cuda::CudaStatus((expr), #expr))
// After a kernel launch: the launch error (bad config, no device).
#define LOOM_CUDA_RETURN_IF_LAUNCH_ERROR(what) \
  LOOM_RETURN_IF_ERROR(::loom::kernels::cuda::CudaStatus(cudaGetLastError(), what))
