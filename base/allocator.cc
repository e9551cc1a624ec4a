#include "base/allocator.h"

#include <cstdio>
#include <cstdlib>

namespace loom {
namespace {
std::atomic<Allocator*> g_default_cpu{nullptr};
}  // namespace

CpuAllocator* CpuAllocator::Get() {
  static CpuAllocator* a = new CpuAllocator();
  return a;
}

void* CpuAllocator::Allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) {
    std::fprintf(stderr, "loom: out of host memory allocating %zu bytes\n", bytes);
    std::abort();
  }
  return p;
}

void CpuAllocator::Deallocate(void* p, size_t) { std::free(p); }

void* CountingAllocator::Allocate(size_t bytes) {
  allocations_.fetch_add(1, std::memory_order_relaxed);
  int64_t now = in_use_.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return base_->Allocate(bytes);
}

void CountingAllocator::Deallocate(void* p, size_t bytes) {
  frees_.fetch_add(1, std::memory_order_relaxed);
  in_use_.fetch_sub(static_cast<int64_t>(bytes));
  base_->Deallocate(p, bytes);
}

AllocatorStats CountingAllocator::stats() const {
  return {allocations_.load(), frees_.load(), in_use_.load(), peak_.load()};
}

void CountingAllocator::ResetPeak() { peak_.store(in_use_.load()); }

Allocator* DefaultCpuAllocator() {
  Allocator* a = g_default_cpu.load();
  return a ? a : CpuAllocator::Get();
}

ScopedDefaultAllocator::ScopedDefaultAllocator(Allocator* a) : prev_(g_default_cpu.exchange(a)) {}
ScopedDefaultAllocator::~ScopedDefaultAllocator() { g_default_cpu.store(prev_); }

}  // namespace loom
