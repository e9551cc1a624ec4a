// DeviceRuntime over the CUDA runtime API. See device_runtime.h.
#include "kernels/cuda/device_runtime.h"

#include <cuda_runtime.h>

#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_util.h"

namespace loom::kernels::cuda {

// ---- StreamEvent -------------------------------------------------------------
absl::StatusOr<StreamEvent> StreamEvent::Create() {
  cudaEvent_t e = nullptr;
  LOOM_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
  StreamEvent ev;
  ev.ev_ = e;
  return ev;
}

StreamEvent& StreamEvent::operator=(StreamEvent&& o) noexcept {
  if (this != &o) {
    if (ev_) cudaEventDestroy(static_cast<cudaEvent_t>(ev_));
    ev_ = o.ev_;
    o.ev_ = nullptr;
  }
  return *this;
}

StreamEvent::~StreamEvent() {
  if (ev_) cudaEventDestroy(static_cast<cudaEvent_t>(ev_));
}

absl::Status StreamEvent::Record(StreamHandle stream) {
  LOOM_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(ev_), AsStream(stream)));
  return absl::OkStatus();
}

absl::Status StreamEvent::MakeStreamWait(StreamHandle stream) const {
  LOOM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(AsStream(stream), static_cast<cudaEvent_t>(ev_), 0));
  return absl::OkStatus();
}

absl::Status StreamEvent::Synchronize() const {
  LOOM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(static_cast<cudaEvent_t>(ev_)));
  return absl::OkStatus();
}

absl::StatusOr<float> StreamEvent::ElapsedMsSince(const StreamEvent& start) const {
  float ms = 0;
  LOOM_CUDA_RETURN_IF_ERROR(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.ev_), static_cast<cudaEvent_t>(ev_)));
  return ms;
}

// ---- CudaBackend -------------------------------------------------------------
namespace {

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  void* Malloc(size_t bytes) override {
    cudaSetDevice(device_);
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free OOM error
      return nullptr;
    }
    return p;
  }
  void Free(void* p) override { cudaFree(p); }
  void* RecordEvent(StreamHandle stream) override {
    cudaEvent_t e = nullptr;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    cudaEventRecord(e, AsStream(stream));
    return e;
  }
  bool EventDone(void* event) override {
    return cudaEventQuery(static_cast<cudaEvent_t>(event)) != cudaErrorNotReady;
  }
  void WaitEvent(void* event) override { cudaEventSynchronize(static_cast<cudaEvent_t>(event)); }
  void DestroyEvent(void* event) override { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }
  Device device() const override { return Device::CUDA(device_); }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<DeviceBackend> MakeCudaBackend(int device) {
  return std::make_unique<CudaBackend>(device);
}

// ---- DeviceRuntime -----------------------------------------------------------
absl::StatusOr<DeviceRuntime*> DeviceRuntime::Get(int device) {
  static std::mutex mu;
  static std::vector<DeviceRuntime*>* runtimes = new std::vector<DeviceRuntime*>();
  std::lock_guard<std::mutex> l(mu);
  int n = 0;
  LOOM_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&n));
  if (device < 0 || device >= n)
    return absl::InvalidArgumentError(absl::StrCat("device: cuda:", device, " not present (", n, " devices)"));
  if (runtimes->empty()) runtimes->resize(n, nullptr);
  if ((*runtimes)[device] != nullptr) return (*runtimes)[device];
  LOOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  int lo = 0, hi = 0;
  LOOM_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  cudaStream_t compute = nullptr, comm = nullptr;
  LOOM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&compute, cudaStreamNonBlocking, lo));
  LOOM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&comm, cudaStreamNonBlocking, hi));
  auto* rt = new DeviceRuntime();
  rt->device_ = device;
  rt->compute_ = compute;
  rt->comm_ = comm;
  rt->alloc_ = std::make_unique<CachingAllocator>(MakeCudaBackend(device));
  rt->alloc_->set_current_stream(compute);
  LOOM_ASSIGN_OR_RETURN(rt->compute_done_, StreamEvent::Create());
  LOOM_ASSIGN_OR_RETURN(rt->comm_done_, StreamEvent::Create());
  (*runtimes)[device] = rt;
  return rt;
}

