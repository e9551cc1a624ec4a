// CUDA availability, asked at run time.
//
// CudaAvailable() is OK when Loom was built with the toolkit (LOOM_HAVE_CUDA)
// and a device answers; otherwise it is Unavailable with the reason ("built
// without CUDA", or the driver's own message such as "CUDA driver version is
// insufficient"). GPU tests skip with that reason.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom::kernels::cuda {

absl::Status CudaAvailable();
absl::StatusOr<int> DeviceCount();
// "NVIDIA H200 (sm_90, 139 GiB)" for device `index`.
absl::StatusOr<std::string> DeviceName(int index);
// Runs a trivial kernel (y = a*x + y over n floats) on device 0 and returns the
// maximum absolute error against the host result: the build's smoke check.
absl::StatusOr<double> SaxpySmokeTest(int n);

}  // namespace loom::kernels::cuda
