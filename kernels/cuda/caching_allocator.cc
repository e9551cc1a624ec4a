#include "kernels/cuda/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace loom::kernels::cuda {

bool CachingStats::operator==(const CachingStats& o) const {
  return allocated == o.allocated && requested == o.requested && reserved == o.reserved &&
         peak_allocated == o.peak_allocated && peak_reserved == o.peak_reserved &&
         backend_mallocs == o.backend_mallocs && backend_frees == o.backend_frees &&
         cache_hits == o.cache_hits && pending_blocks == o.pending_blocks;
}

CachingAllocator::CachingAllocator(std::unique_ptr<DeviceBackend> backend)
    : backend_(std::move(backend)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> l(mu_);
  ProcessEventsLocked(/*wait=*/true);
  ReleaseCachedLocked();
  for (auto& kv : live_) backend_->Free(kv.first);  // leaked by the user; give back anyway
  live_.clear();
}

size_t CachingAllocator::SizeClass(size_t bytes) {
  if (bytes == 0) return 0;
  if (bytes <= 4096) return (bytes + 511) / 512 * 512;
  int k = 63 - __builtin_clzll(static_cast<unsigned long long>(bytes));
  size_t step = (size_t{1} << k) / 4;
  return (bytes + step - 1) / step * step;
}

Device CachingAllocator::device() const { return backend_->device(); }

void CachingAllocator::set_current_stream(StreamHandle s) {
  std::lock_guard<std::mutex> l(mu_);
  current_stream_ = s;
}

StreamHandle CachingAllocator::current_stream() const {
  std::lock_guard<std::mutex> l(mu_);
  return current_stream_;
}

void* CachingAllocator::Allocate(size_t bytes) {
  if (bytes == 0) bytes = 1;  // a distinct non-null pointer, as the contract wants
  void* p = AllocateOn(bytes, current_stream());
  if (p == nullptr) {
    CachingStats s = stats();
    fprintf(stderr, "loom: CachingAllocator out of memory on %s: %zu bytes requested (%lld reserved)\n",
            device().ToString().c_str(), bytes, static_cast<long long>(s.reserved));
    abort();
  }
  return p;
}

void CachingAllocator::Deallocate(void* p, size_t) { Free(p); }

void* CachingAllocator::AllocateOn(size_t bytes, StreamHandle stream) {
  if (bytes == 0) return nullptr;
  const size_t cls = SizeClass(bytes);
  std::lock_guard<std::mutex> l(mu_);
  ProcessEventsLocked(/*wait=*/false);
  Block b;
  auto it = bins_.find({stream, cls});
  if (it != bins_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    auto c = cached_.find(p);
    b = std::move(c->second);
    cached_.erase(c);
    ++stats_.cache_hits;
  } else {
    void* p = backend_->Malloc(cls);
    if (p == nullptr) {
      ProcessEventsLocked(/*wait=*/true);
      ReleaseCachedLocked();
      p = backend_->Malloc(cls);
      if (p == nullptr) return nullptr;
    }
    ++stats_.backend_mallocs;
    stats_.reserved += cls;
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    b.ptr = p;
    b.size = cls;
    b.stream = stream;
  }
  b.requested = bytes;
  b.used_on.clear();
  stats_.allocated += b.size;
  stats_.requested += bytes;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  void* p = b.ptr;
  live_.emplace(p, std::move(b));
  return p;
}

void CachingAllocator::RecordStream(void* p, StreamHandle stream) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = live_.find(p);
  if (it == live_.end() || it->second.stream == stream) return;
  it->second.used_on.insert(stream);
}

void CachingAllocator::Free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> l(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) {
    fprintf(stderr, "loom: CachingAllocator::Free of unknown pointer %p\n", p);
    abort();
  }
  Block b = std::move(it->second);
  live_.erase(it);
  stats_.allocated -= b.size;
  stats_.requested -= b.requested;
  if (b.used_on.empty()) {
    bins_[{b.stream, b.size}].push_back(b.ptr);
    cached_.emplace(b.ptr, std::move(b));
    return;
  }
  Pending pend;
  for (StreamHandle s : b.used_on) pend.events.push_back(backend_->RecordEvent(s));
  pend.block = std::move(b);
  pending_.push_back(std::move(pend));
  stats_.pending_blocks = static_cast<int64_t>(pending_.size());
}

void CachingAllocator::ProcessEvents() {
  std::lock_guard<std::mutex> l(mu_);
  ProcessEventsLocked(/*wait=*/false);
}

void CachingAllocator::ProcessEventsLocked(bool wait) {
  std::vector<Pending> still;
  for (Pending& pe : pending_) {
    bool done = true;
    for (void* ev : pe.events) {
      if (wait) backend_->WaitEvent(ev);
      else if (!backend_->EventDone(ev)) done = false;
    }
    if (!done) {
      still.push_back(std::move(pe));
      continue;
    }
    for (void* ev : pe.events) backend_->DestroyEvent(ev);
    Block& b = pe.block;
    b.used_on.clear();
    bins_[{b.stream, b.size}].push_back(b.ptr);
    cached_.emplace(b.ptr, std::move(b));
  }
  pending_ = std::move(still);
  stats_.pending_blocks = static_cast<int64_t>(pending_.size());
}

void CachingAllocator::ReleaseCachedLocked() {
  for (auto& kv : cached_) {
    backend_->Free(kv.first);
    stats_.reserved -= kv.second.size;
    ++stats_.backend_frees;
  }
  cached_.clear();
  bins_.clear();
}

void CachingAllocator::EmptyCache() {
  std::lock_guard<std::mutex> l(mu_);
  ProcessEventsLocked(/*wait=*/true);
  ReleaseCachedLocked();
}

CachingStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

void CachingAllocator::ResetPeaks() {
  std::lock_guard<std::mutex> l(mu_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

int64_t CachingAllocator::FreeBlocksInBin(StreamHandle stream, size_t size_class) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = bins_.find({stream, size_class});
  return it == bins_.end() ? 0 : static_cast<int64_t>(it->second.size());
}

}  // namespace loom::kernels::cuda
