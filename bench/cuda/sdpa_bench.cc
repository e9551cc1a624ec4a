// sdpa_bench: Loom's flash-attention kernels (kernels/cuda/attention) at the
// SDPA shapes of issue 8, bf16, causal and not: forward and forward+backward
// TFLOP/s (median of CUDA-event-timed iterations after warm-up). FLOPs: forward
// 4 B H T^2 D (halved when causal), forward+backward 3.5x forward.
// Each shape checks itself: 64 query rows at each end of head (0, 0) against
// an fp64 CPU computation (o and lse), and dq/dk/dv sampled for NaN.
// Prints one "RESULT impl=loom_flash ..." line per case, which
// bench/cuda/torch_sdpa.py --loom=FILE reads to print the ratios.
//
//   sdpa_bench [--iters=N] [--shape=B,H,T,D] [--deterministic]
// (--deterministic: the backward's dQ by its own pass instead of atomics.)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/attention/flash_attention.h"

namespace {

struct Shape {
  int64_t b, h, t, d;
};

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)
#define CS(x)                                                                                \
  do {                                                                                       \
    absl::Status s_ = (x);                                                                   \
    if (!s_.ok()) {                                                                          \
      std::fprintf(stderr, "%s: %s\n", #x, std::string(s_.message()).c_str());              \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float FromBf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Approximately normal values (sum of 4 uniforms, unit variance), as bf16.
std::vector<uint16_t> RandomBf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> out(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    float acc = 0;
    for (int j = 0; j < 4; ++j) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      acc += static_cast<float>((s >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
    }
    out[i] = ToBf16(acc * 1.7320508f);
  }
  return out;
}

float Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// fp64 o and lse of query row i of head 0; returns the squared error and
// squared norm of o, and the absolute lse error.
void RowCheck(const Shape& s, bool causal, const std::vector<uint16_t>& q, const std::vector<uint16_t>& k,
              const std::vector<uint16_t>& v, const std::vector<uint16_t>& o, const std::vector<float>& lse,
              int64_t i, double* num, double* den, double* lse_err) {
  const int64_t D = s.d, T = s.t;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> p(T);
  double mx = -INFINITY;
  const int64_t n = causal ? i + 1 : T;
  for (int64_t j = 0; j < n; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += FromBf16(q[i * D + d]) * static_cast<double>(FromBf16(k[j * D + d]));
    p[j] = dot * scale;
    mx = std::max(mx, p[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += (p[j] = std::exp(p[j] - mx));
  for (int64_t d = 0; d < D; ++d) {
    double acc = 0;
    for (int64_t j = 0; j < n; ++j) acc += p[j] * FromBf16(v[j * D + d]);
    acc /= sum;
    const double got = FromBf16(o[i * D + d]);
    *num += std::isfinite(got) ? (got - acc) * (got - acc) : INFINITY;
    *den += acc * acc;
  }
  *lse_err = std::max(*lse_err, std::fabs(lse[i] - (mx + std::log(sum))));
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  bool deterministic = false;
  std::vector<Shape> shapes = {{4, 16, 4096, 128}, {8, 12, 1024, 64}, {2, 16, 8192, 128}};
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--iters=", 8) == 0) {
      iters = std::max(3, std::atoi(argv[i] + 8));
    } else if (std::strncmp(argv[i], "--shape=", 8) == 0) {
      Shape s;
      long long b, h, t, d;
      if (std::sscanf(argv[i] + 8, "%lld,%lld,%lld,%lld", &b, &h, &t, &d) != 4) return 2;
      s = {b, h, t, d};
      shapes = {s};
    } else if (std::strcmp(argv[i], "--deterministic") == 0) {
      deterministic = true;
    } else {
      std::fprintf(stderr, "usage: sdpa_bench [--iters=N] [--shape=B,H,T,D] [--deterministic]\n");
      return 2;
    }
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("sdpa_bench: no GPU\n");
    return 3;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("sdpa_bench on %s: loom flash attention bf16, %d timed iterations (median)\n", prop.name, iters);
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  bool all_ok = true;
  for (const Shape& s : shapes) {
    const size_t n = static_cast<size_t>(s.b * s.h * s.t * s.d);
    std::vector<uint16_t> hq = RandomBf16(n, 1), hk = RandomBf16(n, 2), hv = RandomBf16(n, 3),
                          hdo = RandomBf16(n, 4);
    void *q, *k, *v, *o, *dout, *dq, *dk, *dv, *ws;
    float* lse;
    for (void** p : {&q, &k, &v, &o, &dout, &dq, &dk, &dv}) CK(cudaMalloc(p, n * 2));
    CK(cudaMalloc(&lse, static_cast<size_t>(s.b * s.h * s.t) * 4));
    CK(cudaMemcpy(q, hq.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(k, hk.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(v, hv.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dout, hdo.data(), n * 2, cudaMemcpyHostToDevice));
    for (bool causal : {false, true}) {
      loom::cuda::FlashAttnArgs a;
      a.dtype = loom::DType::kBF16;
      a.batch = s.b, a.heads = a.kv_heads = s.h, a.seq_q = a.seq_k = s.t, a.head_dim = s.d;
      a.causal = causal;
      a.deterministic = deterministic;
      a.q = q, a.k = k, a.v = v, a.o = o, a.lse = lse;
      a.dout = dout, a.dq = dq, a.dk = dk, a.dv = dv;
      a.stream = stream;
      CK(cudaMalloc(&ws, loom::cuda::FlashAttentionBwdWorkspaceBytes(a)));
      a.workspace = ws;
      const double fwd_flops = 4.0 * s.b * s.h * static_cast<double>(s.t) * s.t * s.d / (causal ? 2 : 1);
      std::vector<cudaEvent_t> ev(iters + 1);
      for (auto& e : ev) CK(cudaEventCreate(&e));
      float ms_fwd = 0, ms_fb = 0;
      for (int pass = 0; pass < 2; ++pass) {
        for (int w = 0; w < 3; ++w) {
          CS(loom::cuda::FlashAttentionForward(a));
          if (pass == 1) CS(loom::cuda::FlashAttentionBackward(a));
        }
        CK(cudaEventRecord(ev[0], stream));
        for (int it = 0; it < iters; ++it) {
          CS(loom::cuda::FlashAttentionForward(a));
          if (pass == 1) CS(loom::cuda::FlashAttentionBackward(a));
          CK(cudaEventRecord(ev[it + 1], stream));
        }
        CK(cudaStreamSynchronize(stream));
        std::vector<float> ms(iters);
        for (int it = 0; it < iters; ++it) CK(cudaEventElapsedTime(&ms[it], ev[it], ev[it + 1]));
        (pass == 0 ? ms_fwd : ms_fb) = Median(ms);
      }
      for (auto& e : ev) CK(cudaEventDestroy(e));
      // Self-check: the outputs of the last forward+backward.
      std::vector<uint16_t> ho(n);
      std::vector<float> hlse(static_cast<size_t>(s.b * s.h * s.t));
      CK(cudaMemcpy(ho.data(), o, n * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hlse.data(), lse, hlse.size() * 4, cudaMemcpyDeviceToHost));
      double num = 0, den = 0, lse_err = 0;
      for (int64_t i = 0; i < s.t; ++i) {
        if (i == 64) i = std::max<int64_t>(64, s.t - 64);
        RowCheck(s, causal, hq, hk, hv, ho, hlse, i, &num, &den, &lse_err);
      }
      const double rel = std::sqrt(num / den);
      bool finite = true;
      std::vector<uint16_t> g(n);
      for (void* p : {dq, dk, dv}) {
        CK(cudaMemcpy(g.data(), p, n * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i += 97) finite = finite && std::isfinite(FromBf16(g[i]));
      }
      const bool ok = rel < 1e-2 && lse_err < 1e-2 && finite;
      all_ok = all_ok && ok;
      const double tf_fwd = fwd_flops / (ms_fwd * 1e-3) / 1e12;
      const double tf_fb = 3.5 * fwd_flops / (ms_fb * 1e-3) / 1e12;
      std::printf("RESULT impl=loom_flash%s B=%lld H=%lld T=%lld D=%lld causal=%d fwd_ms=%.3f fwd_tflops=%.1f "
                  "fwdbwd_ms=%.3f fwdbwd_tflops=%.1f check_o_rel=%.2e check_lse_abs=%.2e grads_finite=%d %s\n",
                  deterministic ? "_det" : "", static_cast<long long>(s.b), static_cast<long long>(s.h), static_cast<long long>(s.t),
                  static_cast<long long>(s.d), causal ? 1 : 0, ms_fwd, tf_fwd, ms_fb, tf_fb, rel, lse_err,
                  finite ? 1 : 0, ok ? "CHECK_OK" : "CHECK_FAILED");
      std::fflush(stdout);
      CK(cudaFree(ws));
    }
    for (void* p : {q, k, v, o, dout, dq, dk, dv}) CK(cudaFree(p));
    CK(cudaFree(lse));
  }
  return all_ok ? 0 : 1;
}
