#include "kernels/cpu/shape_ops.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/loops.h"

namespace loom::kernels::cpu {

// ---- Inference ---------------------------------------------------------------

absl::StatusOr<Shape> InferReshape(absl::Span<const int64_t> x, absl::Span<const int64_t> shape) {
  Shape out(shape.begin(), shape.end());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) return ArgError("reshape", "shape", absl::StrCat("more than one -1 in ", ShapeToString(shape)));
      infer = static_cast<int>(i);
    } else if (out[i] < 0) {
      return ArgError("reshape", "shape", absl::StrCat("negative size in ", ShapeToString(shape)));
    } else {
      known *= out[i];
    }
  }
  const int64_t n = NumElements(x);
  if (infer >= 0) {
    if (known == 0 || n % known != 0)
      return ArgError("reshape", "shape", absl::StrCat("cannot infer -1 in ", ShapeToString(shape), " for x ",
                                                       ShapeToString(x)));
    out[infer] = n / known;
  }
  if (NumElements(out) != n)
    return ArgError("reshape", "shape", absl::StrCat(ShapeToString(shape), " has ", NumElements(out),
                                                     " elements, x ", ShapeToString(x), " has ", n));
  return out;
}

absl::StatusOr<std::vector<int>> NormalizePerm(absl::Span<const int64_t> dims, int rank) {
  if (static_cast<int>(dims.size()) != rank)
    return ArgError("permute", "dims", absl::StrCat(ShapeToString(dims), " has ", dims.size(),
                                                    " entries for a ", rank, "-d x"));
  std::vector<int> perm(rank);
  std::vector<bool> seen(rank, false);
  for (int i = 0; i < rank; ++i) {
    LOOM_ASSIGN_OR_RETURN(perm[i], NormalizeAxis("permute", "dims", dims[i], rank));
    if (seen[perm[i]])
      return ArgError("permute", "dims", absl::StrCat(ShapeToString(dims), " is not a permutation of ", rank,
                                                      " dims"));
    seen[perm[i]] = true;
  }
  return perm;
}

namespace {
// Whether start + k * step lies in [0, dim) for every k in [0, length), with
// no overflow for any int64 arguments (start in [0, dim], length >= 0).
bool SteppedFits(int64_t start, int64_t length, int64_t step, int64_t dim) {
  if (length == 0) return true;
  if (start >= dim) return false;
  if (length == 1) return true;
  const int64_t room = step > 0 ? dim - 1 - start : start;  // how far the walk may go
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  const int64_t span = step > 0 ? step : (step == kMin ? kMax : -step);
  return length - 1 <= room / span;
}
}  // namespace

absl::StatusOr<SliceArgs> NormalizeSlice(absl::Span<const int64_t> x, int64_t axis, int64_t start,
                                         int64_t length, int64_t step) {
  SliceArgs s;
  LOOM_ASSIGN_OR_RETURN(s.axis, NormalizeAxis("slice", "axis", axis, static_cast<int>(x.size())));
  const int64_t dim = x[s.axis];
  s.start = start < 0 ? start + dim : start;
  s.length = length;
  s.step = step;
  if (step == 0) return ArgError("slice", "step", "must not be 0");
  if (s.start < 0 || s.start > dim || (step != 1 && length > 0 && s.start == dim))
    return ArgError("slice", "start", absl::StrCat(start, " out of range for dim ", s.axis, " of size ", dim));
  if (length < 0) return ArgError("slice", "length", absl::StrCat(length, " is negative"));
  if (step == 1) {
    if (s.start + length > dim)
      return ArgError("slice", "length", absl::StrCat(length, " from start ", s.start, " exceeds dim ", s.axis,
                                                      " of size ", dim));
    return s;
  }
  if (!SteppedFits(s.start, length, step, dim))
    return ArgError("slice", "length", absl::StrCat(length, " elements from start ", s.start, " with step ", step,
                                                    " leave dim ", s.axis, " of size ", dim));
  return s;
}

absl::StatusOr<Shape> InferSliceBackward(absl::Span<const int64_t> dy, int64_t axis, int64_t start,
                                         int64_t full_len, int64_t step) {
  LOOM_ASSIGN_OR_RETURN(int a, NormalizeAxis("slice_backward", "axis", axis, static_cast<int>(dy.size())));
  if (step == 0) return ArgError("slice_backward", "step", "must not be 0");
  const int64_t n = dy[a];
  const bool fits = step == 1 ? start >= 0 && full_len >= 0 && start + n <= full_len
                              : start >= 0 && start <= full_len && SteppedFits(start, n, step, full_len);
  if (!fits)
    return ArgError("slice_backward", "full_len",
                    absl::StrCat("dy of length ", n, " at start ", start,
                                 step == 1 ? "" : absl::StrCat(" with step ", step), " does not fit in full_len ",
                                 full_len));
  Shape out(dy.begin(), dy.end());
  out[a] = full_len;
  return out;
}

