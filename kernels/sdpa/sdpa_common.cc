// Shared SDPA machinery: the scratch-buffer cache, the AVX-512 tile GEMM
// (runtime-dispatched) and the mask view. See sdpa_internal.h.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "kernels/sdpa/sdpa_internal.h"

namespace loom::kernels::sdpa {

namespace internal {

namespace {
std::mutex g_scratch_mu;
std::vector<Tensor>* g_scratch = new std::vector<Tensor>();  // free buffers
constexpr size_t kMaxCachedBuffers = 32;
}  // namespace

Tensor AcquireScratchBytes(int64_t bytes) {
  {
    std::lock_guard<std::mutex> l(g_scratch_mu);
    // Best fit among cached buffers that are not more than 2x (+64 KiB) too big.
    int best = -1;
    for (size_t i = 0; i < g_scratch->size(); ++i) {
      int64_t have = static_cast<int64_t>((*g_scratch)[i].nbytes());
      if (have >= bytes && have <= 2 * bytes + (64 << 10) &&
          (best < 0 || have < static_cast<int64_t>((*g_scratch)[best].nbytes())))
        best = static_cast<int>(i);
    }
    if (best >= 0) {
      Tensor t = std::move((*g_scratch)[best]);
      g_scratch->erase(g_scratch->begin() + best);
      return t;
    }
  }
  return Tensor::MustEmpty({bytes}, DType::kBool);
}

void ClearScratchCache() {
  std::lock_guard<std::mutex> l(g_scratch_mu);
  g_scratch->clear();
}

void ReleaseScratchBytes(Tensor t) {
  std::lock_guard<std::mutex> l(g_scratch_mu);
  g_scratch->push_back(std::move(t));
  if (g_scratch->size() > kMaxCachedBuffers) {
    // Drop the smallest: large buffers are the expensive ones to re-fault.
    auto it = std::min_element(g_scratch->begin(), g_scratch->end(),
                               [](const Tensor& a, const Tensor& b) { return a.nbytes() < b.nbytes(); });
    g_scratch->erase(it);
  }
}

#ifdef LOOM_SDPA_AVX2
namespace {
std::atomic<int> g_avx512_mode{-1};

template <int MR, bool kZero>
__attribute__((target("avx512f"))) inline void MicroKernel32(int64_t K, const float* A, int64_t sai, int64_t sak,
                                                             const float* B, int64_t ldb, float* C, int64_t ldc) {
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    c0[r] = kZero ? _mm512_setzero_ps() : _mm512_loadu_ps(C + r * ldc);
    c1[r] = kZero ? _mm512_setzero_ps() : _mm512_loadu_ps(C + r * ldc + 16);
  }
  const float* b = B;
  int64_t ka = 0;
  for (int64_t k = 0; k < K; ++k, b += ldb, ka += sak) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 a = _mm512_set1_ps(A[r * sai + ka]);
      c0[r] = _mm512_fmadd_ps(a, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(a, b1, c1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    _mm512_storeu_ps(C + r * ldc, c0[r]);
    _mm512_storeu_ps(C + r * ldc + 16, c1[r]);
  }
}
}  // namespace

bool UseAvx512() {
  static const bool supported = __builtin_cpu_supports("avx512f");
  const int mode = g_avx512_mode.load(std::memory_order_relaxed);
  return mode < 0 ? supported : (mode == 1 && __builtin_cpu_supports("avx512f"));
}

void SetAvx512ForTesting(int mode) { g_avx512_mode.store(mode); }

template <bool kZero>
__attribute__((target("avx512f"))) void Gemm512(int64_t M, int64_t N, int64_t K, const float* A, int64_t sai,
                                                int64_t sak, const float* B, int64_t ldb, float* C, int64_t ldc) {
  for (int64_t j = 0; j < N; j += 32) {
    int64_t i = 0;
    for (; i + 8 <= M; i += 8) MicroKernel32<8, kZero>(K, A + i * sai, sai, sak, B + j, ldb, C + i * ldc + j, ldc);
    if (M - i == 4) MicroKernel32<4, kZero>(K, A + i * sai, sai, sak, B + j, ldb, C + i * ldc + j, ldc);
  }
}

void GemmAcc512(int64_t M, int64_t N, int64_t K, const float* A, int64_t sai, int64_t sak, const float* B,
                int64_t ldb, float* C, int64_t ldc, bool zero) {
  if (zero) Gemm512<true>(M, N, K, A, sai, sak, B, ldb, C, ldc);
  else Gemm512<false>(M, N, K, A, sai, sak, B, ldb, C, ldc);
}
#else
bool UseAvx512() { return false; }
void SetAvx512ForTesting(int) {}
#endif

MaskView MakeMaskView(const SdpaParams& p, const Tensor* mask, Tensor* keepalive) {
  MaskView m;
  if (mask == nullptr || !mask->defined() || p.mask_kind == MaskKind::kNone) return m;
  auto ex = mask->Expand({p.B, p.H, p.T, p.S});
  Tensor e = ex.ok() ? *ex : *mask;
  *keepalive = e;
  m.kind = p.mask_kind;
  m.dtype = e.dtype();
  m.data = e.raw_data();
  m.sb = e.stride(0);
  m.sh = e.stride(1);
  m.st = e.stride(2);
  m.ss = e.stride(3);
  return m;
}

}  // namespace internal

void ReleaseSdpaWorkspace() { internal::ClearScratchCache(); }

}  // namespace loom::kernels::sdpa
