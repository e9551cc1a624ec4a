// Per-device dispatch and loud failures, in one process (world size 1).
#include <functional>

#include "absl/strings/str_cat.h"
#include "collectives/metrics.h"
#include "collectives/process_group.h"
#include "collectives/store/store_server.h"
#include "collectives/store/tcp_store.h"
#include "gtest/gtest.h"

namespace loom::collectives {
namespace {

// A backend that claims only f32 all_reduce on one device (to test Supports()).
class NarrowBackend : public Backend {
 public:
  NarrowBackend(std::string name, DeviceKind device) : name_(std::move(name)), device_(device) {}
  absl::string_view name() const override { return name_; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool Supports(OpType op, DType dt, DeviceKind d) const override {
    return op == OpType::kAllReduce && dt == DType::kF32 && d == device_;
  }
#define NARROW_UNUSED(...) { return absl::InternalError("not reached"); }
  absl::StatusOr<WorkPtr> AllReduce(const Tensor&, const AllReduceOptions&) override {
    return Work::Completed(absl::OkStatus());
  }
  absl::StatusOr<WorkPtr> Broadcast(const Tensor&, const BroadcastOptions&) override NARROW_UNUSED()
  absl::StatusOr<WorkPtr> Reduce(const Tensor&, const ReduceOptions&) override NARROW_UNUSED()
  absl::StatusOr<WorkPtr> AllGather(absl::Span<const Tensor>, const Tensor&, const AllGatherOptions&) override NARROW_UNUSED()
  absl::StatusOr<WorkPtr> AllGatherInto(const Tensor&, const Tensor&, const AllGatherOptions&) override NARROW_UNUSED()
  absl::StatusOr<WorkPtr> ReduceScatter(const Tensor&, absl::Span<const Tensor>, const ReduceScatterOptions&) override NARROW_UNUSED()
  absl::StatusOr<WorkPtr> ReduceScatterFrom(const Tensor&, const Tensor&, const ReduceScatterOptions&) override NARROW_UNUSED()
  absl::StatusOr<WorkPtr> AllToAll(const Tensor&, const Tensor&, const AllToAllOptions&) override NARROW_UNUSED()
  absl::StatusOr<WorkPtr> Gather(absl::Span<const Tensor>, const Tensor&, const GatherOptions&) override NARROW_UNUSED()
  absl::StatusOr<WorkPtr> Scatter(const Tensor&, absl::Span<const Tensor>, const ScatterOptions&) override NARROW_UNUSED()
  absl::StatusOr<WorkPtr> Send(const Tensor&, int, const SendRecvOptions&) override NARROW_UNUSED()
  absl::StatusOr<WorkPtr> Recv(const Tensor&, int, const SendRecvOptions&) override NARROW_UNUSED()
  absl::StatusOr<WorkPtr> Barrier(const BarrierOptions&) override NARROW_UNUSED()

 private:
  std::string name_;
  DeviceKind device_;
};

const bool kNarrow = RegisterBackend("narrow", [](const BackendContext&) -> absl::StatusOr<std::shared_ptr<Backend>> {
  return std::shared_ptr<Backend>(std::make_shared<NarrowBackend>("narrow", DeviceKind::kCPU));
});
// The CUDA variant of "narrow", which a "cuda:narrow" spec entry selects.
const bool kNarrowCuda = RegisterBackend("cuda:narrow", [](const BackendContext&) -> absl::StatusOr<std::shared_ptr<Backend>> {
  return std::shared_ptr<Backend>(std::make_shared<NarrowBackend>("cuda:narrow", DeviceKind::kCUDA));
});
const bool kBroken = RegisterBackend("nogpu", [](const BackendContext&) -> absl::StatusOr<std::shared_ptr<Backend>> {
  return absl::UnavailableError("no CUDA device");
});

// Records the BackendContext it was created with.
BackendContext last_ctx;
absl::StatusOr<std::shared_ptr<Backend>> MakeRecord(const BackendContext& ctx) {
  last_ctx = ctx;
  return std::shared_ptr<Backend>(std::make_shared<NarrowBackend>("record", DeviceKind::kCPU));
}
const bool kRecord = RegisterBackend("record", MakeRecord);

class DispatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::StoreServer::Options o;
    o.secret = "x";
    server_ = *store::StoreServer::Start(o);
    store_ = *store::TcpStore::Connect(server_->address(), "x");
  }
  std::unique_ptr<ProcessGroup> Make(const std::string& spec) {
    ProcessGroupOptions o;
    o.backend = spec;
    auto pg = ProcessGroup::Create(std::make_shared<store::PrefixStore>(store_, spec), 0, 1, o);
    EXPECT_TRUE(pg.ok()) << pg.status();
    return pg.ok() ? std::move(*pg) : nullptr;
  }
  std::unique_ptr<store::StoreServer> server_;
  std::shared_ptr<store::Store> store_;
};

float cuda_storage[4];
Tensor CudaTensor() { return Tensor::Wrap(cuda_storage, {4}, DType::kF32, Device::CUDA(0)); }

TEST_F(DispatchTest, CudaEntryPicksTheCudaVariant) {
  auto pg = Make("cpu:narrow,cuda:narrow");
  ASSERT_TRUE(pg);
  auto b = pg->BackendFor(Device::CUDA(0), OpType::kAllReduce, DType::kF32);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->name(), "cuda:narrow");
  auto c = pg->BackendFor(Device::CPU(), OpType::kAllReduce, DType::kF32);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->name(), "narrow");
  auto w = pg->AllReduce(CudaTensor(), {});
  EXPECT_TRUE(w.ok()) << w.status();
  // A bare "narrow" serves every device with the plain backend, which has no CUDA.
  auto plain = Make("narrow");
  ASSERT_TRUE(plain);
  auto u = plain->AllReduce(CudaTensor(), {});
  EXPECT_TRUE(absl::IsUnimplemented(u.status())) << u.status();
  EXPECT_NE(u.status().message().find("backend narrow "), std::string::npos) << u.status();
}

