// Built when the toolkit is absent: CUDA reports itself unavailable.
#include "kernels/cuda/cuda_device.h"

namespace loom::kernels::cuda {
namespace {
absl::Status NoCuda() { return absl::UnavailableError("Loom was built without CUDA (nvcc not found)"); }
}  // namespace
absl::StatusOr<int> DeviceCount() { return NoCuda(); }
absl::Status CudaAvailable() { return NoCuda(); }
absl::StatusOr<std::string> DeviceName(int) { return NoCuda(); }
absl::StatusOr<double> SaxpySmokeTest(int) { return NoCuda(); }
}  // namespace loom::kernels::cuda
