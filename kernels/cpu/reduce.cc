#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/loops.h"

namespace loom::kernels::cpu {

absl::string_view OpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMean: return "mean";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

Shape ReducedShape(absl::Span<const int64_t> shape, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!mask[d]) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

namespace {
int64_t ReducedCount(absl::Span<const int64_t> shape, const std::vector<bool>& mask) {
  int64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    if (mask[d]) n *= shape[d];
  return n;
}

bool IsExtremum(ReduceOp op) { return op == ReduceOp::kMax || op == ReduceOp::kMin; }

absl::Status CheckReduceDType(ReduceOp op, DType t) {
  if (IsFloating(t) || (op != ReduceOp::kMean && IsInteger(t))) return absl::OkStatus();
  if (op == ReduceOp::kMean) return CheckFloating(OpName(op), "x", t);
  return ArgError(OpName(op), "x", absl::StrCat("expected a floating, i32 or i64 dtype, got ", DTypeName(t)));
}

// The running max (is_min false) or min of acc and v; NaN wins.
template <typename A, typename B>
inline A Extreme(bool is_min, A acc, B v) {
  return ((is_min ? v < acc : v > acc) || v != v) ? static_cast<A>(v) : acc;
}
}  // namespace

absl::StatusOr<kernels::TensorMeta> InferReduce(ReduceOp op, const kernels::TensorMeta& x,
                                                absl::Span<const int64_t> axes, bool keepdim) {
  absl::string_view n = OpName(op);
  LOOM_RETURN_IF_ERROR(CheckReduceDType(op, x.dtype));
  LOOM_ASSIGN_OR_RETURN(std::vector<bool> mask, AxesMask(n, "axes", axes, static_cast<int>(x.shape.size())));
  if (IsExtremum(op) && ReducedCount(x.shape, mask) == 0)
    return ArgError(n, "x", absl::StrCat("cannot take the ", n, " over an empty reduction (shape ",
                                         ShapeToString(x.shape), ")"));
  return kernels::TensorMeta{x.dtype, ReducedShape(x.shape, mask, keepdim)};
}

absl::StatusOr<std::vector<bool>> SumToMask(absl::Span<const int64_t> from, absl::Span<const int64_t> to) {
  LOOM_RETURN_IF_ERROR(CheckShapeAttr("sum_to", "shape", to));
  if (to.size() > from.size())
    return ArgError("sum_to", "shape", absl::StrCat(ShapeToString(to), " has more dims than x ",
                                                    ShapeToString(from)));
  const size_t lead = from.size() - to.size();
  std::vector<bool> mask(from.size(), true);
  for (size_t i = 0; i < to.size(); ++i) {
    int64_t f = from[lead + i], t = to[i];
    if (f == t) mask[lead + i] = false;
    else if (t != 1)
      return ArgError("sum_to", "shape",
                      absl::StrCat(ShapeToString(to), " does not broadcast to x ", ShapeToString(from)));
  }
  return mask;
}

namespace {

absl::Status Validate(ReduceOp op, const Tensor& x, const std::vector<bool>& mask, const Tensor& out) {
  absl::string_view n = OpName(op);
  LOOM_RETURN_IF_ERROR(CheckCpu(n, "x", x));
  LOOM_RETURN_IF_ERROR(CheckReduceDType(op, x.dtype()));
  if (static_cast<int>(mask.size()) != x.ndim())
    return ArgError(n, "axes", absl::StrCat("mask of ", mask.size(), " dims for a ", x.ndim(), "-d x"));
  if (IsExtremum(op) && ReducedCount(x.shape(), mask) == 0)
    return ArgError(n, "x", absl::StrCat("cannot take the ", n, " over an empty reduction"));
  LOOM_RETURN_IF_ERROR(CheckCpu(n, "out", out));
  if (out.dtype() != x.dtype()) return CheckSameDType(n, "x", x.dtype(), "out", out.dtype());
  if (!out.is_contiguous()) return ArgError(n, "out", "output must be contiguous");
  Shape kept = ReducedShape(x.shape(), mask, false);
  if (out.numel() != NumElements(kept))
    return ArgError(n, "out", absl::StrCat("has ", out.numel(), " elements, the reduction gives ",
                                           ShapeToString(kept)));
  return absl::OkStatus();
}

// Reduces x viewed as contiguous [outer, red, inner] over the middle dim.
template <typename T>
void ReduceOIR(ReduceOp op, const T* x, int64_t outer, int64_t red, int64_t inner, T* out) {
  const bool ext = IsExtremum(op), is_min = op == ReduceOp::kMin;
  const double scale = op == ReduceOp::kMean ? 1.0 / static_cast<double>(red) : 1.0;
  const double init = ext ? (is_min ? 1 : -1) * std::numeric_limits<double>::infinity() : 0.0;
  if (inner == 1 && outer < 4 && red >= 8 * kParallelMinElements) {
    // Few long rows: fixed-size pieces reduced in parallel, then combined in
    // piece order, so the result does not depend on the thread count.
    constexpr int64_t kPiece = 1 << 16;
    const int64_t pieces = (red + kPiece - 1) / kPiece;
    std::vector<double> part(pieces);
    for (int64_t o = 0; o < outer; ++o) {
      const T* row = x + o * red;
      ParallelFor(pieces, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t q = lo; q < hi; ++q) {
          const int64_t r0 = q * kPiece, r1 = std::min(red, r0 + kPiece);
          double acc = init;
          for (int64_t r = r0; r < r1; ++r) {
            if (ext) acc = Extreme(is_min, acc, row[r]);
            else acc += row[r];
          }
          part[q] = acc;
        }
      });
      double acc = init;
      for (double v : part) acc = ext ? Extreme(is_min, acc, v) : acc + v;
      out[o] = static_cast<T>(acc * scale);
    }
    return;
  }
  if (inner == 1) {
    int64_t grain = std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(red, 1));
    ParallelFor(outer, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const T* row = x + o * red;
        if (ext) {
          T m = row[0];
          for (int64_t r = 1; r < red; ++r) m = Extreme(is_min, m, row[r]);
          out[o] = m;
        } else {
          // Four partial sums keep the dependency chain short.
          double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
          int64_t r = 0;
          for (; r + 4 <= red; r += 4) {
            s0 += row[r];
            s1 += row[r + 1];
            s2 += row[r + 2];
            s3 += row[r + 3];
          }
          for (; r < red; ++r) s0 += row[r];
          out[o] = static_cast<T>(((s0 + s1) + (s2 + s3)) * scale);
        }
      }
    });
    return;
  }
  // Column blocks x row pieces: each task accumulates up to kBlock columns over
  // one piece of the reduced rows into a partial; partials are then combined
  // in piece order. Pieces depend only on the shape, so results do not depend
  // on the thread count.
  constexpr int64_t kBlock = 256;
  const int64_t nblk = (inner + kBlock - 1) / kBlock;
  int64_t piece_rows = 256;
  while (outer * ((red + piece_rows - 1) / piece_rows) * inner > (int64_t{1} << 22)) piece_rows *= 2;
  const int64_t pieces = std::max<int64_t>(1, (red + piece_rows - 1) / piece_rows);
  std::vector<double> partial(pieces > 1 ? outer * pieces * inner : 0);
  const int64_t tasks = outer * nblk * pieces;
  int64_t grain = std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(piece_rows * kBlock, 1));
  ParallelFor(tasks, grain, [&](int64_t lo, int64_t hi) {
    double acc[kBlock];
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t o = t / (nblk * pieces), blk = (t / pieces) % nblk, q = t % pieces;
      const int64_t c0 = blk * kBlock, w = std::min(kBlock, inner - c0);
      const int64_t r0 = q * piece_rows, r1 = std::min(red, r0 + piece_rows);
      std::fill(acc, acc + w, init);
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = x + (o * red + r) * inner + c0;
        if (ext) {
          for (int64_t j = 0; j < w; ++j) acc[j] = Extreme(is_min, acc[j], row[j]);
        } else if (w == kBlock) {
          // Constant trip count: the compiler vectorises this at -O2.
          for (int64_t j = 0; j < kBlock; ++j) acc[j] += static_cast<double>(row[j]);
        } else {
          for (int64_t j = 0; j < w; ++j) acc[j] += static_cast<double>(row[j]);
        }
      }
      if (pieces == 1) {
        T* dst = out + o * inner + c0;
        for (int64_t j = 0; j < w; ++j) dst[j] = static_cast<T>(acc[j] * scale);
      } else {
        std::copy(acc, acc + w, partial.begin() + (o * pieces + q) * inner + c0);
      }
    }
  });
  if (pieces == 1) return;
  ParallelFor(outer * inner, kParallelMinElements, [&](int64_t lo, int64_t hi) {
    for (int64_t e = lo; e < hi; ++e) {
      const int64_t o = e / inner, c = e % inner;
      double acc = init;
      for (int64_t q = 0; q < pieces; ++q) {
        const double v = partial[(o * pieces + q) * inner + c];
        if (ext) acc = Extreme(is_min, acc, v);
        else acc += v;
      }
      out[e] = static_cast<T>(acc * scale);
    }
  });
}

