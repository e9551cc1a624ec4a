// The staged backend's real pipeline over real Gloo ranks (threads of this
// process), with a host-memory copier: memcpy on one worker thread per
// direction, each copy after an injected delay, every copy's interval logged.
#include "collectives/staging/staged_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "collectives/store/store_server.h"
#include "collectives/store/tcp_store.h"
#include "gtest/gtest.h"

namespace loom::collectives::staging {
namespace {

struct CopyLog {
  bool to_host;
  const char* host;  // the host end of the copy
  size_t bytes;
  absl::Time start, end;
  absl::Time issued;  // when the backend asked for it
};

class HostCopyEvent : public CopyEvent {
 public:
  explicit HostCopyEvent(std::shared_ptr<absl::Notification> done) : done_(std::move(done)) {}
  absl::Status Wait(absl::Time deadline) override {
    if (!done_->WaitForNotificationWithDeadline(deadline)) return absl::DeadlineExceededError("host copy");
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<absl::Notification> done_;
};

// One direction: a worker thread running memcpy jobs in issue order, each
// after `delay`, appending its interval to `log`.
class Lane {
 public:
  Lane(bool to_host, absl::Duration delay, absl::Mutex* log_mu, std::vector<CopyLog>* log)
      : to_host_(to_host), delay_(delay), log_mu_(log_mu), log_(log), worker_([this] { Loop(); }) {}
  ~Lane() {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
    }
    worker_.join();
  }
  // A job without a copy (`fence`) is neither delayed nor logged.
  std::unique_ptr<CopyEvent> Push(void* dst, const void* src, size_t bytes, bool fence = false) {
    auto done = std::make_shared<absl::Notification>();
    absl::MutexLock l(&mu_);
    jobs_.push_back(Job{dst, src, bytes, done, absl::Now(), fence});
    return std::make_unique<HostCopyEvent>(done);
  }

 private:
  struct Job {
    void* dst;
    const void* src;
    size_t bytes;
    std::shared_ptr<absl::Notification> done;
    absl::Time issued;
    bool fence;
  };
  void Loop() {
    while (true) {
      Job job;
      {
        absl::MutexLock l(&mu_);
        mu_.Await(absl::Condition(
            +[](Lane* a) ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->stop_ || !a->jobs_.empty(); }, this));
        if (jobs_.empty()) return;
        job = jobs_.front();
        jobs_.pop_front();
      }
      if (job.fence) {
        job.done->Notify();
        continue;
      }
      absl::Time start = absl::Now();
      absl::SleepFor(delay_);
      if (job.bytes) std::memcpy(job.dst, job.src, job.bytes);
      absl::Time end = absl::Now();
      {
        absl::MutexLock l(log_mu_);
        log_->push_back(
            {to_host_, static_cast<const char*>(to_host_ ? job.dst : job.src), job.bytes, start, end, job.issued});
      }
      job.done->Notify();
    }
  }

  const bool to_host_;
  const absl::Duration delay_;
  absl::Mutex* log_mu_;
  std::vector<CopyLog>* log_;
  absl::Mutex mu_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

class HostCopier : public Copier {
 public:
  explicit HostCopier(absl::Duration delay)
      : to_host_(true, delay, &log_mu_, &log_), to_device_(false, delay, &log_mu_, &log_) {}
  absl::StatusOr<void*> HostBuffer(size_t bytes) override {
    if (buffer_.size() < bytes) buffer_.assign(bytes, 0);
    return buffer_.data();
  }
  absl::StatusOr<std::unique_ptr<CopyEvent>> ToHost(void* host, const void* dev, size_t bytes) override {
    return to_host_.Push(host, dev, bytes);
  }
  absl::StatusOr<std::unique_ptr<CopyEvent>> ToDevice(void* dev, const void* host, size_t bytes) override {
    return to_device_.Push(dev, host, bytes);
  }
  absl::Status ToDeviceQueued(void* dev, const void* host, size_t bytes) override {
    to_device_.Push(dev, host, bytes);  // the lane runs it; ToDeviceFence's event covers it
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<CopyEvent>> ToDeviceFence() override {
    return to_device_.Push(nullptr, nullptr, 0, /*fence=*/true);
  }
  std::vector<CopyLog> Log() {
    absl::MutexLock l(&log_mu_);
    return log_;
  }
  const char* host_base() const { return buffer_.data(); }

 private:
  std::vector<char> buffer_;
  absl::Mutex log_mu_;
  std::vector<CopyLog> log_;
  Lane to_host_, to_device_;
};

struct Rank {
  std::shared_ptr<StagedBackend> backend;
  HostCopier* copier = nullptr;
  std::shared_ptr<Backend> plain;  // a plain CPU Gloo backend of the same ranks: the reference
};

// Runs fn(rank, world, Rank&) on `world` threads, each with its own Gloo
// backend (real rendezvous over a TCP store) behind a StagedBackend, and a
// second, plain one. Both Gloo backends take `base`'s tuning options, and the
// staged one its staging_piece_bytes.
void RunRanks(int world, size_t bucket_bytes, std::function<absl::Duration(int)> delay,
              const std::string& recorder_dir, const std::function<void(int, Rank&)>& fn,
              const BackendContext& base = BackendContext()) {
  store::StoreServer::Options so;
  so.secret = "s";
  auto server = store::StoreServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto store = store::TcpStore::Connect((*server)->address(), "s");
      ASSERT_TRUE(store.ok()) << store.status();
      BackendContext ctx = base;
      ctx.store = std::make_shared<store::PrefixStore>(*store, "inner");
      ctx.rank = r;
      ctx.size = world;
      ctx.timeout = absl::Seconds(30);
      auto inner = CreateBackend("gloo", ctx);
      ASSERT_TRUE(inner.ok()) << inner.status();
      BackendContext plain_ctx = ctx;
      plain_ctx.store = std::make_shared<store::PrefixStore>(*store, "plain");
      auto plain = CreateBackend("gloo", plain_ctx);
      ASSERT_TRUE(plain.ok()) << plain.status();
      auto copier = std::make_unique<HostCopier>(delay(r));
      Rank rank;
      rank.copier = copier.get();
      rank.plain = *plain;
      StagingOptions o;
      o.bucket_bytes = bucket_bytes;
      o.piece_bytes = base.staging_piece_bytes;
      o.flight_recorder_dir = recorder_dir;
      rank.backend = std::make_shared<StagedBackend>("cuda:gloo", *inner, std::move(copier), o);
      fn(r, rank);
    });
  }
  for (auto& t : threads) t.join();
}

