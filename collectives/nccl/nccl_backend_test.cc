// NCCL backend at world size 1 on the one GPU: ops run and complete
// asynchronously; the watchdog aborts an op whose stream is held on a host flag
// that is never set, at its timeout, with a clear error. Skips (with the
// reason) where there is no GPU or no CUDA toolkit.
#include <cuda_runtime.h>

#include <atomic>
#include <vector>

#include "collectives/metrics.h"
#include "collectives/nccl/nccl_backend.h"
#include "collectives/process_group.h"
#include "collectives/store/store_server.h"
#include "collectives/store/tcp_store.h"
#include "gtest/gtest.h"

namespace loom::collectives::nccl {
namespace {

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::StoreServer::Options so;
    so.secret = "s";
    server_ = *store::StoreServer::Start(so);
    ProcessGroupOptions o;
    o.backend = "cpu:tcp,cuda:nccl";
    auto pg = ProcessGroup::Create(*store::TcpStore::Connect(server_->address(), "s"), 0, 1, o);
    ASSERT_TRUE(pg.ok()) << pg.status();
    pg_ = std::move(*pg);
    auto b = pg_->BackendFor(Device::CUDA(0), OpType::kAllReduce, DType::kF32);
    if (absl::IsUnavailable(b.status())) GTEST_SKIP() << "needs a GPU: " << b.status().message();
    ASSERT_TRUE(b.ok()) << b.status();
    nccl_ = dynamic_cast<NcclBackend*>(*b);
    ASSERT_NE(nccl_, nullptr);
  }
  Tensor Device(const std::vector<float>& v) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, v.size() * 4 + 4), cudaSuccess);
    cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
    ptrs_.push_back(p);
    return Tensor::Wrap(p, {static_cast<int64_t>(v.size())}, DType::kF32, loom::Device::CUDA(0));
  }
  std::vector<float> Host(const Tensor& t) {
    std::vector<float> v(t.numel());
    cudaMemcpy(v.data(), t.raw_data(), v.size() * 4, cudaMemcpyDeviceToHost);
    return v;
  }
  void TearDown() override {
    pg_.reset();
    for (void* p : ptrs_) cudaFree(p);
  }
  std::unique_ptr<store::StoreServer> server_;
  std::unique_ptr<ProcessGroup> pg_;
  NcclBackend* nccl_ = nullptr;
  std::vector<void*> ptrs_;
};

TEST_F(NcclTest, OpsAtWorldSizeOne) {
  Tensor t = Device({1, 2, 3});
  AllReduceOptions avg;
  avg.op = ReduceOp::kAvg;
  auto w = pg_->AllReduce(t, avg);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Wait(absl::Now() + absl::Seconds(30)).ok());
  EXPECT_EQ(Host(t), (std::vector<float>{1, 2, 3}));
  Tensor out = Device({0, 0, 0});
  auto g = pg_->AllGatherInto(out, t, {});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE((*g)->Wait(absl::Now() + absl::Seconds(30)).ok());
  EXPECT_EQ(Host(out), (std::vector<float>{1, 2, 3}));
  auto b = pg_->Broadcast(t, {});
  ASSERT_TRUE(b.ok() && (*b)->Wait(absl::Now() + absl::Seconds(30)).ok());
  // bool reductions are refused loudly, naming op, backend and dtype.
  void* p;
  cudaMalloc(&p, 4);
  ptrs_.push_back(p);
  auto bad = pg_->AllReduce(Tensor::Wrap(p, {4}, DType::kBool, loom::Device::CUDA(0)), {});
  EXPECT_TRUE(absl::IsUnimplemented(bad.status())) << bad.status();
}

// NCCL ops feed the same metrics hooks as the CPU backends: count, tensor
// bytes of the call, latency (GPU-timed between events around the op).
TEST_F(NcclTest, RecordsMetricsLikeTheCpuBackends) {
  GlobalCollectiveMetrics().Reset();
  Tensor t = Device({1, 2, 3});
  for (int i = 0; i < 2; ++i) {
    auto w = pg_->AllReduce(t, {});
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->Wait(absl::Now() + absl::Seconds(30)).ok());
  }
  Tensor out = Device({0, 0, 0});
  auto g = pg_->AllGatherInto(out, t, {});
  ASSERT_TRUE(g.ok() && (*g)->Wait(absl::Now() + absl::Seconds(30)).ok());
  auto snap = GlobalCollectiveMetrics().Snapshot();
  const OpMetrics& ar = snap[MetricsKey{"nccl", "all_reduce"}];
  EXPECT_EQ(ar.count, 2);
  EXPECT_EQ(ar.failures, 0);
  EXPECT_EQ(ar.bytes, 2 * 12);
  EXPECT_GT(ar.total_seconds, 0);
  int64_t in_buckets = 0;
  for (int64_t b : ar.latency_buckets) in_buckets += b;
  EXPECT_EQ(in_buckets, 2);
  const OpMetrics& ag = snap[MetricsKey{"nccl", "all_gather_into"}];
  EXPECT_EQ(ag.count, 1);
  EXPECT_EQ(ag.bytes, 12);
}

TEST_F(NcclTest, WatchdogAbortsHungOpAtItsTimeout) {
  GlobalCollectiveMetrics().Reset();
  static std::atomic<int> flag{0};
  nccl_->TestOnlyBlockStreamOnHostFlag(&flag);
  Tensor t = Device({1, 2, 3});
  AllReduceOptions o;
  o.timeout = absl::Seconds(2);
  absl::Time t0 = absl::Now();
  auto w = pg_->AllReduce(t, o);
  ASSERT_TRUE(w.ok()) << w.status();
  absl::Status s = (*w)->Wait(absl::Now() + absl::Seconds(20));
  absl::Duration took = absl::Now() - t0;
  flag = 1;  // release the stream for teardown
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_NE(std::string(s.message()).find("all_reduce"), std::string::npos) << s;
  EXPECT_NE(std::string(s.message()).find("aborted"), std::string::npos) << s;
  EXPECT_GE(took, absl::Seconds(2));
  EXPECT_LE(took, absl::Seconds(4));
  // The communicator is gone: later calls fail at once.
  auto later = pg_->AllReduce(t, o);
  EXPECT_TRUE(absl::IsFailedPrecondition(later.status())) << later.status();
  auto snap = GlobalCollectiveMetrics().Snapshot();
  EXPECT_EQ((snap[MetricsKey{"nccl", "all_reduce"}].failures), 1);
}

}  // namespace
}  // namespace loom::collectives::nccl
