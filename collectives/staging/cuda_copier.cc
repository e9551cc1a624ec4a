#include "collectives/staging/cuda_copier.h"

#include <cuda_runtime.h>

#include <thread>

#include "absl/strings/str_cat.h"

namespace loom::collectives::staging {
namespace {

absl::Status CudaError(absl::string_view what, cudaError_t e) {
  return absl::UnavailableError(absl::StrCat("cuda:gloo: ", what, ": ", cudaGetErrorString(e)));
}

class CudaCopyEvent : public CopyEvent {
 public:
  CudaCopyEvent(cudaEvent_t event, int device) : event_(event), device_(device) {}
  ~CudaCopyEvent() override {
    cudaSetDevice(device_);
    cudaEventDestroy(event_);
  }
  absl::Status Wait(absl::Time deadline) override {
    cudaSetDevice(device_);
    // Polls (the deadline rules out cudaEventSynchronize): yields for the
    // first kSpin, which covers a 1 MiB piece's copy (about 40-80 us), so a
    // ring waiting for its next piece wakes as it lands; then sleeps between
    // polls (each sleep lasts the timer slack, about 50 us, at least), so
    // that a long copy leaves the cores to the host reductions it overlaps.
    constexpr absl::Duration kSpin = absl::Microseconds(300);
    const absl::Time start = absl::Now();
    while (true) {
      cudaError_t e = cudaEventQuery(event_);
      if (e == cudaSuccess) return absl::OkStatus();
      if (e != cudaErrorNotReady) return CudaError("copy", e);
      const absl::Time now = absl::Now();
      if (now >= deadline) return absl::DeadlineExceededError("cuda:gloo: copy did not finish in time");
      if (now - start < kSpin) {
        std::this_thread::yield();
      } else {
        absl::SleepFor(absl::Microseconds(10));
      }
    }
  }

 private:
  cudaEvent_t event_;
  int device_;
};

class CudaCopier : public Copier {
 public:
  CudaCopier(int device, cudaStream_t to_host, cudaStream_t to_device)
      : device_(device), to_host_(to_host), to_device_(to_device) {}
  ~CudaCopier() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(to_host_);
    cudaStreamSynchronize(to_device_);
    if (host_ != nullptr) cudaFreeHost(host_);
    cudaStreamDestroy(to_host_);
    cudaStreamDestroy(to_device_);
  }

  absl::StatusOr<void*> HostBuffer(size_t bytes) override {
    if (bytes <= host_bytes_) return host_;
    cudaSetDevice(device_);
    cudaStreamSynchronize(to_host_);
    cudaStreamSynchronize(to_device_);
    if (host_ != nullptr) cudaFreeHost(host_);
    host_ = nullptr;
    host_bytes_ = 0;
    if (cudaError_t e = cudaHostAlloc(&host_, bytes, cudaHostAllocDefault); e != cudaSuccess) {
      host_ = nullptr;
      return CudaError(absl::StrCat("cudaHostAlloc(", bytes, " bytes)"), e);
    }
    host_bytes_ = bytes;
    return host_;
  }
  absl::StatusOr<std::unique_ptr<CopyEvent>> ToHost(void* host, const void* device, size_t bytes) override {
    return Copy(host, device, bytes, cudaMemcpyDeviceToHost, to_host_);
  }
  absl::StatusOr<std::unique_ptr<CopyEvent>> ToDevice(void* device, const void* host, size_t bytes) override {
    return Copy(device, host, bytes, cudaMemcpyHostToDevice, to_device_);
  }
  absl::Status ToDeviceQueued(void* device, const void* host, size_t bytes) override {
    cudaSetDevice(device_);
    if (cudaError_t e = cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, to_device_); e != cudaSuccess) {
      return CudaError("cudaMemcpyAsync", e);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<CopyEvent>> ToDeviceFence() override {
    cudaSetDevice(device_);
    return Record(to_device_);
  }
  absl::Status RegisterHost(void* host, size_t bytes) override {
    cudaSetDevice(device_);
    if (cudaError_t e = cudaHostRegister(host, bytes, cudaHostRegisterPortable); e != cudaSuccess) {
      return CudaError(absl::StrCat("cudaHostRegister(", bytes, " bytes)"), e);
    }
    return absl::OkStatus();
  }
  void UnregisterHost(void* host) override {
    cudaSetDevice(device_);
    cudaHostUnregister(host);
  }

 private:
  absl::StatusOr<std::unique_ptr<CopyEvent>> Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                                  cudaStream_t stream) {
    cudaSetDevice(device_);
    if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, stream); e != cudaSuccess) {
      return CudaError("cudaMemcpyAsync", e);
    }
    return Record(stream);
  }
  // An event after everything issued on `stream` so far.
  absl::StatusOr<std::unique_ptr<CopyEvent>> Record(cudaStream_t stream) {
    cudaEvent_t event;
    if (cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming); e != cudaSuccess) {
      return CudaError("cudaEventCreate", e);
    }
    if (cudaError_t e = cudaEventRecord(event, stream); e != cudaSuccess) {
      cudaEventDestroy(event);
      return CudaError("cudaEventRecord", e);
    }
    return std::unique_ptr<CopyEvent>(std::make_unique<CudaCopyEvent>(event, device_));
  }

  int device_;
  cudaStream_t to_host_, to_device_;
  void* host_ = nullptr;
  size_t host_bytes_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Copier>> CreateCudaCopier() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return absl::UnavailableError(absl::StrCat("cuda:gloo: no CUDA device: ",
                                               e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0"));
  }
  int device = 0;
  if (e = cudaGetDevice(&device); e != cudaSuccess) return CudaError("cudaGetDevice", e);
  cudaStream_t to_host, to_device;
  if (e = cudaStreamCreate(&to_host); e != cudaSuccess) return CudaError("cudaStreamCreate", e);
  if (e = cudaStreamCreate(&to_device); e != cudaSuccess) {
    cudaStreamDestroy(to_host);
    return CudaError("cudaStreamCreate", e);
  }
  return std::unique_ptr<Copier>(std::make_unique<CudaCopier>(device, to_host, to_device));
}

}  // namespace loom::collectives::staging