Tensor Dev(std::vector<float>& v) {
  return Tensor::Wrap(v.data(), {static_cast<int64_t>(v.size())}, DType::kF32, Device::CUDA(0));
}

absl::Duration NoDelay(int) { return absl::ZeroDuration(); }

void ExpectOk(absl::StatusOr<WorkPtr> w) {
  ASSERT_TRUE(w.ok()) << w.status();
  absl::Status s = (*w)->Wait(absl::Now() + absl::Seconds(30));
  EXPECT_TRUE(s.ok()) << s;
}

// Sizes below, at and above the bucket (40 bytes = 10 floats), none a multiple
// of it except 20; 0 moves nothing.
const int64_t kSizes[] = {0, 1, 7, 10, 13, 20, 101};

void CheckOps(int world) {
  RunRanks(world, 40, NoDelay, "", [world](int r, Rank& k) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(testing::Message() << "rank " << r << " numel " << n);
      std::vector<float> x(n);
      for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((r + 1) * 1000 + i);
      std::vector<float> avg = x;
      AllReduceOptions sum;
      ExpectOk(k.backend->AllReduce(Dev(x), sum));
      AllReduceOptions ao;
      ao.op = ReduceOp::kAvg;
      ExpectOk(k.backend->AllReduce(Dev(avg), ao));
      const float ranks_sum = world * (world + 1) / 2.0f;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(x[i], ranks_sum * 1000 + world * i) << i;
        ASSERT_FLOAT_EQ(avg[i], (ranks_sum * 1000 + world * i) / world) << i;
      }
      // broadcast from the last rank
      std::vector<float> b(n, static_cast<float>(r));
      BroadcastOptions bo;
      bo.root = world - 1;
      ExpectOk(k.backend->Broadcast(Dev(b), bo));
      for (float v : b) ASSERT_EQ(v, world - 1);
      // reduce (max) to rank 0; non-roots keep their input
      std::vector<float> m(n, static_cast<float>(r * 3));
      ReduceOptions ro;
      ro.op = ReduceOp::kMax;
      ExpectOk(k.backend->Reduce(Dev(m), ro));
      for (float v : m) ASSERT_EQ(v, r == 0 ? 3 * (world - 1) : 3 * r);
      // all_gather_into: rank j's block holds j*100 + i
      std::vector<float> in(n), out(n * world, -1);
      for (int64_t i = 0; i < n; ++i) in[i] = r * 100.0f + i;
      ExpectOk(k.backend->AllGatherInto(Dev(out), Dev(in), {}));
      for (int j = 0; j < world; ++j)
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[j * n + i], j * 100.0f + i) << j << "," << i;
      // reduce_scatter_from (sum): input block j on rank r holds r + j*10 + i
      std::vector<float> rin(n * world), rout(n, -1);
      for (int j = 0; j < world; ++j)
        for (int64_t i = 0; i < n; ++i) rin[j * n + i] = r + j * 10.0f + i;
      ExpectOk(k.backend->ReduceScatterFrom(Dev(rout), Dev(rin), {}));
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(rout[i], ranks_sum - world + world * (r * 10.0f + i)) << i;
    }
    ExpectOk(k.backend->Barrier({}));
  });
}

TEST(StagedBackend, EveryOpTwoRanks) { CheckOps(2); }
TEST(StagedBackend, EveryOpThreeRanks) { CheckOps(3); }

// Other dtypes, with a 6-byte bucket: rounded down to whole elements (3 bf16,
// and one i64 since 6 bytes hold none).
TEST(StagedBackend, BucketsHoldWholeElements) {
  RunRanks(2, 6, NoDelay, "", [](int r, Rank& k) {
    std::vector<int64_t> a(11);
    std::vector<BF16> h(13);
    for (size_t i = 0; i < a.size(); ++i) a[i] = (int64_t{1} << 40) * (r + 1) + static_cast<int64_t>(i);
    for (size_t i = 0; i < h.size(); ++i) h[i] = BF16(static_cast<float>(r + 1 + i));
    ExpectOk(k.backend->AllReduce(Tensor::Wrap(a.data(), {11}, DType::kI64, Device::CUDA(0)), {}));
    ExpectOk(k.backend->AllReduce(Tensor::Wrap(h.data(), {13}, DType::kBF16, Device::CUDA(0)), {}));
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], (int64_t{1} << 40) * 3 + 2 * static_cast<int64_t>(i)) << i;
    for (size_t i = 0; i < h.size(); ++i) ASSERT_EQ(static_cast<float>(h[i]), 3.0f + 2 * i) << i;
    // An all_reduce is one inner op over the whole buffer (overlapped).
    EXPECT_EQ(k.backend->inner()->flight_recorder()->Snapshot().size(), 2u);
    // A broadcast runs in buckets: 11 one-element ones, then 5 of 3, 3, 3, 3, 1 bf16.
    BroadcastOptions bo;
    bo.root = 1;
    ExpectOk(k.backend->Broadcast(Tensor::Wrap(a.data(), {11}, DType::kI64, Device::CUDA(0)), bo));
    ExpectOk(k.backend->Broadcast(Tensor::Wrap(h.data(), {13}, DType::kBF16, Device::CUDA(0)), bo));
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], (int64_t{1} << 40) * 3 + 2 * static_cast<int64_t>(i)) << i;
    EXPECT_EQ(k.backend->inner()->flight_recorder()->Snapshot().size(), 2u + 11u + 5u);
  });
}

