#include "collectives/staging/local_group.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <random>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "collectives/algorithms/reduce.h"

namespace loom::collectives::staging {

absl::StatusOr<StagingPath> ParseStagingPath(absl::string_view s) {
  if (s == "auto") return StagingPath::kAuto;
  if (s == "shm") return StagingPath::kSharedMemory;
  if (s == "ring") return StagingPath::kRing;
  return absl::InvalidArgumentError(absl::StrCat("staging_path: expected auto, shm or ring, got '", s, "'"));
}

namespace {

// One counter on a cache line of its own.
struct alignas(64) Counter {
  std::atomic<uint64_t> value;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the counters are shared between processes");

// The head of an arena; the slots start at kHeaderBytes.
struct Header {
  Counter landed, reduced, released;  // chunks done, by number: g + 1 once chunk g is
  Counter failed;                     // non-zero once an op of this rank failed
};
constexpr size_t kHeaderBytes = 4096;
static_assert(sizeof(Header) <= kHeaderBytes);

enum class Stage { kLanded, kReduced, kReleased };

const char* StageName(Stage s) {
  switch (s) {
    case Stage::kLanded: return "copied its chunk to the host";
    case Stage::kReduced: return "reduced its part";
    case Stage::kReleased: return "copied the result back";
  }
  return "?";
}

std::string Errno(absl::string_view what, int err) { return absl::StrCat(what, ": ", std::strerror(err)); }

}  // namespace

struct LocalGroup::Arena {
  std::string name;
  char* base = nullptr;
  size_t bytes = 0;
  bool registered = false;
  Copier* copier = nullptr;

  Header* header() const { return reinterpret_cast<Header*>(base); }
  char* slot(size_t i, size_t slot_bytes) const { return base + kHeaderBytes + i * slot_bytes; }
  std::atomic<uint64_t>& counter(Stage s) const {
    Header* h = header();
    return s == Stage::kLanded ? h->landed.value : s == Stage::kReduced ? h->reduced.value : h->released.value;
  }

  // Maps the shared memory object `name` (created, sized and zeroed when
  // `create`) and registers it with the copier; "" or what failed.
  std::string Map(bool create) {
    const int fd = create ? shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600) : shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0) return Errno(absl::StrCat("shm_open ", name), errno);
    // posix_fallocate reserves the pages, so a full /dev/shm fails here
    // instead of faulting on first touch.
    if (create) {
      if (int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); e != 0) {
        close(fd);
        return Errno(absl::StrCat("posix_fallocate ", name, " (", bytes, " bytes)"), e);
      }
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int err = errno;
    close(fd);
    if (p == MAP_FAILED) return Errno(absl::StrCat("mmap ", name), err);
    base = static_cast<char*>(p);
    if (absl::Status s = copier->RegisterHost(base, bytes); !s.ok()) return std::string(s.message());
    registered = true;
    return "";
  }

  ~Arena() {
    if (registered) copier->UnregisterHost(base);
    if (base != nullptr) munmap(base, bytes);
  }
};

LocalGroup::LocalGroup(int rank, int size, size_t chunk_bytes, int slots, Copier* copier)
    : rank_(rank), size_(size), chunk_bytes_(chunk_bytes), slots_(slots), copier_(copier) {}

LocalGroup::~LocalGroup() = default;

