// SDPA benchmark: flash vs memeff vs math (and PyTorch written-out attention,
// read from --torch=FILE written by torch_attention_bench.py), forward and
// forward+backward, at B=1, H=4, D=Dv=64, T=S in {256, 1024, 4096}, no mask,
// not causal, dropout 0, f32, LOOM_NUM_THREADS threads (run.sh sets 2).
//
// Each case runs in a forked child process so that memory figures are per case:
//   alloc_peak = high-water mark of bytes held through the default allocator
//                (CountingAllocator) during the timed runs, minus the inputs;
//                every tensor and scratch buffer of the kernels goes through it.
//   rss_delta  = ru_maxrss(child) after the runs minus ru_maxrss after the inputs
//                were created (getrusage, KiB -> bytes).
// FLOPs: forward 4*B*H*T*S*D; forward+backward 3.5x that (the usual FlashAttention
// count: the backward's recomputation is not credited).
//
//   sdpa_bench [--T=256,1024,4096] [--impls=flash,memeff,math] [--modes=fwd,fwdbwd]
//              [--torch=results.tsv]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/allocator.h"
#include "base/rng.h"
#include "base/tensor.h"
#include "base/thread_pool.h"
#include "kernels/sdpa/sdpa.h"

namespace loom::bench::sdpa {
namespace {

constexpr int64_t kB = 1, kH = 4, kD = 64;

struct Result {
  double ms = 0;         // best of the timed repetitions
  double median_ms = 0;
  double alloc_peak = 0;  // bytes
  double rss_delta = 0;   // bytes
  double cpu_ms = 0;      // user+system CPU time per step (all threads)
};

Tensor Rand(std::initializer_list<int64_t> shape, uint64_t seed) {
  Tensor t = Tensor::MustEmpty(Shape(shape.begin(), shape.end()), DType::kF32);
  Philox rng(seed, 0);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.Uniform(i) * 2 - 1;
  return t;
}

double CpuMs() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-3;
}

long MaxRssKiB() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

int Reps(int64_t T, kernels::sdpa::SdpaImpl impl) {
  if (T >= 4096) return impl == kernels::sdpa::SdpaImpl::kMath ? 1 : 5;
  if (T >= 1024) return 15;
  return 40;
}

// Runs in the child.
Result RunCase(kernels::sdpa::SdpaImpl impl, int64_t T, bool backward) {
  CountingAllocator counting(CpuAllocator::Get());
  ScopedDefaultAllocator use(&counting);
  Tensor q = Rand({kB, kH, T, kD}, 1), k = Rand({kB, kH, T, kD}, 2), v = Rand({kB, kH, T, kD}, 3),
         dout = Rand({kB, kH, T, kD}, 4);
  std::vector<kernels::TensorMeta> metas = {kernels::MetaOf(q), kernels::MetaOf(k), kernels::MetaOf(v)};
  kernels::sdpa::SdpaParams p = *kernels::sdpa::MakeSdpaParams(metas, {});
  Tensor out = Tensor::MustEmpty({kB, kH, T, kD}, DType::kF32), lse = Tensor::MustEmpty({kB, kH, T}, DType::kF32);
  Tensor dq = Tensor::MustEmpty({kB, kH, T, kD}, DType::kF32), dk = Tensor::MustEmpty({kB, kH, T, kD}, DType::kF32),
         dv = Tensor::MustEmpty({kB, kH, T, kD}, DType::kF32);
  NumThreads();  // start the pool before the baseline
  const int64_t base_bytes = counting.stats().bytes_in_use;
  const long rss0 = MaxRssKiB();
  counting.ResetPeak();
  auto step = [&] {
    absl::Status s = kernels::sdpa::SdpaForward(impl, p, q, k, v, nullptr, out, lse);
    if (s.ok() && backward) s = kernels::sdpa::SdpaBackward(impl, p, dout, q, k, v, out, lse, nullptr, dq, dk, dv);
    if (!s.ok()) {
      fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      exit(1);
    }
  };
  const int reps = Reps(T, impl);
  if (reps > 1) step();  // warm-up (skipped for the slow single-repetition math cases)
  const double c0 = CpuMs();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  Result r;
  r.cpu_ms = (CpuMs() - c0) / reps;
  std::sort(times.begin(), times.end());
  r.ms = times[0];
  r.median_ms = times[times.size() / 2];
  r.alloc_peak = static_cast<double>(counting.stats().peak_bytes - base_bytes);
  r.rss_delta = static_cast<double>(MaxRssKiB() - rss0) * 1024.0;
  return r;
}

Result RunInChild(kernels::sdpa::SdpaImpl impl, int64_t T, bool backward) {
  int fds[2];
  if (pipe(fds) != 0) abort();
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Result r = RunCase(impl, T, backward);
    if (write(fds[1], &r, sizeof(r)) != sizeof(r)) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  Result r;
  r.ms = -1;
  if (read(fds[0], &r, sizeof(r)) != sizeof(r)) r.ms = -1;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return r;
}

std::vector<std::string> SplitArg(int argc, char** argv, const char* name, const char* def) {
  std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i)
    if (strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return absl::StrSplit(argv[i] + prefix.size(), ',');
  return absl::StrSplit(def, ',');
}

}  // namespace
}  // namespace loom::bench::sdpa