absl::StatusOr<kernels::TensorMeta> InferConcat(absl::Span<const kernels::TensorMeta> inputs, int64_t axis) {
  if (inputs.empty()) return ArgError("concat", "inputs", "needs at least one input");
  const kernels::TensorMeta& first = inputs[0];
  LOOM_ASSIGN_OR_RETURN(int a, NormalizeAxis("concat", "axis", axis, static_cast<int>(first.shape.size())));
  Shape out = first.shape;
  for (size_t i = 1; i < inputs.size(); ++i) {
    std::string name = absl::StrCat("input ", i);
    LOOM_RETURN_IF_ERROR(CheckSameDType("concat", "input 0", first.dtype, name, inputs[i].dtype));
    const Shape& s = inputs[i].shape;
    bool ok = s.size() == first.shape.size();
    for (size_t d = 0; ok && d < s.size(); ++d) ok = static_cast<int>(d) == a || s[d] == first.shape[d];
    if (!ok)
      return ArgError("concat", name, absl::StrCat("shape ", ShapeToString(s), " does not match input 0 ",
                                                   ShapeToString(first.shape), " outside axis ", a));
    out[a] += s[a];
  }
  return kernels::TensorMeta{first.dtype, out};
}

// ---- Fast kernels ------------------------------------------------------------------

namespace {
absl::Status CheckInOut(absl::string_view op, const Tensor& x, absl::string_view xname, const Tensor& out,
                        DType out_dtype, absl::Span<const int64_t> out_shape) {
  LOOM_RETURN_IF_ERROR(CheckCpu(op, xname, x));
  return CheckOutput(op, "out", out, out_dtype, out_shape);
}

absl::StatusOr<Shape> PermutedShape(const Tensor& x, const std::vector<int>& perm) {
  if (static_cast<int>(perm.size()) != x.ndim())
    return ArgError("permute", "dims", absl::StrCat(perm.size(), " entries for a ", x.ndim(), "-d x"));
  Shape s;
  for (int p : perm) s.push_back(x.dim(p));
  return s;
}

absl::Status CheckSlice(const Tensor& x, const SliceArgs& s) {
  LOOM_RETURN_IF_ERROR(CheckCpu("slice", "x", x));
  return NormalizeSlice(x.shape(), s.axis, s.start, s.length, s.step).status();
}

// Element strides of t with `axis` scaled by `step`.
std::vector<int64_t> SteppedStrides(const Tensor& t, int axis, int64_t step) {
  std::vector<int64_t> st(t.strides().begin(), t.strides().end());
  st[axis] *= step;
  return st;
}
}  // namespace

absl::Status ReshapeKernel(const Tensor& x, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("reshape", "x", x));
  LOOM_ASSIGN_OR_RETURN(Shape s, InferReshape(x.shape(), out.shape()));
  LOOM_RETURN_IF_ERROR(CheckOutput("reshape", "out", out, x.dtype(), s));
  CopyStrided(x, out.raw_data());  // row-major order of x = row-major order of out
  return absl::OkStatus();
}

absl::Status PermuteKernel(const Tensor& x, const std::vector<int>& perm, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("permute", "x", x));
  LOOM_ASSIGN_OR_RETURN(Shape s, PermutedShape(x, perm));
  LOOM_RETURN_IF_ERROR(CheckOutput("permute", "out", out, x.dtype(), s));
  CopyStrided(x.Permute(perm), out.raw_data());
  return absl::OkStatus();
}

absl::Status SliceKernel(const Tensor& x, const SliceArgs& s, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckSlice(x, s));
  Shape shape = x.shape();
  shape[s.axis] = s.length;
  LOOM_RETURN_IF_ERROR(CheckOutput("slice", "out", out, x.dtype(), shape));
  if (s.step == 1) {
    CopyStrided(x.Narrow(s.axis, s.start, s.length), out.raw_data());
    return absl::OkStatus();
  }
  if (out.numel() == 0) return absl::OkStatus();
  const size_t es = DTypeSize(x.dtype());
  const char* first = static_cast<const char*>(x.raw_data()) + s.start * x.stride(s.axis) * static_cast<int64_t>(es);
  CopyRaw(shape, es, first, SteppedStrides(x, s.axis, s.step), out.raw_data(), ContiguousStrides(shape));
  return absl::OkStatus();
}

