#include "collectives/bench/device_buffer.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"

namespace loom::collectives::bench {
namespace {

absl::Status CudaError(absl::string_view what, cudaError_t e) {
  return absl::UnavailableError(absl::StrCat("bench: ", what, ": ", cudaGetErrorString(e)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceBuffer>> DeviceBuffer::Create(size_t bytes) {
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, bytes == 0 ? 1 : bytes); e != cudaSuccess) {
    return CudaError(absl::StrCat("cudaMalloc(", bytes, ")"), e);
  }
  return std::unique_ptr<DeviceBuffer>(new DeviceBuffer(p));
}

DeviceBuffer::~DeviceBuffer() { cudaFree(data_); }

absl::Status DeviceBuffer::Upload(const void* host, size_t bytes) {
  if (cudaError_t e = cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice); e != cudaSuccess) {
    return CudaError("upload", e);
  }
  return absl::OkStatus();
}

absl::Status DeviceBuffer::Download(void* host, size_t bytes) const {
  if (cudaError_t e = cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost); e != cudaSuccess) {
    return CudaError("download", e);
  }
  return absl::OkStatus();
}

}  // namespace loom::collectives::bench
