#include "kernels/cpu/gather.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/loops.h"

namespace loom::kernels::cpu {
namespace {

constexpr DType kIndexDTypes[] = {DType::kI32, DType::kI64};

// x viewed as [outer, dim, inner] around `axis`.
struct Oir {
  int64_t outer = 1, dim = 1, inner = 1;
};
Oir OirOf(absl::Span<const int64_t> shape, int axis, int64_t dim) {
  Oir g;
  for (int d = 0; d < axis; ++d) g.outer *= shape[d];
  g.dim = dim;
  for (size_t d = axis + 1; d < shape.size(); ++d) g.inner *= shape[d];
  return g;
}

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

absl::StatusOr<GatherGeometry> InferGather(const kernels::TensorMeta& x, const kernels::TensorMeta& indices,
                                           int64_t axis) {
  LOOM_RETURN_IF_ERROR(CheckRank("gather", "x", x.shape, 1));
  LOOM_RETURN_IF_ERROR(CheckDType("gather", "indices", indices.dtype, kIndexDTypes));
  GatherGeometry g;
  LOOM_ASSIGN_OR_RETURN(g.axis, NormalizeAxis("gather", "axis", axis, static_cast<int>(x.shape.size())));
  g.out.dtype = x.dtype;
  g.out.shape.assign(x.shape.begin(), x.shape.begin() + g.axis);
  g.out.shape.insert(g.out.shape.end(), indices.shape.begin(), indices.shape.end());
  g.out.shape.insert(g.out.shape.end(), x.shape.begin() + g.axis + 1, x.shape.end());
  return g;
}

absl::StatusOr<GatherGeometry> InferGatherBackward(const kernels::TensorMeta& dy, const kernels::TensorMeta& indices,
                                                   int64_t axis, int64_t dim_size) {
  LOOM_RETURN_IF_ERROR(CheckFloating("gather_backward", "dy", dy.dtype));
  LOOM_RETURN_IF_ERROR(CheckDType("gather_backward", "indices", indices.dtype, kIndexDTypes));
  const int q = static_cast<int>(indices.shape.size()), ndy = static_cast<int>(dy.shape.size());
  if (ndy < q)
    return ArgError("gather_backward", "dy", absl::StrCat(ShapeToString(dy.shape), " has fewer dims than indices ",
                                                          ShapeToString(indices.shape)));
  GatherGeometry g;
  LOOM_ASSIGN_OR_RETURN(g.axis, NormalizeAxis("gather_backward", "axis", axis, ndy - q + 1));
  const Shape window(dy.shape.begin() + g.axis, dy.shape.begin() + g.axis + q);
  if (window != indices.shape)
    return ArgError("gather_backward", "dy",
                    absl::StrCat("dims [", g.axis, ", ", g.axis + q, ") of ", ShapeToString(dy.shape),
                                 " do not match indices ", ShapeToString(indices.shape)));
  if (dim_size < 0) return ArgError("gather_backward", "dim_size", absl::StrCat("must be >= 0, got ", dim_size));
  g.out.dtype = dy.dtype;
  g.out.shape.assign(dy.shape.begin(), dy.shape.begin() + g.axis);
  g.out.shape.push_back(dim_size);
  g.out.shape.insert(g.out.shape.end(), dy.shape.begin() + g.axis + q, dy.shape.end());
  return g;
}

absl::StatusOr<std::vector<int64_t>> NormalizeIndices(absl::string_view op, const Tensor& indices, int64_t dim) {
  std::vector<int64_t> out(indices.numel());
  for (int64_t j = 0; j < indices.numel(); ++j) {
    const int64_t v = GetInt(indices, j);
    if (v < -dim || v >= dim)
      return ArgError(op, "indices",
                      absl::StrCat("index ", v, " at position ", j, " is out of range [", -dim, ", ", dim, ")"));
    out[j] = v < 0 ? v + dim : v;
  }
  return out;
}

absl::Status GatherKernel(const Tensor& x, const Tensor& indices, int axis, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("gather", "x", x));
  LOOM_RETURN_IF_ERROR(CheckCpu("gather", "indices", indices));
  LOOM_ASSIGN_OR_RETURN(GatherGeometry g, InferGather(kernels::MetaOf(x), kernels::MetaOf(indices), axis));
  LOOM_RETURN_IF_ERROR(CheckOutput("gather", "out", out, g.out.dtype, g.out.shape));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> idx, NormalizeIndices("gather", indices, x.dim(g.axis)));
  const Tensor xc = x.Contiguous();
  const Oir s = OirOf(x.shape(), g.axis, x.dim(g.axis));
  const int64_t n = static_cast<int64_t>(idx.size());
  const size_t row = static_cast<size_t>(s.inner) * DTypeSize(x.dtype());
  const char* src = static_cast<const char*>(xc.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  if (row == 0 || out.numel() == 0) return absl::OkStatus();
  const int64_t grain = std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(s.inner, 1));
  ParallelFor(s.outer * n, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t o = r / n, j = r % n;
      std::memcpy(dst + r * row, src + (o * s.dim + idx[j]) * row, row);
    }
  });
  return absl::OkStatus();
}

