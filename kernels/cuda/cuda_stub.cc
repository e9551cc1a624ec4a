// Built instead of the CUDA sources when the toolkit is absent: every entry of
// device_runtime.h, gemm.h and layernorm.h reports CUDA as unavailable (argument
// checks that need no device still answer InvalidArgument first where cheap).
#include "absl/status/status.h"
#include "kernels/cuda/device_runtime.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/layernorm.h"

namespace loom::kernels::cuda {
namespace {
absl::Status NoCuda() { return absl::UnavailableError("Loom was built without CUDA (nvcc not found)"); }
}  // namespace

absl::StatusOr<StreamEvent> StreamEvent::Create() { return NoCuda(); }
StreamEvent& StreamEvent::operator=(StreamEvent&& o) noexcept {
  ev_ = o.ev_;
  o.ev_ = nullptr;
  return *this;
}
StreamEvent::~StreamEvent() = default;
absl::Status StreamEvent::Record(StreamHandle) { return NoCuda(); }
absl::Status StreamEvent::MakeStreamWait(StreamHandle) const { return NoCuda(); }
absl::Status StreamEvent::Synchronize() const { return NoCuda(); }
absl::StatusOr<float> StreamEvent::ElapsedMsSince(const StreamEvent&) const { return NoCuda(); }

absl::StatusOr<DeviceRuntime*> DeviceRuntime::Get(int) { return NoCuda(); }
absl::Status DeviceRuntime::ComputeWaitsForComm() { return NoCuda(); }
absl::Status DeviceRuntime::CommWaitsForCompute() { return NoCuda(); }
absl::Status DeviceRuntime::SynchronizeCompute() { return NoCuda(); }
absl::Status DeviceRuntime::SynchronizeAll() { return NoCuda(); }
absl::Status DeviceRuntime::MakeCurrent() const { return NoCuda(); }
absl::StatusOr<Tensor> DeviceRuntime::Empty(absl::Span<const int64_t>, DType) { return NoCuda(); }
std::unique_ptr<DeviceBackend> MakeCudaBackend(int) { return nullptr; }

absl::StatusOr<Tensor> ToDevice(const Tensor&, Device device) {
  if (!device.is_cuda()) return absl::InvalidArgumentError("to_device: device: not a CUDA device");
  return NoCuda();
}
absl::StatusOr<Tensor> ToHost(const Tensor& dev) {
  if (!dev.device().is_cuda()) return absl::InvalidArgumentError("copy: dev: not a CUDA tensor");
  return NoCuda();
}
absl::Status CopyHostToDevice(const Tensor&, Tensor&) { return NoCuda(); }
absl::Status CopyDeviceToHost(const Tensor&, Tensor&) { return NoCuda(); }
absl::Status FillBytes(void*, size_t, int, StreamHandle) { return NoCuda(); }

const char* EpilogueName(Epilogue) { return "?"; }
absl::Status Gemm(const GemmArgs& g) {
  if (g.dtype != DType::kBF16 && g.dtype != DType::kF32)
    return absl::InvalidArgumentError("gemm: dtype: expected bf16 or f32");
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) return absl::InvalidArgumentError("gemm: m, n, k: must be positive");
  if (!g.a) return absl::InvalidArgumentError("gemm: a: null");
  return NoCuda();
}
void SetGemmAutotune(bool) {}
std::string GemmChoice(const GemmArgs&) { return ""; }

int64_t LayerNormBwdWorkspaceFloats(int64_t rows, int64_t cols) { return (rows < 512 ? rows : 512) * 2 * cols; }
absl::Status LayerNormBackward(const LayerNormBwdArgs&) { return NoCuda(); }

}  // namespace loom::kernels::cuda
