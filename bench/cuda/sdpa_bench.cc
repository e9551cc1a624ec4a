// sdpa_bench: Loom's flash-attention kernels (kernels/cuda/attention) at the
// SDPA table's shapes (docs/perf.md), bf16, causal and not: forward and forward+backward
// TFLOP/s (median of CUDA-event-timed iterations after warm-up). FLOPs: forward
// 4 B H T^2 D (halved when causal), forward+backward 3.5x forward.
// Each shape checks itself: 64 query rows at each end of head (0, 0) against
// an fp64 CPU computation (o and lse), and dq/dk/dv sampled for NaN.
// Prints one "RESULT impl=loom_flash ..." line per case (and, unless --bwd,
// "impl=loom_flash_ds": the stored-dS backward, and unless --deterministic
// too, "impl=loom_flash_atomic": the atomic-dQ backward), which
// bench/cuda/torch_sdpa.py --loom=FILE reads to print the ratios.
//
//   sdpa_bench [--iters=N] [--shape=B,H,T,D] [--fwd=V] [--bwd=V] [--dq=V] [--sweep] [--dispatch]
//              [--only=IMPL,...] [--idle-ms=N] [--data-scale=X] [--cudnn-configs=N] [--cudnn-verbose]
// Each RESULT line also gives the backward alone (bwd_ms), the inference
// forward (fwdinf_ms: lse null, for loom_flash, loom_cudnn and loom_sdpa;
// PyTorch's no-grad forward computes no lse either), forward+backward
// replayed from one captured CUDA graph (graph_fwdbwd_ms: no host gaps; -1
// where the path does not capture), and the host's enqueue time per
// iteration of the three timed loops (host_ms=fwd/fwd+bwd/bwd).
// --only: just these RESULT rows (e.g. loom_cudnn,loom_sdpa). --idle-ms (300):
// the card idles this long before every timed loop, as torch_sdpa.py does,
// so that neither side's figure depends on the power draw of what ran just
// before (docs/perf.md). --data-scale: the inputs' standard deviation (1).
// --dispatch: also each case through the SDPA dispatcher (sdpa_dispatch.h;
// tuned during the warm-up), "RESULT impl=loom_sdpa ..." with its choices.
// Unless --no-cudnn: also cuDNN's fused attention directly (cudnn_sdpa.h),
// "RESULT impl=loom_cudnn ..." (or a SKIP line saying why, e.g. no libcudnn).
// --cudnn-configs / --cudnn-verbose set CudnnSdpaOptions (engine configs
// timed per plan, 4 by default; print their timings).
// --fwd/--bwd/--dq pick kernel variants (flash_variants.h; 0 = defaults; --bwd=6
// is the atomic-dQ backward). --sweep times every variant instead: each forward
// variant alone, and the backward alone for every dK/dV variant (dQ default)
// and every dQ variant (dK/dV default), printing "SWEEP ..." lines with the
// backward's outputs compared with the default variant's (rel = ||x-def||/||def||
// over a strided sample) and a "BEST ..." line per case.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/attention/cudnn_sdpa.h"
#include "kernels/cuda/attention/flash_attention.h"
#include "kernels/cuda/attention/sdpa_dispatch.h"

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
std::vector<uint16_t> RandomBf16(size_t n, uint64_t seed, float scale) {
  std::vector<uint16_t> out(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    float acc = 0;
    for (int j = 0; j < 4; ++j) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      acc += static_cast<float>((s >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
    }
    out[i] = ToBf16(acc * 1.7320508f * scale);
  }
  return out;
}

float Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median ms of fn() over iters launches after 3 warm-ups, CUDA events.
template <class Fn>
float TimeMs(cudaStream_t stream, int iters, Fn fn) {
  for (int w = 0; w < 3; ++w) fn();
  std::vector<cudaEvent_t> ev(iters + 1);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  CK(cudaEventRecord(ev[0], stream));
  for (int it = 0; it < iters; ++it) {
    fn();
    CK(cudaEventRecord(ev[it + 1], stream));
  }
  CK(cudaStreamSynchronize(stream));
  std::vector<float> ms(iters);
  for (int it = 0; it < iters; ++it) CK(cudaEventElapsedTime(&ms[it], ev[it], ev[it + 1]));
  for (auto& e : ev) CK(cudaEventDestroy(e));
  return Median(ms);
}

// Strided sample of a bf16 device buffer, as floats.
std::vector<float> Sample(const void* p, size_t n) {
  std::vector<uint16_t> h(n);
  CK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out;
  for (size_t i = 0; i < n; i += 31) out.push_back(FromBf16(h[i]));
  return out;
}
double Rel(const std::vector<float>& x, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(x[i])) return INFINITY;
    num += (x[i] - ref[i]) * (double)(x[i] - ref[i]);
    den += ref[i] * (double)ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0);
}