template <typename T>
void RunReduce(ReduceOp op, const Tensor& x, const std::vector<bool>& mask, Tensor& out) {
  // Group dims (size-1 dims dropped) into runs of equal reduced-ness.
  std::vector<int64_t> sizes;
  std::vector<bool> red;
  for (int d = 0; d < x.ndim(); ++d) {
    if (x.dim(d) == 1) continue;
    if (!red.empty() && red.back() == mask[d]) sizes.back() *= x.dim(d);
    else {
      sizes.push_back(x.dim(d));
      red.push_back(mask[d]);
    }
  }
  T* po = static_cast<T*>(out.raw_data());
  int reduced_runs = static_cast<int>(std::count(red.begin(), red.end(), true));
  if (reduced_runs <= 1 && x.is_contiguous()) {
    int64_t outer = 1, r = 1, inner = 1;
    bool seen = false;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (red[i]) { r = sizes[i]; seen = true; }
      else if (seen) inner *= sizes[i];
      else outer *= sizes[i];
    }
    ReduceOIR<T>(op, static_cast<const T*>(x.raw_data()), outer, r, inner, po);
    return;
  }
  // General case: gather x as [kept..., reduced...] contiguous, then reduce rows.
  std::vector<int> perm;
  for (int d = 0; d < x.ndim(); ++d)
    if (!mask[d]) perm.push_back(d);
  for (int d = 0; d < x.ndim(); ++d)
    if (mask[d]) perm.push_back(d);
  Tensor gathered = Tensor::MustEmpty(x.Permute(perm).shape(), x.dtype());
  CopyStrided(x.Permute(perm), gathered.raw_data());
  int64_t r = ReducedCount(x.shape(), mask);
  ReduceOIR<T>(op, static_cast<const T*>(gathered.raw_data()), out.numel(), r, 1, po);
}