TEST(StagedBackend, RefusesWhatItCannotStage) {
  RunRanks(1, 40, NoDelay, "", [](int, Rank& k) {
    std::vector<float> x(4);
    Tensor cpu = Tensor::Wrap(x.data(), {4}, DType::kF32, Device::CPU());
    auto w = k.backend->AllReduce(cpu, {});
    EXPECT_TRUE(absl::IsInvalidArgument(w.status())) << w.status();
    EXPECT_NE(w.status().message().find("cpu"), std::string::npos) << w.status();
    EXPECT_TRUE(k.backend->Supports(OpType::kAllToAll, DType::kF32, DeviceKind::kCUDA));
    EXPECT_FALSE(k.backend->Supports(OpType::kAllReduce, DType::kF32, DeviceKind::kCPU));
    EXPECT_TRUE(k.backend->Supports(OpType::kAllReduce, DType::kF32, DeviceKind::kCUDA));
    AllReduceOptions o;
    o.timeout = absl::ZeroDuration();
    auto z = k.backend->AllReduce(Dev(x), o);
    EXPECT_TRUE(absl::IsInvalidArgument(z.status())) << z.status();
    EXPECT_NE(z.status().message().find("options.timeout"), std::string::npos) << z.status();
  });
}

// Rank 1's copies each take 30 ms, rank 0's none. Broadcast runs in buckets:
// rank 0's reduction of bucket i waits for rank 1's copy of bucket i, and
// rank 0 meanwhile copies bucket i+1 to the host and bucket i-1 back. The
// inner ops' real start and end times come from the inner Gloo backend's
// flight recorder: each copy runs between the op's issue (queued) and its end.
TEST(StagedBackend, CopiesOverlapBucketedOps) {
  constexpr int kBuckets = 5;
  RunRanks(2, 400, [](int r) { return r == 1 ? absl::Milliseconds(30) : absl::ZeroDuration(); }, "",
           [](int r, Rank& k) {
             std::vector<float> x(kBuckets * 100, static_cast<float>(r));
             BroadcastOptions bo;
             bo.root = 1;
             ExpectOk(k.backend->Broadcast(Dev(x), bo));
             for (float v : x) ASSERT_EQ(v, 1.0f);
             if (r != 0) return;
             std::vector<OpRecord> inner = k.backend->inner()->flight_recorder()->Snapshot();
             ASSERT_EQ(inner.size(), static_cast<size_t>(kBuckets));
             const char* base = k.copier->host_base();
             auto copy_back = [&](int bucket) {
               for (const CopyLog& c : k.copier->Log())
                 if (!c.to_host && c.host == base + bucket * 400) return c;
               ADD_FAILURE() << "no copy back of bucket " << bucket;
               return CopyLog{};
             };
             for (int i = 1; i < kBuckets; ++i) {
               SCOPED_TRACE(testing::Message() << "bucket " << i);
               ASSERT_EQ(inner[i].state, OpRecord::State::kOk);
               EXPECT_LT(copy_back(i - 1).start, inner[i].finished)
                   << "bucket i-1's copy back starts after bucket i's broadcast ends";
             }
           });
}

