// DeviceBuffer: CUDA memory for the cuda:gloo runs of `loom bench
// collectives` (cudaMalloc, synchronous uploads and downloads for filling and
// checking). Create returns Unavailable without a CUDA device or when Loom
// was built without the CUDA toolkit (device_buffer_stub.cc).
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom::collectives::bench {

class DeviceBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceBuffer>> Create(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  absl::Status Upload(const void* host, size_t bytes);
  absl::Status Download(void* host, size_t bytes) const;

 private:
  explicit DeviceBuffer(void* data) : data_(data) {}
  void* data_;
};

}  // namespace loom::collectives::bench