absl::Status GatherReference(const Tensor& x, const Tensor& indices, int axis, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("gather", "x", x));
  LOOM_RETURN_IF_ERROR(CheckCpu("gather", "indices", indices));
  LOOM_ASSIGN_OR_RETURN(GatherGeometry g, InferGather(kernels::MetaOf(x), kernels::MetaOf(indices), axis));
  LOOM_RETURN_IF_ERROR(CheckOutput("gather", "out", out, g.out.dtype, g.out.shape));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> idx, NormalizeIndices("gather", indices, x.dim(g.axis)));
  const int q = indices.ndim();
  for (int64_t i = 0; i < out.numel(); ++i) {
    // out index (a..., j..., k...) reads x at (a..., indices[j...], k...).
    const Shape oi = Unravel(i, out.shape());
    const Shape j(oi.begin() + g.axis, oi.begin() + g.axis + q);
    Shape xi(oi.begin(), oi.begin() + g.axis);
    xi.push_back(idx[Ravel(j, indices.shape())]);
    xi.insert(xi.end(), oi.begin() + g.axis + q, oi.end());
    CopyElement(x, Ravel(xi, x.shape()), out, i);
  }
  return absl::OkStatus();
}

namespace {

template <typename T>
void ScatterAdd(const T* dy, const std::vector<int64_t>& idx, const Oir& s, T* dx) {
  const int64_t n = static_cast<int64_t>(idx.size());
  // Tasks own disjoint (outer, column block) pieces of dx; within a task the
  // rows of dy are added in index order, so the sums do not depend on threads.
  constexpr int64_t kBlock = 1024;
  const int64_t blocks = (s.inner + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, kParallelMinElements / std::max<int64_t>(n * std::min(s.inner, kBlock), 1));
  ParallelFor(s.outer * blocks, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t o = t / blocks, c0 = (t % blocks) * kBlock, c1 = std::min(s.inner, c0 + kBlock);
      T* base = dx + o * s.dim * s.inner;
      for (int64_t j = 0; j < n; ++j) {
        const T* src = dy + (o * n + j) * s.inner;
        T* row = base + idx[j] * s.inner;
        for (int64_t c = c0; c < c1; ++c) row[c] += src[c];
      }
    }
  });
}

}  // namespace

absl::Status GatherBackwardKernel(const Tensor& dy, const Tensor& indices, int axis, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("gather_backward", "dy", dy));
  LOOM_RETURN_IF_ERROR(CheckCpu("gather_backward", "indices", indices));
  LOOM_RETURN_IF_ERROR(CheckDType("gather_backward", "dy", dy.dtype(), {DType::kF32, DType::kF64}));
  if (out.ndim() != dy.ndim() - indices.ndim() + 1 || axis < 0 || axis >= out.ndim())
    return ArgError("gather_backward", "out", absl::StrCat("shape ", ShapeToString(out.shape()), " does not fit dy ",
                                                           ShapeToString(dy.shape()), " at axis ", axis));
  LOOM_ASSIGN_OR_RETURN(GatherGeometry g,
                        InferGatherBackward(kernels::MetaOf(dy), kernels::MetaOf(indices), axis, out.dim(axis)));
  LOOM_RETURN_IF_ERROR(CheckOutput("gather_backward", "out", out, g.out.dtype, g.out.shape));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> idx, NormalizeIndices("gather_backward", indices, out.dim(axis)));
  if (out.nbytes() > 0) std::memset(out.raw_data(), 0, out.nbytes());
  const Tensor dyc = dy.Contiguous();
  const Oir s = OirOf(out.shape(), g.axis, out.dim(g.axis));
  if (dy.dtype() == DType::kF64) ScatterAdd(dyc.data<double>(), idx, s, out.data<double>());
  else ScatterAdd(dyc.data<float>(), idx, s, out.data<float>());
  return absl::OkStatus();
}

absl::Status GatherBackwardReference(const Tensor& dy, const Tensor& indices, int axis, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("gather_backward", "dy", dy));
  LOOM_RETURN_IF_ERROR(CheckCpu("gather_backward", "indices", indices));
  if (out.ndim() != dy.ndim() - indices.ndim() + 1 || axis < 0 || axis >= out.ndim())
    return ArgError("gather_backward", "out", "does not fit dy");
  LOOM_ASSIGN_OR_RETURN(GatherGeometry g,
                        InferGatherBackward(kernels::MetaOf(dy), kernels::MetaOf(indices), axis, out.dim(axis)));
  LOOM_RETURN_IF_ERROR(CheckOutput("gather_backward", "out", out, g.out.dtype, g.out.shape));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> idx, NormalizeIndices("gather_backward", indices, out.dim(axis)));
  std::vector<double> acc(out.numel(), 0.0);
  const int q = indices.ndim();
  for (int64_t i = 0; i < dy.numel(); ++i) {
    // dy index (a..., j..., k...) adds into dx at (a..., indices[j...], k...).
    const Shape di = Unravel(i, dy.shape());
    const Shape j(di.begin() + g.axis, di.begin() + g.axis + q);
    Shape xi(di.begin(), di.begin() + g.axis);
    xi.push_back(idx[Ravel(j, indices.shape())]);
    xi.insert(xi.end(), di.begin() + g.axis + q, di.end());
    acc[Ravel(xi, out.shape())] += dy.GetDouble(i);
  }
  for (int64_t i = 0; i < out.numel(); ++i) out.SetDouble(i, acc[i]);
  return absl::OkStatus();
}

}  // namespace loom::kernels::cpu