// --sweep: every variant of one case (a: the default variants, buffers set).
bool Sweep(loom::kernels::cuda::attention::FlashAttnArgs a, const char* tag, double fwd_flops, int iters, size_t n,
           int64_t ws_bytes) {
  using namespace loom::kernels::cuda;
  bool ok = true;
  int best_f = 0;
  float best_f_ms = 1e30f;
  for (int v = 1; v <= attention::FlashForwardVariants(); ++v) {
    a.fwd_variant = v;
    const float ms =
        TimeMs(static_cast<cudaStream_t>(a.stream), iters, [&] { CS(attention::FlashAttentionForward(a)); });
    std::printf("SWEEP %s fwd v=%d [%s] ms=%.3f tflops=%.1f\n", tag, v,
                attention::FlashForwardVariantName(v, a.head_dim).c_str(), ms, fwd_flops / (ms * 1e-3) / 1e12);
    if (ms < best_f_ms) best_f_ms = ms, best_f = v;
  }
  a.fwd_variant = 0;
  CS(attention::FlashAttentionForward(a));
  a.bwd_variant = a.dq_variant = 0;
  CS(attention::FlashAttentionBackward(a));
  CK(cudaStreamSynchronize(static_cast<cudaStream_t>(a.stream)));
  const std::vector<float> rq = Sample(a.dq, n), rk = Sample(a.dk, n), rv = Sample(a.dv, n);
  float best_b_ms = 1e30f, best_q_ms = 1e30f;
  int best_b = 0, best_q = 0;
  for (int pass = 0; pass < 2; ++pass) {
    const int count = pass == 0 ? attention::FlashBackwardVariants() : attention::FlashDqVariants();
    for (int v = 1; v <= count; ++v) {
      a.bwd_variant = pass == 0 ? v : 0;
      a.dq_variant = pass == 1 ? v : 0;
      if (attention::FlashAttentionBwdWorkspaceBytes(a) > ws_bytes) continue;  // the stored-dS variant past its limit
      const float ms =
          TimeMs(static_cast<cudaStream_t>(a.stream), iters, [&] { CS(attention::FlashAttentionBackward(a)); });
      CK(cudaStreamSynchronize(static_cast<cudaStream_t>(a.stream)));
      const double eq = Rel(Sample(a.dq, n), rq), ek = Rel(Sample(a.dk, n), rk), ev = Rel(Sample(a.dv, n), rv);
      const bool good = eq < 1e-2 && ek < 1e-2 && ev < 1e-2;
      ok = ok && good;
      std::printf("SWEEP %s bwd=%d dq=%d [%s] bwd_ms=%.3f bwd_tflops=%.1f rel_dq=%.1e rel_dk=%.1e rel_dv=%.1e %s\n",
                  tag, a.bwd_variant, a.dq_variant,
                  attention::FlashBackwardVariantName(a.bwd_variant, a.dq_variant, a.head_dim).c_str(), ms,
                  2.5 * fwd_flops / (ms * 1e-3) / 1e12, eq, ek, ev, good ? "CHECK_OK" : "CHECK_FAILED");
      if (pass == 0 && ms < best_b_ms) best_b_ms = ms, best_b = v;
      if (pass == 1 && ms < best_q_ms) best_q_ms = ms, best_q = v;
    }
  }
  std::printf("BEST %s fwd=%d (%.3f ms) bwd=%d (%.3f ms with dq default) dq=%d (%.3f ms with bwd default)\n", tag, best_f,
              best_f_ms, best_b, best_b_ms, best_q, best_q_ms);
  std::fflush(stdout);
  return ok;
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
  bool deterministic = false, sweep = false, dispatch = false, cudnn = true;
  int fwd_v = 0, bwd_v = 0, dq_v = 0;
  std::vector<std::string> only;  // --only=IMPL,...: measure just these rows
  float data_scale = 1.f;         // --data-scale=X: inputs' standard deviation
  int idle_ms = 300;              // --idle-ms=N: the card idles this long before each timed loop
  loom::kernels::cuda::attention::CudnnSdpaOptions cudnn_options;
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
    } else if (std::strcmp(argv[i], "--dispatch") == 0) {
      dispatch = true;
    } else if (std::strcmp(argv[i], "--no-cudnn") == 0) {
      cudnn = false;
    } else if (std::strcmp(argv[i], "--sweep") == 0) {
      sweep = true;
    } else if (std::strncmp(argv[i], "--fwd=", 6) == 0) {
      fwd_v = std::atoi(argv[i] + 6);
    } else if (std::strncmp(argv[i], "--bwd=", 6) == 0) {
      bwd_v = std::atoi(argv[i] + 6);
    } else if (std::strncmp(argv[i], "--idle-ms=", 10) == 0) {
      idle_ms = std::max(0, std::atoi(argv[i] + 10));
    } else if (std::strncmp(argv[i], "--data-scale=", 13) == 0) {
      data_scale = static_cast<float>(std::atof(argv[i] + 13));
    } else if (std::strncmp(argv[i], "--only=", 7) == 0) {
      for (const char* p = argv[i] + 7; *p;) {
        const char* e = std::strchr(p, ',');
        only.emplace_back(p, e ? e - p : std::strlen(p));
        p = e ? e + 1 : p + std::strlen(p);
      }
    } else if (std::strncmp(argv[i], "--dq=", 5) == 0) {
      dq_v = std::atoi(argv[i] + 5);
    } else if (std::strncmp(argv[i], "--cudnn-configs=", 16) == 0) {
      cudnn_options.max_engine_configs = std::atoi(argv[i] + 16);
    } else if (std::strcmp(argv[i], "--cudnn-verbose") == 0) {
      cudnn_options.verbose = true;
    } else {
      std::fprintf(stderr,
                   "usage: sdpa_bench [--iters=N] [--shape=B,H,T,D] [--fwd=V] [--bwd=V] [--dq=V] [--deterministic] "
                   "[--sweep] [--dispatch] [--no-cudnn] [--only=IMPL,...] [--data-scale=X] [--idle-ms=N] "
                   "[--cudnn-configs=N] [--cudnn-verbose]\n");
      return 2;
    }
  }
  if (absl::Status st = loom::kernels::cuda::attention::SetCudnnSdpaOptions(cudnn_options); !st.ok()) {
    std::fprintf(stderr, "sdpa_bench: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("sdpa_bench: no GPU\n");
    return 3;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("sdpa_bench on %s: loom flash attention bf16, %d timed iterations (median); cuDNN %s\n", prop.name, iters,
              loom::kernels::cuda::attention::CudnnVersionString().c_str());
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  bool all_ok = true;
  for (const Shape& s : shapes) {
    const size_t n = static_cast<size_t>(s.b * s.h * s.t * s.d);
    std::vector<uint16_t> hq = RandomBf16(n, 1, data_scale), hk = RandomBf16(n, 2, data_scale),
                          hv = RandomBf16(n, 3, data_scale), hdo = RandomBf16(n, 4, data_scale);
    void *q, *k, *v, *o, *dout, *dq, *dk, *dv, *ws;
    int64_t ws_bytes = 0;
    float* lse;
    for (void** p : {&q, &k, &v, &o, &dout, &dq, &dk, &dv}) CK(cudaMalloc(p, n * 2));
    CK(cudaMalloc(&lse, static_cast<size_t>(s.b * s.h * s.t) * 4));
    CK(cudaMemcpy(q, hq.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(k, hk.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(v, hv.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dout, hdo.data(), n * 2, cudaMemcpyHostToDevice));
    for (bool causal : {false, true}) {
      loom::kernels::cuda::attention::FlashAttnArgs a;
      a.dtype = loom::DType::kBF16;
      a.batch = s.b, a.heads = a.kv_heads = s.h, a.seq_q = a.seq_k = s.t, a.head_dim = s.d;
      a.causal = causal;
      a.deterministic = deterministic;
      a.fwd_variant = fwd_v, a.bwd_variant = bwd_v, a.dq_variant = dq_v;
      a.q = q, a.k = k, a.v = v, a.o = o, a.lse = lse;
      a.dout = dout, a.dq = dq, a.dk = dk, a.dv = dv;
      a.stream = stream;
      {
        loom::kernels::cuda::attention::SdpaArgs sa;
        sa.batch = s.b, sa.heads = sa.kv_heads = s.h, sa.seq_q = sa.seq_k = s.t, sa.head_dim = s.d;
        ws_bytes = std::max<int64_t>(loom::kernels::cuda::attention::FlashAttentionBwdWorkspaceBytes(a),
                                     loom::kernels::cuda::attention::SdpaBackwardWorkspaceBytes(sa));
        CK(cudaMalloc(&ws, ws_bytes));
      }
      a.workspace = ws;
      const double fwd_flops = 4.0 * s.b * s.h * static_cast<double>(s.t) * s.t * s.d / (causal ? 2 : 1);
      if (sweep) {
        char tag[96];
        std::snprintf(tag, sizeof(tag), "B=%lld H=%lld T=%lld D=%lld causal=%d", static_cast<long long>(s.b),
                      static_cast<long long>(s.h), static_cast<long long>(s.t), static_cast<long long>(s.d),
                      causal ? 1 : 0);
        all_ok = Sweep(a, tag, fwd_flops, iters, n, ws_bytes) && all_ok;
        CK(cudaFree(ws));
        continue;
      }
      // Times forward and forward+backward through fwd/bwd, and the inference
      // forward (no lse) through fwd_inf when given; self-checks, prints RESULT.
      auto measure = [&](const char* impl, const std::function<absl::Status()>& fwd,
                         const std::function<absl::Status()>& bwd, const std::function<std::string()>& what_f,
                         const std::function<std::string()>& what_b, const std::function<absl::Status()>& fwd_inf) {
        if (!only.empty() && std::find(only.begin(), only.end(), std::string(impl)) == only.end()) return;
        // The card's clocks under a power cap depend on what ran just before;
        // every timed loop (here and in torch_sdpa.py) starts from the same
        // idle pause, so neither side inherits the other's load.
        auto idle = [&] {
          CK(cudaStreamSynchronize(stream));
          std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
        };
        std::vector<cudaEvent_t> ev(iters + 1);
        for (auto& e : ev) CK(cudaEventCreate(&e));
        // Pass 0: forward; 1: forward+backward; 2: backward alone (on the
        // forward's outputs); 3: the inference forward.
        float ms_pass[4] = {0, 0, 0, 0}, host_ms[4] = {0, 0, 0, 0};  // device median; host enqueue mean
        auto step = [&](int pass) {
          if (pass == 3) {
            CS(fwd_inf());
            return;
          }
          if (pass != 2) CS(fwd());
          if (pass != 0) CS(bwd());
        };
        // An inference forward that fails to launch (a backend without that
        // graph) fails this row's check; the other passes still run and print.
        bool inf_ok = static_cast<bool>(fwd_inf);
        if (inf_ok) {
          const absl::Status st = fwd_inf();
          if (!st.ok()) {
            std::fprintf(stderr, "%s: inference forward failed: %s\n", impl, std::string(st.message()).c_str());
            inf_ok = false;
          }
        }
        for (int pass = 0; pass < (inf_ok ? 4 : 3); ++pass) {
          for (int w = 0; w < 3; ++w) step(pass);
          idle();
          CK(cudaEventRecord(ev[0], stream));
          const auto t0 = std::chrono::steady_clock::now();
          for (int it = 0; it < iters; ++it) {
            step(pass);
            CK(cudaEventRecord(ev[it + 1], stream));
          }
          host_ms[pass] = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
          CK(cudaStreamSynchronize(stream));
          std::vector<float> ms(iters);
          for (int it = 0; it < iters; ++it) CK(cudaEventElapsedTime(&ms[it], ev[it], ev[it + 1]));
          ms_pass[pass] = Median(ms);
        }
        const float ms_fwd = ms_pass[0], ms_fb = ms_pass[1], ms_bwd = ms_pass[2];
        // Forward+backward captured once as a CUDA graph and replayed: no host
        // gaps between launches (-1: the path does not capture).
        float ms_graph = -1;
        {
          cudaGraph_t graph = nullptr;
          cudaGraphExec_t exec = nullptr;
          bool ok = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
          const bool launched = ok && fwd().ok() && bwd().ok();
          ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess && launched;
          ok = ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
          if (ok) {
            for (int w = 0; w < 3; ++w) CK(cudaGraphLaunch(exec, stream));
            idle();
            CK(cudaEventRecord(ev[0], stream));
            for (int it = 0; it < iters; ++it) {
              CK(cudaGraphLaunch(exec, stream));
              CK(cudaEventRecord(ev[it + 1], stream));
            }
            CK(cudaStreamSynchronize(stream));
            std::vector<float> ms(iters);
            for (int it = 0; it < iters; ++it) CK(cudaEventElapsedTime(&ms[it], ev[it], ev[it + 1]));
            ms_graph = Median(ms);
          }
          cudaGetLastError();
          if (exec != nullptr) cudaGraphExecDestroy(exec);
          if (graph != nullptr) cudaGraphDestroy(graph);
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
        const bool ok = rel < 1e-2 && lse_err < 1e-2 && finite && inf_ok == static_cast<bool>(fwd_inf);
        all_ok = all_ok && ok;
        const double tf_fwd = fwd_flops / (ms_fwd * 1e-3) / 1e12;
        const double tf_fb = 3.5 * fwd_flops / (ms_fb * 1e-3) / 1e12;
        char inf[96] = "";
        if (inf_ok)
          std::snprintf(inf, sizeof(inf), " fwdinf_ms=%.3f fwdinf_tflops=%.1f", ms_pass[3],
                        fwd_flops / (ms_pass[3] * 1e-3) / 1e12);
        else if (fwd_inf)
          std::snprintf(inf, sizeof(inf), " fwdinf_ms=failed");
        std::printf("RESULT impl=%s B=%lld H=%lld T=%lld D=%lld causal=%d fwd_ms=%.3f fwd_tflops=%.1f%s "
                    "fwdbwd_ms=%.3f fwdbwd_tflops=%.1f bwd_ms=%.3f graph_fwdbwd_ms=%.3f host_ms=%.3f/%.3f/%.3f check_o_rel=%.2e check_lse_abs=%.2e grads_finite=%d %s kernels=[%s | %s]\n",
                    impl, static_cast<long long>(s.b), static_cast<long long>(s.h), static_cast<long long>(s.t),
                    static_cast<long long>(s.d), causal ? 1 : 0, ms_fwd, tf_fwd, inf, ms_fb, tf_fb, ms_bwd, ms_graph, host_ms[0], host_ms[1], host_ms[2], rel, lse_err,
                    finite ? 1 : 0, ok ? "CHECK_OK" : "CHECK_FAILED", what_f().c_str(), what_b().c_str());
        std::fflush(stdout);
      };
      measure(
          deterministic ? "loom_flash_det" : "loom_flash",
          [&] { return loom::kernels::cuda::attention::FlashAttentionForward(a); },
          [&] { return loom::kernels::cuda::attention::FlashAttentionBackward(a); },
          [&] { return loom::kernels::cuda::attention::FlashForwardVariantName(fwd_v, s.d); },
          [&] {
            return loom::kernels::cuda::attention::FlashBackwardVariantName(
                loom::kernels::cuda::attention::FlashResolvedBackwardVariant(a), dq_v, s.d);
          },
          [&] {
            loom::kernels::cuda::attention::FlashAttnArgs ai = a;
            ai.lse = nullptr;
            return loom::kernels::cuda::attention::FlashAttentionForward(ai);
          });
      // Loom's flash with the other backward schemes too, where the default is
      // not one: stored dS (when the workspace holds it) and, unless
      // --deterministic, atomic dQ.
      for (int bv :
           {loom::kernels::cuda::attention::kFlashBwdDsVariant, loom::kernels::cuda::attention::kFlashBwdWgmmaDsVariant,
            loom::kernels::cuda::attention::kFlashBwdWgmmaDs1Variant,
            loom::kernels::cuda::attention::kFlashBwdAtomicVariant,
            loom::kernels::cuda::attention::kFlashBwdWsAtomicVariant}) {
        loom::kernels::cuda::attention::FlashAttnArgs aa = a;
        aa.bwd_variant = bv;
        if (bwd_v != 0 || bv == loom::kernels::cuda::attention::FlashResolvedBackwardVariant(a) ||
            (deterministic && loom::kernels::cuda::attention::FlashBwdAtomicDq(bv)) ||
            loom::kernels::cuda::attention::FlashAttentionBwdWorkspaceBytes(aa) > ws_bytes)
          continue;
        measure(
            bv == loom::kernels::cuda::attention::kFlashBwdDsVariant         ? "loom_flash_ds"
            : bv == loom::kernels::cuda::attention::kFlashBwdWgmmaDsVariant  ? "loom_flash_wgmma_ds"
            : bv == loom::kernels::cuda::attention::kFlashBwdWgmmaDs1Variant ? "loom_flash_wgmma_ds1"
            : bv == loom::kernels::cuda::attention::kFlashBwdWsAtomicVariant ? "loom_flash_ws_atomic"
                                                                             : "loom_flash_atomic",
            [&] { return loom::kernels::cuda::attention::FlashAttentionForward(aa); },
            [&] { return loom::kernels::cuda::attention::FlashAttentionBackward(aa); },
            [&] { return loom::kernels::cuda::attention::FlashForwardVariantName(fwd_v, s.d); },
            [&] { return loom::kernels::cuda::attention::FlashBackwardVariantName(aa.bwd_variant, 0, s.d); }, {});
      }
      // The pipelined wgmma forward (default backward) where it is not the default.
      if (fwd_v == 0 && loom::kernels::cuda::attention::FlashDefaultForwardVariant(s.d) !=
                            loom::kernels::cuda::attention::kFlashFwdWgmmaPipeVariant) {
        loom::kernels::cuda::attention::FlashAttnArgs aa = a;
        aa.fwd_variant = loom::kernels::cuda::attention::kFlashFwdWgmmaPipeVariant;
        measure(
            "loom_flash_wgmma", [&] { return loom::kernels::cuda::attention::FlashAttentionForward(aa); },
            [&] { return loom::kernels::cuda::attention::FlashAttentionBackward(aa); },
            [&] { return loom::kernels::cuda::attention::FlashForwardVariantName(aa.fwd_variant, s.d); },
            [&] {
              return loom::kernels::cuda::attention::FlashBackwardVariantName(
                  loom::kernels::cuda::attention::FlashResolvedBackwardVariant(aa), 0, s.d);
            },
            {});
      }
      if (cudnn && !deterministic) {
        loom::kernels::cuda::attention::CudnnSdpaArgs ca;
        ca.dtype = loom::DType::kBF16;
        ca.batch = s.b, ca.heads = ca.kv_heads = s.h, ca.seq_q = ca.seq_k = s.t, ca.head_dim = s.d;
        ca.causal = causal;
        ca.q = q, ca.k = k, ca.v = v, ca.o = o, ca.lse = lse;
        ca.dout = dout, ca.dq = dq, ca.dk = dk, ca.dv = dv;
        ca.stream = stream;  // workspace: the caching allocator's
        // First calls build the plans; a failure is reported, not fatal.
        absl::Status st = loom::kernels::cuda::attention::CudnnSdpaForward(ca);
        if (st.ok()) st = loom::kernels::cuda::attention::CudnnSdpaBackward(ca);
        if (st.ok()) st = cudaStreamSynchronize(stream) == cudaSuccess ? absl::OkStatus() : absl::InternalError("sync");
        if (!st.ok()) {
          std::printf("SKIP impl=loom_cudnn B=%lld H=%lld T=%lld D=%lld causal=%d: %s\n", static_cast<long long>(s.b),
                      static_cast<long long>(s.h), static_cast<long long>(s.t), static_cast<long long>(s.d),
                      causal ? 1 : 0, std::string(st.message()).c_str());
        } else {
          measure(
              "loom_cudnn", [&] { return loom::kernels::cuda::attention::CudnnSdpaForward(ca); },
              [&] { return loom::kernels::cuda::attention::CudnnSdpaBackward(ca); },
              [] { return std::string("cudnn fwd"); }, [] { return std::string("cudnn bwd"); },
              [&] {
                loom::kernels::cuda::attention::CudnnSdpaArgs ci = ca;
                ci.lse = nullptr;
                return loom::kernels::cuda::attention::CudnnSdpaForward(ci);
              });
        }
      }
      if (dispatch) {
        loom::kernels::cuda::attention::SdpaArgs sa;
        sa.dtype = loom::DType::kBF16;
        sa.batch = s.b, sa.heads = sa.kv_heads = s.h, sa.seq_q = sa.seq_k = s.t, sa.head_dim = s.d;
        sa.causal = causal;
        sa.deterministic = deterministic;
        sa.q = q, sa.k = k, sa.v = v, sa.o = o, sa.lse = lse;
        sa.dout = dout, sa.dq = dq, sa.dk = dk, sa.dv = dv, sa.workspace = ws;
        sa.stream = stream;
        auto& disp = loom::kernels::cuda::attention::SdpaDispatcher::Global();
        // Tuning happens on the first calls (the warm-up), outside the timed runs.
        loom::kernels::cuda::attention::SdpaArgs si = sa;
        si.lse = nullptr;
        measure(
            "loom_sdpa", [&] { return disp.Forward(sa); }, [&] { return disp.Backward(sa); },
            [&] { return disp.Choice(sa, false) + " / inference: " + disp.Choice(si, false); },
            [&] { return disp.Choice(sa, true); }, [&] { return disp.Forward(si); });
      }
      CK(cudaFree(ws));
    }
    for (void* p : {q, k, v, o, dout, dq, dk, dv}) CK(cudaFree(p));
    CK(cudaFree(lse));
  }
  return all_ok ? 0 : 1;
}