int main(int argc, char** argv) {
  using namespace loom::bench::sdpa;
  std::vector<int64_t> Ts;
  for (const std::string& s : SplitArg(argc, argv, "T", "256,1024,4096")) {
    int64_t t;
    if (absl::SimpleAtoi(s, &t)) Ts.push_back(t);
  }
  std::vector<std::string> impls = SplitArg(argc, argv, "impls", "flash,memeff,math");
  std::vector<std::string> modes = SplitArg(argc, argv, "modes", "fwd,fwdbwd");
  std::string torch_file = SplitArg(argc, argv, "torch", "")[0];
  // torch results: lines "T mode best_ms median_ms cpu_ms rss_delta_bytes".
  std::map<std::pair<int64_t, std::string>, Result> torch;
  if (!torch_file.empty()) {
    if (FILE* f = fopen(torch_file.c_str(), "r")) {
      long long t;
      char mode[32];
      Result r;
      while (fscanf(f, "%lld %31s %lf %lf %lf %lf", &t, mode, &r.ms, &r.median_ms, &r.cpu_ms, &r.rss_delta) == 6)
        torch[{t, mode}] = r;
      fclose(f);
    }
  }
  const char* threads = getenv("LOOM_NUM_THREADS");
  printf("SDPA f32, B=%lld H=%lld D=Dv=%lld, T=S, no mask, not causal, dropout 0, threads (loom and torch)=%s\n",
         (long long)kB, (long long)kH, (long long)kD, threads ? threads : "hw");
  printf("best/median: wall ms per step (best and median of the repetitions); cpu: CPU ms per step, all threads;\n"
         "TFLOP/s from best; ratios = other's best / this best (torch/x: >1 means x is faster)\n");
  printf("%-6s %-7s %-7s %9s %9s %9s %8s %11s %11s %9s %8s\n", "T", "mode", "impl", "best_ms", "median", "cpu_ms",
         "TFLOP/s", "alloc_peak", "rss_delta", "torch/x", "math/x");
  auto row = [&](int64_t T, const std::string& mode, const std::string& name, const Result& r, double flops,
                 const Result* tr, const Result* mr) {
    char vs_torch[32] = "-", vs_math[32] = "-", alloc[32] = "-";
    if (tr && r.ms > 0) snprintf(vs_torch, sizeof(vs_torch), "%.2fx", tr->ms / r.ms);
    if (mr && r.ms > 0) snprintf(vs_math, sizeof(vs_math), "%.2fx", mr->ms / r.ms);
    if (r.alloc_peak >= 0) snprintf(alloc, sizeof(alloc), "%.2fMB", r.alloc_peak / 1e6);
    printf("%-6lld %-7s %-7s %9.2f %9.2f %9.2f %8.4f %11s %9.2fMB %9s %8s\n", (long long)T, mode.c_str(), name.c_str(),
           r.ms, r.median_ms, r.cpu_ms, flops / (r.ms * 1e-3) / 1e12, alloc, r.rss_delta / 1e6, vs_torch, vs_math);
  };
  for (int64_t T : Ts) {
    for (const std::string& mode : modes) {
      const bool bwd = mode == "fwdbwd";
      const double flops = 4.0 * kB * kH * T * T * kD * (bwd ? 3.5 : 1.0);
      std::map<std::string, Result> res;
      for (const std::string& name : impls) {
        loom::kernels::sdpa::SdpaImpl impl = name == "flash"    ? loom::kernels::sdpa::SdpaImpl::kFlash
                                             : name == "memeff" ? loom::kernels::sdpa::SdpaImpl::kMemEff
                                                                : loom::kernels::sdpa::SdpaImpl::kMath;
        res[name] = RunInChild(impl, T, bwd);
      }
      auto it = torch.find({T, mode});
      const Result* tr = it != torch.end() ? &it->second : nullptr;
      const Result* mr = res.count("math") ? &res["math"] : nullptr;
      for (const std::string& name : impls) row(T, mode, name, res[name], flops, tr, mr);
      if (tr) {
        Result t = *tr;
        t.alloc_peak = -1;
        row(T, mode, "torch", t, flops, tr, mr);
      }
      fflush(stdout);
    }
  }
  return 0;
}