absl::Status SliceBackwardKernel(const Tensor& dy, int axis, int64_t start, Tensor& out, int64_t step) {
  LOOM_RETURN_IF_ERROR(CheckCpu("slice_backward", "dy", dy));
  LOOM_ASSIGN_OR_RETURN(int a, NormalizeAxis("slice_backward", "axis", axis, dy.ndim()));
  if (out.ndim() != dy.ndim()) return ArgError("slice_backward", "out", "rank differs from dy");
  LOOM_ASSIGN_OR_RETURN(Shape s, InferSliceBackward(dy.shape(), a, start, out.dim(a), step));
  LOOM_RETURN_IF_ERROR(CheckOutput("slice_backward", "out", out, dy.dtype(), s));
  if (out.nbytes() > 0) std::memset(out.raw_data(), 0, out.nbytes());
  if (step == 1) {
    CopyView(dy, out.Narrow(a, start, dy.dim(a)));
    return absl::OkStatus();
  }
  if (dy.numel() == 0) return absl::OkStatus();
  const size_t es = DTypeSize(dy.dtype());
  char* first = static_cast<char*>(out.raw_data()) + start * out.stride(a) * static_cast<int64_t>(es);
  CopyRaw(dy.shape(), es, dy.raw_data(), dy.strides(), first, SteppedStrides(out, a, step));
  return absl::OkStatus();
}

absl::Status ConcatKernel(absl::Span<const Tensor> inputs, int axis, Tensor& out) {
  std::vector<kernels::TensorMeta> metas;
  for (size_t i = 0; i < inputs.size(); ++i) {
    LOOM_RETURN_IF_ERROR(CheckCpu("concat", absl::StrCat("input ", i), inputs[i]));
    metas.push_back(kernels::MetaOf(inputs[i]));
  }
  LOOM_ASSIGN_OR_RETURN(kernels::TensorMeta m, InferConcat(metas, axis));
  LOOM_RETURN_IF_ERROR(CheckOutput("concat", "out", out, m.dtype, m.shape));
  int64_t off = 0;
  for (const Tensor& t : inputs) {
    CopyView(t, out.Narrow(axis, off, t.dim(axis)));
    off += t.dim(axis);
  }
  return absl::OkStatus();
}

absl::Status BroadcastToKernel(const Tensor& x, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("broadcast_to", "x", x));
  LOOM_RETURN_IF_ERROR(CheckBroadcastableTo("broadcast_to", "x", x.shape(), out.shape()));
  LOOM_RETURN_IF_ERROR(CheckOutput("broadcast_to", "out", out, x.dtype(), out.shape()));
  LOOM_ASSIGN_OR_RETURN(Tensor v, x.Expand(out.shape()));
  CopyStrided(v, out.raw_data());
  return absl::OkStatus();
}

absl::Status CastKernel(const Tensor& x, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckInOut("cast", x, "x", out, out.dtype(), x.shape()));
  if (x.dtype() == out.dtype()) {
    CopyStrided(x, out.raw_data());
    return absl::OkStatus();
  }
  Tensor src = x;
  if (!x.is_contiguous()) {
    src = Tensor::MustEmpty(x.shape(), x.dtype());
    CopyStrided(x, src.raw_data());
  }
  VisitDType(x.dtype(), [&](auto stag) {
    using S = decltype(stag);
    VisitDType(out.dtype(), [&](auto dtag) {
      using D = decltype(dtag);
      const S* s = static_cast<const S*>(src.raw_data());
      D* d = static_cast<D*>(out.raw_data());
      ParallelFor(x.numel(), kParallelMinElements, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) d[i] = ConvertTo<D>(s[i]);
      });
    });
  });
  return absl::OkStatus();
}

absl::Status FillKernel(double value, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("fill", "out", out));
  if (!out.is_contiguous()) return ArgError("fill", "out", "output must be contiguous");
  VisitDType(out.dtype(), [&](auto tag) {
    using D = decltype(tag);
    const D v = ConvertTo<D>(value);
    D* d = static_cast<D*>(out.raw_data());
    ParallelFor(out.numel(), kParallelMinElements, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) d[i] = v;
    });
  });
  return absl::OkStatus();
}

// ---- References -----------------------------------------------------------------------
// Element by element through CopyElement (exact for integers); index
// arithmetic spelled out.

