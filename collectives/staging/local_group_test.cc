// LocalGroup (local_group.h): the shared-memory all_reduce, reduce_scatter
// and all_gather of ranks on one host, run by threads that each create and map real shared-memory arenas
// (shm_open, over a real TCP store), with a copier that copies on a worker
// thread per direction after an injected delay, so that a read of a slot
// before its copy lands, or a slot reused before every rank is done with it,
// shows as a wrong result.
#include "collectives/staging/local_group.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/dtype.h"
#include "collectives/gloo/gloo_backend.h"
#include "collectives/staging/staged_backend.h"
#include "collectives/store/store_server.h"
#include "collectives/store/tcp_store.h"
#include "gtest/gtest.h"

namespace loom::collectives::staging {
namespace {

// One copy direction: jobs run in issue order on a worker thread, each after
// `delay`. Every copy is logged (direction, issue order) for the overlap test.
class Lane {
 public:
  struct State {
    absl::Mutex mu;
    bool done = false;
  };
  class Event : public CopyEvent {
   public:
    explicit Event(std::shared_ptr<State> s) : s_(std::move(s)) {}
    absl::Status Wait(absl::Time deadline) override {
      absl::MutexLock l(&s_->mu);
      if (!s_->mu.AwaitWithDeadline(absl::Condition(&s_->done), deadline)) {
        return absl::DeadlineExceededError("copy did not land");
      }
      return absl::OkStatus();
    }

   private:
    std::shared_ptr<State> s_;
  };

  explicit Lane(absl::Duration delay) : delay_(delay), worker_([this] { Loop(); }) {}
  ~Lane() {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
    }
    worker_.join();
  }
  std::unique_ptr<CopyEvent> Push(void* dst, const void* src, size_t bytes) {
    auto s = std::make_shared<State>();
    absl::MutexLock l(&mu_);
    jobs_.push_back({dst, src, bytes, s});
    return std::make_unique<Event>(s);
  }

 private:
  struct Job {
    void* dst;
    const void* src;
    size_t bytes;
    std::shared_ptr<State> state;
  };
  void Loop() {
    while (true) {
      Job j;
      {
        absl::MutexLock l(&mu_);
        mu_.Await(absl::Condition(
            +[](Lane* self) { return self->stop_ || !self->jobs_.empty(); }, this));
        if (jobs_.empty()) return;
        j = jobs_.front();
        jobs_.pop_front();
      }
      if (delay_ > absl::ZeroDuration()) absl::SleepFor(delay_);
      if (j.bytes > 0) std::memcpy(j.dst, j.src, j.bytes);
      absl::MutexLock l(&j.state->mu);
      j.state->done = true;
    }
  }