TEST_F(DispatchTest, PicksBackendByDevice) {
  auto pg = Make("cpu:narrow,cuda:nogpu");
  ASSERT_TRUE(pg);
  Tensor cpu = Tensor::Zeros({4}, DType::kF32);
  auto w = pg->AllReduce(cpu, {});
  ASSERT_TRUE(w.ok()) << w.status();
  // CUDA goes to "nogpu", which could not start: Unavailable quoting why.
  auto c = pg->AllReduce(CudaTensor(), {});
  EXPECT_TRUE(absl::IsUnavailable(c.status())) << c.status();
  std::string m(c.status().message());
  for (const char* want : {"all_reduce", "cuda:0", "nogpu", "no CUDA device"}) {
    EXPECT_NE(m.find(want), std::string::npos) << want << " in " << m;
  }
}

TEST_F(DispatchTest, UnsupportedCombinationIsLoud) {
  auto pg = Make("cpu:narrow");
  ASSERT_TRUE(pg);
  auto a = pg->AllReduce(Tensor::Zeros({4}, DType::kI64), {});
  EXPECT_TRUE(absl::IsUnimplemented(a.status())) << a.status();
  std::string m(a.status().message());
  for (const char* want : {"all_reduce", "narrow", "i64", "cpu"}) EXPECT_NE(m.find(want), std::string::npos) << m;
  // A device not in the spec falls to the default backend, which refuses it by name.
  auto c = pg->AllReduce(CudaTensor(), {});
  EXPECT_TRUE(absl::IsUnimplemented(c.status())) << c.status();
  EXPECT_NE(std::string(c.status().message()).find("cuda:0"), std::string::npos);
  auto b = pg->Broadcast(Tensor::Zeros({4}, DType::kF32), {});
  EXPECT_TRUE(absl::IsUnimplemented(b.status())) << b.status();
  EXPECT_NE(std::string(b.status().message()).find("broadcast"), std::string::npos);
}

TEST_F(DispatchTest, MixedDevicesRejected) {
  auto pg = Make("cpu:narrow");
  ASSERT_TRUE(pg);
  Tensor out = Tensor::Zeros({4}, DType::kF32);
  auto a = pg->AllGatherInto(out, CudaTensor(), {});
  EXPECT_TRUE(absl::IsInvalidArgument(a.status())) << a.status();
}

TEST_F(DispatchTest, UnknownBackendListsRegistered) {
  ProcessGroupOptions o;
  o.backend = "cpu:nope";
  auto pg = ProcessGroup::Create(store_, 0, 1, o);
  EXPECT_TRUE(absl::IsNotFound(pg.status())) << pg.status();
  EXPECT_NE(std::string(pg.status().message()).find("narrow"), std::string::npos);
}

TEST_F(DispatchTest, TuningOptionsReachTheBackend) {
  ProcessGroupOptions o;
  o.backend = "cpu:record";
  o.staging_bucket_bytes = 1 << 10;
  o.channels = 3;
  o.channel_min_slice_bytes = 64;
  o.gloo_native_min_bytes = 0;
  o.gloo_transport = "gloo";
  o.tcp_socket_buffer_bytes = 1 << 20;
  auto pg = ProcessGroup::Create(store_, 0, 1, o);
  ASSERT_TRUE(pg.ok()) << pg.status();
  EXPECT_EQ(last_ctx.staging_bucket_bytes, 1u << 10);
  EXPECT_EQ(last_ctx.channels, 3);
  EXPECT_EQ(last_ctx.channel_min_slice_bytes, 64u);
  EXPECT_EQ(last_ctx.gloo_native_min_bytes, 0);
  EXPECT_EQ(last_ctx.gloo_transport, "gloo");
  EXPECT_EQ(last_ctx.tcp_socket_buffer_bytes, 1 << 20);
}