// The overlapped all_reduce (one inner ring over the whole 4 MiB buffer, its
// pieces copied in the order the ring reads them): on rank 1, whose copies
// each take 30 ms, the ring is already running while later pieces are still
// being copied in, and the first final segment is on its way back before
// the ring ends. Rank 0's copies take none.
TEST(StagedBackend, AllReduceCopiesOverlapTheRing) {
  BackendContext base;
  base.staging_piece_bytes = 256 << 10;
  RunRanks(2, 4 << 20, [](int r) { return r == 1 ? absl::Milliseconds(30) : absl::ZeroDuration(); }, "",
           [](int r, Rank& k) {
             std::vector<float> x(1 << 20, static_cast<float>(r + 1));
             ExpectOk(k.backend->AllReduce(Dev(x), {}));
             for (float v : x) ASSERT_EQ(v, 3.0f);
             std::vector<OpRecord> inner = k.backend->inner()->flight_recorder()->Snapshot();
             ASSERT_EQ(inner.size(), 1u) << "one inner op";
             ASSERT_EQ(inner[0].state, OpRecord::State::kOk);
             std::vector<CopyLog> in, out;
             for (const CopyLog& c : k.copier->Log()) (c.to_host ? in : out).push_back(c);
             // 2 segments of 2 MiB, each read in eight 256 KiB pieces. This
             // rank's own segment goes back in one copy when the
             // reduce-scatter ends, the received one piece by piece as they
             // land; together they cover the buffer once.
             EXPECT_EQ(in.size(), 16u);
             ASSERT_EQ(out.size(), 9u);
             const char* host0 = k.copier->host_base();
             std::vector<std::pair<size_t, size_t>> ranges;  // (offset, bytes)
             for (const CopyLog& c : out) ranges.push_back({static_cast<size_t>(c.host - host0), c.bytes});
             EXPECT_EQ(ranges[0], std::make_pair(static_cast<size_t>(r) << 21, size_t{2} << 20)) << "own segment first";
             std::sort(ranges.begin(), ranges.end());
             size_t at = 0;
             for (const auto& [o, b] : ranges) {
               EXPECT_EQ(o, at) << "the copies back tile the buffer";
               at = o + b;
             }
             EXPECT_EQ(at, size_t{4} << 20);
             for (size_t i = 1; i < out.size(); ++i)
               EXPECT_EQ(out[i].bytes, size_t{256} << 10) << "a received piece";
             if (r != 1) return;
             absl::Time last_in = absl::InfinitePast(), first_out = absl::InfiniteFuture();
             for (const CopyLog& c : in) last_in = std::max(last_in, c.end);
             for (const CopyLog& c : out) first_out = std::min(first_out, c.issued);
             EXPECT_GT(last_in, inner[0].started) << "every piece landed before the ring began";
             EXPECT_LT(first_out, inner[0].finished) << "nothing was sent back before the ring ended";
           }, base);
}

// The overlapped all_reduce against a plain CPU Gloo all_reduce of the same
// data, bitwise: 3 ranks, sum and avg, the small path, the ring with one and
// with several pieces per segment (odd counts), the default 1 MiB pieces and
// pieces of an odd number of elements, and the inner backend cut into 3
// channel slices as well as unsliced.
TEST(StagedBackend, OverlappedAllReduceEqualsPlainGlooBitwise) {
  for (int channels : {1, 3})
    for (size_t piece : {kDefaultStagingPieceBytes, size_t{12 << 10} + 4}) {
    BackendContext base;
    base.channels = channels;
    base.channel_min_slice_bytes = 4096;
    base.staging_piece_bytes = piece;
    RunRanks(3, 1 << 20, NoDelay, "", [&](int r, Rank& k) {
      for (int64_t n : {int64_t{100}, int64_t{70001}, int64_t{(3 << 20) / 4 * 3 + 7}})
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
          SCOPED_TRACE(testing::Message() << "channels " << channels << " piece " << piece << " numel " << n << " "
                                          << ReduceOpName(op));
          std::vector<float> staged(n), plain(n);
          for (int64_t i = 0; i < n; ++i) staged[i] = plain[i] = 0.1f * (r + 1) + 1e-3f * static_cast<float>(i % 977);
          AllReduceOptions o;
          o.op = op;
          ExpectOk(k.backend->AllReduce(Dev(staged), o));
          ExpectOk(k.plain->AllReduce(Tensor::Wrap(plain.data(), {n}, DType::kF32, Device::CPU()), o));
          ASSERT_EQ(std::memcmp(staged.data(), plain.data(), n * sizeof(float)), 0);
        }
    }, base);
    }
}

// Rank 1 never joins the op: rank 0's op fails by its own timeout, Work::Wait
// with an earlier deadline says DeadlineExceeded while it runs, the flight
// recorder (in memory and dumped) shows the op failed, and later ops fail
// quoting it.
TEST(StagedBackend, TimeoutFailsTheOpAndRecordsIt) {
  char tmpl[] = "/tmp/staged_fr_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  absl::Notification rank0_done;
  RunRanks(2, 40, NoDelay, dir, [&](int r, Rank& k) {
    if (r == 1) {
      rank0_done.WaitForNotification();
      return;
    }
    std::vector<float> x(25, 1.0f);
    AllReduceOptions o;
    o.timeout = absl::Milliseconds(500);
    absl::Time t0 = absl::Now();
    auto w = k.backend->AllReduce(Dev(x), o);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(absl::IsDeadlineExceeded((*w)->Wait(absl::Now() + absl::Milliseconds(50))));
    EXPECT_FALSE((*w)->IsCompleted());
    absl::Status s = (*w)->Wait(absl::Now() + absl::Seconds(20));
    EXPECT_FALSE(s.ok());
    EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
    EXPECT_NE(s.message().find("cuda:gloo all_reduce #0 on rank 0"), std::string::npos) << s;
    std::vector<OpRecord> rec = k.backend->flight_recorder()->Snapshot();
    ASSERT_EQ(rec.size(), 1u);
    EXPECT_EQ(rec[0].state, OpRecord::State::kFailed);
    EXPECT_EQ(rec[0].op, "all_reduce");
    EXPECT_EQ(rec[0].numel, 25);
    std::ifstream f(dir + "/cuda:gloo.rank0.txt");
    std::stringstream dump;
    dump << f.rdbuf();
    EXPECT_NE(dump.str().find("seq=0 op=all_reduce dtype=f32 numel=25 state=failed"), std::string::npos)
        << dump.str();
    auto later = k.backend->AllReduce(Dev(x), {});
    ASSERT_TRUE(later.ok());
    absl::Status ls = (*later)->Wait(absl::Now() + absl::Seconds(20));
    EXPECT_TRUE(absl::IsFailedPrecondition(ls)) << ls;
    EXPECT_NE(ls.message().find("earlier op failed"), std::string::npos) << ls;
    rank0_done.Notify();
  });
  std::remove((dir + "/cuda:gloo.rank0.txt").c_str());
  rmdir(dir.c_str());
}