// Integer sum / max / min (I = int32_t or int64_t): x gathered as [kept,
// reduced] rows, each reduced in int64 in order; sums wrap.
template <typename I>
void RunIntReduce(ReduceOp op, const Tensor& x, const std::vector<bool>& mask, Tensor& out) {
  std::vector<int> perm;
  for (int d = 0; d < x.ndim(); ++d)
    if (!mask[d]) perm.push_back(d);
  for (int d = 0; d < x.ndim(); ++d)
    if (mask[d]) perm.push_back(d);
  const Tensor view = x.Permute(perm);
  Tensor rows = Tensor::MustEmpty(view.shape(), x.dtype());
  CopyStrided(view, rows.raw_data());
  const int64_t red = ReducedCount(x.shape(), mask);
  const I* px = static_cast<const I*>(rows.raw_data());
  I* po = static_cast<I*>(out.raw_data());
  const bool is_min = op == ReduceOp::kMin;
  ParallelFor(out.numel(), std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(red, 1)),
              [&](int64_t lo, int64_t hi) {
                for (int64_t o = lo; o < hi; ++o) {
                  const I* row = px + o * red;
                  if (op == ReduceOp::kSum) {
                    uint64_t acc = 0;
                    for (int64_t r = 0; r < red; ++r) acc += static_cast<uint64_t>(static_cast<int64_t>(row[r]));
                    po[o] = ConvertTo<I>(static_cast<int64_t>(acc));
                  } else {
                    I m = row[0];
                    for (int64_t r = 1; r < red; ++r) m = Extreme(is_min, m, row[r]);
                    po[o] = m;
                  }
                }
              });
}

}  // namespace

