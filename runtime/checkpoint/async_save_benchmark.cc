// Step time with and without an asynchronous checkpoint save in flight.
//
//   bazel run //runtime/checkpoint:async_save_benchmark -- [DIR] [MB]
//
// A "training step" updates every parameter once (memory-bound, like an
// optimizer step). Prints: the median step time with no save, the snapshot
// time (copying parameters on the caller's thread; the first save allocates,
// later ones reuse the previous snapshot's buffers), the median step time
// while the saver thread writes and commits, and the save's wall time.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/file_io.h"

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void Step(std::vector<loom::Tensor>& params) {
  for (loom::Tensor& t : params) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] * 0.999f + 0.001f;
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace loom;
  using namespace loom::runtime::checkpoint;
  std::string root = argc > 1 ? argv[1] : "/tmp/loom_async_save_bench." + std::to_string(getpid());
  const int64_t mb = argc > 2 ? atoll(argv[2]) : 64;
  const int64_t per = 1 << 20;  // floats per tensor (4 MiB)
  std::vector<Tensor> params;
  for (int64_t i = 0; i < mb / 4; ++i) params.push_back(Tensor::Zeros({per}, DType::kF32));
  RemoveTree(root).IgnoreError();

  std::vector<double> idle;
  for (int i = 0; i < 15; ++i) {
    auto t0 = Clock::now();
    Step(params);
    idle.push_back(Ms(t0, Clock::now()));
  }

  AsyncCheckpointer saver(root, {2});
  std::vector<double> busy, snap, save_ms;
  for (int round = 0; round < 4; ++round) {
    SaveRequest req;
    req.step = round + 1;
    req.world_size = 2;
    for (size_t i = 0; i < params.size(); ++i) {
      TensorToSave t;
      t.name = "p" + std::to_string(i);
      t.dtype = DType::kF32;
      t.global_shape = {per};
      t.spec = "S(0)";
      t.shards.push_back({0, {0}, params[i].Narrow(0, 0, per / 2)});
      t.shards.push_back({1, {per / 2}, params[i].Narrow(0, per / 2, per / 2)});
      req.tensors.push_back(std::move(t));
    }
    if (round == 0) {
      auto c0 = Clock::now();
      SaveRequest copy = SnapshotRequest(req);
      printf("snapshot alone (first touch of fresh memory): %.2f ms\n", Ms(c0, Clock::now()));
    }
    auto t0 = Clock::now();
    if (!saver.SaveAsync(req).ok()) return 1;
    auto t1 = Clock::now();
    snap.push_back(Ms(t0, t1));
    while (saver.in_flight()) {
      auto s0 = Clock::now();
      Step(params);
      busy.push_back(Ms(s0, Clock::now()));
      if (Ms(t1, Clock::now()) > 60000) break;
    }
    absl::Status s = saver.Wait();
    save_ms.push_back(Ms(t1, Clock::now()));
    if (!s.ok()) {
      fprintf(stderr, "save failed: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  printf("parameters: %lld MiB in %zu tensors, 2 ranks' files per save\n", static_cast<long long>(mb), params.size());
  printf("step time, no save in flight:    median %.2f ms (%zu steps)\n", Median(idle), idle.size());
  printf("snapshot (caller thread):        first %.2f ms, then median %.2f ms (buffers reused)\n", snap[0],
         Median(std::vector<double>(snap.begin() + 1, snap.end())));
  printf("step time, save in flight:       median %.2f ms (%zu steps)\n", Median(busy), busy.size());
  printf("save wall time (write+commit):   median %.2f ms\n", Median(save_ms));
  RemoveTree(root).IgnoreError();
  return 0;
}
