// Memory allocators for tensor storage.
//
// Every tensor's bytes come from an Allocator. CpuAllocator returns 64-byte
// aligned host memory. CountingAllocator wraps another allocator and counts
// calls and bytes, so tests can assert "no allocation after the first step".
//
//   CountingAllocator counting(CpuAllocator::Get());
//   ScopedDefaultAllocator use(&counting);
//   ... run a step ...
//   EXPECT_EQ(counting.stats().allocations, before);
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/device.h"

namespace loom {

struct AllocatorStats {
  int64_t allocations = 0;    // calls to Allocate
  int64_t frees = 0;          // calls to Deallocate
  int64_t bytes_in_use = 0;   // live bytes now
  int64_t peak_bytes = 0;     // high-water mark of bytes_in_use
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for `bytes` bytes (never null for bytes > 0; aborts on OOM
  // after logging the request, like operator new).
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Deallocate(void* p, size_t bytes) = 0;
  virtual Device device() const = 0;
};

class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  static CpuAllocator* Get();
  void* Allocate(size_t bytes) override;
  void Deallocate(void* p, size_t bytes) override;
  Device device() const override { return Device::CPU(); }
};

// Thread-safe counting wrapper.
class CountingAllocator final : public Allocator {
 public:
  explicit CountingAllocator(Allocator* base) : base_(base) {}
  void* Allocate(size_t bytes) override;
  void Deallocate(void* p, size_t bytes) override;
  Device device() const override { return base_->device(); }
  AllocatorStats stats() const;
  void ResetPeak();

 private:
  Allocator* base_;
  std::atomic<int64_t> allocations_{0}, frees_{0}, in_use_{0}, peak_{0};
};

// The allocator Tensor::Empty uses for CPU tensors when none is given.
Allocator* DefaultCpuAllocator();

// Installs `a` as the default CPU allocator for this scope (process-wide).
class ScopedDefaultAllocator {
 public:
  explicit ScopedDefaultAllocator(Allocator* a);
  ~ScopedDefaultAllocator();
  ScopedDefaultAllocator(const ScopedDefaultAllocator&) = delete;
  ScopedDefaultAllocator& operator=(const ScopedDefaultAllocator&) = delete;

 private:
  Allocator* prev_;
};

}  // namespace loom
