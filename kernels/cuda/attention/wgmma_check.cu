// GPU check of wgmma.cuh: every product form the wgmma flash forward uses,
// against a host fp64 product, on fresh random bf16 and f16 inputs.
//   SS:  C[64][N] = A[64][128] B[N][128]^T, both K-major SW128 tiles
//        (S = Q K^T, the reduction split over two 64-column panels).
//   RS:  C[64][N] = A[64][128] (registers, mma.sync A layout) V[128][N],
//        V an MN-major SW128 tile read with the transpose bit (O += P V).
// N = 64 and 128. The RS form is also run with the leading and stride byte
// offsets swapped: that row must fail when N spans two panels, which shows
// the check can tell the two layouts apart.
// Prints one line per case and "wgmma_check: N passed, N failed"; returns the
// number failed (wgmma_check_main.cc). Runs only on an sm_90 GPU (the kernels
// are sm_90a code): without one it returns -1 and says why in `why`.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention/wgmma.cuh"

namespace loom::kernels::cuda::attention::wg {
namespace {

constexpr int kK = 128;

// Host-side conversions, and the device-side pair packing of flash_common.cuh.
template <bool kBf16>
using Ty = typename Elem<kBf16>::T;
inline float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float ToF(__half v) { return __half2float(v); }
template <bool kBf16>
Ty<kBf16> FromF(float f) {
  if constexpr (kBf16) return __float2bfloat16(f);
  else return __float2half(f);
}
template <bool kBf16>
__device__ uint32_t PackPair(Ty<kBf16> lo, Ty<kBf16> hi) {
  return Elem<kBf16>::Pack(static_cast<float>(lo), static_cast<float>(hi));  // exact: both already rounded
}

// kMode 0: SS; 1: RS with (lbo, sbo) = (panel, 1024); 2: RS swapped.
template <int N, bool kBf16, int kMode>
__global__ void ProbeKernel(const Ty<kBf16>* a, const Ty<kBf16>* b, float* c) {
  using T = Ty<kBf16>;
  extern __shared__ unsigned char smem_raw[];
  T* sA = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  T* sB = sA + 64 * kK;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  for (int i = tid; i < 64 * kK; i += 128) sA[SwTile<64>(i / kK, i % kK)] = a[i];
  for (int i = tid; i < N * kK; i += 128) {
    if (kMode == 0) sB[SwTile<N>(i / kK, i % kK)] = b[i];  // b is [N][K]
    else sB[SwTile<kK>(i / N, i % N)] = b[i];              // b is [K][N]
  }
  FenceProxyAsync();
  __syncthreads();
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
  const uint32_t a_addr = static_cast<uint32_t>(__cvta_generic_to_shared(sA));
  const uint32_t b_addr = static_cast<uint32_t>(__cvta_generic_to_shared(sB));
  Fence();
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    if (kMode == 0) {
      const uint64_t da = Desc(a_addr + (kk / 4) * 64 * 128 + (kk % 4) * 32, 16, 1024);
      const uint64_t db = Desc(b_addr + (kk / 4) * N * 128 + (kk % 4) * 32, 16, 1024);
      Mma<N, kBf16>::SS(d, da, db, kk > 0);
    } else {
      const int r0 = warp * 16 + g, c0 = kk * 16 + 2 * t;
      uint32_t f[4];
      f[0] = PackPair<kBf16>(a[r0 * kK + c0], a[r0 * kK + c0 + 1]);
      f[1] = PackPair<kBf16>(a[(r0 + 8) * kK + c0], a[(r0 + 8) * kK + c0 + 1]);
      f[2] = PackPair<kBf16>(a[r0 * kK + c0 + 8], a[r0 * kK + c0 + 9]);
      f[3] = PackPair<kBf16>(a[(r0 + 8) * kK + c0 + 8], a[(r0 + 8) * kK + c0 + 9]);
      const uint32_t panel = kK * 128;
      const uint64_t db = kMode == 1 ? Desc(b_addr + kk * 16 * 128, panel, 1024)
                                     : Desc(b_addr + kk * 16 * 128, 1024, panel);
      Mma<N, kBf16>::template RS<1>(d, f, db, kk > 0);
    }
  }
  Commit();
  Wait<0>();
  const int r = warp * 16 + g;
  for (int i = 0; i < N / 8; ++i)
    for (int e = 0; e < 4; ++e) c[(r + (e >> 1) * 8) * N + 8 * i + 2 * t + (e & 1)] = d[4 * i + e];
}

template <int N, bool kBf16, int kMode>
bool RunCase(std::mt19937& rng, int* passed, int* failed) {
  using T = Ty<kBf16>;
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<T> ha(64 * kK), hb(N * kK);
  for (auto& x : ha) x = FromF<kBf16>(nd(rng));
  for (auto& x : hb) x = FromF<kBf16>(nd(rng));
  T *da, *db;
  float* dc;
  cudaMalloc(&da, ha.size() * sizeof(T));
  cudaMalloc(&db, hb.size() * sizeof(T));
  cudaMalloc(&dc, 64 * N * sizeof(float));
  cudaMemcpy(da, ha.data(), ha.size() * sizeof(T), cudaMemcpyHostToDevice);
  cudaMemcpy(db, hb.data(), hb.size() * sizeof(T), cudaMemcpyHostToDevice);
  cudaMemset(dc, 0xFF, 64 * N * sizeof(float));  // NaN poison
  const int smem = (64 + N) * kK * 2 + 1024;
  auto kernel = ProbeKernel<N, kBf16, kMode>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  kernel<<<1, 128, smem>>>(da, db, dc);
  cudaError_t e = cudaDeviceSynchronize();
  std::vector<float> hc(64 * N);
  cudaMemcpy(hc.data(), dc, hc.size() * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  double num = 0, den = 0;
  bool nan = false;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < N; ++j) {
      double ref = 0;
      for (int k = 0; k < kK; ++k) {
        const double bv = kMode == 0 ? ToF(hb[j * kK + k]) : ToF(hb[k * N + j]);
        ref += static_cast<double>(ToF(ha[i * kK + k])) * bv;
      }
      const double out = hc[i * N + j];
      nan |= std::isnan(out);
      num += (out - ref) * (out - ref);
      den += ref * ref;
    }
  const double rel = std::sqrt(num / den);
  const bool ok = e == cudaSuccess && !nan && rel < 1e-4;
  const char* mode = kMode == 0 ? "SS K-major" : kMode == 1 ? "RS MN-major (lbo=panel)" : "RS MN-major (lbo=1024)";
  std::printf("wgmma m64n%dk16 %s %s: rel %.3e%s%s -> %s\n", N, kBf16 ? "bf16" : "f16", mode, rel, nan ? " NaN" : "",
              e != cudaSuccess ? cudaGetErrorString(e) : "", ok ? "ok" : "FAIL");
  // The swapped-offset row is a control: expected to fail when N spans two panels.
  if (kMode == 2) return ok;
  ++*(ok ? passed : failed);
  return ok;
}

}  // namespace