namespace {
// Row-major multi-index of linear index i in `shape`.
Shape Unravel(int64_t i, absl::Span<const int64_t> shape) {
  Shape idx(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}
int64_t Ravel(absl::Span<const int64_t> idx, absl::Span<const int64_t> shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + idx[d];
  return i;
}
}  // namespace

absl::Status ReshapeReference(const Tensor& x, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("reshape", "x", x));
  if (x.numel() != out.numel()) return ArgError("reshape", "out", "element count differs from x");
  for (int64_t i = 0; i < x.numel(); ++i) CopyElement(x, i, out, i);
  return absl::OkStatus();
}

absl::Status PermuteReference(const Tensor& x, const std::vector<int>& perm, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("permute", "x", x));
  LOOM_ASSIGN_OR_RETURN(Shape s, PermutedShape(x, perm));
  LOOM_RETURN_IF_ERROR(CheckOutput("permute", "out", out, x.dtype(), s));
  for (int64_t i = 0; i < out.numel(); ++i) {
    Shape oi = Unravel(i, s);
    Shape xi(x.ndim());
    for (int d = 0; d < x.ndim(); ++d) xi[perm[d]] = oi[d];  // out dim d is x dim perm[d]
    CopyElement(x, Ravel(xi, x.shape()), out, i);
  }
  return absl::OkStatus();
}

absl::Status SliceReference(const Tensor& x, const SliceArgs& s, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckSlice(x, s));
  for (int64_t i = 0; i < out.numel(); ++i) {
    Shape idx = Unravel(i, out.shape());
    idx[s.axis] = s.start + idx[s.axis] * s.step;
    CopyElement(x, Ravel(idx, x.shape()), out, i);
  }
  return absl::OkStatus();
}

absl::Status SliceBackwardReference(const Tensor& dy, int axis, int64_t start, Tensor& out, int64_t step) {
  LOOM_RETURN_IF_ERROR(CheckCpu("slice_backward", "dy", dy));
  LOOM_ASSIGN_OR_RETURN(axis, NormalizeAxis("slice_backward", "axis", axis, dy.ndim()));
  if (out.ndim() != dy.ndim()) return ArgError("slice_backward", "out", "rank differs from dy");
  LOOM_RETURN_IF_ERROR(InferSliceBackward(dy.shape(), axis, start, out.dim(axis), step).status());
  for (int64_t i = 0; i < out.numel(); ++i) {
    Shape idx = Unravel(i, out.shape());
    // Position idx[axis] = start + p * step holds dy's element p.
    const int64_t d = idx[axis] - start;
    const int64_t p = d % step == 0 ? d / step : -1;
    if (p < 0 || p >= dy.dim(axis)) {
      out.SetDouble(i, 0);
    } else {
      idx[axis] = p;
      CopyElement(dy, Ravel(idx, dy.shape()), out, i);
    }
  }
  return absl::OkStatus();
}

absl::Status ConcatReference(absl::Span<const Tensor> inputs, int axis, Tensor& out) {
  for (size_t i = 0; i < inputs.size(); ++i)
    LOOM_RETURN_IF_ERROR(CheckCpu("concat", absl::StrCat("input ", i), inputs[i]));
  for (int64_t i = 0; i < out.numel(); ++i) {
    Shape idx = Unravel(i, out.shape());
    // Find the input holding position idx[axis].
    size_t k = 0;
    while (idx[axis] >= inputs[k].dim(axis)) idx[axis] -= inputs[k++].dim(axis);
    CopyElement(inputs[k], Ravel(idx, inputs[k].shape()), out, i);
  }
  return absl::OkStatus();
}

absl::Status BroadcastToReference(const Tensor& x, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("broadcast_to", "x", x));
  LOOM_RETURN_IF_ERROR(CheckBroadcastableTo("broadcast_to", "x", x.shape(), out.shape()));
  const size_t lead = out.ndim() - x.ndim();
  for (int64_t i = 0; i < out.numel(); ++i) {
    Shape oi = Unravel(i, out.shape());
    Shape xi(x.ndim());
    for (int d = 0; d < x.ndim(); ++d) xi[d] = x.dim(d) == 1 ? 0 : oi[lead + d];
    CopyElement(x, Ravel(xi, x.shape()), out, i);
  }
  return absl::OkStatus();
}

absl::Status CastReference(const Tensor& x, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckInOut("cast", x, "x", out, out.dtype(), x.shape()));
  for (int64_t i = 0; i < x.numel(); ++i) CopyElement(x, i, out, i);
  return absl::OkStatus();
}

absl::Status FillReference(double value, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("fill", "out", out));
  const Tensor v = Tensor::FromVector({}, {value}, DType::kF64);
  for (int64_t i = 0; i < out.numel(); ++i) CopyElement(v, 0, out, i);
  return absl::OkStatus();
}

}  // namespace loom::kernels::cpu