absl::StatusOr<std::unique_ptr<LocalGroup>> LocalGroup::Create(store::Store& store, int rank, int size,
                                                               Copier* copier, const Options& o,
                                                               std::string* why_not) {
  if (o.chunk_bytes < 4096) {
    return absl::InvalidArgumentError(absl::StrCat("staging_piece_bytes: at least 4096 bytes, got ", o.chunk_bytes));
  }
  if (o.slots < 2) return absl::InvalidArgumentError(absl::StrCat("local group: slots: at least 2, got ", o.slots));
  auto group = std::unique_ptr<LocalGroup>(new LocalGroup(rank, size, o.chunk_bytes, o.slots, copier));
  const size_t bytes = kHeaderBytes + static_cast<size_t>(o.slots) * o.chunk_bytes;
  std::random_device rd;
  const std::string own_name =
      absl::StrFormat("/loom-stage-%d-%d-%08x%08x", static_cast<int>(getpid()), rank, rd(), rd());
  for (int p = 0; p < size; ++p) {
    auto a = std::make_unique<Arena>();
    a->bytes = bytes;
    a->copier = copier;
    group->arenas_.push_back(std::move(a));
  }
  // The name goes when Create returns: by then every rank has mapped this
  // arena, or the group is not used (a failed Create also leaves none behind).
  struct Unlink {
    const std::string& name;
    ~Unlink() { shm_unlink(name.c_str()); }
  } unlink_on_return{own_name};
  // Round 1: every rank creates its arena and publishes its name (or why not).
  Arena& own = *group->arenas_[rank];
  own.name = own_name;
  std::string error = own.Map(/*create=*/true);
  LOOM_RETURN_IF_ERROR(store.Set(absl::StrCat("arena/", rank), error.empty() ? own_name : "!" + error));
  // Round 2: every rank maps the others' arenas and says whether it could.
  for (int p = 0; p < size && error.empty(); ++p) {
    if (p == rank) continue;
    LOOM_ASSIGN_OR_RETURN(std::string name, store.WaitGet(absl::StrCat("arena/", p), o.timeout));
    if (!name.empty() && name[0] == '!') {
      error = absl::StrCat("rank ", p, " has no arena: ", name.substr(1));
      break;
    }
    group->arenas_[p]->name = name;
    error = group->arenas_[p]->Map(/*create=*/false);
  }
  LOOM_RETURN_IF_ERROR(store.Set(absl::StrCat("mapped/", rank), error.empty() ? "ok" : error));
  std::vector<std::string> errors;
  for (int p = 0; p < size; ++p) {
    LOOM_ASSIGN_OR_RETURN(std::string v, store.WaitGet(absl::StrCat("mapped/", p), o.timeout));
    if (v != "ok") errors.push_back(absl::StrCat("rank ", p, ": ", v));
  }
  if (!errors.empty()) {
    if (why_not != nullptr) *why_not = absl::StrJoin(errors, "; ");
    return std::unique_ptr<LocalGroup>();
  }
  return group;
}

namespace {

// Waits until every rank's `stage` counter reaches `target`. Fails at once
// when another rank has failed or `abort` is set, and at `deadline`; `op`
// names the op in the errors.
absl::Status WaitPeers(const std::vector<std::unique_ptr<LocalGroup::Arena>>& arenas, int self, Stage stage,
                       uint64_t target, absl::Time deadline, const std::atomic<bool>& abort, const char* op) {
  const absl::Time start = absl::Now();
  for (int spins = 0;; ++spins) {
    if (abort.load(std::memory_order_relaxed)) return absl::AbortedError(absl::StrCat(op, " aborted"));
    int behind = -1;
    for (size_t p = 0; p < arenas.size(); ++p) {
      if (static_cast<int>(p) == self) continue;
      if (arenas[p]->header()->failed.value.load(std::memory_order_acquire) != 0) {
        return absl::AbortedError(absl::StrCat("rank ", p, " failed its part of the ", op));
      }
      if (arenas[p]->counter(stage).load(std::memory_order_acquire) < target) {
        behind = static_cast<int>(p);
        break;
      }
    }
    if (behind < 0) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("rank ", behind, " has not ", StageName(stage), " for chunk ",
                                                      target - 1, " in time"));
    }
    // Spin briefly (a peer is usually microseconds behind), then yield the
    // core, then sleep: ranks may outnumber the cores.
    if (spins < 64) {
      __builtin_ia32_pause();
    } else if (now - start < absl::Milliseconds(1)) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(absl::Microseconds(20));
    }
  }
}

// Elements [first, first + count) of a chunk of `elems` that part p of n covers.
std::pair<size_t, size_t> Part(size_t elems, int n, int p) {
  const size_t per = elems / n, rem = elems % n;
  const size_t up = static_cast<size_t>(p);
  return {up * per + std::min(up, rem), per + (up < rem ? 1 : 0)};
}

absl::Duration Since(absl::Time t) { return absl::Now() - t; }