// Abort() of a running op (rank 1 never joins) aborts its inner op: the op
// ends Cancelled long before its own 30 s timeout.
TEST(StagedBackend, AbortEndsARunningOp) {
  absl::Notification rank0_done;
  RunRanks(2, 40, NoDelay, "", [&](int r, Rank& k) {
    if (r == 1) {
      rank0_done.WaitForNotification();
      return;
    }
    std::vector<float> x(25, 1.0f);
    AllReduceOptions o;
    o.timeout = absl::Seconds(30);
    auto w = k.backend->AllReduce(Dev(x), o);
    ASSERT_TRUE(w.ok()) << w.status();
    absl::SleepFor(absl::Milliseconds(200));
    EXPECT_FALSE((*w)->IsCompleted());
    absl::Time t0 = absl::Now();
    (*w)->Abort();
    absl::Status s = (*w)->Wait(absl::Now() + absl::Seconds(10));
    EXPECT_TRUE(absl::IsCancelled(s)) << s;
    EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
    rank0_done.Notify();
  });
}

// ---------------------------------------------------------------- list forms, all_to_all, gather, scatter, send/recv
//
// Each op runs on the staged backend (outputs poisoned with -1) and on the
// plain CPU Gloo backend of the same ranks (outputs poisoned with -2), on the
// same inputs; the results must be equal, and the plain ones what the op
// means. The bucket is 10 floats.

// Per-rank block sizes of the list forms: uneven, one empty, one of three buckets.
int64_t ListSize(int r) {
  static const int64_t kList[] = {13, 0, 25, 7};
  return kList[r];
}

std::vector<float> Fill(int64_t n, int r, int salt) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(r * 1000 + salt * 100 + i);
  return v;
}

Tensor Cpu(std::vector<float>& v) { return Tensor::Wrap(v.data(), {static_cast<int64_t>(v.size())}, DType::kF32); }

// Per-rank outputs of the given sizes, poisoned, and their tensors.
struct Outputs {
  std::vector<std::vector<float>> dev, cpu;
  std::vector<Tensor> dev_t, cpu_t;
  explicit Outputs(const std::vector<int64_t>& sizes) : dev(sizes.size()), cpu(sizes.size()) {
    for (size_t j = 0; j < sizes.size(); ++j) {
      dev[j].assign(sizes[j], -1.0f);
      cpu[j].assign(sizes[j], -2.0f);
    }
    for (size_t j = 0; j < sizes.size(); ++j) {
      dev_t.push_back(Dev(dev[j]));
      cpu_t.push_back(Cpu(cpu[j]));
    }
  }
};

std::vector<int64_t> ListSizes(int world) {
  std::vector<int64_t> s;
  for (int j = 0; j < world; ++j) s.push_back(ListSize(j));
  return s;
}

size_t InnerOps(Rank& k) { return k.backend->inner()->flight_recorder()->Snapshot().size(); }

void CheckListForms(int world, int r, Rank& k) {
  // all_gather: outputs[j] = rank j's input; 25 floats = 3 buckets.
  std::vector<float> in = Fill(ListSize(r), r, 1);
  Outputs ag(ListSizes(world));
  size_t before = InnerOps(k);
  ExpectOk(k.backend->AllGather(ag.dev_t, Dev(in), {}));
  const size_t buckets = world > 2 ? 3 : 2;  // the longest block: 13 or 25 floats
  EXPECT_EQ(InnerOps(k) - before, buckets) << "all_gather buckets";
  ExpectOk(k.plain->AllGather(ag.cpu_t, Cpu(in), {}));
  for (int j = 0; j < world; ++j) {
    EXPECT_EQ(ag.cpu[j], Fill(ListSize(j), j, 1)) << "plain all_gather " << j;
    EXPECT_EQ(ag.dev[j], ag.cpu[j]) << "all_gather outputs[" << j << "]";
  }
  // reduce_scatter (max): inputs[j] on rank r holds Fill(ListSize(j), r, j).
  std::vector<std::vector<float>> ins;
  for (int j = 0; j < world; ++j) ins.push_back(Fill(ListSize(j), r, j));
  std::vector<Tensor> dev_in, cpu_in;
  for (auto& v : ins) {
    dev_in.push_back(Dev(v));
    cpu_in.push_back(Cpu(v));
  }
  Outputs rs({ListSize(r)});
  ReduceScatterOptions ro;
  ro.op = ReduceOp::kMax;
  before = InnerOps(k);
  ExpectOk(k.backend->ReduceScatter(rs.dev_t[0], dev_in, ro));
  EXPECT_EQ(InnerOps(k) - before, buckets) << "reduce_scatter buckets";
  ExpectOk(k.plain->ReduceScatter(rs.cpu_t[0], cpu_in, ro));
  EXPECT_EQ(rs.cpu[0], Fill(ListSize(r), world - 1, r)) << "plain reduce_scatter";
  EXPECT_EQ(rs.dev[0], rs.cpu[0]) << "reduce_scatter";
}

// Rows (of 3 floats) that rank s sends to rank d: uneven, some none.
int64_t Rows(int s, int d) { return (s + 2 * d + 1) % 4; }

