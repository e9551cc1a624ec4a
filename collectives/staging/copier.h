// Copier: the copy engine the staged backend drives (device <-> pinned host).
//
// A copy is issued at once and returns a CopyEvent to wait on. Copies of one
// direction run in issue order; the two directions may run concurrently (the
// CUDA copier uses one stream per direction). Host memory comes from
// HostBuffer: page-locked for CUDA, so cudaMemcpyAsync runs as DMA.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace loom::collectives::staging {

class CopyEvent {
 public:
  virtual ~CopyEvent() = default;
  // OK once the copy has landed; DeadlineExceeded if `deadline` passes first.
  [[nodiscard]] virtual absl::Status Wait(absl::Time deadline) = 0;
};

class Copier {
 public:
  virtual ~Copier() = default;
  // Host staging memory of at least `bytes`, owned by the copier. A later
  // call may replace it (the earlier pointer is then invalid).
  virtual absl::StatusOr<void*> HostBuffer(size_t bytes) = 0;
  virtual absl::StatusOr<std::unique_ptr<CopyEvent>> ToHost(void* host, const void* device, size_t bytes) = 0;
  virtual absl::StatusOr<std::unique_ptr<CopyEvent>> ToDevice(void* device, const void* host, size_t bytes) = 0;
  // A copy to the device without an event of its own, for callers that issue
  // many and wait for them together: ToDeviceFence covers it.
  virtual absl::Status ToDeviceQueued(void* device, const void* host, size_t bytes) = 0;
  // An event that completes once every copy to the device issued before it
  // has landed.
  virtual absl::StatusOr<std::unique_ptr<CopyEvent>> ToDeviceFence() = 0;
  // Makes host memory the caller mapped (another rank's shared staging
  // arena, local_group.h) a source and target of copies at DMA speed, until
  // UnregisterHost. A copier over plain host memory needs nothing.
  virtual absl::Status RegisterHost(void* /*host*/, size_t /*bytes*/) { return absl::OkStatus(); }
  virtual void UnregisterHost(void* /*host*/) {}
};

}  // namespace loom::collectives::staging
