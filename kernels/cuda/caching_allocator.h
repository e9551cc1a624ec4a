// CachingAllocator: a stream-ordered caching allocator for device memory.
//
// Device allocation (cudaMalloc/cudaFree) synchronises the device and costs
// tens of microseconds, so tensors inside a training step take their bytes from
// this cache instead. The allocator is written against a small DeviceBackend
// interface, so the same code runs over the CUDA runtime (cuda_runtime.h,
// CudaBackend) and over a fake backend in tests on machines without a GPU.
//
// Contract:
//  - Requests are rounded up to a size class: 512 B granules up to 4 KiB, then
//    four classes per power of two (2^k, 1.25*2^k, 1.5*2^k, 1.75*2^k). A block
//    always keeps its class size; blocks are never split or merged, so a free
//    list per (stream, class) is the whole bookkeeping ("bins").
//  - Every block belongs to the stream it was allocated on. Freeing a block
//    makes it reusable at once by later allocations on the same stream (stream
//    order makes that safe). A block that was also used on other streams
//    (RecordStream) is held back after Free until an event recorded on each of
//    those streams at Free time has completed; then it returns to its bin.
//  - When the backend is out of memory, the allocator releases every cached
//    free block (after finishing pending events) and retries once; then it
//    fails (Allocate returns null and logs; the loom::Allocator entry point
//    aborts like operator new).
//  - Stats: allocated (class bytes handed out and not freed), requested (bytes
//    asked for), reserved (bytes held from the backend), their peaks, and
//    counts of backend calls and cache hits. Thread-safe (one mutex).
//
//   CachingAllocator alloc(std::make_unique<CudaBackend>(0));
//   void* p = alloc.AllocateOn(bytes, stream);
//   alloc.RecordStream(p, comm_stream);  // used on the comm stream too
//   alloc.Free(p);                      // reused once comm_stream passed this point
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/allocator.h"
#include "base/device.h"

namespace loom::kernels::cuda {

// Opaque stream handle (a cudaStream_t for the CUDA backend; nullptr is the
// default stream).
using StreamHandle = void*;

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  // Returns null when out of memory.
  virtual void* Malloc(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  // An event recorded now on `stream`; EventDone polls it; DestroyEvent frees it.
  virtual void* RecordEvent(StreamHandle stream) = 0;
  virtual bool EventDone(void* event) = 0;
  virtual void WaitEvent(void* event) = 0;  // blocks the host until done
  virtual void DestroyEvent(void* event) = 0;
  virtual Device device() const = 0;
};

struct CachingStats {
  int64_t allocated = 0;       // class bytes of live blocks
  int64_t requested = 0;       // bytes asked for by live blocks
  int64_t reserved = 0;        // bytes held from the backend
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
  int64_t backend_mallocs = 0;
  int64_t backend_frees = 0;
  int64_t cache_hits = 0;      // allocations served from a bin
  int64_t pending_blocks = 0;  // freed blocks waiting on cross-stream events
  bool operator==(const CachingStats& o) const;
};

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(std::unique_ptr<DeviceBackend> backend);
  ~CachingAllocator() override;  // returns everything to the backend
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // The size class a request of `bytes` is rounded to (0 stays 0).
  static size_t SizeClass(size_t bytes);

  // loom::Allocator: allocates on the current stream; aborts on OOM.
  void* Allocate(size_t bytes) override;
  void Deallocate(void* p, size_t bytes) override;
  Device device() const override;

  // Null on out-of-memory (after the release-and-retry); null for bytes == 0.
  void* AllocateOn(size_t bytes, StreamHandle stream);
  // Marks `p` as used on `stream` as well as its own. Ignores unknown pointers.
  void RecordStream(void* p, StreamHandle stream);
  // Returns a live block; aborts on a pointer this allocator did not hand out.
  void Free(void* p);
  // Moves completed pending blocks to their bins (also done on every Allocate).
  void ProcessEvents();
  // Waits for pending blocks, then returns every cached free block to the backend.
  void EmptyCache();

  void set_current_stream(StreamHandle s);
  StreamHandle current_stream() const;
  CachingStats stats() const;
  void ResetPeaks();
  // Number of cached free blocks in the bin (stream, class). For tests.
  int64_t FreeBlocksInBin(StreamHandle stream, size_t size_class) const;
  DeviceBackend* backend() { return backend_.get(); }

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;       // class size
    size_t requested = 0;
    StreamHandle stream = nullptr;
    std::set<StreamHandle> used_on;  // other streams
  };
  struct Pending {
    Block block;
    std::vector<void*> events;
  };
  using BinKey = std::pair<StreamHandle, size_t>;

  void ProcessEventsLocked(bool wait);
  void ReleaseCachedLocked();

  std::unique_ptr<DeviceBackend> backend_;
  mutable std::mutex mu_;
  StreamHandle current_stream_ = nullptr;
  std::map<BinKey, std::vector<void*>> bins_;       // free blocks per bin
  std::unordered_map<void*, Block> live_;           // handed out
  std::unordered_map<void*, Block> cached_;         // in a bin
  std::vector<Pending> pending_;
  CachingStats stats_;
};

}  // namespace loom::kernels::cuda