void CheckAllToAll(int world, int r, Rank& k) {
  for (bool even : {false, true}) {
    SCOPED_TRACE(even ? "equal splits" : "uneven splits");
    AllToAllOptions o;
    int64_t in_rows = 0, out_rows = 0;
    for (int j = 0; j < world; ++j) {
      o.input_split_sizes.push_back(even ? 2 : Rows(r, j));
      o.output_split_sizes.push_back(even ? 2 : Rows(j, r));
      in_rows += o.input_split_sizes.back();
      out_rows += o.output_split_sizes.back();
    }
    if (even) o = AllToAllOptions();  // empty: equal splits
    std::vector<float> in = Fill(in_rows * 3, r, 5);
    Outputs out({out_rows * 3});
    auto dev2 = [](std::vector<float>& v, int64_t rows) {
      return Tensor::Wrap(v.data(), {rows, 3}, DType::kF32, Device::CUDA(0));
    };
    size_t before = InnerOps(k);
    ExpectOk(k.backend->AllToAll(dev2(out.dev[0], out_rows), dev2(in, in_rows), o));
    EXPECT_EQ(InnerOps(k) - before, 1u) << "all_to_all is one bucket";
    ExpectOk(k.plain->AllToAll(Tensor::Wrap(out.cpu[0].data(), {out_rows, 3}, DType::kF32),
                               Tensor::Wrap(in.data(), {in_rows, 3}, DType::kF32), o));
    // Row block j of the output is rank j's block for r: its first element.
    int64_t row = 0;
    for (int j = 0; j < world; ++j) {
      int64_t first_row_at_j = 0;
      for (int d = 0; d < r; ++d) first_row_at_j += even ? 2 : Rows(j, d);
      if ((even ? 2 : Rows(j, r)) > 0) {
        EXPECT_EQ(out.cpu[0][row * 3], j * 1000 + 500 + first_row_at_j * 3) << "plain all_to_all from " << j;
      }
      row += even ? 2 : Rows(j, r);
    }
    EXPECT_EQ(out.dev[0], out.cpu[0]) << "all_to_all";
  }
}

void CheckGatherScatter(int world, int r, Rank& k) {
  // gather to the last rank
  std::vector<float> in = Fill(ListSize(r), r, 3);
  const bool groot = r == world - 1;
  Outputs g(groot ? ListSizes(world) : std::vector<int64_t>{});
  GatherOptions go;
  go.root = world - 1;
  size_t before = InnerOps(k);
  ExpectOk(k.backend->Gather(g.dev_t, Dev(in), go));
  EXPECT_EQ(InnerOps(k) - before, 1u) << "gather is one bucket";
  ExpectOk(k.plain->Gather(g.cpu_t, Cpu(in), go));
  for (size_t j = 0; j < g.dev.size(); ++j) {
    EXPECT_EQ(g.cpu[j], Fill(ListSize(j), j, 3)) << "plain gather " << j;
    EXPECT_EQ(g.dev[j], g.cpu[j]) << "gather outputs[" << j << "]";
  }
  // scatter from rank 1: inputs[j] = Fill(ListSize(j), 1, j)
  std::vector<std::vector<float>> ins;
  std::vector<Tensor> dev_in, cpu_in;
  if (r == 1) {
    for (int j = 0; j < world; ++j) ins.push_back(Fill(ListSize(j), 1, j));
    for (auto& v : ins) {
      dev_in.push_back(Dev(v));
      cpu_in.push_back(Cpu(v));
    }
  }
  Outputs s({ListSize(r)});
  ScatterOptions so;
  so.root = 1;
  before = InnerOps(k);
  ExpectOk(k.backend->Scatter(s.dev_t[0], dev_in, so));
  EXPECT_EQ(InnerOps(k) - before, 1u) << "scatter is one bucket";
  ExpectOk(k.plain->Scatter(s.cpu_t[0], cpu_in, so));
  EXPECT_EQ(s.cpu[0], Fill(ListSize(r), 1, r)) << "plain scatter";
  EXPECT_EQ(s.dev[0], s.cpu[0]) << "scatter";
}

// A ring: rank r sends to r+1 and receives from r-1 at every size, rank 0
// sending first and the others receiving first (a send may wait for its
// receiver); ceil(n / 10) buckets each way.
void CheckSendRecv(int world, int r, Rank& k) {
  const int next = (r + 1) % world, prev = (r + world - 1) % world;
  for (int64_t n : kSizes) {
    SCOPED_TRACE(testing::Message() << "numel " << n);
    std::vector<float> mine = Fill(n, r, 7);
    Outputs got({n});
    SendRecvOptions o;
    o.tag = 9;
    for (Backend* b : {static_cast<Backend*>(k.backend.get()), k.plain.get()}) {
      const bool plain = b == k.plain.get();
      Tensor dst = plain ? got.cpu_t[0] : got.dev_t[0];
      Tensor src = plain ? Cpu(mine) : Dev(mine);
      size_t before = InnerOps(k);
      if (r == 0) ExpectOk(b->Send(src, next, o));
      ExpectOk(b->Recv(dst, prev, o));
      if (r != 0) ExpectOk(b->Send(src, next, o));
      if (!plain) EXPECT_EQ(InnerOps(k) - before, 2 * static_cast<size_t>((n + 9) / 10)) << "send/recv buckets";
    }
    EXPECT_EQ(got.cpu[0], Fill(n, prev, 7)) << "plain recv";
    EXPECT_EQ(got.dev[0], got.cpu[0]) << "recv";
  }
}

void CheckNewOps(int world) {
  RunRanks(world, 40, NoDelay, "", [world](int r, Rank& k) {
    SCOPED_TRACE(testing::Message() << "rank " << r);
    CheckListForms(world, r, k);
    CheckAllToAll(world, r, k);
    CheckGatherScatter(world, r, k);
    CheckSendRecv(world, r, k);
    ExpectOk(k.backend->Barrier({}));
  });
}