// An op of `bytes` moves in chunks of this many bytes (local_group.h).
size_t ChunkBytes(size_t bytes, size_t slot_bytes) {
  constexpr size_t kMinChunk = size_t{256} << 10;
  return std::min(slot_bytes, std::max(kMinChunk, (bytes + 3) / 4));
}

}  // namespace

// What one op moves. Block i of `in` (in_count[i] elements on the device) is
// copied to the host; the blocks of `out` receive the result. all_reduce: one
// block each, the same buffer. reduce_scatter: one input block per rank, this
// rank's output (in_count[rank] elements). all_gather: this rank's input, one
// output block per rank (out_count[p] elements; in_count[0] is
// out_count[rank]). Every rank has the same counts.
struct LocalGroup::Op {
  enum Kind { kAllReduce, kReduceScatter, kAllGather } kind;
  DType dtype;
  ReduceOp op = ReduceOp::kSum;
  std::vector<const char*> in;
  std::vector<size_t> in_count;
  std::vector<char*> out;
  std::vector<size_t> out_count;

  // The longest block: elements [k * chunk, (k + 1) * chunk) of every block
  // make up chunk k.
  size_t Longest() const {
    const std::vector<size_t>& c = kind == kAllGather ? out_count : in_count;
    return c.empty() ? 0 : *std::max_element(c.begin(), c.end());
  }
  const char* Name() const {
    return kind == kAllReduce ? "all_reduce" : kind == kReduceScatter ? "reduce_scatter" : "all_gather";
  }
};

// One op's pipeline over chunks base .. base + chunks - 1.
class LocalGroup::Run {
 public:
  Run(LocalGroup& g, const Op& op, size_t chunk_elems, absl::Time deadline, const std::atomic<bool>& abort,
      LocalStats* stats)
      : g_(g),
        mine_(*g.arenas_[g.rank_]),
        o_(op),
        es_(DTypeSize(op.dtype)),
        chunk_elems_(chunk_elems),
        chunks_((op.Longest() + chunk_elems - 1) / chunk_elems),
        base_(g.next_chunk_),
        slots_(static_cast<uint64_t>(g.slots_)),
        deadline_(deadline),
        abort_(abort),
        stats_(*stats) {}

  absl::Status Go() {
    absl::Status s = Load(0);
    for (uint64_t k = 0; s.ok() && k < chunks_; ++k) s = Step(k);
    if (s.ok()) s = ReleaseBefore(base_ + chunks_);
    if (s.ok()) {
      g_.next_chunk_ = base_ + chunks_;
      return s;
    }
    // No copy this op issued may outlive it: they end on their own, soon.
    const absl::Time grace = absl::Now() + absl::Seconds(10);
    if (loading_ != nullptr) loading_->Wait(grace).IgnoreError();
    for (auto& [g, e] : storing_) e->Wait(grace).IgnoreError();
    return s;
  }

 private:
  char* Slot(const Arena& a, uint64_t g) const { return a.slot(g % slots_, g_.chunk_bytes_); }
  // Elements of a block of `count` in chunk k.
  size_t Len(size_t count, uint64_t k) const {
    const size_t first = k * chunk_elems_;
    return count > first ? std::min(chunk_elems_, count - first) : 0;
  }
  // Where input block i's slice of chunk k starts in a slot, in elements.
  size_t InOffset(size_t i, uint64_t k) const {
    size_t at = 0;
    for (size_t j = 0; j < i; ++j) at += Len(o_.in_count[j], k);
    return at;
  }

  absl::Status WaitFor(Stage st, uint64_t target) {
    const absl::Time t = absl::Now();
    absl::Status s = WaitPeers(g_.arenas_, g_.rank_, st, target, deadline_, abort_, o_.Name());
    stats_.peer_wait += Since(t);
    return s;
  }

  // Publishes `released` for every chunk before `end` once its copies back land.
  absl::Status ReleaseBefore(uint64_t end) {
    const absl::Time t = absl::Now();
    while (!storing_.empty() && storing_.front().first < end) {
      LOOM_RETURN_IF_ERROR(storing_.front().second->Wait(deadline_));
      mine_.counter(Stage::kReleased).store(storing_.front().first + 1, std::memory_order_release);
      storing_.pop_front();
    }
    stats_.to_device_wait += Since(t);
    return absl::OkStatus();
  }