  absl::Duration delay_;
  absl::Mutex mu_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

class ThreadCopier : public Copier {
 public:
  explicit ThreadCopier(absl::Duration delay) : to_host_(delay), to_device_(delay) {}
  absl::StatusOr<void*> HostBuffer(size_t bytes) override {
    if (buffer_.size() < bytes) buffer_.assign(bytes, 0);
    return buffer_.data();
  }
  absl::StatusOr<std::unique_ptr<CopyEvent>> ToHost(void* host, const void* dev, size_t bytes) override {
    Log('H');
    return to_host_.Push(host, dev, bytes);
  }
  absl::StatusOr<std::unique_ptr<CopyEvent>> ToDevice(void* dev, const void* host, size_t bytes) override {
    Log('D');
    return to_device_.Push(dev, host, bytes);
  }
  absl::Status ToDeviceQueued(void* dev, const void* host, size_t bytes) override {
    Log('D');
    to_device_.Push(dev, host, bytes);
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<CopyEvent>> ToDeviceFence() override {
    Log('F');
    return to_device_.Push(nullptr, nullptr, 0);
  }
  absl::Status RegisterHost(void* host, size_t bytes) override {
    absl::MutexLock l(&mu_);
    ++registered_;
    EXPECT_NE(host, nullptr);
    EXPECT_GT(bytes, 0u);
    return absl::OkStatus();
  }
  void UnregisterHost(void*) override {
    absl::MutexLock l(&mu_);
    --registered_;
  }
  // 'H' copy to the host, 'D' copy back, 'F' fence, in issue order.
  std::string log() {
    absl::MutexLock l(&mu_);
    return log_;
  }
  int registered() {
    absl::MutexLock l(&mu_);
    return registered_;
  }

 private:
  void Log(char c) {
    absl::MutexLock l(&mu_);
    log_ += c;
  }
  std::vector<char> buffer_;
  absl::Mutex mu_;
  std::string log_ ABSL_GUARDED_BY(mu_);
  int registered_ ABSL_GUARDED_BY(mu_) = 0;
  Lane to_host_, to_device_;
};

// A store server for one test's ranks (secret "s").
auto StartStore() {
  store::StoreServer::Options so;
  so.secret = "s";
  return store::StoreServer::Start(so);
}

struct Member {
  std::unique_ptr<ThreadCopier> copier;
  std::unique_ptr<LocalGroup> group;
  std::shared_ptr<store::Store> store;
};

// Runs fn(rank, Member&) on `world` threads, each with its LocalGroup over one
// TCP store. `delay(r)` is rank r's copy delay.
void RunGroup(int world, size_t chunk_bytes, const std::function<absl::Duration(int)>& delay,
              const std::function<void(int, Member&)>& fn) {
  auto server = StartStore();
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto store = store::TcpStore::Connect((*server)->address(), "s");
      ASSERT_TRUE(store.ok()) << store.status();
      Member m;
      m.store = *store;
      m.copier = std::make_unique<ThreadCopier>(delay(r));
      LocalGroup::Options o;
      o.chunk_bytes = chunk_bytes;
      o.timeout = absl::Seconds(30);
      std::string why_not;
      auto g = LocalGroup::Create(**store, r, world, m.copier.get(), o, &why_not);
      ASSERT_TRUE(g.ok()) << g.status();
      ASSERT_NE(*g, nullptr) << why_not;
      m.group = *std::move(g);
      EXPECT_EQ(m.copier->registered(), world) << "its own arena and every other rank's";
      fn(r, m);
      m.group.reset();
      EXPECT_EQ(m.copier->registered(), 0);
    });
  }
  for (auto& t : threads) t.join();
}

absl::Duration Zero(int) { return absl::ZeroDuration(); }

// The expected result of element i: its part's owner p (local_group.h) starts
// from its own value, then applies the others' in rank order.
size_t Owner(size_t i, size_t chunk_elems, size_t total, int world) {
  const size_t k = i / chunk_elems;
  const size_t elems = std::min(chunk_elems, total - k * chunk_elems), at = i - k * chunk_elems;
  const size_t per = elems / world, rem = elems % world;
  for (int p = 0; p < world; ++p) {
    const size_t first = p * per + std::min<size_t>(p, rem), count = per + (static_cast<size_t>(p) < rem);
    if (at >= first && at < first + count) return p;
  }
  return world;  // unreachable
}

float Value(int rank, size_t i, uint32_t seed) {
  std::mt19937 g(seed * 7919 + rank * 104729 + static_cast<uint32_t>(i));
  return std::uniform_real_distribution<float>(-1, 1)(g) * std::pow(2.0f, static_cast<float>(g() % 20) - 10);
}

const std::atomic<bool> kNoAbort{false};

// f32 sum, avg and max over sizes around the chunk (1024 floats at 4 KiB):
// every rank ends with the same bits, equal to the order the header gives.
void CheckF32(int world, const std::function<absl::Duration(int)>& delay) {
  const size_t chunk_bytes = 4096, chunk_elems = chunk_bytes / 4;
  const std::vector<size_t> sizes = {1, 3, 1023, 1024, 1025, 4 * 1024 + 7, 3, 9 * 1024};
  RunGroup(world, chunk_bytes, delay, [&](int r, Member& m) {
    uint32_t seed = 1;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      for (size_t n : sizes) {
        SCOPED_TRACE(testing::Message() << "rank " << r << " of " << world << " op " << static_cast<int>(op)
                                        << " numel " << n);
        ++seed;
        std::vector<float> x(n);
        for (size_t i = 0; i < n; ++i) x[i] = Value(r, i, seed);
        LocalStats st;
        absl::Status s = m.group->AllReduce(reinterpret_cast<char*>(x.data()), n * 4, DType::kF32, op,
                                            absl::Now() + absl::Seconds(30), kNoAbort, &st);
        ASSERT_TRUE(s.ok()) << s;
        for (size_t i = 0; i < n; ++i) {
          const int p = static_cast<int>(Owner(i, chunk_elems, n, world));
          float want = Value(p, i, seed);
          for (int q = 0; q < world; ++q) {
            if (q == p) continue;
            const float v = Value(q, i, seed);
            want = op == ReduceOp::kMax ? std::max(want, v) : want + v;
          }
          if (op == ReduceOp::kAvg) want /= static_cast<float>(world);
          ASSERT_EQ(std::memcmp(&x[i], &want, 4), 0) << "element " << i << ": " << x[i] << " != " << want;
        }
      }
    }
  });
}