TEST(StagedBackend, ListFormsAllToAllGatherScatterSendRecvMatchCpuTwoRanks) { CheckNewOps(2); }
TEST(StagedBackend, ListFormsAllToAllGatherScatterSendRecvMatchCpuThreeRanks) { CheckNewOps(3); }

// Issues `op` on rank 0 of two ranks, with the given timeout (rank 1 never
// joins). Each waits for rank 1: gather's root and scatter's receiver, recv.
// (A send is not here: the inner TCP transport completes a small send without
// its receiver.)
absl::StatusOr<WorkPtr> IssueAlone(OpType op, Rank& k, absl::Duration timeout, std::vector<float>& a,
                                   std::vector<float>& b, std::vector<float>& c) {
  std::vector<Tensor> list{Dev(b), Dev(c)};
  switch (op) {
    case OpType::kAllGather: {
      AllGatherOptions o;
      o.timeout = timeout;
      return k.backend->AllGather(list, Dev(a), o);
    }
    case OpType::kReduceScatter: {
      ReduceScatterOptions o;
      o.timeout = timeout;
      return k.backend->ReduceScatter(Dev(a), list, o);
    }
    case OpType::kAllToAll: {
      AllToAllOptions o;
      o.timeout = timeout;
      return k.backend->AllToAll(Dev(b), Dev(a), o);
    }
    case OpType::kGather: {
      GatherOptions o;
      o.timeout = timeout;
      return k.backend->Gather(list, Dev(a), o);
    }
    case OpType::kScatter: {
      ScatterOptions o;
      o.root = 1;
      o.timeout = timeout;
      return k.backend->Scatter(Dev(a), list, o);
    }
    case OpType::kRecv: {
      SendRecvOptions o;
      o.timeout = timeout;
      return k.backend->Recv(Dev(a), 1, o);
    }
    default:
      return absl::InternalError("not in this test");
  }
}

class StagedTimeout : public testing::TestWithParam<OpType> {};

// Rank 1 never joins: rank 0's op fails with DeadlineExceeded by its own
// timeout, the flight recorder shows it failed, and a later op fails quoting it.
TEST_P(StagedTimeout, RankThatNeverJoins) {
  const OpType op = GetParam();
  const std::string name(OpTypeName(op));
  absl::Notification rank0_done;
  RunRanks(2, 40, NoDelay, "", [&](int r, Rank& k) {
    if (r == 1) {
      rank0_done.WaitForNotification();
      return;
    }
    std::vector<float> a(26, 1.0f), b(26, 2.0f), c(26, 3.0f);
    absl::Time t0 = absl::Now();
    auto w = IssueAlone(op, k, absl::Milliseconds(400), a, b, c);
    ASSERT_TRUE(w.ok()) << w.status();
    absl::Status s = (*w)->Wait(absl::Now() + absl::Seconds(20));
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
    EXPECT_NE(s.message().find(absl::StrCat("cuda:gloo ", name, " #0 on rank 0")), std::string::npos) << s;
    std::vector<OpRecord> rec = k.backend->flight_recorder()->Snapshot();
    ASSERT_EQ(rec.size(), 1u);
    EXPECT_EQ(rec[0].op, name);
    EXPECT_EQ(rec[0].state, OpRecord::State::kFailed);
    auto later = k.backend->AllReduce(Dev(a), {});
    ASSERT_TRUE(later.ok()) << later.status();
    absl::Status ls = (*later)->Wait(absl::Now() + absl::Seconds(20));
    EXPECT_TRUE(absl::IsFailedPrecondition(ls)) << ls;
    EXPECT_NE(ls.message().find(absl::StrCat("earlier op failed: cuda:gloo ", name, " #0")), std::string::npos) << ls;
    rank0_done.Notify();
  });
}

INSTANTIATE_TEST_SUITE_P(NewOps, StagedTimeout,
                         testing::Values(OpType::kAllGather, OpType::kReduceScatter, OpType::kAllToAll,
                                         OpType::kGather, OpType::kScatter, OpType::kRecv),
                         [](const testing::TestParamInfo<OpType>& p) { return std::string(OpTypeName(p.param)); });

void ExpectInvalid(absl::StatusOr<WorkPtr> w, absl::string_view text) {
  EXPECT_TRUE(absl::IsInvalidArgument(w.status())) << w.status();
  EXPECT_NE(w.status().message().find(text), std::string::npos) << "want '" << text << "' in " << w.status();
}

