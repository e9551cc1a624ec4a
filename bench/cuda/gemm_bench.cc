// gemm_bench: Loom's cuBLASLt GEMM (kernels/cuda/gemm.h) at M=N=K=8192 bf16 by
// default. Times `iters` products with CUDA events after `warmup` ones on
// random data, prints the median TFLOP/s and the algorithm chosen, and checks
// 256 sampled entries of D against fp64 dot products (rel err < 1e-2).
// bench/cuda/run_all.sh runs it beside torch.matmul and prints the ratio.
//
//   gemm_bench [--m=8192 --n=8192 --k=8192] [--iters=100] [--warmup=10] [--f32] [--no-autotune] [--tA] [--tB]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/tensor.h"
#include "kernels/cuda/device_runtime.h"
#include "kernels/cuda/gemm.h"

namespace {

int64_t Flag(int argc, char** argv, const char* name, int64_t def) {
  size_t n = std::strlen(name);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], name, n) == 0 && argv[i][n] == '=') return std::strtoll(argv[i] + n + 1, nullptr, 10);
  return def;
}
bool Has(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

#define CHECK_OK(expr)                                                                   \
  do {                                                                                   \
    auto _s = (expr);                                                                    \
    if (!_s.ok()) {                                                                      \
      std::fprintf(stderr, "gemm_bench: %s: %s\n", #expr, std::string(_s.message()).c_str()); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  using namespace loom;
  using namespace loom::kernels::cuda;
  const int64_t m = Flag(argc, argv, "--m", 8192), n = Flag(argc, argv, "--n", 8192), k = Flag(argc, argv, "--k", 8192);
  const int iters = static_cast<int>(Flag(argc, argv, "--iters", 100));
  const int warmup = static_cast<int>(Flag(argc, argv, "--warmup", 10));
  const DType dt = Has(argc, argv, "--f32") ? DType::kF32 : DType::kBF16;
  const bool ta = Has(argc, argv, "--tA"), tb = Has(argc, argv, "--tB");
  if (Has(argc, argv, "--no-autotune")) SetGemmAutotune(false);
  auto rt_or = DeviceRuntime::Get(0);
  CHECK_OK(rt_or.status());
  DeviceRuntime* rt = *rt_or;
  // Random inputs in [-1, 1) (a cheap LCG; never zeros).
  auto random_host = [&](int64_t rows, int64_t cols, uint64_t seed) {
    Tensor t = Tensor::MustEmpty({rows, cols}, dt);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < rows * cols; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      float v = static_cast<float>((s >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
      if (dt == DType::kBF16) t.data<BF16>()[i] = BF16(v);
      else t.data<float>()[i] = v;
    }
    return t;
  };
  Tensor ha = ta ? random_host(k, m, 1) : random_host(m, k, 1);
  Tensor hb = tb ? random_host(n, k, 2) : random_host(k, n, 2);
  auto da = ToDevice(ha, rt->device());
  CHECK_OK(da.status());
  auto db = ToDevice(hb, rt->device());
  CHECK_OK(db.status());
  auto dd = rt->Empty({m, n}, dt);
  CHECK_OK(dd.status());
  CHECK_OK(FillBytes(dd->raw_data(), dd->nbytes(), 0xFF, rt->compute_stream()));
  GemmArgs g;
  g.dtype = dt;
  g.m = m, g.n = n, g.k = k, g.trans_a = ta, g.trans_b = tb;
  g.a = da->raw_data(), g.b = db->raw_data(), g.d = dd->raw_data();
  g.stream = rt->compute_stream();
  for (int i = 0; i < warmup; ++i) CHECK_OK(Gemm(g));
  std::vector<StreamEvent> ev;
  for (int i = 0; i <= iters; ++i) {
    auto e = StreamEvent::Create();
    CHECK_OK(e.status());
    ev.push_back(std::move(*e));
  }
  CHECK_OK(ev[0].Record(rt->compute_stream()));
  for (int i = 0; i < iters; ++i) {
    CHECK_OK(Gemm(g));
    CHECK_OK(ev[i + 1].Record(rt->compute_stream()));
  }
  CHECK_OK(rt->SynchronizeCompute());
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    auto t = ev[i + 1].ElapsedMsSince(ev[i]);
    CHECK_OK(t.status());
    ms.push_back(*t);
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double tflops = 2.0 * m * n * k / (med * 1e-3) / 1e12;
  // Sampled check against fp64.
  auto hd = ToHost(*dd);
  CHECK_OK(hd.status());
  double num = 0, den = 0;
  bool finite = true;
  uint64_t s = 12345;
  for (int t = 0; t < 256; ++t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t i = (s >> 33) % m, j = (s >> 13) % n;
    double ref = 0;
    for (int64_t p = 0; p < k; ++p)
      ref += ha.GetDouble(ta ? p * m + i : i * k + p) * hb.GetDouble(tb ? j * k + p : p * n + j);
    const double out = hd->GetDouble(i * n + j);
    finite = finite && std::isfinite(out);
    num += (out - ref) * (out - ref);
    den += ref * ref;
  }
  const double rel = std::sqrt(num / den);
  const bool ok = finite && rel < (dt == DType::kF32 ? 1e-4 : 1e-2);
  std::printf("loom gemm %s m=%lld n=%lld k=%lld tA=%d tB=%d: median %.3f ms, min %.3f ms over %d, %.1f TFLOP/s; "
              "sampled rel err %.2e %s\n",
              std::string(DTypeName(dt)).c_str(), (long long)m, (long long)n, (long long)k, ta, tb, med, ms.front(),
              iters, tflops, rel, ok ? "OK" : "FAILED");
  std::printf("choice: %s\n", GemmChoice(g).c_str());
  std::printf("RESULT loom_tflops=%.1f\n", tflops);
  return ok ? 0 : 1;
}