absl::Status ReduceKernel(ReduceOp op, const Tensor& x, const std::vector<bool>& mask, Tensor& out) {
  LOOM_RETURN_IF_ERROR(Validate(op, x, mask, out));
  LOOM_RETURN_IF_ERROR(CheckDType(OpName(op), "x", x.dtype(),
                                  {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64}));
  if (out.numel() == 0) return absl::OkStatus();
  switch (x.dtype()) {
    case DType::kF64: RunReduce<double>(op, x, mask, out); break;
    case DType::kBF16: RunReduce<BF16>(op, x, mask, out); break;
    case DType::kI32: RunIntReduce<int32_t>(op, x, mask, out); break;
    case DType::kI64: RunIntReduce<int64_t>(op, x, mask, out); break;
    default: RunReduce<float>(op, x, mask, out); break;
  }
  return absl::OkStatus();
}

namespace {
// Row-major offset in the kept dims' output of x's element i.
int64_t KeptOffset(const Tensor& x, const std::vector<bool>& mask, const Shape& kept, const Strides& kept_strides,
                   int64_t i) {
  int64_t rem = i, o = 0, k = static_cast<int64_t>(kept.size());
  for (int d = x.ndim() - 1; d >= 0; --d) {
    const int64_t idx = rem % x.dim(d);
    rem /= x.dim(d);
    if (!mask[d]) o += idx * kept_strides[--k];
  }
  return o;
}
}  // namespace

absl::Status ReduceReference(ReduceOp op, const Tensor& x, const std::vector<bool>& mask, Tensor& out) {
  LOOM_RETURN_IF_ERROR(Validate(op, x, mask, out));
  const bool ext = IsExtremum(op), is_min = op == ReduceOp::kMin;
  const Shape kept = ReducedShape(x.shape(), mask, false);
  const Strides kept_strides = ContiguousStrides(kept);
  if (IsInteger(x.dtype())) {
    // Exact: int64 extremes; sums in uint64 (two's complement wrap), narrowed by SetInt.
    std::vector<int64_t> acc(out.numel(), ext ? (is_min ? std::numeric_limits<int64_t>::max()
                                                        : std::numeric_limits<int64_t>::min())
                                              : 0);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t o = KeptOffset(x, mask, kept, kept_strides, i), v = GetInt(x, i);
      acc[o] = ext ? Extreme(is_min, acc[o], v)
                   : static_cast<int64_t>(static_cast<uint64_t>(acc[o]) + static_cast<uint64_t>(v));
    }
    for (int64_t o = 0; o < out.numel(); ++o) SetInt(out, o, acc[o]);
    return absl::OkStatus();
  }
  std::vector<double> acc(out.numel(), ext ? (is_min ? INFINITY : -INFINITY) : 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t o = KeptOffset(x, mask, kept, kept_strides, i);
    const double v = x.GetDouble(i);
    if (ext) acc[o] = Extreme(is_min, acc[o], v);
    else acc[o] += v;
  }
  const double count = static_cast<double>(ReducedCount(x.shape(), mask));
  for (int64_t o = 0; o < out.numel(); ++o)
    out.SetDouble(o, op == ReduceOp::kMean ? acc[o] / count : acc[o]);
  return absl::OkStatus();
}

}  // namespace loom::kernels::cpu