// Bad arguments are refused on the caller's thread, naming the argument;
// nothing is queued.
TEST(StagedBackend, NewOpsNameBadArguments) {
  RunRanks(2, 40, NoDelay, "", [](int r, Rank& k) {
    std::vector<float> a(4), b(4), c(4), odd(3), host(4);
    std::vector<int32_t> ints(4);
    Tensor cpu = Cpu(host);
    Tensor i32 = Tensor::Wrap(ints.data(), {4}, DType::kI32, Device::CUDA(0));
    std::vector<Tensor> one{Dev(b)}, with_cpu{Dev(b), cpu}, with_i32{i32, Dev(c)}, two{Dev(b), Dev(c)};
    ExpectInvalid(k.backend->AllGather(one, Dev(a), {}), "all_gather: outputs: expected 2 tensors, got 1");
    ExpectInvalid(k.backend->AllGather(with_cpu, Dev(a), {}), "all_gather: outputs[1]: cuda:gloo stages CUDA tensors");
    ExpectInvalid(k.backend->AllGather(with_i32, Dev(a), {}), "all_gather: outputs[0]: dtype i32 != input f32");
    ExpectInvalid(k.backend->AllGather(two, Dev(odd), {}), absl::StrCat("all_gather: outputs[", r, "] has 4"));
    ExpectInvalid(k.backend->ReduceScatter(Dev(a), one, {}), "reduce_scatter: inputs: expected 2 tensors");
    ExpectInvalid(k.backend->ReduceScatter(Dev(odd), two, {}), "reduce_scatter: output: expected 4 elements");
    ExpectInvalid(k.backend->ReduceScatter(cpu, two, {}), "reduce_scatter: output: cuda:gloo stages CUDA");
    AllToAllOptions ao;
    ao.input_split_sizes = {1, 2};
    ExpectInvalid(k.backend->AllToAll(Dev(b), Dev(a), ao), "all_to_all: options.input_split_sizes: sum 3 != 4");
    ExpectInvalid(k.backend->AllToAll(Dev(b), Dev(odd), {}), "all_to_all: input: 3 rows do not split evenly");
    ExpectInvalid(k.backend->AllToAll(i32, Dev(a), {}), "all_to_all: output: dtype i32 != input f32");
    GatherOptions go;
    go.root = 2;
    ExpectInvalid(k.backend->Gather(two, Dev(a), go), "gather: options.root: rank 2 out of range");
    go.root = r;
    ExpectInvalid(k.backend->Gather(one, Dev(a), go), "gather: outputs: expected 2 tensors, got 1");
    ScatterOptions so;
    so.root = r;
    ExpectInvalid(k.backend->Scatter(Dev(a), with_cpu, so), "scatter: inputs[1]: cuda:gloo stages CUDA tensors");
    ExpectInvalid(k.backend->Scatter(Dev(odd), two, so), absl::StrCat("scatter: inputs[", r, "] has 4"));
    ExpectInvalid(k.backend->Send(Dev(a), r, {}), "send: dst: cannot send to self");
    ExpectInvalid(k.backend->Send(Dev(a), 5, {}), "send: dst: rank 5 out of range");
    ExpectInvalid(k.backend->Recv(cpu, 1 - r, {}), "recv: tensor: cuda:gloo stages CUDA tensors");
    ExpectInvalid(k.backend->Recv(Dev(a), -1, {}), "recv: src: rank -1 out of range");
    EXPECT_TRUE(k.backend->flight_recorder()->Snapshot().empty());
  });
}

// Stats(): each op's waits for its copies (every copy takes at least 3 ms
// here), its inner ops and its whole run, summed over the ops; the run
// covers the three.
TEST(StagedBackend, StatsSplitEachOpsTimeIntoItsPhases) {
  const absl::Duration delay = absl::Milliseconds(3);
  RunRanks(2, 1 << 20, [&](int) { return delay; }, "", [&](int r, Rank& k) {
    const StagingStats none = k.backend->Stats();
    EXPECT_EQ(none.ops, 0);
    EXPECT_EQ(none.run, absl::ZeroDuration());
    std::vector<float> x(1000, static_cast<float>(r + 1));
    for (int i = 0; i < 3; ++i) ExpectOk(k.backend->AllReduce(Dev(x), {}));
    EXPECT_EQ(x[999], 12.0f) << "1 + 2, then doubled by each later sum";
    StagingStats s = k.backend->Stats();
    EXPECT_EQ(s.ops, 3);
    // The overlapped all_reduce: the ring itself waits for its one piece
    // (under 64 KiB: read whole), and the executor thread for what is left of
    // the copy back, which the ring issued as it ended: per op, the inner op
    // and that wait together hold both copies.
    EXPECT_LT(s.to_host_wait, delay) << "the executor thread has no copy in to wait for";
    // A wait starts just after its copy is issued: a copy's 3 ms, less that
    // gap (microseconds; 1 ms allowed), is inside each wait.
    const absl::Duration waited = delay - absl::Milliseconds(1);
    EXPECT_GE(s.algorithm_host_wait, 3 * waited);
    EXPECT_GT(s.to_device_wait, absl::ZeroDuration());
    EXPECT_GE(s.inner + s.to_device_wait, 3 * 2 * delay);
    EXPECT_GE(s.inner, s.algorithm_host_wait) << "the ring's waits are part of the inner op";
    EXPECT_GE(s.run, s.to_host_wait + s.inner + s.to_device_wait);
    // A broadcast runs in buckets: one copy each way, each waited for from its issue.
    const StagingStats before = s;
    BroadcastOptions bo;
    for (int i = 0; i < 3; ++i) ExpectOk(k.backend->Broadcast(Dev(x), bo));
    s = k.backend->Stats();
    EXPECT_EQ(s.ops, 6);
    if (r == bo.root) {
      EXPECT_GE(s.to_host_wait - before.to_host_wait, 3 * waited) << "the root copies in";
    } else {
      EXPECT_GE(s.to_device_wait - before.to_device_wait, 3 * waited) << "the others copy back";
    }
    EXPECT_EQ(s.algorithm_host_wait, before.algorithm_host_wait);
    EXPECT_GE(s.run - before.run, (s.to_host_wait - before.to_host_wait) + (s.inner - before.inner) +
                                      (s.to_device_wait - before.to_device_wait));
  });
}

}  // namespace
}  // namespace loom::collectives::staging
