#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_device.h"

namespace loom::kernels::cuda {
namespace {

absl::Status FromCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::UnavailableError(std::string(what) + ": " + cudaGetErrorString(e));
}

__global__ void Saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

}  // namespace

absl::StatusOr<int> DeviceCount() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return FromCuda(e, "cudaGetDeviceCount");
  return n;
}

absl::Status CudaAvailable() {
  auto n = DeviceCount();
  if (!n.ok()) return n.status();
  if (*n == 0) return absl::UnavailableError("no CUDA device visible");
  return absl::OkStatus();
}

absl::StatusOr<std::string> DeviceName(int index) {
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, index);
  if (e != cudaSuccess) return FromCuda(e, "cudaGetDeviceProperties");
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.totalGlobalMem >> 30) + " GiB)";
}

absl::StatusOr<double> SaxpySmokeTest(int n) {
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) { x[i] = 0.5f * i; y[i] = 1.0f - i; }
  float *dx = nullptr, *dy = nullptr;
  absl::Status s = FromCuda(cudaMalloc(&dx, n * sizeof(float)), "cudaMalloc");
  if (s.ok()) s = FromCuda(cudaMalloc(&dy, n * sizeof(float)), "cudaMalloc");
  if (s.ok()) s = FromCuda(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  if (s.ok()) s = FromCuda(cudaMemcpy(dy, y.data(), n * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  if (s.ok()) {
    Saxpy<<<(n + 255) / 256, 256>>>(n, 2.0f, dx, dy);
    s = FromCuda(cudaGetLastError(), "Saxpy launch");
  }
  std::vector<float> out(n);
  if (s.ok()) s = FromCuda(cudaMemcpy(out.data(), dy, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(dx);
  cudaFree(dy);
  if (!s.ok()) return s;
  double err = 0;
  for (int i = 0; i < n; ++i) err = std::fmax(err, std::fabs(out[i] - (2.0f * x[i] + y[i])));
  return err;
}

}  // namespace loom::kernels::cuda