TEST(LocalGroup, F32TwoRanks) { CheckF32(2, Zero); }
TEST(LocalGroup, F32ThreeRanks) { CheckF32(3, Zero); }
TEST(LocalGroup, F32FourRanksUnevenCopies) {
  // Rank 1 copies slowly, rank 3 a little: the others reach every wait first.
  CheckF32(4, [](int r) { return r == 1 ? absl::Microseconds(300) : r == 3 ? absl::Microseconds(50) : absl::ZeroDuration(); });
}

TEST(LocalGroup, Bf16AndInt64) {
  RunGroup(3, 4096, Zero, [](int r, Member& m) {
    const size_t n = 5000;  // 2 bytes an element: three chunks of 2048 and a rest
    std::vector<BF16> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = BF16(static_cast<float>((r + 1) * (i % 7)));
    LocalStats st;
    ASSERT_TRUE(m.group->AllReduce(reinterpret_cast<char*>(h.data()), n * 2, DType::kBF16, ReduceOp::kSum,
                                   absl::Now() + absl::Seconds(30), kNoAbort, &st).ok());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(static_cast<float>(h[i]), 6.0f * (i % 7)) << i;
    std::vector<int64_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = (r + 2) * static_cast<int64_t>(i + 1);
    ASSERT_TRUE(m.group->AllReduce(reinterpret_cast<char*>(v.data()), n * 8, DType::kI64, ReduceOp::kProduct,
                                   absl::Now() + absl::Seconds(30), kNoAbort, &st).ok());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(v[i], 24 * static_cast<int64_t>(i + 1) * (i + 1) * (i + 1)) << i;
  });
}

TEST(LocalGroup, CopiesOverlapTheReduction) {
  // Three chunks: chunk 1's copy to the host is issued before chunk 0's
  // copies back, and chunk 2's before chunk 1's.
  RunGroup(2, 4096, Zero, [](int r, Member& m) {
    std::vector<float> x(3 * 1024, 1.0f);
    LocalStats st;
    ASSERT_TRUE(m.group->AllReduce(reinterpret_cast<char*>(x.data()), x.size() * 4, DType::kF32, ReduceOp::kSum,
                                   absl::Now() + absl::Seconds(30), kNoAbort, &st).ok());
    for (float v : x) ASSERT_EQ(v, 2.0f);
    // H(0) H(1) D D F(0) H(2) D D F(1) D D F(2): two parts a chunk.
    EXPECT_EQ(m.copier->log(), "HHDDFHDDFDDF") << "rank " << r;
  });
}

TEST(LocalGroup, AnOpOfOneSlotStillMovesInFourChunks) {
  // 1 MiB slots: 1 MiB runs as 4 chunks of 256 KiB, 3 MiB as 4 of 768 KiB,
  // 8 MiB as 8 whole slots, and 100 KiB (under the 256 KiB floor) as one.
  RunGroup(2, size_t{1} << 20, Zero, [](int r, Member& m) {
    for (const auto& [bytes, chunks] : std::vector<std::pair<size_t, size_t>>{{1 << 20, 4}, {100 << 10, 1}, {3 << 20, 4}, {8 << 20, 8}}) {
      std::vector<float> x(bytes / 4);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((r + 1) * (i % 1000));
      const size_t before = m.copier->log().size();
      LocalStats st;
      ASSERT_TRUE(m.group->AllReduce(reinterpret_cast<char*>(x.data()), bytes, DType::kF32, ReduceOp::kSum,
                                     absl::Now() + absl::Seconds(30), kNoAbort, &st).ok());
      for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], 3.0f * (i % 1000)) << i;
      const std::string log = m.copier->log().substr(before);
      EXPECT_EQ(static_cast<size_t>(std::count(log.begin(), log.end(), 'H')), chunks) << bytes << " bytes: " << log;
    }
  });
}

// Element i of block b of rank r's input (reduce_scatter) or of rank b's
// input (all_gather, where r == b).
float BlockValue(int rank, int block, size_t i, uint32_t seed) {
  return Value(rank, static_cast<size_t>(block) * 100003 + i, seed);
}