// A bad tuning value fails Create naming the option and the value.
TEST_F(DispatchTest, BackendsRefuseBadTuning) {
  struct Case {
    std::string spec;
    std::function<void(ProcessGroupOptions&)> set;
    std::string want;
  };
  int i = 0;
  for (const Case& c : std::vector<Case>{
           {"cpu:tcp", [](ProcessGroupOptions& o) { o.channels = 9; },
            "channels: expected 0 (automatic) or an integer in [1, 8], got 9"},
           {"cpu:tcp", [](ProcessGroupOptions& o) { o.channel_min_slice_bytes = 0; },
            "channel_min_slice_bytes: expected a positive byte count, got 0"},
           {"cpu:tcp", [](ProcessGroupOptions& o) { o.tcp_socket_buffer_bytes = -2; },
            "tcp_socket_buffer_bytes: expected -1 (automatic), 0 (the kernel's autotuning) or a byte count up to "
            "1 GiB, got -2"},
           {"cpu:gloo", [](ProcessGroupOptions& o) { o.gloo_transport = "mpi"; },
            "gloo_transport: expected tcp or gloo, got 'mpi'"},
           {"cpu:gloo", [](ProcessGroupOptions& o) { o.gloo_native_min_bytes = -2; },
            "gloo_native_min_bytes: expected a byte count or -1 (automatic), got -2"}}) {
    ProcessGroupOptions o;
    o.backend = c.spec;
    c.set(o);
    auto pg = ProcessGroup::Create(std::make_shared<store::PrefixStore>(store_, absl::StrCat("bad", i++)), 0, 1, o);
    EXPECT_TRUE(absl::IsInvalidArgument(pg.status())) << pg.status();
    EXPECT_NE(std::string(pg.status().message()).find(c.want), std::string::npos) << pg.status();
  }
}

TEST_F(DispatchTest, TcpBackendValidatesArguments) {
  auto pg = Make("cpu:tcp");
  ASSERT_TRUE(pg);
  Tensor t = Tensor::Zeros({4, 4}, DType::kF32);
  auto nc = pg->AllReduce(t.Transpose(0, 1), {});
  EXPECT_TRUE(absl::IsInvalidArgument(nc.status()));
  EXPECT_NE(std::string(nc.status().message()).find("contiguous"), std::string::npos);
  AllReduceOptions zero;
  zero.timeout = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(pg->AllReduce(t, zero).status()));
  BroadcastOptions bad_root;
  bad_root.root = 3;
  auto br = pg->Broadcast(t, bad_root);
  EXPECT_TRUE(absl::IsInvalidArgument(br.status()));
  EXPECT_NE(std::string(br.status().message()).find("options.root"), std::string::npos);
  AllReduceOptions avg;
  avg.op = ReduceOp::kAvg;
  EXPECT_TRUE(absl::IsInvalidArgument(pg->AllReduce(Tensor::Zeros({2}, DType::kBool), avg).status()));
  Tensor out = Tensor::Zeros({3}, DType::kF32);
  auto ag = pg->AllGatherInto(out, Tensor::Zeros({4}, DType::kF32), {});
  EXPECT_TRUE(absl::IsInvalidArgument(ag.status()));
  EXPECT_NE(std::string(ag.status().message()).find("output"), std::string::npos);
  AllToAllOptions a2a;
  a2a.input_split_sizes = {5};
  auto at = pg->AllToAll(Tensor::Zeros({4}, DType::kF32), Tensor::Zeros({4}, DType::kF32), a2a);
  EXPECT_TRUE(absl::IsInvalidArgument(at.status()));
  // World size 1 still runs every op, and metrics count it.
  GlobalCollectiveMetrics().Reset();
  auto w = pg->AllReduce(t, {});
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE((*w)->Wait().ok());
  auto m = GlobalCollectiveMetrics().Snapshot();
  const OpMetrics& ar = m[MetricsKey{"tcp", "all_reduce"}];
  EXPECT_EQ(ar.count, 1);
  EXPECT_EQ(ar.bytes, 16 * 4);
  EXPECT_EQ(ar.failures, 0);
  int64_t in_buckets = 0;
  for (int64_t b : ar.latency_buckets) in_buckets += b;
  EXPECT_EQ(in_buckets, 1);
}

}  // namespace
}  // namespace loom::collectives
