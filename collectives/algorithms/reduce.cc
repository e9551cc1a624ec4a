#include "collectives/algorithms/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#define LOOM_REDUCE_AVX2 1
#endif

#include "absl/strings/str_cat.h"

namespace loom::collectives::algorithms {
namespace {

template <typename T, typename F>
void Apply(void* acc, const void* in, size_t n, F f) {
  // __restrict (acc and in never overlap) plus -O3 on this library let the
  // compiler vectorise every (type, op) pair with AVX2.
  T* __restrict a = static_cast<T*>(acc);
  const T* __restrict b = static_cast<const T*>(in);
  for (size_t i = 0; i < n; ++i) a[i] = f(a[i], b[i]);
}

template <typename T>
void ReduceTyped(ReduceOp op, void* acc, const void* in, size_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return Apply<T>(acc, in, n, [](T x, T y) { return static_cast<T>(x + y); });
    case ReduceOp::kProduct:
      return Apply<T>(acc, in, n, [](T x, T y) { return static_cast<T>(x * y); });
    case ReduceOp::kMin:
      return Apply<T>(acc, in, n, [](T x, T y) { return y < x ? y : x; });
    case ReduceOp::kMax:
      return Apply<T>(acc, in, n, [](T x, T y) { return y > x ? y : x; });
  }
}

#ifdef LOOM_REDUCE_AVX2
// 8 halves <-> 8 floats. bf16: widen by a shift; narrow with round to nearest
// even and quiet NaNs exactly like BF16::FromFloat. f16: F16C (IEEE round to
// nearest even, like F16::FromFloat), NaNs replaced by F16::FromFloat's
// canonical sign|0x7e00.
inline __m256 LoadBF16(const uint16_t* p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
inline void StoreBF16(uint16_t* p, __m256 f) {
  __m256i u = _mm256_castps_si256(f);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  __m256i nan_bits = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));  // quiet: 0x40 after >> 16
  __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                      _mm256_set1_epi32(0x7f800000));
  __m256i r = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, nan_bits, is_nan), 16);
  __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}
inline __m256 LoadF16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline void StoreF16(uint16_t* p, __m256 f) {
  __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  if (!_mm256_testz_ps(nan, nan)) {
    __m128i sign = _mm_and_si128(_mm_srli_epi16(h, 15), _mm_set1_epi16(1));
    __m128i canon = _mm_or_si128(_mm_slli_epi16(sign, 15), _mm_set1_epi16(0x7e00));
    __m256i m32 = _mm256_castps_si256(nan);
    __m128i m16 = _mm_packs_epi32(_mm256_castsi256_si128(m32), _mm256_extracti128_si256(m32, 1));
    h = _mm_blendv_epi8(h, canon, m16);
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
}

template <ReduceOp op>
inline __m256 Combine(__m256 x, __m256 y) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return _mm256_add_ps(x, y);
    case ReduceOp::kProduct: return _mm256_mul_ps(x, y);
    // Scalar: y < x ? y : x (keeps x when either is NaN); vminps(a, b)
    // returns b unless a < b, so min_ps(y, x) matches exactly. Likewise max.
    case ReduceOp::kMin: return _mm256_min_ps(y, x);
    default: return _mm256_max_ps(y, x);
  }
}

// Reduces the first multiple of 8 elements; returns how many were done.
template <bool kBF16, ReduceOp op>
size_t ReduceHalfVectorOp(void* acc, const void* in, size_t n) {
  uint16_t* a = static_cast<uint16_t*>(acc);
  const uint16_t* b = static_cast<const uint16_t*>(in);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = kBF16 ? LoadBF16(a + i) : LoadF16(a + i);
    __m256 y = kBF16 ? LoadBF16(b + i) : LoadF16(b + i);
    __m256 r = Combine<op>(x, y);
    if (kBF16) {
      StoreBF16(a + i, r);
    } else {
      StoreF16(a + i, r);
    }
  }
  return i;
}

template <bool kBF16>
size_t ReduceHalfVector(ReduceOp op, void* acc, const void* in, size_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return ReduceHalfVectorOp<kBF16, ReduceOp::kSum>(acc, in, n);
    case ReduceOp::kProduct: return ReduceHalfVectorOp<kBF16, ReduceOp::kProduct>(acc, in, n);
    case ReduceOp::kMin: return ReduceHalfVectorOp<kBF16, ReduceOp::kMin>(acc, in, n);
    default: return ReduceHalfVectorOp<kBF16, ReduceOp::kMax>(acc, in, n);
  }
}
#endif  // LOOM_REDUCE_AVX2

template <typename H>  // BF16 or F16: reduce in float, round per step
void ReduceHalf(ReduceOp op, void* acc, const void* in, size_t n, bool vector) {
  H* a = static_cast<H*>(acc);
  const H* b = static_cast<const H*>(in);
  size_t i = 0;
#ifdef LOOM_REDUCE_AVX2
  if (vector) i = ReduceHalfVector<std::is_same_v<H, BF16>>(op, acc, in, n);
#else
  (void)vector;
#endif
  for (; i < n; ++i) {
    float x = a[i], y = b[i], r;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: r = x + y; break;
      case ReduceOp::kProduct: r = x * y; break;
      case ReduceOp::kMin: r = y < x ? y : x; break;
      default: r = y > x ? y : x; break;
    }
    a[i] = H(r);
  }
}

void ReduceBool(ReduceOp op, void* acc, const void* in, size_t n) {
  uint8_t* a = static_cast<uint8_t*>(acc);
  const uint8_t* b = static_cast<const uint8_t*>(in);
  bool is_or = op == ReduceOp::kSum || op == ReduceOp::kMax;
  for (size_t i = 0; i < n; ++i) a[i] = is_or ? (a[i] | b[i]) != 0 : (a[i] & b[i]) != 0;
}

}  // namespace

absl::Status CheckReducible(DType dtype, ReduceOp op) {
  if (dtype == DType::kBool && op == ReduceOp::kAvg) {
    return absl::InvalidArgumentError("op: avg is undefined for bool tensors");
  }
  return absl::OkStatus();
}

void ReduceInto(DType dtype, ReduceOp op, void* acc, const void* in, size_t count) {
  switch (dtype) {
    case DType::kF64: return ReduceTyped<double>(op, acc, in, count);
    case DType::kF32: return ReduceTyped<float>(op, acc, in, count);
    case DType::kI32: return ReduceTyped<int32_t>(op, acc, in, count);
    case DType::kI64: return ReduceTyped<int64_t>(op, acc, in, count);
    case DType::kBF16: return ReduceHalf<BF16>(op, acc, in, count, true);
    case DType::kF16: return ReduceHalf<F16>(op, acc, in, count, true);
    case DType::kBool: return ReduceBool(op, acc, in, count);
  }
}

void ReduceHalfScalarForTest(DType dtype, ReduceOp op, void* acc, const void* in, size_t count) {
  if (dtype == DType::kBF16) return ReduceHalf<BF16>(op, acc, in, count, false);
  if (dtype == DType::kF16) return ReduceHalf<F16>(op, acc, in, count, false);
  ReduceInto(dtype, op, acc, in, count);
}

void DivideInPlace(DType dtype, void* buf, size_t count, int divisor) {
  VisitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(buf);
    if constexpr (std::is_same_v<T, bool>) {
      return;
    } else if constexpr (std::is_same_v<T, BF16> || std::is_same_v<T, F16>) {
      for (size_t i = 0; i < count; ++i) p[i] = T(static_cast<float>(p[i]) / divisor);
    } else {
      for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / divisor);
    }
  });
}

}  // namespace loom::collectives::algorithms