absl::Status DeviceRuntime::MakeCurrent() const {
  LOOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return absl::OkStatus();
}

absl::Status DeviceRuntime::ComputeWaitsForComm() {
  LOOM_RETURN_IF_ERROR(comm_done_.Record(comm_));
  return comm_done_.MakeStreamWait(compute_);
}

absl::Status DeviceRuntime::CommWaitsForCompute() {
  LOOM_RETURN_IF_ERROR(compute_done_.Record(compute_));
  return compute_done_.MakeStreamWait(comm_);
}

absl::Status DeviceRuntime::SynchronizeCompute() {
  LOOM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(AsStream(compute_)));
  return absl::OkStatus();
}

absl::Status DeviceRuntime::SynchronizeAll() {
  LOOM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(AsStream(compute_)));
  LOOM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(AsStream(comm_)));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> DeviceRuntime::Empty(absl::Span<const int64_t> shape, DType dtype) {
  return Tensor::Empty(shape, dtype, device(), alloc_.get());
}

// ---- Copies -------------------------------------------------------------------
absl::Status CopyHostToDevice(const Tensor& host, Tensor& dev) {
  if (!host.device().is_cpu()) return absl::InvalidArgumentError("copy: host: not a CPU tensor");
  if (!dev.device().is_cuda()) return absl::InvalidArgumentError("copy: dev: not a CUDA tensor");
  if (host.dtype() != dev.dtype() || host.numel() != dev.numel() || !dev.is_contiguous())
    return absl::InvalidArgumentError(absl::StrCat("copy: dev: ", dev.DebugString(),
                                                   " does not match host ", host.DebugString()));
  LOOM_ASSIGN_OR_RETURN(DeviceRuntime * rt, DeviceRuntime::Get(dev.device().index));
  Tensor src = host.Contiguous();
  LOOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(rt->device_index()));
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev.raw_data(), src.raw_data(), src.nbytes(),
                                            cudaMemcpyHostToDevice, AsStream(rt->compute_stream())));
  return rt->SynchronizeCompute();
}

absl::Status CopyDeviceToHost(const Tensor& dev, Tensor& host) {
  if (!dev.device().is_cuda()) return absl::InvalidArgumentError("copy: dev: not a CUDA tensor");
  if (!host.device().is_cpu() || !host.is_contiguous())
    return absl::InvalidArgumentError("copy: host: not a contiguous CPU tensor");
  if (host.dtype() != dev.dtype() || host.numel() != dev.numel() || !dev.is_contiguous())
    return absl::InvalidArgumentError(absl::StrCat("copy: host: ", host.DebugString(),
                                                   " does not match dev ", dev.DebugString()));
  LOOM_ASSIGN_OR_RETURN(DeviceRuntime * rt, DeviceRuntime::Get(dev.device().index));
  LOOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(rt->device_index()));
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.raw_data(), dev.raw_data(), dev.nbytes(),
                                            cudaMemcpyDeviceToHost, AsStream(rt->compute_stream())));
  return rt->SynchronizeCompute();
}

absl::StatusOr<Tensor> ToDevice(const Tensor& host, Device device) {
  if (!device.is_cuda()) return absl::InvalidArgumentError("to_device: device: not a CUDA device");
  LOOM_ASSIGN_OR_RETURN(DeviceRuntime * rt, DeviceRuntime::Get(device.index));
  LOOM_ASSIGN_OR_RETURN(Tensor dev, rt->Empty(host.shape(), host.dtype()));
  LOOM_RETURN_IF_ERROR(CopyHostToDevice(host, dev));
  return dev;
}

absl::StatusOr<Tensor> ToHost(const Tensor& dev) {
  LOOM_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty(dev.shape(), dev.dtype()));
  LOOM_RETURN_IF_ERROR(CopyDeviceToHost(dev, host));
  return host;
}

absl::Status FillBytes(void* p, size_t bytes, int byte, StreamHandle stream) {
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p, byte, bytes, AsStream(stream)));
  return absl::OkStatus();
}

}  // namespace loom::kernels::cuda
