// cuda:gloo on a real GPU: 2 and 4 ranks (processes) sharing the one device,
// every staged op on cudaMalloc'ed buffers at sizes around and across the
// bucket (64 KiB here), the list forms, all_to_all, gather and scatter at
// uneven per-rank sizes (one rank's empty), checked on the host. Skips with
// "needs a GPU" where there is none.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/process_group.h"
#include "collectives/staging/staged_backend.h"
#include "collectives/testing/multiprocess.h"
#include "gtest/gtest.h"

namespace loom::collectives::staging {
namespace {

using testing::WorkerContext;

// A device copy of `host`, wrapped as a CUDA tensor (freed by the caller).
Tensor ToDevice(const std::vector<float>& host, float** dev) {
  cudaMalloc(reinterpret_cast<void**>(dev), std::max<size_t>(1, host.size()) * sizeof(float));
  cudaMemcpy(*dev, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  return Tensor::Wrap(*dev, {static_cast<int64_t>(host.size())}, DType::kF32, Device::CUDA(0));
}

std::vector<float> ToHost(const float* dev, size_t n) {
  std::vector<float> out(n);
  cudaMemcpy(out.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost);
  return out;
}

bool Run(WorkerContext& ctx, absl::StatusOr<WorkPtr> w, const char* what) {
  absl::Status s = w.ok() ? (*w)->Wait(absl::Now() + absl::Seconds(60)) : w.status();
  WORKER_EXPECT(ctx, s.ok(), what, ": ", s.ToString());
  return s.ok();
}

// A device buffer holding `host` (freed with it), as a CUDA tensor.
struct DeviceVec {
  float* dev = nullptr;
  size_t n = 0;
  explicit DeviceVec(const std::vector<float>& host) : n(host.size()) {
    cudaMalloc(reinterpret_cast<void**>(&dev), std::max<size_t>(1, n) * sizeof(float));
    cudaMemcpy(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  }
  ~DeviceVec() { cudaFree(dev); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  Tensor tensor() const { return Tensor::Wrap(dev, {static_cast<int64_t>(n)}, DType::kF32, Device::CUDA(0)); }
  std::vector<float> host() const { return ToHost(dev, n); }
};

// value of element i of the block that rank `from` holds for rank `to`
float Val(int from, int to, int64_t i) { return static_cast<float>(from * 1000 + to * 10 + i % 7); }

std::vector<float> Block(int from, int to, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = Val(from, to, i);
  return v;
}

// The list forms, all_to_all, gather, scatter and send/recv on device
// buffers of uneven per-rank sizes (rank 1's empty), around `base` elements.
void CheckUnevenOps(WorkerContext& ctx, ProcessGroup& pg, int64_t base) {
  const int r = ctx.rank, n = ctx.world;
  auto size_of = [base](int j) -> int64_t { return j == 1 ? 0 : base * (j + 1) + j; };
  auto poisoned = [&](std::vector<std::unique_ptr<DeviceVec>>* v, std::vector<Tensor>* t, int count, auto size) {
    for (int j = 0; j < count; ++j) {
      v->push_back(std::make_unique<DeviceVec>(std::vector<float>(size(j), -1.0f)));
      t->push_back(v->back()->tensor());
    }
  };
  std::vector<std::unique_ptr<DeviceVec>> outs;
  std::vector<Tensor> out_t;
  DeviceVec mine(Block(r, 0, size_of(r)));
  poisoned(&outs, &out_t, n, size_of);
  if (Run(ctx, pg.AllGather(out_t, mine.tensor(), {}), "all_gather")) {
    for (int j = 0; j < n; ++j) {
      WORKER_EXPECT(ctx, outs[j]->host() == Block(j, 0, size_of(j)), "all_gather from ", j, " base ", base);
    }
  }
  // reduce_scatter (sum): inputs[j] on rank r is Block(r, j); rank r gets the sum over ranks of Block(*, r)
  std::vector<std::unique_ptr<DeviceVec>> ins;
  std::vector<Tensor> in_t;
  for (int j = 0; j < n; ++j) {
    ins.push_back(std::make_unique<DeviceVec>(Block(r, j, size_of(j))));
    in_t.push_back(ins.back()->tensor());
  }
  DeviceVec red(std::vector<float>(size_of(r), -1.0f));
  if (Run(ctx, pg.ReduceScatter(red.tensor(), in_t, {}), "reduce_scatter")) {
    std::vector<float> want(size_of(r), 0.0f);
    for (int s = 0; s < n; ++s)
      for (int64_t i = 0; i < size_of(r); ++i) want[i] += Val(s, r, i);
    WORKER_EXPECT(ctx, red.host() == want, "reduce_scatter base ", base);
  }
  // all_to_all: rank s sends size_of((s + d) % n) elements to rank d
  AllToAllOptions ao;
  std::vector<float> send, want;
  for (int j = 0; j < n; ++j) {
    ao.input_split_sizes.push_back(size_of((r + j) % n));
    ao.output_split_sizes.push_back(size_of((j + r) % n));
    std::vector<float> b = Block(r, j, size_of((r + j) % n)), w = Block(j, r, size_of((j + r) % n));
    send.insert(send.end(), b.begin(), b.end());
    want.insert(want.end(), w.begin(), w.end());
  }
  DeviceVec a_in(send), a_out(std::vector<float>(want.size(), -1.0f));
  if (Run(ctx, pg.AllToAll(a_out.tensor(), a_in.tensor(), ao), "all_to_all")) {
    WORKER_EXPECT(ctx, a_out.host() == want, "all_to_all base ", base);
  }
  // gather to the last rank, scatter from rank 0
  std::vector<std::unique_ptr<DeviceVec>> g;
  std::vector<Tensor> g_t;
  if (r == n - 1) poisoned(&g, &g_t, n, size_of);
  GatherOptions go;
  go.root = n - 1;
  if (Run(ctx, pg.Gather(g_t, mine.tensor(), go), "gather")) {
    for (size_t j = 0; j < g.size(); ++j) {
      WORKER_EXPECT(ctx, g[j]->host() == Block(j, 0, size_of(j)), "gather from ", j, " base ", base);
    }
  }
  std::vector<Tensor> sc_in;
  if (r == 0) sc_in = in_t;
  DeviceVec sc(std::vector<float>(size_of(r), -1.0f));
  if (Run(ctx, pg.Scatter(sc.tensor(), sc_in, {}), "scatter")) {
    WORKER_EXPECT(ctx, sc.host() == Block(0, r, size_of(r)), "scatter base ", base);
  }
  // send/recv in a ring (rank 0 sends first), base * 3 + 1 elements
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  DeviceVec s_buf(Block(r, next, base * 3 + 1)), r_buf(std::vector<float>(base * 3 + 1, -1.0f));
  bool ok = true;
  if (r == 0) ok = Run(ctx, pg.Send(s_buf.tensor(), next, {}), "send");
  ok = Run(ctx, pg.Recv(r_buf.tensor(), prev, {}), "recv") && ok;
  if (r != 0) ok = Run(ctx, pg.Send(s_buf.tensor(), next, {}), "send") && ok;
  if (ok) WORKER_EXPECT(ctx, r_buf.host() == Block(prev, r, base * 3 + 1), "recv base ", base);
}

// Every staged op, all_reduce over `staging_path` (shm or ring).
int StagedWorker(WorkerContext& ctx, const std::string& staging_path) {
  const int r = ctx.rank, n = ctx.world;
  ProcessGroupOptions po;
  po.backend = "cpu:gloo,cuda:gloo";
  po.staging_bucket_bytes = 64 << 10;
  po.staging_path = staging_path;
  auto pg = ProcessGroup::Create(ctx.store, r, n, po);
  if (!pg.ok()) {
    fprintf(stderr, "[rank %d] %s\n", r, pg.status().ToString().c_str());
    return 1;
  }
  auto b = (*pg)->BackendFor(Device::CUDA(0), OpType::kAllReduce, DType::kF32);
  WORKER_EXPECT(ctx, b.ok() && (*b)->name() == "cuda:gloo", "dispatch: ", b.status().ToString());
  if (!b.ok()) return 1;
  auto* staged = dynamic_cast<StagedBackend*>(*b);
  WORKER_EXPECT(ctx, staged != nullptr && staged->shared_memory() == (staging_path == "shm"),
                "all_reduce over ", staging_path);
  const float ranks_sum = n * (n + 1) / 2.0f;
  for (int64_t numel : {int64_t{1}, int64_t{16383}, int64_t{16384}, int64_t{100003}, int64_t{(1 << 20) + 3}}) {
    std::vector<float> x(numel);
    for (int64_t i = 0; i < numel; ++i) x[i] = static_cast<float>((r + 1) * 4 + i % 1000);
    float* d = nullptr;
    Tensor t = ToDevice(x, &d);
    AllReduceOptions ao;
    ao.op = ReduceOp::kAvg;
    if (Run(ctx, (*pg)->AllReduce(t, ao), "all_reduce avg")) {
      std::vector<float> got = ToHost(d, numel);
      for (int64_t i = 0; i < numel; ++i) {
        float want = (ranks_sum * 4 + n * (i % 1000)) / n;
        if (got[i] != want) { WORKER_EXPECT(ctx, false, "all_reduce avg numel ", numel, " at ", i, ": ", got[i], " != ", want); break; }
      }
    }
    BroadcastOptions bo;
    bo.root = n - 1;
    if (Run(ctx, (*pg)->Broadcast(t, bo), "broadcast")) {
      std::vector<float> got = ToHost(d, numel);
      std::vector<float> want(numel);
      for (int64_t i = 0; i < numel; ++i) want[i] = (ranks_sum * 4 + n * (i % 1000)) / n;
      WORKER_EXPECT(ctx, got == want, "broadcast numel ", numel);
    }
    cudaFree(d);
    // all_gather_into, then reduce_scatter_from (sum) of the gathered blocks
    std::vector<float> in(numel, static_cast<float>(r + 1));
    float *din = nullptr, *dout = nullptr, *drs = nullptr;
    Tensor tin = ToDevice(in, &din);
    Tensor tout = ToDevice(std::vector<float>(numel * n, -1), &dout);
    if (Run(ctx, (*pg)->AllGatherInto(tout, tin, {}), "all_gather_into")) {
      std::vector<float> got = ToHost(dout, numel * n);
      for (int j = 0; j < n; ++j)
        WORKER_EXPECT(ctx, got[j * numel] == j + 1 && got[(j + 1) * numel - 1] == j + 1, "all_gather block ", j);
    }
    Tensor trs = ToDevice(std::vector<float>(numel, -1), &drs);
    if (Run(ctx, (*pg)->ReduceScatterFrom(trs, tout, {}), "reduce_scatter_from")) {
      std::vector<float> got = ToHost(drs, numel);
      WORKER_EXPECT(ctx, got.front() == n * (r + 1) && got.back() == n * (r + 1), "reduce_scatter numel ", numel);
    }
    cudaFree(din);
    cudaFree(dout);
    cudaFree(drs);
  }
  // 64 KiB buckets hold 16384 floats: blocks of one, of 2 to 5 buckets (not
  // a multiple), and of many.
  for (int64_t base : {int64_t{1}, int64_t{16384 + 3}, int64_t{(1 << 18) + 1}}) CheckUnevenOps(ctx, **pg, base);
  return ctx.failures == 0 ? 0 : 1;
}
int StagedShmWorker(WorkerContext& ctx) { return StagedWorker(ctx, "shm"); }
int StagedRingWorker(WorkerContext& ctx) { return StagedWorker(ctx, "ring"); }
LOOM_COLLECTIVES_WORKER(staged_gpu_shm, StagedShmWorker);
LOOM_COLLECTIVES_WORKER(staged_gpu_ring, StagedRingWorker);

bool HasGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// (world, all_reduce path)
class CudaGlooGpu : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(CudaGlooGpu, RanksShareOneGpu) {
  if (!HasGpu()) GTEST_SKIP() << "needs a GPU";
  const auto& [world, path] = GetParam();
  auto r = testing::RunRanks({.worker = "staged_gpu_" + path, .world = world, .deadline = absl::Seconds(240)});
  EXPECT_TRUE(r.ok()) << r.Summary();
}

INSTANTIATE_TEST_SUITE_P(WorldAndPath, CudaGlooGpu,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values(std::string("shm"), std::string("ring"))));

}  // namespace
}  // namespace loom::collectives::staging

int main(int argc, char** argv) {
  int rc;
  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
