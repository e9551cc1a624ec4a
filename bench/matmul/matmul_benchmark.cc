// Matmul throughput on the host, in GFLOP/s:
//   - Loom's matmul kernel (kernels/cpu/matmul.h) on square sizes 256..2048 and
//     GPT-style shapes (activations [T, C] times weights [C, 3C] etc.,
//     batched attention-score products);
//   - the ceiling: raw OpenBLAS cblas_sgemm at 2048^3, no Loom code around it;
//   - torch.matmul (torch.set_num_threads(2)) on the same shapes, run through
//     /usr/bin/python3 bench/matmul/torch_matmul.py, and the Loom/torch ratio.
//
// Run: bazel run //bench/matmul:matmul_benchmark  (bench/matmul/run.sh)
// After the Google Benchmark runs (means per iteration), a side-by-side table
// times every shape again best-of-N for Loom, the sgemm ceiling and torch (the
// same statistic on all three) and prints the ratios.
// Flags (after Google Benchmark's own): --no-torch skips torch, --no-table
// skips the table, --torch-script=PATH names torch_matmul.py.
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/tensor.h"
#include "benchmark/benchmark.h"
#include "kernels/cpu/matmul.h"

namespace {

using loom::DType;
using loom::Tensor;

struct Shape3 {
  std::string name;
  int64_t batch;  // 0: plain 2-D a
  int64_t m, k, n;
  bool trans_b;
  bool b_batched;  // b carries the batch too (else b is a shared 2-D weight)
};

const std::vector<Shape3>& Shapes() {
  static const std::vector<Shape3> s = {
      {"square_256", 0, 256, 256, 256, false, false},
      {"square_512", 0, 512, 512, 512, false, false},
      {"square_1024", 0, 1024, 1024, 1024, false, false},
      {"square_2048", 0, 2048, 2048, 2048, false, false},
      // GPT-2 small-ish block at T=2048 tokens, C=256: qkv, proj, mlp up/down.
      {"gpt_qkv_2048x256x768", 0, 2048, 256, 768, false, false},
      {"gpt_proj_2048x256x256", 0, 2048, 256, 256, false, false},
      {"gpt_mlp_up_2048x256x1024", 0, 2048, 256, 1024, false, false},
      {"gpt_mlp_down_2048x1024x256", 0, 2048, 1024, 256, false, false},
      // Batched activations against a shared weight (folds into one GEMM).
      {"gpt_batched_8x256x256x768", 8, 256, 256, 768, false, false},
      // Attention scores q @ k^T per head: [B*H, T, D] x [B*H, T, D]^T.
      {"attn_scores_32x256x64x256_tb", 32, 256, 64, 256, true, true},
  };
  return s;
}

Tensor Rand(std::vector<int64_t> shape) {
  Tensor t = Tensor::MustEmpty(shape, DType::kF32);
  float* p = t.data<float>();
  uint32_t x = 12345;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
  }
  return t;
}

double Flops(const Shape3& s) { return 2.0 * std::max<int64_t>(s.batch, 1) * s.m * s.n * s.k; }

struct Problem {
  Tensor a, b, c;
  bool trans_b;
  absl::Status Run() { return loom::kernels::cpu::MatMul(a, b, false, trans_b, c); }
};

Problem MakeProblem(const Shape3& s) {
  std::vector<int64_t> as = {s.m, s.k}, bs = s.trans_b ? std::vector<int64_t>{s.n, s.k}
                                                       : std::vector<int64_t>{s.k, s.n};
  std::vector<int64_t> cs = {s.m, s.n};
  if (s.batch) {
    as.insert(as.begin(), s.batch);
    cs.insert(cs.begin(), s.batch);
  }
  if (s.batch && s.b_batched) bs.insert(bs.begin(), s.batch);
  return Problem{Rand(as), Rand(bs), Tensor::MustEmpty(cs, DType::kF32), s.trans_b};
}

// Best-of timing (seconds per call) after one warm-up call: robust on a
// shared machine, and the same statistic torch_matmul.py reports.
template <typename Fn>
double BestSeconds(Fn fn, double min_time = 0.3) {
  fn();
  double best = 1e30, total = 0;
  for (int it = 0; total < min_time || it < 3; ++it) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, dt);
    total += dt;
  }
  return best;
}

void BM_LoomMatMul(benchmark::State& state, Shape3 s) {
  Problem p = MakeProblem(s);
  for (auto _ : state) {
    absl::Status st = p.Run();
    if (!st.ok()) state.SkipWithError(std::string(st.message()).c_str());
    benchmark::DoNotOptimize(p.c.raw_data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(Flops(s), benchmark::Counter::kIsIterationInvariantRate);
}

// The ceiling: OpenBLAS sgemm called directly (its own threads), nothing of
// Loom around it.
void RawSgemm(int n, std::vector<float>& a, std::vector<float>& b, std::vector<float>& c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(),
              n);
}

void BM_OpenBlasSgemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  for (auto _ : state) {
    RawSgemm(n, a, b, c);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * n * n * double(n), benchmark::Counter::kIsIterationInvariantRate);
}

