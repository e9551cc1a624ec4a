// CachingAllocator against a reference model of its bins.
//
// Here (no GPU) it runs over a fake backend whose events complete only when the
// test says so; with a GPU the same stream-local sequence also runs over the
// CUDA backend, plus a cross-stream reuse check and a Tensor round trip.
#include "kernels/cuda/caching_allocator.h"

#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/device_runtime.h"

namespace loom::kernels::cuda {
namespace {

// Fake device memory: distinct addresses, a capacity, and events that complete
// when Advance(stream) is called (or when waited on).
class FakeBackend final : public DeviceBackend {
 public:
  struct State {
    int64_t capacity = int64_t{1} << 40;
    int64_t used = 0;
    uintptr_t next = 0x10000;
    std::map<void*, size_t> blocks;
    int64_t ticket = 0;
    std::map<StreamHandle, int64_t> last_ticket, completed;
    std::map<void*, std::pair<StreamHandle, int64_t>> events;
    int64_t live_events = 0;
  };
  explicit FakeBackend(State* s) : s_(s) {}
  void* Malloc(size_t bytes) override {
    if (s_->used + int64_t(bytes) > s_->capacity) return nullptr;
    void* p = reinterpret_cast<void*>(s_->next);
    s_->next += bytes + 4096;
    s_->blocks[p] = bytes;
    s_->used += bytes;
    return p;
  }
  void Free(void* p) override {
    auto it = s_->blocks.find(p);
    ASSERT_NE(it, s_->blocks.end());
    s_->used -= it->second;
    s_->blocks.erase(it);
  }
  void* RecordEvent(StreamHandle stream) override {
    int64_t t = ++s_->ticket;
    s_->last_ticket[stream] = t;
    void* ev = reinterpret_cast<void*>(0x1000000000 + t);
    s_->events[ev] = {stream, t};
    ++s_->live_events;
    return ev;
  }
  bool EventDone(void* ev) override {
    auto e = s_->events.at(ev);
    return s_->completed[e.first] >= e.second;
  }
  void WaitEvent(void* ev) override {
    auto e = s_->events.at(ev);
    s_->completed[e.first] = std::max(s_->completed[e.first], e.second);
  }
  void DestroyEvent(void* ev) override {
    s_->events.erase(ev);
    --s_->live_events;
  }
  Device device() const override { return Device::CUDA(0); }

 private:
  State* s_;
};

// The reference model: counts per bin, live blocks, pending blocks.
struct Model {
  struct Live {
    StreamHandle stream;
    size_t cls, requested;
    std::set<StreamHandle> used_on;
  };
  struct Pending {
    void* ptr;
    StreamHandle stream;
    size_t cls;
    std::map<StreamHandle, int64_t> tickets;
  };
  std::map<std::pair<StreamHandle, size_t>, int64_t> bins;
  std::map<void*, Live> live;
  std::vector<Pending> pending;
  CachingStats st;

