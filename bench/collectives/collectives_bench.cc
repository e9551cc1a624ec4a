// collectives_bench: nccl-tests style bandwidth for all_reduce, all_gather and
// reduce_scatter over Loom's CPU backends, with torch.distributed's Gloo (from
// Debian's /usr/bin/python3) side by side in the same invocation and this
// machine's memcpy bandwidth as the ceiling.
//
//   bazel run -c opt //bench/collectives:collectives_bench -- \
//       --backends=gloo,ucx,tcp --ranks=2,4 --min_bytes=1024 --max_bytes=268435456
//
// Columns: size (bytes of the full buffer: the all_reduce tensor, the
// all_gather output, the reduce_scatter input), time per op (us), algbw =
// size/time (GB/s), busbw = algbw * factor (all_reduce 2(n-1)/n, all_gather and
// reduce_scatter (n-1)/n), and whether the result checked out.
// Ranks are processes over loopback (shared-memory for UCX when UCX picks it).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "collectives/process_group.h"
#include "collectives/testing/multiprocess.h"

namespace loom::collectives::bench {
namespace {

using testing::WorkerContext;

int Iters(int64_t bytes) {
  int64_t it = (int64_t{128} << 20) / std::max<int64_t>(bytes, 1);
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(it, 3), 200));
}

std::vector<int64_t> Sizes(int64_t lo, int64_t hi) {
  std::vector<int64_t> v;
  for (int64_t s = lo; s <= hi; s *= 4) v.push_back(s);
  return v;
}

bool WaitOk(absl::StatusOr<WorkPtr> w) {
  if (!w.ok()) {
    fprintf(stderr, "%s\n", w.status().ToString().c_str());
    return false;
  }
  absl::Status s = (*w)->Wait();
  if (!s.ok()) fprintf(stderr, "%s\n", s.ToString().c_str());
  return s.ok();
}

// arg: "<backend>|<min>|<max>"
int BenchWorker(WorkerContext& ctx) {
  std::vector<std::string> a = absl::StrSplit(ctx.arg, '|');
  int64_t lo = 1024, hi = 1 << 20;
  (void)absl::SimpleAtoi(a[1], &lo);
  (void)absl::SimpleAtoi(a[2], &hi);
  ProcessGroupOptions po;
  po.backend = "cpu:" + a[0];
  auto pg = ProcessGroup::Create(ctx.store, ctx.rank, ctx.world, po);
  if (!pg.ok()) {
    fprintf(stderr, "%s\n", pg.status().ToString().c_str());
    return 1;
  }
  ProcessGroup& g = **pg;
  const int n = ctx.world;
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter"}) {
    for (int64_t bytes : Sizes(lo, hi)) {
      int64_t count = bytes / 4;
      if (std::string(op) != "all_reduce") count = count / n * n;
      if (count == 0) continue;
      Tensor big = Tensor::MustEmpty({count}, DType::kF32);
      Tensor small = Tensor::MustEmpty({count / n}, DType::kF32);
      auto run = [&]() -> bool {
        if (std::string(op) == "all_reduce") return WaitOk(g.AllReduce(big, {}));
        if (std::string(op) == "all_gather") return WaitOk(g.AllGatherInto(big, small, {}));
        return WaitOk(g.ReduceScatterFrom(small, big, {}));
      };
      auto fill = [&]() {
        if (std::string(op) == "all_gather") small.Fill(ctx.rank + 1); else big.Fill(ctx.rank + 1);
      };
      fill();
      if (!run()) return 1;
      // Check: all_reduce/reduce_scatter: n(n+1)/2 everywhere; all_gather: block i holds i+1.
      bool ok = true;
      if (std::string(op) == "all_gather") {
        for (int i = 0; i < n; ++i) ok &= big.data<float>()[i * (count / n)] == i + 1;
      } else {
        const Tensor& out = std::string(op) == "all_reduce" ? big : small;
        float want = n * (n + 1) / 2.0f;
        ok = out.data<float>()[0] == want && out.data<float>()[out.numel() - 1] == want;
      }
      int iters = Iters(bytes);
      if (!WaitOk(g.Barrier({}))) return 1;
      absl::Time t0 = absl::Now();
      for (int i = 0; i < iters; ++i) if (!run()) return 1;
      double us = absl::ToDoubleMicroseconds(absl::Now() - t0) / iters;
      if (ctx.rank == 0) {
        double size = count * 4.0;
        double algbw = size / us / 1e3;
        double factor = std::string(op) == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
        printf("%-6s %5d  %-14s %12.0f %12.1f %9.3f %9.3f  %s\n", a[0].c_str(), n, op, size, us, algbw,
               algbw * factor, ok ? "ok" : "WRONG");
        fflush(stdout);
      }
    }
  }
  return WaitOk(g.Barrier({})) ? 0 : 1;
}
LOOM_COLLECTIVES_WORKER(bench, BenchWorker);

double MemcpyGBps() {
  size_t n = 256 << 20;
  std::vector<char> a(n, 1), b(n, 2);
  std::memcpy(b.data(), a.data(), n);
  absl::Time t0 = absl::Now();
  for (int i = 0; i < 5; ++i) std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), n);
  return 5.0 * n / absl::ToDoubleSeconds(absl::Now() - t0) / 1e9;
}

std::string Flag(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--" + name + "=", 0) == 0) return s.substr(name.size() + 3);
  }
  return def;
}

int Main(int argc, char** argv) {
  std::string backends = Flag(argc, argv, "backends", "gloo,ucx,tcp");
  std::string ranks = Flag(argc, argv, "ranks", "2,4");
  std::string lo = Flag(argc, argv, "min_bytes", "1024");
  std::string hi = Flag(argc, argv, "max_bytes", "67108864");
  std::string torch = Flag(argc, argv, "torch", "1");
  printf("# memcpy bandwidth (one core, 256 MiB): %.2f GB/s  (the ceiling for busbw on loopback)\n",
         MemcpyGBps());
  printf("# %-4s %5s  %-14s %12s %12s %9s %9s  %s\n", "impl", "ranks", "op", "size(B)", "time(us)",
         "algbw", "busbw", "check");
  fflush(stdout);
  int rc = 0;
  for (absl::string_view r : absl::StrSplit(ranks, ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(r, &n)) continue;
    for (absl::string_view b : absl::StrSplit(backends, ',')) {
      auto res = testing::RunRanks({.worker = "bench", .world = n,
                                    .arg = absl::StrCat(b, "|", lo, "|", hi),
                                    .deadline = absl::Seconds(580)});
      if (!res.ok()) {
        fprintf(stderr, "%s x%d failed: %s\n", std::string(b).c_str(), n, res.Summary().c_str());
        rc = 1;
      }
    }
    if (torch == "1") {
      // torch.distributed Gloo at the same sizes (1.13 has no Gloo reduce_scatter).
      const char* src = std::getenv("TORCH_BENCH_PY");
      std::string script = src ? src : "bench/collectives/torch_gloo_bench.py";
      std::string cmd = absl::StrCat("/usr/bin/python3 ", script, " --ranks=", n, " --min_bytes=", lo,
                                     " --max_bytes=", hi);
      fflush(stdout);
      if (std::system(cmd.c_str()) != 0) fprintf(stderr, "torch benchmark failed: %s\n", cmd.c_str());
    }
  }
  return rc;
}

}  // namespace
}  // namespace loom::collectives::bench

int main(int argc, char** argv) {
  int rc;
  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
  return loom::collectives::bench::Main(argc, argv);
}