std::string FindTorchScript(const char* argv0, const std::string& given) {
  std::vector<std::string> candidates;
  if (!given.empty()) candidates.push_back(given);
  candidates.push_back("bench/matmul/torch_matmul.py");  // bazel run: cwd is the runfiles root
  candidates.push_back(absl::StrCat(argv0, ".runfiles/loom/bench/matmul/torch_matmul.py"));
  for (const std::string& c : candidates)
    if (FILE* f = std::fopen(c.c_str(), "r")) {
      std::fclose(f);
      return c;
    }
  return "";
}

// Runs the torch script over every shape; name -> GFLOP/s.
std::map<std::string, double> RunTorch(const char* argv0, const std::string& given_script) {
  std::map<std::string, double> out;
  std::string script = FindTorchScript(argv0, given_script);
  if (script.empty()) {
    std::printf("torch side-by-side skipped: torch_matmul.py not found\n");
    return out;
  }
  std::string cmd = absl::StrCat("/usr/bin/python3 ", script);
  for (const Shape3& s : Shapes())
    absl::StrAppend(&cmd, " ", s.name, ":", s.batch, ":", s.m, ":", s.k, ":", s.n, ":", s.trans_b ? 1 : 0, ":",
                    s.b_batched ? 1 : 0);
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char name[256];
  double g;
  while (std::fscanf(p, "%255s %lf", name, &g) == 2) out[name] = g;
  int rc = pclose(p);
  if (rc != 0) std::printf("torch script exited with status %d\n", rc);
  return out;
}

struct Flags {
  bool torch = true, table = true;
  std::string torch_script;
};

// This benchmark's flags, from what Google Benchmark left in argv; exit 2 on
// any other argument.
Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-torch") {
      f.torch = false;
    } else if (a == "--no-table") {
      f.table = false;
    } else if (a.rfind("--torch-script=", 0) == 0) {
      f.torch_script = a.substr(std::string("--torch-script=").size());
    } else {
      std::fprintf(stderr, "matmul_benchmark: unknown argument '%s' (--no-torch, --no-table, --torch-script=PATH, "
                   "or Google Benchmark's --benchmark_* flags)\n", a.c_str());
      std::exit(2);
    }
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  for (const Shape3& s : Shapes())
    benchmark::RegisterBenchmark(("LoomMatMul/" + s.name).c_str(), BM_LoomMatMul, s)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("OpenBlasSgemm", BM_OpenBlasSgemm)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::Initialize(&argc, argv);
  const Flags flags = ParseFlags(argc, argv);
  benchmark::RunSpecifiedBenchmarks();

  std::printf("\nOpenBLAS threads: %d\n", openblas_get_num_threads());
  if (!flags.table) return 0;
  // Side by side, best-of-N for every column (Google Benchmark above reports means).
  double ceiling = 0;
  {
    const int n = 2048;
    std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
    ceiling = 2.0 * n * n * double(n) / BestSeconds([&] { RawSgemm(n, a, b, c); }, 1.0) / 1e9;
  }
  std::map<std::string, double> loom;
  for (const Shape3& s : Shapes()) {
    Problem p = MakeProblem(s);
    loom[s.name] = Flops(s) / BestSeconds([&] { (void)p.Run(); }) / 1e9;
  }
  std::map<std::string, double> torch;
  if (flags.torch) torch = RunTorch(argv[0], flags.torch_script);
  std::printf("\nbest-of-N GFLOP/s (f32)\n%-32s %12s %13s %11s %15s\n", "shape", "loom", "torch(2 thr)",
              "loom/torch", "loom/sgemm2048");
  for (const Shape3& s : Shapes()) {
    double l = loom[s.name], t = torch.count(s.name) ? torch[s.name] : 0;
    std::printf("%-32s %12.1f %13.1f %11s %15s\n", s.name.c_str(), l, t,
                t > 0 ? absl::StrCat(static_cast<int>(100 * l / t + 0.5), "%").c_str() : "-",
                absl::StrCat(static_cast<int>(100 * l / ceiling + 0.5), "%").c_str());
  }
  std::printf("%-32s %12.1f   (OpenBLAS's own %d threads)\n", "raw cblas_sgemm 2048^3", ceiling,
              openblas_get_num_threads());
  benchmark::Shutdown();
  return 0;
}