// Block sizes around the chunk (at 4 KiB a slot, world blocks share it):
// equal ones, and uneven ones with an empty block.
std::vector<std::vector<size_t>> BlockShapes(int world) {
  std::vector<std::vector<size_t>> shapes;
  for (size_t n : {size_t{1}, size_t{255}, static_cast<size_t>(1024 / world), size_t{3000}, size_t{20000}}) shapes.emplace_back(world, n);
  std::vector<size_t> uneven(world);
  for (int p = 0; p < world; ++p) uneven[p] = (p * 1237 + 5) % 2600;
  uneven[world - 1] = 0;
  shapes.push_back(uneven);
  return shapes;
}

// reduce_scatter of one shape: rank r's output equals, bit for bit, its own
// block r, then every other rank's block r applied in rank order.
void ReduceScatterOnce(int r, Member& m, int world, const std::vector<size_t>& counts, ReduceOp op, uint32_t seed) {
  std::vector<std::vector<float>> in(world);
  std::vector<const char*> ptrs;
  for (int b = 0; b < world; ++b) {
    in[b].resize(counts[b]);
    for (size_t i = 0; i < counts[b]; ++i) in[b][i] = BlockValue(r, b, i, seed);
    ptrs.push_back(reinterpret_cast<const char*>(in[b].data()));
  }
  std::vector<float> out(counts[r], std::nanf(""));
  LocalStats st;
  absl::Status s = m.group->ReduceScatter(reinterpret_cast<char*>(out.data()), ptrs, counts, DType::kF32, op,
                                          absl::Now() + absl::Seconds(30), kNoAbort, &st);
  ASSERT_TRUE(s.ok()) << s;
  for (size_t i = 0; i < counts[r]; ++i) {
    float want = BlockValue(r, r, i, seed);
    for (int q = 0; q < world; ++q) {
      if (q == r) continue;
      const float v = BlockValue(q, r, i, seed);
      want = op == ReduceOp::kMax ? std::max(want, v) : want + v;
    }
    if (op == ReduceOp::kAvg) want /= static_cast<float>(world);
    ASSERT_EQ(std::memcmp(&out[i], &want, 4), 0) << "element " << i << ": " << out[i] << " != " << want;
  }
}

// all_gather of one shape: output block p equals rank p's input, bit for bit.
void AllGatherOnce(int r, Member& m, int world, const std::vector<size_t>& counts, uint32_t seed) {
  std::vector<float> in(counts[r]);
  for (size_t i = 0; i < counts[r]; ++i) in[i] = BlockValue(r, r, i, seed);
  std::vector<std::vector<float>> out(world);
  std::vector<char*> ptrs;
  for (int p = 0; p < world; ++p) {
    out[p].assign(counts[p], std::nanf(""));
    ptrs.push_back(reinterpret_cast<char*>(out[p].data()));
  }
  LocalStats st;
  absl::Status s = m.group->AllGather(ptrs, counts, reinterpret_cast<const char*>(in.data()), DType::kF32,
                                      absl::Now() + absl::Seconds(30), kNoAbort, &st);
  ASSERT_TRUE(s.ok()) << s;
  for (int p = 0; p < world; ++p) {
    for (size_t i = 0; i < counts[p]; ++i) {
      const float want = BlockValue(p, p, i, seed);
      ASSERT_EQ(std::memcmp(&out[p][i], &want, 4), 0) << "block " << p << " element " << i;
    }
  }
}

// Every shape with sum, avg and max, then an all_gather of it, and an
// all_reduce between shapes: the three kinds share the chunk numbering.
void CheckBlocks(int world, const std::function<absl::Duration(int)>& delay) {
  RunGroup(world, 4096, delay, [&](int r, Member& m) {
    uint32_t seed = 100;
    for (const std::vector<size_t>& counts : BlockShapes(world)) {
      SCOPED_TRACE(testing::Message() << "rank " << r << " of " << world << ", block 0 of " << counts[0]);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
        ReduceScatterOnce(r, m, world, counts, op, ++seed);
        if (::testing::Test::HasFatalFailure()) return;
      }
      AllGatherOnce(r, m, world, counts, ++seed);
      if (::testing::Test::HasFatalFailure()) return;
      std::vector<float> x(777, static_cast<float>(r + 1));
      LocalStats st;
      ASSERT_TRUE(m.group->AllReduce(reinterpret_cast<char*>(x.data()), x.size() * 4, DType::kF32, ReduceOp::kSum,
                                     absl::Now() + absl::Seconds(30), kNoAbort, &st).ok());
      for (float v : x) ASSERT_EQ(v, static_cast<float>(world * (world + 1) / 2));
    }
  });
}

