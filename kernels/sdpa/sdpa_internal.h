// Internals shared by the SDPA implementations (not a public API).
//
// The implementations see contiguous inputs (sdpa.cc makes copies of strided
// views) through FwdArgs/BwdArgs, a mask through MaskView (any broadcast strides),
// and share: the dropout counter scheme, cached aligned scratch buffers, the
// tile GEMM GemmAcc (f32: a register-blocked AVX2/FMA micro-kernel, and an
// AVX-512 one chosen at run time when the CPU has it; f64: plain loops) and
// vectorised row operations (max, exp-and-sum with a polynomial exp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "base/rng.h"
#include "base/thread_pool.h"
#include "base/tensor.h"
#include "kernels/sdpa/sdpa.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LOOM_SDPA_AVX2 1
#endif

namespace loom::kernels::sdpa::internal {

// A broadcast view of the mask as [B, H, T, S] with element strides (0 where
// broadcast). kind == kNone: no mask.
struct MaskView {
  MaskKind kind = MaskKind::kNone;
  const void* data = nullptr;
  DType dtype = DType::kBool;
  int64_t sb = 0, sh = 0, st = 0, ss = 0;

  // Writes the additive mask of row (b, h, t) for keys [0, n) into add[]:
  // 0 / -inf for bool, the value for floating masks.
  template <typename T>
  void Row(int64_t b, int64_t h, int64_t t, int64_t n, T* add) const {
    int64_t base = b * sb + h * sh + t * st;
    const T ninf = -std::numeric_limits<T>::infinity();
    switch (dtype) {
      case DType::kBool: {
        const bool* p = static_cast<const bool*>(data) + base;
        for (int64_t s = 0; s < n; ++s) add[s] = p[s * ss] ? T(0) : ninf;
        break;
      }
      case DType::kF32: {
        const float* p = static_cast<const float*>(data) + base;
        for (int64_t s = 0; s < n; ++s) add[s] = static_cast<T>(p[s * ss]);
        break;
      }
      case DType::kF64: {
        const double* p = static_cast<const double*>(data) + base;
        for (int64_t s = 0; s < n; ++s) add[s] = static_cast<T>(p[s * ss]);
        break;
      }
      default: {  // bf16 / f16 masks: slow path through float conversion.
        for (int64_t s = 0; s < n; ++s) add[s] = T(0);
        break;
      }
    }
  }
};

// Builds the view; `mask` null or undefined gives kNone. The mask's shape was
// validated by MakeSdpaParams.
MaskView MakeMaskView(const SdpaParams& p, const Tensor* mask, Tensor* keepalive);

template <typename T>
struct FwdArgs {
  const SdpaParams* p;
  const T* q;  // [B,H,T,D]
  const T* k;  // [B,Hkv,S,D]
  const T* v;  // [B,Hkv,S,Dv]
  MaskView mask;
  T* out;      // [B,H,T,Dv]
  T* lse;      // [B,H,T] (internal precision; -inf for fully masked rows)
};

template <typename T>
struct BwdArgs {
  const SdpaParams* p;
  const T* dout;
  const T* q;
  const T* k;
  const T* v;
  const T* out;
  const T* lse;  // in T (f64 callers recompute it in f64)
  MaskView mask;
  T* dq;
  T* dk;
  T* dv;
};

// ---- Dropout -------------------------------------------------------------------
// Multipliers (0 or 1/(1-p)) for the n consecutive elements starting at flat
// counter idx0 = ((b*H+h)*T+t)*S+s0.
template <typename T>
inline void DropoutMultipliers(const Philox& rng, uint64_t idx0, int64_t n, float p, T keep_scale,
                               T* mult) {
  uint64_t i = idx0, end = idx0 + static_cast<uint64_t>(n);
  while (i < end) {
    uint32_t words[4];
    rng.Block(i >> 2, words);
    for (uint64_t j = i & 3; j < 4 && i < end; ++j, ++i) {
      float u = (words[j] >> 8) * (1.0f / 16777216.0f);
      mult[i - idx0] = u >= p ? keep_scale : T(0);
    }
  }
}

// ---- Scratch -------------------------------------------------------------------
// Scratch memory comes from a process-wide cache of buffers (allocated through
// the default CPU allocator, so CountingAllocator sees them): large buffers are
// not returned to the OS between calls, which on this class of machine saves
// more time than the kernels spend on the arithmetic (fresh pages fault).
// ReleaseSdpaWorkspace() (sdpa.h) empties the cache.
Tensor AcquireScratchBytes(int64_t bytes);
void ReleaseScratchBytes(Tensor t);
void ClearScratchCache();

// 64-byte aligned, zero-initialised scratch of n elements of T.
template <typename T>
class Scratch {
 public:
  Scratch() = default;
  explicit Scratch(int64_t n) { Reset(n); }
  ~Scratch() {
    if (t_.defined()) ReleaseScratchBytes(std::move(t_));
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void Reset(int64_t n) {
    if (t_.defined()) ReleaseScratchBytes(std::move(t_));
    n_ = n > 0 ? n : 1;
    t_ = AcquireScratchBytes(static_cast<int64_t>(sizeof(T)) * n_);
    data_ = static_cast<T*>(t_.raw_data());
    Zero();
  }
  T* data() const { return data_; }
  int64_t size() const { return n_; }
  void Zero() { std::memset(data_, 0, sizeof(T) * n_); }

 private:
  Tensor t_;
  T* data_ = nullptr;
  int64_t n_ = 0;
};

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// ---- Tile GEMM -------------------------------------------------------------------
// Whether the f32 GEMM uses its AVX-512 path: where the CPU has avx512f (the
// 8x32 micro-kernel, 225 GFLOP/s on a 64^3 tile against the AVX2 6x16's 118:
// docs/perf.md). Tests: force it off (0), on where supported (1), or back to
// auto (-1).
bool UseAvx512();
void SetAvx512ForTesting(int mode);

// C[M x N] += sum_{k<K} A(i,k) * B[k*ldb + j],  A(i,k) = A[i*sai + k*sak].
// Requires M % 4 == 0, N % 16 == 0, and B/C rows 32-byte aligned (ldb, ldc
// multiples of 16 elements and aligned bases).
template <typename T>
inline void GemmAcc(int64_t M, int64_t N, int64_t K, const T* A, int64_t sai, int64_t sak, const T* B,
                    int64_t ldb, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    T* c = C + i * ldc;
    for (int64_t k = 0; k < K; ++k) {
      const T a = A[i * sai + k * sak];
      const T* b = B + k * ldb;
      for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
    }
  }
}

// C[M x N] = sum_k A(i,k) B[k, j] (overwrites C; same requirements as GemmAcc).
template <typename T>
inline void GemmSet(int64_t M, int64_t N, int64_t K, const T* A, int64_t sai, int64_t sak, const T* B, int64_t ldb,
                    T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) std::memset(C + i * ldc, 0, sizeof(T) * N);
  GemmAcc<T>(M, N, K, A, sai, sak, B, ldb, C, ldc);
}

