#include "collectives/bench/bench_worker.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "base/tensor.h"
#include "collectives/bench/launcher.h"
#include "collectives/process_group.h"

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
  Tensor big, small;

  void Fill() {
    float* b = big.data<float>();
    if (op == "all_gather") {
      float* s = small.data<float>();
      for (int64_t j = 0; j < small.numel(); ++j) s[j] = GatherInput(rank, j);
    } else {
      for (int64_t i = 0; i < count; ++i) b[i] = ReduceInput(rank, i);
    }
  }
  absl::Status Once(ProcessGroup& g) {
    if (op == "all_reduce") return Run(g.AllReduce(big, {}));
    if (op == "all_gather") return Run(g.AllGatherInto(big, small, {}));
    return Run(g.ReduceScatterFrom(small, big, {}));
  }
  int64_t Wrong() const {
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
  ProcessGroupOptions po;
  po.backend = "cpu:" + backend;
  auto pg = ProcessGroup::Create(env->store, rank, n, po);
  if (!pg.ok()) {
    fprintf(stderr, "[rank %d] %s: %s\n", rank, backend.c_str(), pg.status().ToString().c_str());
    return 1;
  }
  ProcessGroup& g = **pg;
  std::vector<int64_t> sizes = Sizes(config);
  for (size_t oi = 0; oi < config.ops.size(); ++oi) {
    for (size_t si = 0; si < sizes.size(); ++si) {
      Case c{config.ops[oi], n, rank, ElementsFor(config.ops[oi], sizes[si], n), {}, {}};
      if (c.count == 0) continue;
      c.big = Tensor::MustEmpty({c.count}, DType::kF32);
      c.small = Tensor::MustEmpty({c.count / n}, DType::kF32);
      auto fail = [&](const absl::Status& s) {
        fprintf(stderr, "[rank %d] %s %s %lld bytes: %s\n", rank, backend.c_str(), c.op.c_str(),
                static_cast<long long>(c.count * 4), s.ToString().c_str());
        return 1;
      };
      c.Fill();
      if (absl::Status s = c.Once(g); !s.ok()) return fail(s);
      int64_t wrong = c.Wrong();
      for (int i = 1; i < config.warmup; ++i) {
        if (absl::Status s = c.Once(g); !s.ok()) return fail(s);
      }
      const int iters = ItersFor(config, c.count * 4);
      if (absl::Status s = Run(g.Barrier({})); !s.ok()) return fail(s);
      absl::Time t0 = absl::Now();
      for (int i = 0; i < iters; ++i) {
        if (absl::Status s = c.Once(g); !s.ok()) return fail(s);
      }
      double us = absl::ToDoubleMicroseconds(absl::Now() - t0) / iters;
      c.Fill();  // the timed calls changed the data: check a fresh call too
      if (absl::Status s = c.Once(g); !s.ok()) return fail(s);
      wrong += c.Wrong();
      absl::Status s = env->store->Set(ResultKey(static_cast<int>(oi), static_cast<int>(si), rank),
                                       absl::StrCat(us, " ", wrong));
      if (!s.ok()) return fail(s);
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