  void Process(const FakeBackend::State* f) {
    if (f == nullptr) return;  // real backend: the sequence records no cross-stream use
    std::vector<Pending> still;
    for (auto& p : pending) {
      bool done = true;
      for (auto& kv : p.tickets) {
        auto it = f->completed.find(kv.first);
        if (it == f->completed.end() || it->second < kv.second) done = false;
      }
      if (done) ++bins[{p.stream, p.cls}];
      else still.push_back(p);
    }
    pending = still;
    st.pending_blocks = pending.size();
  }
  void Alloc(void* p, size_t bytes, StreamHandle s, const FakeBackend::State* f) {
    Process(f);
    size_t cls = CachingAllocator::SizeClass(bytes);
    auto& n = bins[{s, cls}];
    if (n > 0) {
      --n;
      ++st.cache_hits;
    } else {
      ++st.backend_mallocs;
      st.reserved += cls;
      st.peak_reserved = std::max(st.peak_reserved, st.reserved);
    }
    st.allocated += cls;
    st.requested += bytes;
    st.peak_allocated = std::max(st.peak_allocated, st.allocated);
    live[p] = {s, cls, bytes, {}};
  }
  void Free(void* p, const FakeBackend::State* f) {
    Live l = live.at(p);
    live.erase(p);
    st.allocated -= l.cls;
    st.requested -= l.requested;
    if (l.used_on.empty()) {
      ++bins[{l.stream, l.cls}];
      return;
    }
    Pending pe{p, l.stream, l.cls, {}};
    for (auto s : l.used_on) pe.tickets[s] = f->last_ticket.at(s);
    pending.push_back(pe);
    st.pending_blocks = pending.size();
  }
};

TEST(CachingAllocator, SizeClasses) {
  EXPECT_EQ(CachingAllocator::SizeClass(0), 0u);
  EXPECT_EQ(CachingAllocator::SizeClass(1), 512u);
  EXPECT_EQ(CachingAllocator::SizeClass(512), 512u);
  EXPECT_EQ(CachingAllocator::SizeClass(513), 1024u);
  EXPECT_EQ(CachingAllocator::SizeClass(4096), 4096u);
  EXPECT_EQ(CachingAllocator::SizeClass(4097), 5120u);
  EXPECT_EQ(CachingAllocator::SizeClass(1 << 20), size_t(1) << 20);
  EXPECT_EQ(CachingAllocator::SizeClass((1 << 20) + 1), size_t(1) << 20 | size_t(1) << 18);
  for (size_t b = 1; b < (size_t(1) << 30); b = b * 3 + 7) {
    size_t c = CachingAllocator::SizeClass(b);
    EXPECT_GE(c, b);
    EXPECT_LE(c, b + b / 4 + 512) << b;  // at most 25% (or one granule) of waste
    EXPECT_EQ(CachingAllocator::SizeClass(c), c);
  }
}

// Random alloc/free/record-stream/advance sequences; stats must match the model
// after every operation, and no live or pending block is ever handed out.
void RunRandomSequence(CachingAllocator& alloc, FakeBackend::State* fake, uint64_t seed, int ops,
                       const std::vector<StreamHandle>& streams) {
  std::mt19937_64 rng(seed);
  Model model;
  const size_t sizes[] = {1, 100, 512, 700, 4096, 5000, 65536, 100000, 1 << 20, (1 << 20) + 17, 3 << 20};
  for (int i = 0; i < ops; ++i) {
    int what = rng() % 10;
    if (what < 5 || model.live.empty()) {
      size_t bytes = sizes[rng() % 11];
      StreamHandle s = streams[rng() % streams.size()];
      void* p = alloc.AllocateOn(bytes, s);
      ASSERT_NE(p, nullptr);
      ASSERT_EQ(model.live.count(p), 0u) << "a live block handed out twice";
      model.Process(fake);
      for (auto& pe : model.pending) ASSERT_NE(pe.ptr, p) << "a pending block handed out";
      model.Alloc(p, bytes, s, fake);
    } else if (what < 8) {
      auto it = model.live.begin();
      std::advance(it, rng() % model.live.size());
      void* p = it->first;
      alloc.Free(p);
      model.Free(p, fake);
    } else if (what < 9 && fake != nullptr) {
      auto it = model.live.begin();
      std::advance(it, rng() % model.live.size());
      StreamHandle s = streams[rng() % streams.size()];
      alloc.RecordStream(it->first, s);
      if (s != it->second.stream) it->second.used_on.insert(s);
    } else if (fake != nullptr) {
      StreamHandle s = streams[rng() % streams.size()];
      fake->completed[s] = fake->ticket;  // everything queued on s so far is done
      alloc.ProcessEvents();
      model.Process(fake);
    }
    ASSERT_TRUE(alloc.stats() == model.st) << "op " << i << " allocated " << alloc.stats().allocated << " vs "
                                           << model.st.allocated << ", reserved " << alloc.stats().reserved
                                           << " vs " << model.st.reserved << ", hits " << alloc.stats().cache_hits
                                           << " vs " << model.st.cache_hits << ", pending "
                                           << alloc.stats().pending_blocks << " vs " << model.st.pending_blocks;
    for (auto& kv : model.bins)
      ASSERT_EQ(alloc.FreeBlocksInBin(kv.first.first, kv.first.second), kv.second);
  }
  // Live pointers are distinct by construction of the map; check none is pending.
  for (auto& kv : model.live) alloc.Free(kv.first);
}

TEST(CachingAllocator, MatchesReferenceModelOverFakeBackend) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    FakeBackend::State fake;
    {
      CachingAllocator alloc(std::make_unique<FakeBackend>(&fake));
      auto s1 = reinterpret_cast<StreamHandle>(0x1), s2 = reinterpret_cast<StreamHandle>(0x2);
      RunRandomSequence(alloc, &fake, seed, 400, {nullptr, s1, s2});
      if (HasFatalFailure()) return;
      alloc.EmptyCache();
      EXPECT_EQ(alloc.stats().reserved, 0);
      EXPECT_EQ(alloc.stats().allocated, 0);
      EXPECT_EQ(fake.used, 0);
    }
    EXPECT_EQ(fake.live_events, 0);
  }
}

