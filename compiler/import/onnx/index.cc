// Indexing ONNX ops: Slice, Split, Gather and Trilu.
//
// Slice clamps its constant starts/ends per axis as ONNX specifies and becomes
// one `slice` per sliced axis (attrs axis, start, length = elements taken,
// step, negative steps included). Split is one `slice` per output. Gather over
// a parameter table along axis 0 with run-time ids is `embedding` (the
// token-embedding fast path; ids must lie in [0, rows)); otherwise `gather`
// (negative indices count from the end; constant ones are range-checked at
// import). Trilu is `where` over a constant boolean band mask.
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/import/onnx/op_table.h"

namespace loom::compiler::import::onnx {
namespace {

struct AxisSlice {
  int axis = 0;
  int64_t start = 0, length = 0, step = 1;
};

// ONNX's clamping of (start, end, step) against a dim of size `dim`.
AxisSlice Clamp(int axis, int64_t start, int64_t end, int64_t step, int64_t dim) {
  AxisSlice s;
  s.axis = axis;
  s.step = step;
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::min(std::max(start, int64_t{0}), dim);
    end = std::min(std::max(end, int64_t{0}), dim);
    s.length = end > start ? (end - start + step - 1) / step : 0;
  } else {
    start = std::min(std::max(start, int64_t{0}), dim - 1);
    end = std::min(std::max(end, int64_t{-1}), dim - 1);
    s.length = start > end ? (start - end + (-step) - 1) / (-step) : 0;
  }
  s.start = start;
  return s;
}

absl::StatusOr<Val> SliceAxis(NodeCtx& n, const Val& x, const AxisSlice& s) {
  const int64_t dim = x.meta.shape[s.axis];
  if (s.step == 1 && s.start == 0 && s.length == dim) return x;
  ir::Attrs a{{"axis", int64_t{s.axis}}, {"start", s.start}, {"length", s.length}};
  if (s.step != 1) a.Set("step", s.step);
  return n.Emit1("slice", {x}, a);
}

absl::Status Slice(NodeCtx& n) {
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.opset() >= 10) {
    LOOM_RETURN_IF_ERROR(n.OnlyAttrs({}));
    LOOM_ASSIGN_OR_RETURN(starts, n.ConstInts(1, "starts"));
    LOOM_ASSIGN_OR_RETURN(ends, n.ConstInts(2, "ends"));
    if (n.HasInput(3)) {
      LOOM_ASSIGN_OR_RETURN(axes, n.ConstInts(3, "axes"));
    }
    if (n.HasInput(4)) {
      LOOM_ASSIGN_OR_RETURN(steps, n.ConstInts(4, "steps"));
    }
  } else {
    LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"starts", "ends", "axes"}));
    LOOM_ASSIGN_OR_RETURN(starts, n.AttrInts("starts"));
    LOOM_ASSIGN_OR_RETURN(ends, n.AttrInts("ends"));
    LOOM_ASSIGN_OR_RETURN(axes, n.AttrInts("axes"));
  }
  const int rank = static_cast<int>(x.meta.shape.size());
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return n.Error(absl::StrCat("starts, ends, axes and steps have different lengths (", starts.size(), ", ",
                                ends.size(), ", ", axes.size(), ", ", steps.size(), ")"));
  std::vector<bool> seen(rank, false);
  Val y = x;
  for (size_t i = 0; i < starts.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(int ax, NormAxis(n, axes[i], rank, "axis"));
    if (seen[ax]) return n.Error(absl::StrCat("axis ", axes[i], " is repeated"));
    seen[ax] = true;
    if (steps[i] == 0) return n.Error(absl::StrCat("steps[", i, "] is 0"));
    LOOM_ASSIGN_OR_RETURN(y, SliceAxis(n, y, Clamp(ax, starts[i], ends[i], steps[i], x.meta.shape[ax])));
  }
  return n.SetOut(0, y);
}

