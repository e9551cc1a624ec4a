#include "collectives/bench/bench_worker.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "base/tensor.h"
#include "base/status.h"
#include "collectives/bench/device_buffer.h"
#include "collectives/bench/launcher.h"
#include "collectives/process_group.h"
#include "collectives/staging/cuda_copier.h"
#include "collectives/staging/staged_backend.h"

namespace loom::collectives::bench {
namespace {

absl::Status Run(absl::StatusOr<WorkPtr> w) {
  if (!w.ok()) return w.status();
  return (*w)->Wait();
}

// Input patterns: small integers, so every sum is exact in f32.
float ReduceInput(int rank, int64_t i) { return static_cast<float>((rank + 1) + (i % 13)); }
float ReduceExpect(int n, int64_t i) { return static_cast<float>(n * (n + 1) / 2 + n * (i % 13)); }
float GatherInput(int rank, int64_t j) { return static_cast<float>(rank * 16 + (j % 16)); }

struct Case {
  std::string op;
  int n, rank;
  int64_t count;  // elements of the full buffer
  Tensor big, small;  // host: the pattern and the check
  // cuda:gloo: the device copies the ops run on (run_* = big/small otherwise).
  std::unique_ptr<DeviceBuffer> dbig, dsmall;
  Tensor run_big, run_small;

