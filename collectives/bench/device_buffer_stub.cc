// Built without the CUDA toolkit: no device buffers.
#include "collectives/bench/device_buffer.h"

namespace loom::collectives::bench {

absl::StatusOr<std::unique_ptr<DeviceBuffer>> DeviceBuffer::Create(size_t) {
  return absl::UnavailableError("bench: Loom was built without the CUDA toolkit");
}

DeviceBuffer::~DeviceBuffer() = default;

absl::Status DeviceBuffer::Upload(const void*, size_t) { return absl::UnavailableError("no CUDA"); }
absl::Status DeviceBuffer::Download(void*, size_t) const { return absl::UnavailableError("no CUDA"); }

}  // namespace loom::collectives::bench