int RunWgmmaCheck(std::string* why) {
  int dev = 0, major = 0;
  cudaGetDevice(&dev);
  const cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e != cudaSuccess || major != 9) {
    *why = e != cudaSuccess ? std::string("no CUDA device: ") + cudaGetErrorString(e)
                            : "device " + std::to_string(dev) + " is sm_" + std::to_string(major) + "x, not sm_90";
    std::printf("wgmma_check: %s\n", why->c_str());
    return -1;
  }
  std::mt19937 rng(1234);
  int passed = 0, failed = 0;
  RunCase<64, true, 0>(rng, &passed, &failed);
  RunCase<128, true, 0>(rng, &passed, &failed);
  RunCase<64, false, 0>(rng, &passed, &failed);
  RunCase<128, false, 0>(rng, &passed, &failed);
  RunCase<64, true, 1>(rng, &passed, &failed);
  RunCase<128, true, 1>(rng, &passed, &failed);
  RunCase<64, false, 1>(rng, &passed, &failed);
  RunCase<128, false, 1>(rng, &passed, &failed);
  const bool control = RunCase<128, true, 2>(rng, &passed, &failed);
  std::printf("wgmma control (swapped offsets over two panels) %s\n",
              control ? "unexpectedly passed" : "failed as it must");
  if (control) ++failed;
  std::printf("wgmma_check: %d passed, %d failed\n", passed, failed);
  return failed;
}

}  // namespace loom::kernels::cuda::attention::wg