  // Issues chunk k's copies to the host once every rank is done with its slot.
  // Copies of one direction land in issue order, so the last one's event
  // covers them all.
  absl::Status Load(uint64_t k) {
    const uint64_t g = base_ + k;
    if (g >= slots_) {
      LOOM_RETURN_IF_ERROR(ReleaseBefore(g - slots_ + 1));
      LOOM_RETURN_IF_ERROR(WaitFor(Stage::kReleased, g - slots_ + 1));
    }
    char* slot = Slot(mine_, g);
    for (size_t i = 0; i < o_.in.size(); ++i) {
      const size_t len = Len(o_.in_count[i], k);
      if (len == 0) continue;
      LOOM_ASSIGN_OR_RETURN(loading_, g_.copier_->ToHost(slot + InOffset(i, k) * es_,
                                                         o_.in[i] + k * chunk_elems_ * es_, len * es_));
    }
    return absl::OkStatus();
  }

  // Reduces this rank's share of chunk k in its own slot, reading the same
  // elements of every other rank's slot, in rank order.
  void Reduce(uint64_t k) {
    const uint64_t g = base_ + k;
    size_t first = 0, count = 0;
    if (o_.kind == Op::kAllReduce) {
      std::tie(first, count) = Part(Len(o_.in_count[0], k), g_.size_, g_.rank_);
    } else {
      first = InOffset(g_.rank_, k);
      count = Len(o_.in_count[g_.rank_], k);
    }
    if (count == 0) return;
    char* acc = Slot(mine_, g) + first * es_;
    for (int p = 0; p < g_.size_; ++p) {
      if (p != g_.rank_) algorithms::ReduceInto(o_.dtype, o_.op, acc, Slot(*g_.arenas_[p], g) + first * es_, count);
    }
    if (o_.op == ReduceOp::kAvg) algorithms::DivideInPlace(o_.dtype, acc, count, g_.size_);
  }

  // Queues chunk k's copies back to the device: all_reduce, part p from rank
  // p's slot; reduce_scatter, this rank's block from its own slot;
  // all_gather, block p from rank p's slot.
  absl::Status Store(uint64_t k) {
    const uint64_t g = base_ + k;
    const size_t at = k * chunk_elems_ * es_;
    if (o_.kind == Op::kReduceScatter) {
      const size_t len = Len(o_.in_count[g_.rank_], k);
      if (len > 0) {
        LOOM_RETURN_IF_ERROR(
            g_.copier_->ToDeviceQueued(o_.out[0] + at, Slot(mine_, g) + InOffset(g_.rank_, k) * es_, len * es_));
      }
    } else {
      for (int p = 0; p < g_.size_; ++p) {
        size_t first = 0, len = 0;
        char* dst = nullptr;
        if (o_.kind == Op::kAllReduce) {
          std::tie(first, len) = Part(Len(o_.in_count[0], k), g_.size_, p);
          dst = o_.out[0] + at + first * es_;
        } else {
          len = Len(o_.out_count[p], k);
          dst = o_.out[p] + at;
        }
        if (len == 0) continue;
        LOOM_RETURN_IF_ERROR(g_.copier_->ToDeviceQueued(dst, Slot(*g_.arenas_[p], g) + first * es_, len * es_));
      }
    }
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<CopyEvent> fence, g_.copier_->ToDeviceFence());
    storing_.emplace_back(g, std::move(fence));
    return absl::OkStatus();
  }

  // Chunk k: lands, is reduced (this rank's share), and goes back. A rank
  // reads other ranks' slots only before it releases the chunk, and a slot is
  // reused only once every rank has released it.
  absl::Status Step(uint64_t k) {
    const uint64_t g = base_ + k;
    absl::Time t = absl::Now();
    if (loading_ != nullptr) LOOM_RETURN_IF_ERROR(loading_->Wait(deadline_));
    loading_.reset();
    stats_.to_host_wait += Since(t);
    mine_.counter(Stage::kLanded).store(g + 1, std::memory_order_release);
    if (k + 1 < chunks_) LOOM_RETURN_IF_ERROR(Load(k + 1));
    LOOM_RETURN_IF_ERROR(WaitFor(Stage::kLanded, g + 1));
    if (o_.kind != Op::kAllGather) {
      t = absl::Now();
      Reduce(k);
      stats_.reduce += Since(t);
    }
    mine_.counter(Stage::kReduced).store(g + 1, std::memory_order_release);
    // all_reduce copies back the other ranks' parts: they must be final.
    if (o_.kind == Op::kAllReduce) LOOM_RETURN_IF_ERROR(WaitFor(Stage::kReduced, g + 1));
    return Store(k);
  }

  LocalGroup& g_;
  Arena& mine_;
  const Op& o_;
  size_t es_, chunk_elems_;
  uint64_t chunks_, base_, slots_;
  absl::Time deadline_;
  const std::atomic<bool>& abort_;
  LocalStats& stats_;
  std::unique_ptr<CopyEvent> loading_;
  std::deque<std::pair<uint64_t, std::unique_ptr<CopyEvent>>> storing_;  // chunk g's copies back, in order
};

