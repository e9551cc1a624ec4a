#include "kernels/cpu/shape_ops.h"

#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/loops.h"

namespace loom::cpu {

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

absl::StatusOr<SliceArgs> NormalizeSlice(absl::Span<const int64_t> x, int64_t axis, int64_t start,
                                         int64_t length) {
  SliceArgs s;
  LOOM_ASSIGN_OR_RETURN(s.axis, NormalizeAxis("slice", "axis", axis, static_cast<int>(x.size())));
  const int64_t dim = x[s.axis];
  s.start = start < 0 ? start + dim : start;
  s.length = length;
  if (s.start < 0 || s.start > dim)
    return ArgError("slice", "start", absl::StrCat(start, " out of range for dim ", s.axis, " of size ", dim));
  if (length < 0 || s.start + length > dim)
    return ArgError("slice", "length", absl::StrCat(length, " from start ", s.start, " exceeds dim ", s.axis,
                                                    " of size ", dim));
  return s;
}

absl::StatusOr<Shape> InferSliceBackward(absl::Span<const int64_t> dy, int64_t axis, int64_t start,
                                         int64_t full_len) {
  LOOM_ASSIGN_OR_RETURN(int a, NormalizeAxis("slice_backward", "axis", axis, static_cast<int>(dy.size())));
  if (start < 0 || full_len < 0 || start + dy[a] > full_len)
    return ArgError("slice_backward", "full_len",
                    absl::StrCat("dy of length ", dy[a], " at start ", start, " does not fit in full_len ",
                                 full_len));
  Shape out(dy.begin(), dy.end());
  out[a] = full_len;
  return out;
}

absl::StatusOr<ops::TensorMeta> InferConcat(absl::Span<const ops::TensorMeta> inputs, int64_t axis) {
  if (inputs.empty()) return ArgError("concat", "inputs", "needs at least one input");
  const ops::TensorMeta& first = inputs[0];
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
  return ops::TensorMeta{first.dtype, out};
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
  return NormalizeSlice(x.shape(), s.axis, s.start, s.length).status();
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
  Tensor v = x.Narrow(s.axis, s.start, s.length);
  LOOM_RETURN_IF_ERROR(CheckOutput("slice", "out", out, x.dtype(), v.shape()));
  CopyStrided(v, out.raw_data());
  return absl::OkStatus();
}

absl::Status SliceBackwardKernel(const Tensor& dy, int axis, int64_t start, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("slice_backward", "dy", dy));
  LOOM_ASSIGN_OR_RETURN(int a, NormalizeAxis("slice_backward", "axis", axis, dy.ndim()));
  if (out.ndim() != dy.ndim()) return ArgError("slice_backward", "out", "rank differs from dy");
  LOOM_ASSIGN_OR_RETURN(Shape s, InferSliceBackward(dy.shape(), a, start, out.dim(a)));
  LOOM_RETURN_IF_ERROR(CheckOutput("slice_backward", "out", out, dy.dtype(), s));
  if (out.nbytes() > 0) std::memset(out.raw_data(), 0, out.nbytes());
  CopyView(dy, out.Narrow(a, start, dy.dim(a)));
  return absl::OkStatus();
}

absl::Status ConcatKernel(absl::Span<const Tensor> inputs, int axis, Tensor& out) {
  std::vector<ops::TensorMeta> metas;
  for (size_t i = 0; i < inputs.size(); ++i) {
    LOOM_RETURN_IF_ERROR(CheckCpu("concat", absl::StrCat("input ", i), inputs[i]));
    metas.push_back(ops::MetaOf(inputs[i]));
  }
  LOOM_ASSIGN_OR_RETURN(ops::TensorMeta m, InferConcat(metas, axis));
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
    idx[s.axis] += s.start;
    CopyElement(x, Ravel(idx, x.shape()), out, i);
  }
  return absl::OkStatus();
}

absl::Status SliceBackwardReference(const Tensor& dy, int axis, int64_t start, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("slice_backward", "dy", dy));
  if (axis < 0) axis += dy.ndim();
  for (int64_t i = 0; i < out.numel(); ++i) {
    Shape idx = Unravel(i, out.shape());
    int64_t p = idx[axis] - start;
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

}  // namespace loom::cpu