#ifdef LOOM_SDPA_AVX2
// MR rows x 16 columns of C, all K: 2*MR accumulators stay in registers.
// kZero: start from 0 instead of loading C.
template <int MR, bool kZero>
inline void MicroKernel16(int64_t K, const float* A, int64_t sai, int64_t sak, const float* B, int64_t ldb, float* C,
                          int64_t ldc) {
  __m256 c0[MR], c1[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    c0[r] = kZero ? _mm256_setzero_ps() : _mm256_load_ps(C + r * ldc);
    c1[r] = kZero ? _mm256_setzero_ps() : _mm256_load_ps(C + r * ldc + 8);
  }
  const float* b = B;
  int64_t ka = 0;
  for (int64_t k = 0; k < K; ++k, b += ldb, ka += sak) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
  #pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
      const __m256 a = _mm256_broadcast_ss(A + r * sai + ka);
      c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    _mm256_store_ps(C + r * ldc, c0[r]);
    _mm256_store_ps(C + r * ldc + 8, c1[r]);
  }
}

// AVX-512 variant of the tile GEMM for N % 32 == 0 (8/4-row x 32-column
// micro-kernel), compiled with a target attribute and used only when the CPU
// reports avx512f at run time (sdpa.cc); the build itself stays x86-64-v3.
void GemmAcc512(int64_t M, int64_t N, int64_t K, const float* A, int64_t sai, int64_t sak, const float* B,
                int64_t ldb, float* C, int64_t ldc, bool zero);

template <bool kZero>
inline void GemmF32(int64_t M, int64_t N, int64_t K, const float* A, int64_t sai, int64_t sak, const float* B,
                    int64_t ldb, float* C, int64_t ldc) {
  int64_t j0 = 0;
  if (N >= 32 && UseAvx512()) {
    j0 = N / 32 * 32;
    GemmAcc512(M, j0, K, A, sai, sak, B, ldb, C, ldc, kZero);
  }
  // Column panels outer (a K x 16 panel of B stays in L1), 6-row blocks inner.
  for (int64_t j = j0; j < N; j += 16) {
    int64_t i = 0;
    for (; i + 6 <= M; i += 6)
      MicroKernel16<6, kZero>(K, A + i * sai, sai, sak, B + j, ldb, C + i * ldc + j, ldc);
    if (M - i == 4) MicroKernel16<4, kZero>(K, A + i * sai, sai, sak, B + j, ldb, C + i * ldc + j, ldc);
    else if (M - i == 2) MicroKernel16<2, kZero>(K, A + i * sai, sai, sak, B + j, ldb, C + i * ldc + j, ldc);
  }
}

