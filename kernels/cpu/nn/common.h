// Internal helpers shared by the NN kernels in kernels/cpu/nn (not a public API).
//
//   - Validation for InferFns: each returns InvalidArgument whose message starts
//     with the argument's name ("x: expected a floating dtype, got i32"). RunOp
//     prefixes the op name, so the final message reads "gelu: x: ...".
//   - Numeric helpers for the fast f32 kernels: a branch-free, vectorisable
//     FastExp/FastTanh (Cephes-style polynomial, ~2 ulp) and blocked reductions
//     that sum in f32 SIMD lanes per block and accumulate blocks in f64.
//   - Reference plumbing: AsF64 (contiguous f64 copy) and Store (convert back).
//
// Kernels take f32; for any other float dtype they fall back to the reference
// (KernelOrReference), so RunOp(kKernel) works on every dtype the InferFn accepts.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/status.h"
#include "base/tensor.h"
#include "kernels/registry.h"

namespace loom::kernels::cpu::nn::internal {

using kernels::Attrs;
using kernels::TensorMeta;

// ---- Validation ----------------------------------------------------------------
inline absl::Status ExpectNumInputs(absl::Span<const TensorMeta> in, size_t n) {
  if (in.size() != n) return absl::InvalidArgumentError(absl::StrCat("expected ", n, " inputs, got ", in.size()));
  return absl::OkStatus();
}

inline absl::Status ExpectFloat(const TensorMeta& m, absl::string_view arg) {
  if (!IsFloating(m.dtype))
    return absl::InvalidArgumentError(absl::StrCat(arg, ": expected a floating dtype, got ", DTypeName(m.dtype)));
  return absl::OkStatus();
}

inline absl::Status ExpectInteger(const TensorMeta& m, absl::string_view arg) {
  if (m.dtype != DType::kI32 && m.dtype != DType::kI64)
    return absl::InvalidArgumentError(absl::StrCat(arg, ": expected dtype i32 or i64, got ", DTypeName(m.dtype)));
  return absl::OkStatus();
}

inline absl::Status ExpectSameDType(const TensorMeta& m, absl::string_view arg, const TensorMeta& ref,
                                    absl::string_view ref_arg) {
  if (m.dtype != ref.dtype)
    return absl::InvalidArgumentError(absl::StrCat(arg, ": dtype ", DTypeName(m.dtype), " does not match ", ref_arg,
                                                   " (", DTypeName(ref.dtype), ")"));
  return absl::OkStatus();
}

inline absl::Status ExpectSameShape(const TensorMeta& m, absl::string_view arg, const TensorMeta& ref,
                                    absl::string_view ref_arg) {
  if (m.shape != ref.shape)
    return absl::InvalidArgumentError(absl::StrCat(arg, ": shape ", ShapeToString(m.shape), " does not match ",
                                                   ref_arg, " ", ShapeToString(ref.shape)));
  return absl::OkStatus();
}

inline absl::Status ExpectMinRank(const TensorMeta& m, absl::string_view arg, int rank) {
  if (static_cast<int>(m.shape.size()) < rank)
    return absl::InvalidArgumentError(
        absl::StrCat(arg, ": expected at least ", rank, " dims, got shape ", ShapeToString(m.shape)));
  return absl::OkStatus();
}

inline absl::Status ExpectRank(const TensorMeta& m, absl::string_view arg, int rank) {
  if (static_cast<int>(m.shape.size()) != rank)
    return absl::InvalidArgumentError(
        absl::StrCat(arg, ": expected ", rank, " dims, got shape ", ShapeToString(m.shape)));
  return absl::OkStatus();
}

// A scalar: rank 0 (a [1] tensor is accepted too).
inline absl::Status ExpectScalar(const TensorMeta& m, absl::string_view arg) {
  if (!(m.shape.empty() || (m.shape.size() == 1 && m.shape[0] == 1)))
    return absl::InvalidArgumentError(absl::StrCat(arg, ": expected a scalar, got shape ", ShapeToString(m.shape)));
  return absl::OkStatus();
}

// Attribute type checks: an attribute present with the wrong type is an error
// (Attrs' getters would silently return the default). Ints are accepted where
// floats or bools are expected.
enum class AttrKind { kInt, kFloat, kBool, kString };
inline absl::Status CheckAttr(const Attrs& a, const std::string& name, AttrKind kind) {
  auto it = a.values().find(name);
  if (it == a.values().end()) return absl::OkStatus();
  const kernels::AttrValue& v = it->second;
  bool is_int = absl::holds_alternative<int64_t>(v);
  bool ok = false;
  const char* want = "";
  switch (kind) {
    case AttrKind::kInt: ok = is_int; want = "an integer"; break;
    case AttrKind::kFloat: ok = is_int || absl::holds_alternative<double>(v); want = "a number"; break;
    case AttrKind::kBool: ok = is_int || absl::holds_alternative<bool>(v); want = "a bool"; break;
    case AttrKind::kString: ok = absl::holds_alternative<std::string>(v); want = "a string"; break;
  }
  if (!ok) return absl::InvalidArgumentError(absl::StrCat(name, ": expected ", want, " attribute"));
  return absl::OkStatus();
}

// Normalises a possibly negative axis against `rank`.
inline absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank, absl::string_view arg = "axis") {
  if (axis < -rank || axis >= rank || rank == 0)
    return absl::InvalidArgumentError(absl::StrCat(arg, ": ", axis, " out of range for rank ", rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Product of all dims but the last (the "rows" of a [..., C] tensor).
inline int64_t LeadingRows(const Shape& s) {
  int64_t r = 1;
  for (size_t i = 0; i + 1 < s.size(); ++i) r *= s[i];
  return r;
}

// ---- Reference plumbing ----------------------------------------------------------
inline Tensor AsF64(const Tensor& t) { return t.To(DType::kF64); }
inline absl::Status Store(Tensor& out, const Tensor& f64) { return out.CopyFrom(f64); }
inline Tensor NewF64(const Shape& s) { return Tensor::Zeros(s, DType::kF64); }

// Integer ids of any integer dtype, as int64, row-major.
inline std::vector<int64_t> IdsOf(const Tensor& t) {
  std::vector<int64_t> ids(t.numel());
  if (t.dtype() == DType::kI64 && t.is_contiguous()) {
    std::memcpy(ids.data(), t.data<int64_t>(), ids.size() * sizeof(int64_t));
  } else if (t.dtype() == DType::kI32 && t.is_contiguous()) {
    const int32_t* p = t.data<int32_t>();
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = p[i];
  } else {
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(t.GetDouble(i));
  }
  return ids;
}

// True when every float input and output is f32 (the fast kernels' dtype).
// Rank-0 inputs (lr, grad_norm, dloss) are read as double by every kernel and
// may have any dtype.
inline bool AllF32(absl::Span<const Tensor> in, absl::Span<Tensor> out) {
  for (const Tensor& t : in)
    if (t.ndim() > 0 && IsFloating(t.dtype()) && t.dtype() != DType::kF32) return false;
  for (const Tensor& t : out)
    if (IsFloating(t.dtype()) && t.dtype() != DType::kF32) return false;
  return true;
}

// Wraps an f32 kernel: other dtypes run `ref`.
template <typename Fast>
kernels::KernelFn KernelOrReference(Fast fast, kernels::KernelFn ref) {
  return [fast, ref](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& attrs) -> absl::Status {
    if (!AllF32(in, out)) return ref(in, out, attrs);
    std::vector<Tensor> contig;
    contig.reserve(in.size());
    for (const Tensor& t : in) contig.push_back(t.Contiguous());
    return fast(absl::Span<const Tensor>(contig), out, attrs);
  };
}

// ---- Fast math (vectorisable under #pragma omp simd) --------------------------
// exp(x) for f32 with ~2 ulp error; inputs clamped to [-87.3, 88.3] (so exp(-inf)
// gives ~1e-38, not 0). NaN propagates.
inline float FastExp(float x) {
  x = std::min(std::max(x, -87.3f), 88.3f);
  float fn = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(fn) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// tanh via exp(-2|u|); absolute error ~1e-7.
inline float FastTanh(float u) {
  float e = FastExp(-2.0f * std::fabs(u));
  float t = (1.0f - e) / (1.0f + e);
  return u < 0 ? -t : t;
}

// Blocked sum of f(i) for i in [0, n): f32 SIMD lanes within blocks of 256, f64
// across blocks. f must be inlinable and side-effect free.
template <typename F>
inline double BlockSum(int64_t n, F f) {
  double total = 0;
  for (int64_t b = 0; b < n; b += 256) {
    int64_t e = std::min<int64_t>(n, b + 256);
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = b; i < e; ++i) s += f(i);
    total += s;
  }
  return total;
}

template <typename F>
inline float BlockMax(int64_t n, F f) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = std::max(m, f(i));
  return m;
}

// Grain (rows per ParallelFor chunk) so a chunk holds roughly `work` elements.
inline int64_t RowGrain(int64_t row_len, int64_t work = 16384) {
  return std::max<int64_t>(1, work / std::max<int64_t>(1, row_len));
}

}  // namespace loom::kernels::cpu::nn::internal