TEST(CachingAllocator, NoReuseBeforeCrossStreamEventCompletes) {
  FakeBackend::State fake;
  CachingAllocator alloc(std::make_unique<FakeBackend>(&fake));
  auto compute = reinterpret_cast<StreamHandle>(0x1), comm = reinterpret_cast<StreamHandle>(0x2);
  void* p = alloc.AllocateOn(1000, compute);
  alloc.RecordStream(p, comm);
  alloc.Free(p);
  EXPECT_EQ(alloc.stats().pending_blocks, 1);
  void* q = alloc.AllocateOn(1000, compute);
  EXPECT_NE(q, p);  // comm may still read p
  fake.completed[comm] = fake.ticket;
  alloc.Free(q);
  void* r = alloc.AllocateOn(1000, compute);
  void* s = alloc.AllocateOn(1000, compute);
  EXPECT_TRUE((r == p && s == q) || (r == q && s == p));
  EXPECT_EQ(alloc.stats().backend_mallocs, 2);
  // Other streams never see compute's blocks.
  alloc.Free(r);
  void* t = alloc.AllocateOn(1000, comm);
  EXPECT_NE(t, r);
  alloc.Free(s);
  alloc.Free(t);
}

TEST(CachingAllocator, OutOfMemoryReleasesCacheAndRetries) {
  FakeBackend::State fake;
  fake.capacity = 3 << 20;
  CachingAllocator alloc(std::make_unique<FakeBackend>(&fake));
  void* a = alloc.AllocateOn(1 << 20, nullptr);
  void* b = alloc.AllocateOn(1 << 20, nullptr);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  alloc.Free(a);
  alloc.Free(b);
  // A different class: the two cached 1 MiB blocks must go back first.
  void* c = alloc.AllocateOn((2 << 20) + 1, nullptr);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(alloc.stats().backend_frees, 2);
  EXPECT_EQ(alloc.AllocateOn(3 << 20, nullptr), nullptr);  // really out
  alloc.Free(c);
  EXPECT_EQ(alloc.stats().peak_reserved, int64_t(CachingAllocator::SizeClass((2 << 20) + 1)));
}

TEST(CachingAllocator, CudaBackendMatchesModelOrSkips) {
  absl::Status avail = CudaAvailable();
  if (!avail.ok()) GTEST_SKIP() << "needs a GPU: " << avail.message();
  auto rt = DeviceRuntime::Get(0);
  ASSERT_TRUE(rt.ok()) << rt.status();
  {
    // Stream-local sequence over real memory: same stats as the model.
    CachingAllocator alloc(MakeCudaBackend(0));
    RunRandomSequence(alloc, nullptr, 7, 600, {(*rt)->compute_stream(), (*rt)->comm_stream()});
    if (HasFatalFailure()) return;
    printf("cuda backend: reserved %lld peak_allocated %lld mallocs %lld hits %lld\n",
           (long long)alloc.stats().reserved, (long long)alloc.stats().peak_allocated,
           (long long)alloc.stats().backend_mallocs, (long long)alloc.stats().cache_hits);
    // Cross-stream: a block used on comm returns to its bin once comm passed.
    alloc.EmptyCache();
    void* p = alloc.AllocateOn(1 << 20, (*rt)->compute_stream());
    alloc.RecordStream(p, (*rt)->comm_stream());
    alloc.Free(p);
    ASSERT_TRUE((*rt)->SynchronizeAll().ok());
    alloc.ProcessEvents();
    EXPECT_EQ(alloc.stats().pending_blocks, 0);
    EXPECT_EQ(alloc.FreeBlocksInBin((*rt)->compute_stream(), 1 << 20), 1);
    alloc.EmptyCache();
    EXPECT_EQ(alloc.stats().reserved, 0);
  }
  // Tensor round trip through the runtime's allocator and streams.
  Tensor h = Tensor::FromVector({3, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, DType::kBF16);
  auto d = ToDevice(h.Transpose(0, 1), Device::CUDA(0));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->device(), Device::CUDA(0));
  ASSERT_TRUE((*rt)->CommWaitsForCompute().ok());
  ASSERT_TRUE((*rt)->ComputeWaitsForComm().ok());
  auto back = ToHost(*d);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToVector(), h.Transpose(0, 1).ToVector());
  EXPECT_GT((*rt)->allocator()->stats().allocated, 0);
}

TEST(DeviceRuntime, BadArgumentsAreErrorsNotCrashes) {
  Tensor h = Tensor::FromVector({2}, {1, 2});
  auto r = ToDevice(h, Device::CPU());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  auto r2 = ToHost(h);
  EXPECT_EQ(r2.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::kernels::cuda
