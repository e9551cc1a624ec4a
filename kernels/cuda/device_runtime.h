// The CUDA device runtime: per-device streams, events, the caching allocator,
// and host<->device copies of loom::Tensor.
//
// DeviceRuntime::Get(i) creates (once, never destroyed) the runtime of device
// cuda:i: a compute stream and a communication stream (non-blocking, the comm
// stream at the higher priority), and a CachingAllocator whose current stream is
// the compute stream. Tensors on the device are ordinary Tensors whose storage
// comes from that allocator:
//
//   LOOM_ASSIGN_OR_RETURN(DeviceRuntime* rt, DeviceRuntime::Get(0));
//   LOOM_ASSIGN_OR_RETURN(Tensor d, ToDevice(host, Device::CUDA(0)));   // async copy + sync
//   ... launch kernels on rt->compute_stream() ...
//   LOOM_RETURN_IF_ERROR(rt->CommWaitsForCompute());  // comm stream sees compute work so far
//   LOOM_ASSIGN_OR_RETURN(Tensor h, ToHost(d));
//
// No CUDA types appear here (streams are opaque StreamHandle), so code that only
// moves tensors need not include CUDA headers. Every call returns a Status; with
// no device (or a build without CUDA) Get() is Unavailable with the reason.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "kernels/cuda/caching_allocator.h"

namespace loom::kernels::cuda {

// A CUDA event (timing enabled). Movable, destroys itself.
class StreamEvent {
 public:
  static absl::StatusOr<StreamEvent> Create();
  StreamEvent() = default;
  StreamEvent(StreamEvent&& o) noexcept : ev_(o.ev_) { o.ev_ = nullptr; }
  StreamEvent& operator=(StreamEvent&& o) noexcept;
  ~StreamEvent();
  absl::Status Record(StreamHandle stream);
  // Work queued later on `stream` waits for this event (no host sync).
  absl::Status MakeStreamWait(StreamHandle stream) const;
  absl::Status Synchronize() const;
  // Milliseconds from `start` to this event (both recorded and done).
  absl::StatusOr<float> ElapsedMsSince(const StreamEvent& start) const;
  void* raw() const { return ev_; }

 private:
  void* ev_ = nullptr;
};

class DeviceRuntime {
 public:
  static absl::StatusOr<DeviceRuntime*> Get(int device = 0);

  int device_index() const { return device_; }
  Device device() const { return Device::CUDA(device_); }
  StreamHandle compute_stream() const { return compute_; }
  StreamHandle comm_stream() const { return comm_; }
  CachingAllocator* allocator() const { return alloc_.get(); }

  // Work queued later on the compute stream waits for everything queued on the
  // comm stream so far (and the reverse). No host synchronisation.
  absl::Status ComputeWaitsForComm();
  absl::Status CommWaitsForCompute();
  absl::Status SynchronizeCompute();
  absl::Status SynchronizeAll();
  // Makes this runtime's device current for the calling thread.
  absl::Status MakeCurrent() const;

  // An uninitialised contiguous device tensor from the caching allocator.
  absl::StatusOr<Tensor> Empty(absl::Span<const int64_t> shape, DType dtype);

 private:
  DeviceRuntime() = default;
  int device_ = 0;
  StreamHandle compute_ = nullptr, comm_ = nullptr;
  std::unique_ptr<CachingAllocator> alloc_;
  StreamEvent compute_done_, comm_done_;
};

// A DeviceBackend over cudaMalloc/cudaFree and CUDA events on `device`.
std::unique_ptr<DeviceBackend> MakeCudaBackend(int device);

// Copies a host tensor (any strides, any dtype) to a new contiguous tensor on
// `device` (through the compute stream, synchronised before returning).
absl::StatusOr<Tensor> ToDevice(const Tensor& host, Device device);
// Copies a contiguous device tensor to a new host tensor.
absl::StatusOr<Tensor> ToHost(const Tensor& dev);
// Copies between existing tensors of equal dtype and numel (dst contiguous).
absl::Status CopyHostToDevice(const Tensor& host, Tensor& dev);
absl::Status CopyDeviceToHost(const Tensor& dev, Tensor& host);

// Fills `bytes` bytes at device pointer `p` with `byte` (e.g. 0xFF poisons f32
// and bf16 with NaN) on the compute stream of the current device.
absl::Status FillBytes(void* p, size_t bytes, int byte, StreamHandle stream);

}  // namespace loom::kernels::cuda