absl::Status Split(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"axis", "split"}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  LOOM_ASSIGN_OR_RETURN(int64_t a, n.AttrInt("axis", 0));
  LOOM_ASSIGN_OR_RETURN(int ax, NormAxis(n, a, static_cast<int>(x.meta.shape.size()), "axis"));
  std::vector<int64_t> sizes;
  if (n.opset() >= 13) {
    if (n.HasInput(1)) {
      LOOM_ASSIGN_OR_RETURN(sizes, n.ConstInts(1, "split"));
    }
  } else {
    LOOM_ASSIGN_OR_RETURN(sizes, n.AttrInts("split"));
  }
  const int64_t dim = x.meta.shape[ax];
  const int outs = n.NumOutputs();
  if (sizes.empty()) {
    if (outs == 0 || dim % outs != 0)
      return n.Error(absl::StrCat("axis size ", dim, " does not split into ", outs, " equal parts"));
    sizes.assign(outs, dim / outs);
  }
  if (static_cast<int>(sizes.size()) != outs)
    return n.Error(absl::StrCat("split has ", sizes.size(), " sizes for ", outs, " outputs"));
  int64_t off = 0;
  for (int i = 0; i < outs; ++i) {
    if (sizes[i] < 0) return n.Error(absl::StrCat("split[", i, "] is negative"));
    off += sizes[i];
  }
  if (off != dim) return n.Error(absl::StrCat("split sizes sum to ", off, ", the axis has ", dim));
  off = 0;
  for (int i = 0; i < outs; ++i) {
    LOOM_ASSIGN_OR_RETURN(Val y, SliceAxis(n, x, AxisSlice{ax, off, sizes[i], 1}));
    LOOM_RETURN_IF_ERROR(n.SetOut(i, y));
    off += sizes[i];
  }
  return absl::OkStatus();
}

absl::Status Gather(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"axis"}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  LOOM_ASSIGN_OR_RETURN(Val idx, n.In(1));
  LOOM_ASSIGN_OR_RETURN(int64_t a, n.AttrInt("axis", 0));
  LOOM_ASSIGN_OR_RETURN(int ax, NormAxis(n, a, static_cast<int>(x.meta.shape.size()), "axis"));
  if (idx.meta.dtype != DType::kI32 && idx.meta.dtype != DType::kI64)
    return n.Error(absl::StrCat("indices must be int32 or int64, got ", DTypeName(idx.meta.dtype)));
  const int64_t dim = x.meta.shape[ax];
  if (idx.is_const()) {
    std::vector<int64_t> v = ToInts(idx.value);
    for (int64_t& i : v) {
      if (i < -dim || i >= dim) return n.Error(absl::StrCat("index ", i, " is out of range for axis size ", dim));
      if (i < 0) i += dim;
    }
    idx = n.Const(IntTensor(v, idx.meta.shape, idx.meta.dtype));
  } else if (ax == 0 && x.meta.shape.size() == 2 && IsFloating(x.meta.dtype) && n.builder().IsParam(x)) {
    // A table lookup by run-time ids: the embedding op (ids in [0, rows)).
    LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("embedding", {x, idx}));
    return n.SetOut(0, y);
  }
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("gather", {x, idx}, ir::Attrs{{"axis", int64_t{ax}}}));
  return n.SetOut(0, y);
}

absl::Status Trilu(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"upper"}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  LOOM_ASSIGN_OR_RETURN(int64_t upper, n.AttrInt("upper", 1));
  int64_t k = 0;
  if (n.HasInput(1)) {
    LOOM_ASSIGN_OR_RETURN(double kv, n.ConstScalar(1, "k"));
    k = static_cast<int64_t>(kv);
  }
  const Shape& s = x.meta.shape;
  LOOM_RETURN_IF_ERROR(n.Check(s.size() >= 2, "input must have rank >= 2"));
  const int64_t rows = s[s.size() - 2], cols = s[s.size() - 1];
  Tensor mask = Tensor::MustEmpty({rows, cols}, DType::kBool);
  uint8_t* m = static_cast<uint8_t*>(mask.raw_data());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) m[i * cols + j] = upper ? (j - i >= k) : (j - i <= k);
  LOOM_ASSIGN_OR_RETURN(Val zero, n.Scalar(0, x.meta.dtype));
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("where", {n.Const(mask), x, zero}));
  return n.SetOut(0, y);
}

}  // namespace

std::vector<OpEntry> IndexOps() {
  return {
      {"Slice", "index", 7, "slice", Slice},
      {"Split", "index", 7, "slice", Split},
      {"Gather", "index", 7, "gather | embedding", Gather},
      {"Trilu", "index", 14, "where", Trilu},
  };
}

}  // namespace loom::compiler::import::onnx