TEST(LocalGroup, ReduceScatterAndAllGatherTwoRanks) { CheckBlocks(2, Zero); }
TEST(LocalGroup, ReduceScatterAndAllGatherThreeRanksUnevenCopies) {
  CheckBlocks(3, [](int r) { return r == 0 ? absl::Microseconds(200) : absl::ZeroDuration(); });
}
TEST(LocalGroup, ReduceScatterAndAllGatherFourRanksUnevenCopies) {
  CheckBlocks(4, [](int r) { return r == 2 ? absl::Microseconds(300) : r == 1 ? absl::Microseconds(40) : absl::ZeroDuration(); });
}

TEST(LocalGroup, BlockOpsNeedOneBlockPerRank) {
  RunGroup(2, 4096, Zero, [](int, Member& m) {
    float a[4] = {}, b[4] = {};
    const std::vector<size_t> one = {4};
    const std::vector<const char*> in = {reinterpret_cast<const char*>(a)};
    LocalStats st;
    absl::Status s = m.group->ReduceScatter(reinterpret_cast<char*>(b), in, one, DType::kF32, ReduceOp::kSum,
                                            absl::Now() + absl::Seconds(5), kNoAbort, &st);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("expected 2 blocks"), std::string::npos) << s;
    const std::vector<char*> out = {reinterpret_cast<char*>(b)};
    s = m.group->AllGather(out, one, reinterpret_cast<const char*>(a), DType::kF32, absl::Now() + absl::Seconds(5),
                           kNoAbort, &st);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    // Bad arguments leave the group usable.
    std::vector<float> x(10, 1.0f);
    ASSERT_TRUE(m.group->AllReduce(reinterpret_cast<char*>(x.data()), 40, DType::kF32, ReduceOp::kSum,
                                   absl::Now() + absl::Seconds(30), kNoAbort, &st).ok());
    EXPECT_EQ(x[9], 2.0f);
  });
}

int ArenaNames() {
  const std::string prefix = absl::StrCat("loom-stage-", getpid(), "-");
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) n += std::string(e->d_name).rfind(prefix, 0) == 0;
  closedir(d);
  return n;
}

TEST(LocalGroup, ArenasAreUnlinkedOnceMapped) {
  RunGroup(3, 4096, Zero, [](int r, Member& m) {
    // Once every rank's Create has returned, no arena has a name left: a
    // crash from here on leaks no shared memory.
    ASSERT_TRUE(m.store->Set(absl::StrCat("created/", r), "1").ok());
    ASSERT_TRUE(m.store->Wait({"created/0", "created/1", "created/2"}, absl::Seconds(30)).ok());
    EXPECT_EQ(ArenaNames(), 0);
  });
}

TEST(LocalGroup, AbsentRankTimesOutNamingIt) {
  RunGroup(2, 4096, Zero, [](int r, Member& m) {
    if (r == 1) return;  // never joins the op
    std::vector<float> x(100, 1.0f);
    LocalStats st;
    absl::Status s = m.group->AllReduce(reinterpret_cast<char*>(x.data()), 400, DType::kF32, ReduceOp::kSum,
                                        absl::Now() + absl::Milliseconds(300), kNoAbort, &st);
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    EXPECT_NE(s.message().find("rank 1 has not copied its chunk to the host"), std::string::npos) << s;
    s = m.group->AllReduce(reinterpret_cast<char*>(x.data()), 400, DType::kF32, ReduceOp::kSum,
                           absl::Now() + absl::Seconds(1), kNoAbort, &st);
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << "a failed group is not used again: " << s;
  });
}

TEST(LocalGroup, AbortedRankFailsTheOthersAtOnce) {
  RunGroup(3, 4096, Zero, [](int r, Member& m) {
    std::vector<float> x(100, 1.0f);
    LocalStats st;
    std::atomic<bool> abort{r == 0};
    const absl::Time start = absl::Now();
    absl::Status s = m.group->AllReduce(reinterpret_cast<char*>(x.data()), 400, DType::kF32, ReduceOp::kSum,
                                        absl::Now() + absl::Seconds(60), r == 0 ? abort : kNoAbort, &st);
    EXPECT_TRUE(absl::IsAborted(s)) << s;
    if (r != 0) {
      EXPECT_NE(s.message().find("rank 0 failed"), std::string::npos) << s;
    }
    EXPECT_LT(absl::Now() - start, absl::Seconds(30)) << "the others must not wait out their deadline";
  });
}