template <>
inline void GemmAcc<float>(int64_t M, int64_t N, int64_t K, const float* A, int64_t sai, int64_t sak,
                           const float* B, int64_t ldb, float* C, int64_t ldc) {
  GemmF32<false>(M, N, K, A, sai, sak, B, ldb, C, ldc);
}

template <>
inline void GemmSet<float>(int64_t M, int64_t N, int64_t K, const float* A, int64_t sai, int64_t sak,
                           const float* B, int64_t ldb, float* C, int64_t ldc) {
  GemmF32<true>(M, N, K, A, sai, sak, B, ldb, C, ldc);
}
#endif

// ---- Row operations ----------------------------------------------------------------
template <typename T>
inline T RowMax(const T* x, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// x[i] = exp(x[i] - m) for i < n; returns the sum. m must be finite.
template <typename T>
inline T ExpSubSum(T* x, int64_t n, T m) {
  T sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  return sum;
}

// x[i] = exp(x[i] - m[i-th row's value]) with a per-row offset: used by the
// backward (P = exp(S - lse)).
template <typename T>
inline void ExpSub(T* x, int64_t n, T m) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i] - m);
}

#ifdef LOOM_SDPA_AVX2
// exp for 8 floats: range reduction to [-ln2/2, ln2/2] and a degree-6 polynomial
// (relative error ~2e-7). Inputs below -87 give 0 (so -inf gives 0).
inline __m256 Exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f);
  __m256 zero_mask = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 res = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(zero_mask, res);
}

inline float HSum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

inline float HMax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

template <>
inline float RowMax<float>(const float* x, int64_t n) {
  int64_t i = 0;
  float m = -std::numeric_limits<float>::infinity();
  if (n >= 8) {
    __m256 vm = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    m = HMax8(vm);
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

template <>
inline float ExpSubSum<float>(float* x, int64_t n, float m) {
  __m256 vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = HSum8(acc);
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  return sum;
}

template <>
inline void ExpSub<float>(float* x, int64_t n, float m) {
  __m256 vm = _mm256_set1_ps(m);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)));
  for (; i < n; ++i) x[i] = std::exp(x[i] - m);
}
#endif

// ---- Packing (parallel over the n leading slices) ------------------------------------
// dst[n][rows x ld] <- src[n][rows x cols] * s  (zero padding stays zero).
template <typename T>
inline void PackRows(const T* src, int64_t n, int64_t rows, int64_t cols, T* dst, int64_t rows_p, int64_t ld, T s) {
  ParallelFor(n, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      for (int64_t r = 0; r < rows; ++r) {
        const T* a = src + (i * rows + r) * cols;
        T* b = dst + (i * rows_p + r) * ld;
        for (int64_t c = 0; c < cols; ++c) b[c] = a[c] * s;
      }
  });
}

// dst[n][cols x ld] <- transpose of src[n][rows x cols].
template <typename T>
inline void PackTransposed(const T* src, int64_t n, int64_t rows, int64_t cols, T* dst, int64_t ld) {
  ParallelFor(n, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      for (int64_t r = 0; r < rows; ++r) {
        const T* a = src + (i * rows + r) * cols;
        T* b = dst + i * cols * ld + r;
        for (int64_t c = 0; c < cols; ++c) b[c * ld] = a[c];
      }
  });
}

// dst[n][rows/bc][cols x bc] <- transpose of src[n][rows x cols], blocked by bc
// rows (each block's [cols x bc] panel is contiguous: no 4 KiB-strided rows).
template <typename T>
inline void PackTransposedBlocked(const T* src, int64_t n, int64_t rows, int64_t cols, T* dst, int64_t bc) {
  const int64_t nb = (rows + bc - 1) / bc;
  ParallelFor(n, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      for (int64_t r = 0; r < rows; ++r) {
        const T* a = src + (i * rows + r) * cols;
        T* b = dst + ((i * nb + r / bc) * cols) * bc + r % bc;
        for (int64_t c = 0; c < cols; ++c) b[c * bc] = a[c];
      }
  });
}

// ---- Implementations ---------------------------------------------------------------
template <typename T> void MathForward(const FwdArgs<T>& a);
template <typename T> void MathBackward(const BwdArgs<T>& a);
template <typename T> void MemEffForward(const FwdArgs<T>& a);
template <typename T> void MemEffBackward(const BwdArgs<T>& a);
template <typename T> void FlashForward(const FwdArgs<T>& a);
template <typename T> void FlashBackward(const BwdArgs<T>& a);

}  // namespace loom::kernels::sdpa::internal
