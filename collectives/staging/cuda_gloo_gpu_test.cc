// cuda:gloo on a real GPU: 2 and 4 ranks (processes) sharing the one device,
// every staged op on cudaMalloc'ed buffers at sizes around and across the
// bucket (64 KiB here), checked on the host. Skips with "needs a GPU" where
// there is none.
#include <cuda_runtime.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/process_group.h"
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

int StagedWorker(WorkerContext& ctx) {
  const int r = ctx.rank, n = ctx.world;
  ProcessGroupOptions po;
  po.backend = "cpu:gloo,cuda:gloo";
  po.staging_bucket_bytes = 64 << 10;
  auto pg = ProcessGroup::Create(ctx.store, r, n, po);
  if (!pg.ok()) {
    fprintf(stderr, "[rank %d] %s\n", r, pg.status().ToString().c_str());
    return 1;
  }
  auto b = (*pg)->BackendFor(Device::CUDA(0), OpType::kAllReduce, DType::kF32);
  WORKER_EXPECT(ctx, b.ok() && (*b)->name() == "cuda:gloo", "dispatch: ", b.status().ToString());
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
  return ctx.failures == 0 ? 0 : 1;
}
LOOM_COLLECTIVES_WORKER(staged_gpu, StagedWorker);

bool HasGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

class CudaGlooGpu : public ::testing::TestWithParam<int> {};

TEST_P(CudaGlooGpu, RanksShareOneGpu) {
  if (!HasGpu()) GTEST_SKIP() << "needs a GPU";
  auto r = testing::RunRanks({.worker = "staged_gpu", .world = GetParam(), .deadline = absl::Seconds(240)});
  EXPECT_TRUE(r.ok()) << r.Summary();
}

INSTANTIATE_TEST_SUITE_P(World, CudaGlooGpu, ::testing::Values(2, 4));

}  // namespace
}  // namespace loom::collectives::staging

int main(int argc, char** argv) {
  int rc;
  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