absl::Status LocalGroup::Execute(const Op& op, absl::Time deadline, const std::atomic<bool>& abort,
                                 LocalStats* stats) {
  if (failed_) return absl::FailedPreconditionError("the shared-memory group failed in an earlier op");
  const size_t es = DTypeSize(op.dtype), blocks = op.in.size(), longest = op.Longest();
  if (longest == 0) return absl::OkStatus();
  if (blocks * es > chunk_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("a chunk slot of ", chunk_bytes_, " bytes cannot hold one element of ",
                                                   blocks, " blocks"));
  }
  const size_t chunk_elems = ChunkBytes(blocks * longest * es, chunk_bytes_) / (blocks * es);
  absl::Status s = Run(*this, op, std::max<size_t>(chunk_elems, 1), deadline, abort, stats).Go();
  if (!s.ok()) {
    failed_ = true;
    arenas_[rank_]->header()->failed.value.store(1, std::memory_order_release);
  }
  return s;
}

absl::Status LocalGroup::AllReduce(char* device, size_t bytes, DType dtype, ReduceOp op, absl::Time deadline,
                                   const std::atomic<bool>& abort, LocalStats* stats) {
  LOOM_RETURN_IF_ERROR(algorithms::CheckReducible(dtype, op));
  const size_t n = bytes / DTypeSize(dtype);
  return Execute({Op::kAllReduce, dtype, op, {device}, {n}, {device}, {}}, deadline, abort, stats);
}

absl::Status LocalGroup::ReduceScatter(char* output, absl::Span<const char* const> inputs,
                                       absl::Span<const size_t> counts, DType dtype, ReduceOp op, absl::Time deadline,
                                       const std::atomic<bool>& abort, LocalStats* stats) {
  LOOM_RETURN_IF_ERROR(algorithms::CheckReducible(dtype, op));
  LOOM_RETURN_IF_ERROR(CheckBlocks(inputs.size(), counts.size(), "reduce_scatter"));
  return Execute({Op::kReduceScatter, dtype, op, {inputs.begin(), inputs.end()}, {counts.begin(), counts.end()},
                  {output}, {}},
                 deadline, abort, stats);
}

absl::Status LocalGroup::AllGather(absl::Span<char* const> outputs, absl::Span<const size_t> counts,
                                   const char* input, DType dtype, absl::Time deadline,
                                   const std::atomic<bool>& abort, LocalStats* stats) {
  LOOM_RETURN_IF_ERROR(CheckBlocks(outputs.size(), counts.size(), "all_gather"));
  return Execute({Op::kAllGather, dtype, ReduceOp::kSum, {input}, {counts[rank_]}, {outputs.begin(), outputs.end()},
                  {counts.begin(), counts.end()}},
                 deadline, abort, stats);
}

absl::Status LocalGroup::CheckBlocks(size_t blocks, size_t counts, absl::string_view op) const {
  if (blocks != static_cast<size_t>(size_) || counts != blocks) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": expected ", size_, " blocks and counts, got ", blocks,
                                                   " and ", counts));
  }
  return absl::OkStatus();
}

}  // namespace loom::collectives::staging