TEST(LocalGroup, BadOptionsAndPaths) {
  auto server = StartStore();
  ASSERT_TRUE(server.ok());
  auto store = store::TcpStore::Connect((*server)->address(), "s");
  ASSERT_TRUE(store.ok());
  ThreadCopier copier(absl::ZeroDuration());
  LocalGroup::Options o;
  o.chunk_bytes = 100;
  auto g = LocalGroup::Create(**store, 0, 2, &copier, o, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(g.status())) << g.status();
  EXPECT_NE(g.status().message().find("staging_piece_bytes"), std::string::npos) << g.status();
  EXPECT_TRUE(ParseStagingPath("auto").ok());
  EXPECT_EQ(*ParseStagingPath("shm"), StagingPath::kSharedMemory);
  EXPECT_EQ(*ParseStagingPath("ring"), StagingPath::kRing);
  auto bad = ParseStagingPath("nvlink");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find("staging_path"), std::string::npos) << bad.status();
}

TEST(LocalGroup, RunsTheStagedBackendsOps) {
  auto server = StartStore();
  ASSERT_TRUE(server.ok());
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto store = store::TcpStore::Connect((*server)->address(), "s");
      ASSERT_TRUE(store.ok());
      BackendContext ctx;
      ctx.store = std::make_shared<store::PrefixStore>(*store, "inner");
      ctx.rank = r;
      ctx.size = 2;
      auto inner = CreateBackend("gloo", ctx);
      ASSERT_TRUE(inner.ok()) << inner.status();
      auto copier = std::make_unique<ThreadCopier>(absl::ZeroDuration());
      LocalGroup::Options o;
      o.chunk_bytes = 4096;
      auto group = LocalGroup::Create(**store, r, 2, copier.get(), o, nullptr);
      ASSERT_TRUE(group.ok() && *group != nullptr);
      auto b = std::make_shared<StagedBackend>("cuda:gloo", *inner, std::move(copier), StagingOptions(),
                                               *std::move(group));
      EXPECT_TRUE(b->shared_memory());
      std::vector<float> x(5000, static_cast<float>(r + 1));
      AllReduceOptions ao;
      auto w = b->AllReduce(Tensor::Wrap(x.data(), {5000}, DType::kF32, Device::CUDA(0)), ao);
      ASSERT_TRUE(w.ok()) << w.status();
      ASSERT_TRUE((*w)->Wait(absl::Now() + absl::Seconds(30)).ok());
      for (float v : x) ASSERT_EQ(v, 3.0f);
      // reduce_scatter_from and all_gather_into over the same group.
      std::vector<float> blocks(2 * 3000), mine(3000, -1.0f);
      for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<float>((r + 1) * (i % 97));
      ReduceScatterOptions ro;
      auto rs = b->ReduceScatterFrom(Tensor::Wrap(mine.data(), {3000}, DType::kF32, Device::CUDA(0)),
                                     Tensor::Wrap(blocks.data(), {6000}, DType::kF32, Device::CUDA(0)), ro);
      ASSERT_TRUE(rs.ok()) << rs.status();
      ASSERT_TRUE((*rs)->Wait(absl::Now() + absl::Seconds(30)).ok());
      for (size_t i = 0; i < mine.size(); ++i) ASSERT_EQ(mine[i], 3.0f * ((r * 3000 + i) % 97)) << i;
      std::vector<float> all(6000, -1.0f);
      AllGatherOptions go;
      auto ag = b->AllGatherInto(Tensor::Wrap(all.data(), {6000}, DType::kF32, Device::CUDA(0)),
                                 Tensor::Wrap(mine.data(), {3000}, DType::kF32, Device::CUDA(0)), go);
      ASSERT_TRUE(ag.ok()) << ag.status();
      ASSERT_TRUE((*ag)->Wait(absl::Now() + absl::Seconds(30)).ok());
      for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], 3.0f * (i % 97)) << i;
      const StagingStats st = b->Stats();
      EXPECT_EQ(st.ops, 3);
      EXPECT_GE(st.inner, st.peer_wait);
      EXPECT_GT(st.run, absl::ZeroDuration());
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace loom::collectives::staging