  absl::Status Allocate(bool on_device) {
    big = Tensor::MustEmpty({count}, DType::kF32);
    small = Tensor::MustEmpty({count / n}, DType::kF32);
    run_big = big;
    run_small = small;
    if (!on_device) return absl::OkStatus();
    LOOM_ASSIGN_OR_RETURN(dbig, DeviceBuffer::Create(big.nbytes()));
    LOOM_ASSIGN_OR_RETURN(dsmall, DeviceBuffer::Create(small.nbytes()));
    run_big = Tensor::Wrap(dbig->data(), {count}, DType::kF32, Device::CUDA(0));
    run_small = Tensor::Wrap(dsmall->data(), {count / n}, DType::kF32, Device::CUDA(0));
    return absl::OkStatus();
  }
  absl::Status Fill() {
    float* b = big.data<float>();
    if (op == "all_gather") {
      float* s = small.data<float>();
      for (int64_t j = 0; j < small.numel(); ++j) s[j] = GatherInput(rank, j);
    } else {
      for (int64_t i = 0; i < count; ++i) b[i] = ReduceInput(rank, i);
    }
    if (!dbig) return absl::OkStatus();
    LOOM_RETURN_IF_ERROR(dbig->Upload(big.raw_data(), big.nbytes()));
    return dsmall->Upload(small.raw_data(), small.nbytes());
  }
  absl::Status Once(ProcessGroup& g) {
    if (op == "all_reduce") return Run(g.AllReduce(run_big, {}));
    if (op == "all_gather") return Run(g.AllGatherInto(run_big, run_small, {}));
    return Run(g.ReduceScatterFrom(run_small, run_big, {}));
  }
  absl::StatusOr<int64_t> Wrong() const {
    if (dbig) {
      LOOM_RETURN_IF_ERROR(dbig->Download(big.raw_data(), big.nbytes()));
      LOOM_RETURN_IF_ERROR(dsmall->Download(small.raw_data(), small.nbytes()));
    }
    int64_t bad = 0;
    const int64_t m = count / n;
    if (op == "all_reduce") {
      const float* b = big.data<float>();
      for (int64_t i = 0; i < count; ++i) bad += b[i] != ReduceExpect(n, i);
    } else if (op == "all_gather") {
      const float* b = big.data<float>();
      for (int64_t i = 0; i < count; ++i) bad += b[i] != GatherInput(static_cast<int>(i / m), i % m);
    } else {
      const float* s = small.data<float>();
      for (int64_t j = 0; j < m; ++j) bad += s[j] != ReduceExpect(n, rank * m + j);
    }
    return bad;
  }
};

// cuda:gloo: microseconds per pinned copy of the all_reduce buffer to the
// host and back, every rank copying at once (the staging path's ceiling).
absl::Status TimeCopies(ProcessGroup& g, staging::Copier& copier, const Case& c, int iters, double* d2h_us,
                        double* h2d_us) {
  const size_t bytes = c.big.nbytes();
  LOOM_ASSIGN_OR_RETURN(void* host, copier.HostBuffer(bytes));
  for (int dir = 0; dir < 2; ++dir) {
    LOOM_RETURN_IF_ERROR(Run(g.Barrier({})));
    absl::Time t0 = absl::Now();
    for (int i = 0; i < iters; ++i) {
      auto e = dir == 0 ? copier.ToHost(host, c.dbig->data(), bytes) : copier.ToDevice(c.dbig->data(), host, bytes);
      if (!e.ok()) return e.status();
      LOOM_RETURN_IF_ERROR((*e)->Wait(absl::InfiniteFuture()));
    }
    (dir == 0 ? *d2h_us : *h2d_us) = absl::ToDoubleMicroseconds(absl::Now() - t0) / iters;
  }
  return absl::OkStatus();
}

// One (op, size): check, warm up, time, check again; publishes the result.
absl::Status RunCase(ProcessGroup& g, store::Store& store, staging::Copier* copier, const BenchConfig& config,
                     Case& c, const std::string& key) {
  LOOM_RETURN_IF_ERROR(c.Allocate(copier != nullptr));
  LOOM_RETURN_IF_ERROR(c.Fill());
  LOOM_RETURN_IF_ERROR(c.Once(g));
  LOOM_ASSIGN_OR_RETURN(int64_t wrong, c.Wrong());
  for (int i = 1; i < config.warmup; ++i) LOOM_RETURN_IF_ERROR(c.Once(g));
  const int iters = ItersFor(config, c.count * 4);
  staging::StagedBackend* staged = nullptr;
  if (copier != nullptr) {
    auto b = g.BackendFor(Device::CUDA(0), OpType::kAllReduce, DType::kF32);
    if (b.ok()) staged = dynamic_cast<staging::StagedBackend*>(*b);
  }
  const staging::StagingStats before = staged ? staged->Stats() : staging::StagingStats{};
  LOOM_RETURN_IF_ERROR(Run(g.Barrier({})));
  absl::Time t0 = absl::Now();
  for (int i = 0; i < iters; ++i) LOOM_RETURN_IF_ERROR(c.Once(g));
  double us = absl::ToDoubleMicroseconds(absl::Now() - t0) / iters;
  const staging::StagingStats after = staged ? staged->Stats() : staging::StagingStats{};
  LOOM_RETURN_IF_ERROR(c.Fill());  // the timed calls changed the data: check a fresh call too
  LOOM_RETURN_IF_ERROR(c.Once(g));
  LOOM_ASSIGN_OR_RETURN(int64_t wrong2, c.Wrong());
  std::string value = absl::StrCat(us, " ", wrong + wrong2);
  if (copier != nullptr && c.op == "all_reduce") {
    double d2h = 0, h2d = 0;
    LOOM_RETURN_IF_ERROR(TimeCopies(g, *copier, c, iters, &d2h, &h2d));
    absl::StrAppend(&value, " ", d2h, " ", h2d);
    // Where the timed ops' time went on the staging thread (per op, us).
    const double ops = std::max<int64_t>(after.ops - before.ops, 1);
    auto per_op = [&](absl::Duration staging::StagingStats::*f) {
      return absl::ToDoubleMicroseconds(after.*f - before.*f) / ops;
    };
    absl::StrAppend(&value, " ", per_op(&staging::StagingStats::to_host_wait), " ",
                    per_op(&staging::StagingStats::inner), " ", per_op(&staging::StagingStats::to_device_wait), " ",
                    per_op(&staging::StagingStats::run), " ",
                    per_op(&staging::StagingStats::algorithm_host_wait) + per_op(&staging::StagingStats::peer_wait));
  }
  return store.Set(key, value);
}

}  // namespace

int64_t ElementsFor(const std::string& op, int64_t bytes, int n) {
  int64_t count = bytes / 4;
  if (op != "all_reduce") count = count / n * n;
  return count;
}

std::string ResultKey(int op_index, int size_index, int rank) {
  return absl::StrCat("res/", op_index, "/", size_index, "/", rank);
}

int RunBenchWorker(const std::string& backend, const BenchConfig& config) {
  auto env = ConnectLaunchedWorker();
  if (!env.ok()) {
    fprintf(stderr, "bench worker: %s\n", env.status().ToString().c_str());
    return 3;
  }
  const int n = env->world, rank = env->rank;
  const bool staged = backend == "cuda:gloo";
  ProcessGroupOptions po;
  po.backend = staged ? "cpu:gloo,cuda:gloo" : "cpu:" + backend;
  po.staging_bucket_bytes = static_cast<size_t>(config.bucket_bytes);
  po.staging_piece_bytes = static_cast<size_t>(config.piece_bytes);
  po.staging_path = config.staging_path;
  po.channels = config.channels;
  if (config.gloo_native_min_bytes >= 0) po.gloo_native_min_bytes = config.gloo_native_min_bytes;
  std::unique_ptr<staging::Copier> copier;
  if (staged) {
    auto cp = staging::CreateCudaCopier();
    if (!cp.ok()) {
      fprintf(stderr, "[rank %d] %s: %s\n", rank, backend.c_str(), cp.status().ToString().c_str());
      return 1;
    }
    copier = std::move(*cp);
  }
  auto pg = ProcessGroup::Create(env->store, rank, n, po);
  if (!pg.ok()) {
    fprintf(stderr, "[rank %d] %s: %s\n", rank, backend.c_str(), pg.status().ToString().c_str());
    return 1;
  }
  ProcessGroup& g = **pg;
  std::vector<int64_t> sizes = Sizes(config);
  for (size_t oi = 0; oi < config.ops.size(); ++oi) {
    for (size_t si = 0; si < sizes.size(); ++si) {
      Case c{config.ops[oi], n, rank, ElementsFor(config.ops[oi], sizes[si], n), {}, {}, nullptr, nullptr, {}, {}};
      if (c.count == 0) continue;
      absl::Status s = RunCase(g, *env->store, copier.get(), config, c,
                               ResultKey(static_cast<int>(oi), static_cast<int>(si), rank));
      if (!s.ok()) {
        fprintf(stderr, "[rank %d] %s %s %lld bytes: %s\n", rank, backend.c_str(), c.op.c_str(),
                static_cast<long long>(c.count * 4), s.ToString().c_str());
        return 1;
      }
    }
  }
  absl::Status s = Run(g.Barrier({}));
  if (!s.ok()) {
    fprintf(stderr, "[rank %d] final barrier: %s\n", rank, s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace loom::collectives::bench
