// Direct checks of the lowering's reductions (lowering_kernels.h) against fp64
// CPU references, run by cuda_executor_gpu_check before the training checks:
//   SumRows (bias-gradient column sums): vectorised and scalar paths;
//   the multi-tensor grad norm: f32 and bf16 tensors, aligned and not, sizes
//   that end mid-chunk;
//   the fused cross-entropy forward+backward (lse, loss, dlogits).
// Inputs are fresh random values (bf16-rounded where the kernel reads bf16),
// outputs are poisoned with NaN before each run, and each kernel runs twice to
// check that the two results are bit-identical (fixed-order reductions).
#include "compiler/cuda/lowering_kernel_checks.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <algorithm>
#include <random>
#include <vector>

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "compiler/cuda/lowering_kernels.h"

namespace loom::compiler::cuda {

#ifdef LOOM_HAVE_CUDA
namespace {

uint16_t ToBf16(float f) {  // round to nearest even (inputs are finite)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
double FromBf16(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  ~Dev() { cudaFree(p); }
};

double RelErr(const std::vector<float>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

bool Report(const char* name, const char* shape, double err, bool same, double tol) {
  const bool ok = err <= tol && same;
  std::printf("%-34s %-22s rel_err %-10.2e deterministic %-3s %s\n", name, shape, err, same ? "yes" : "NO",
              ok ? "ok" : "FAIL");
  return ok;
}

bool CheckSumRows(std::mt19937_64& rng, int64_t rows, int64_t cols, bool bf16_in, int64_t offset_elems) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = rows * cols;
  std::vector<double> ref(cols, 0.0);
  Dev x((n + offset_elems) * 4), out(cols * 4), ws(kern::SumRowsWorkspaceFloats(rows, cols) * 4);
  if (!x.p || !out.p || !ws.p) return Report("sum_rows", "alloc failed", INFINITY, false, 0);
  if (bf16_in) {
    std::vector<uint16_t> h(n);
    for (int64_t i = 0; i < n; ++i) {
      h[i] = ToBf16(nd(rng) + 0.25f);
      ref[i % cols] += FromBf16(h[i]);
    }
    cudaMemcpy(static_cast<uint16_t*>(x.p) + offset_elems, h.data(), n * 2, cudaMemcpyHostToDevice);
  } else {
    std::vector<float> h(n);
    for (int64_t i = 0; i < n; ++i) {
      h[i] = nd(rng) + 0.25f;
      ref[i % cols] += h[i];
    }
    cudaMemcpy(static_cast<float*>(x.p) + offset_elems, h.data(), n * 4, cudaMemcpyHostToDevice);
  }
  const void* xp = bf16_in ? static_cast<const void*>(static_cast<uint16_t*>(x.p) + offset_elems)
                           : static_cast<const void*>(static_cast<float*>(x.p) + offset_elems);
  std::vector<float> o1(cols), o2(cols);
  for (std::vector<float>* o : {&o1, &o2}) {
    cudaMemset(out.p, 0xFF, cols * 4);
    const int e = kern::SumRows(bf16_in ? kern::kBF16 : kern::kF32, kern::kF32, rows, cols, xp, out.p,
                                static_cast<float*>(ws.p), nullptr);
    if (e != 0 || cudaDeviceSynchronize() != cudaSuccess) return Report("sum_rows", "launch failed", INFINITY, false, 0);
    cudaMemcpy(o->data(), out.p, cols * 4, cudaMemcpyDeviceToHost);
  }
  char shape[64];
  std::snprintf(shape, sizeof(shape), "%lldx%lld%s", static_cast<long long>(rows), static_cast<long long>(cols),
                offset_elems ? " +1" : "");
  return Report(bf16_in ? "sum_rows bf16 -> f32" : "sum_rows f32 -> f32", shape, RelErr(o1, ref),
                std::memcmp(o1.data(), o2.data(), cols * 4) == 0, 1e-5);
}

bool CheckGradNorm(std::mt19937_64& rng) {
  struct T {
    int64_t n;
    bool bf16;
    int64_t offset;
  };
  const std::vector<T> ts = {{768, false, 0},    {65536 * 3 + 5, false, 0}, {1000003, false, 1},
                             {2304, true, 0},    {65536 + 7, true, 0},      {99999, true, 3},
                             {768 * 3072, false, 0}, {1, false, 0}};
  std::normal_distribution<float> nd(0.0f, 1.0f);
  double ref = 0;
  std::vector<std::unique_ptr<Dev>> bufs;
  std::vector<kern::GradNormEntry> entries;
  int64_t chunks = 0;
  for (const T& t : ts) {
    const size_t esz = t.bf16 ? 2 : 4;
    bufs.push_back(std::make_unique<Dev>((t.n + t.offset) * esz));
    if (bufs.back()->p == nullptr) return Report("grad_norm multi-tensor", "alloc failed", INFINITY, false, 0);
    char* base = static_cast<char*>(bufs.back()->p) + t.offset * esz;
    if (t.bf16) {
      std::vector<uint16_t> h(t.n);
      for (auto& v : h) {
        v = ToBf16(nd(rng));
        ref += FromBf16(v) * FromBf16(v);
      }
      cudaMemcpy(base, h.data(), t.n * 2, cudaMemcpyHostToDevice);
    } else {
      std::vector<float> h(t.n);
      for (auto& v : h) {
        v = nd(rng);
        ref += double(v) * v;
      }
      cudaMemcpy(base, h.data(), t.n * 4, cudaMemcpyHostToDevice);
    }
    kern::GradNormEntry e;
    e.x = base;
    e.numel = t.n;
    e.dt = t.bf16 ? kern::kBF16 : kern::kF32;
    entries.push_back(e);
    chunks += kern::GradNormChunks(t.n);
  }
  void *de = nullptr, *dc = nullptr;
  int64_t nc = 0;
  if (kern::GradNormUpload(entries.data(), static_cast<int>(entries.size()), &de, &dc, &nc) != 0 || nc != chunks)
    return Report("grad_norm multi-tensor", "upload failed", INFINITY, false, 0);
  Dev partials(nc * 4), out(4);
  float r[2];
  for (float& v : r) {
    cudaMemset(out.p, 0xFF, 4);
    if (kern::GradNormMulti(de, dc, nc, static_cast<float*>(partials.p), static_cast<float*>(out.p), nullptr) != 0 ||
        cudaDeviceSynchronize() != cudaSuccess)
      return Report("grad_norm multi-tensor", "launch failed", INFINITY, false, 0);
    cudaMemcpy(&v, out.p, 4, cudaMemcpyDeviceToHost);
  }
  cudaFree(de);
  cudaFree(dc);
  const double want = std::sqrt(ref);
  const double err = std::isfinite(r[0]) ? std::fabs(r[0] - want) / want : INFINITY;
  return Report("grad_norm multi-tensor", "8 tensors f32+bf16", err, std::memcmp(&r[0], &r[1], 4) == 0, 1e-5);
}

// The fused cross-entropy (forward + backward in one pass over the logits):
// lse, the mean loss and dlogits against fp64, some rows ignored (-100).
bool CheckCrossEntropyFused(std::mt19937_64& rng, int64_t rows, int64_t vocab, bool bf16) {
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_int_distribution<int64_t> tok(0, vocab - 1);
  const int64_t n = rows * vocab;
  const size_t esz = bf16 ? 2 : 4;
  std::vector<double> x(n);
  std::vector<uint16_t> hb(bf16 ? n : 0);
  std::vector<float> hf(bf16 ? 0 : n);
  for (int64_t i = 0; i < n; ++i) {
    const float v = nd(rng);
    if (bf16) {
      hb[i] = ToBf16(v);
      x[i] = FromBf16(hb[i]);
    } else {
      hf[i] = v;
      x[i] = v;
    }
  }
  std::vector<int64_t> t(rows);
  for (int64_t r = 0; r < rows; ++r) t[r] = r % 7 == 3 ? -100 : tok(rng);
  const float dloss = 0.7f;
  // fp64 reference.
  std::vector<double> lse(rows), dl(n, 0.0);
  double loss = 0, valid = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < vocab; ++j) mx = std::max(mx, x[r * vocab + j]);
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(x[r * vocab + j] - mx);
    lse[r] = mx + std::log(s);
    if (t[r] >= 0) loss += lse[r] - x[r * vocab + t[r]], valid += 1;
  }
  loss /= std::max(valid, 1.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < vocab && t[r] >= 0; ++j)
      dl[r * vocab + j] = dloss / valid * (std::exp(x[r * vocab + j] - lse[r]) - (j == t[r] ? 1.0 : 0.0));
  Dev dx(n * esz), dt(rows * 8), dd(4), dlse(rows * 4), dloss_out(4), dg(n * esz), ws((rows + 1) * 4);
  if (!dx.p || !dt.p || !dg.p || !ws.p) return Report("cross_entropy fused", "alloc failed", INFINITY, false, 0);
  cudaMemcpy(dx.p, bf16 ? static_cast<const void*>(hb.data()) : hf.data(), n * esz, cudaMemcpyHostToDevice);
  cudaMemcpy(dt.p, t.data(), rows * 8, cudaMemcpyHostToDevice);
  cudaMemcpy(dd.p, &dloss, 4, cudaMemcpyHostToDevice);
  std::vector<float> g1(n), g2(n), l_out(rows);
  float loss_out = 0;
  for (std::vector<float>* g : {&g1, &g2}) {
    cudaMemset(dg.p, 0xFF, n * esz);  // NaN poison
    cudaMemset(dlse.p, 0xFF, rows * 4);
    cudaMemset(dloss_out.p, 0xFF, 4);
    const int e = kern::CrossEntropyFused(bf16 ? kern::kBF16 : kern::kF32, kern::kI64, rows, vocab,
                                          static_cast<const float*>(dd.p), dx.p, dt.p, -100,
                                          static_cast<float*>(dlse.p), static_cast<float*>(dloss_out.p), dg.p,
                                          static_cast<float*>(ws.p), nullptr);
    if (e != 0 || cudaDeviceSynchronize() != cudaSuccess)
      return Report("cross_entropy fused", "launch failed", INFINITY, false, 0);
    if (bf16) {
      std::vector<uint16_t> h(n);
      cudaMemcpy(h.data(), dg.p, n * 2, cudaMemcpyDeviceToHost);
      for (int64_t i = 0; i < n; ++i) (*g)[i] = static_cast<float>(FromBf16(h[i]));
    } else {
      cudaMemcpy(g->data(), dg.p, n * 4, cudaMemcpyDeviceToHost);
    }
  }
  cudaMemcpy(l_out.data(), dlse.p, rows * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(&loss_out, dloss_out.p, 4, cudaMemcpyDeviceToHost);
  const double err = std::max({RelErr(g1, dl), RelErr(l_out, lse), RelErr({loss_out}, {loss})});
  char shape[64];
  std::snprintf(shape, sizeof(shape), "%lldx%lld %s", static_cast<long long>(rows), static_cast<long long>(vocab),
                bf16 ? "bf16" : "f32");
  return Report("cross_entropy fused fwd+bwd", shape, err, std::memcmp(g1.data(), g2.data(), n * 4) == 0,
                bf16 ? 1e-2 : 1e-4);
}

}  // namespace

int CheckLoweringKernels() {
  std::mt19937_64 rng(4242);
  int failures = 0;
  failures += !CheckSumRows(rng, 16384, 768, true, 0);
  failures += !CheckSumRows(rng, 16384, 2304, true, 0);
  failures += !CheckSumRows(rng, 16384, 3072, true, 0);
  failures += !CheckSumRows(rng, 70000, 136, true, 0);  // more rows than 256 parts of 128
  failures += !CheckSumRows(rng, 37, 200, true, 0);
  failures += !CheckSumRows(rng, 300, 768, true, 1);   // unaligned: the scalar kernel
  failures += !CheckSumRows(rng, 513, 100, false, 0);  // f32: the scalar kernel
  failures += !CheckGradNorm(rng);
  failures += !CheckCrossEntropyFused(rng, 64, 50304, true);   // the vectorised one-pass kernel
  failures += !CheckCrossEntropyFused(rng, 33, 1000, true);
  failures += !CheckCrossEntropyFused(rng, 20, 1003, true);    // vocab % 8 != 0: the two kernels
  failures += !CheckCrossEntropyFused(rng, 17, 5000, false);   // f32: the two kernels
  return failures;
}
#else
int CheckLoweringKernels() { return 0; }
#endif

}  // namespace loom::compiler::cuda
