// Registers the reductions (kernels in reduce.h): sum, mean, max, min (attrs
// axes = ints or a single int, negatives allowed, absent/empty = all dims;
// keepdim = bool) and sum_to (attr shape). sum, max and min also take
// i32/i64.
//
// Gradients: the output gradient is reshaped to the keepdim shape and
// broadcast_to the input's shape (mean then scales by 1/count). max sends the
// gradient to every element equal to the max: gx = g - relu_backward(g, max - x),
// so tied maxima each receive the full gradient; min likewise with x - min.
// sum_to's gradient is broadcast_to; the gradient of broadcast_to is sum_to
// (register_shape.cc).
#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/op_util.h"
#include "kernels/cpu/reduce.h"

namespace loom::kernels::cpu::internal {
namespace {

constexpr V kNone = GradBuilder::kNone;

// attr axes: a list of ints, or a single int; absent = all dims. Anything
// else is an error (never a silent reduce-over-everything).
absl::StatusOr<std::vector<int64_t>> AxesAttr(absl::string_view op, const Attrs& attrs) {
  auto it = attrs.values().find("axes");
  if (it == attrs.values().end()) return std::vector<int64_t>{};
  if (auto* v = absl::get_if<std::vector<int64_t>>(&it->second)) return *v;
  if (auto* i = absl::get_if<int64_t>(&it->second)) return std::vector<int64_t>{*i};
  return ArgError(op, "axes", "expected a list of ints");
}

// g (of the reduced shape) broadcast back over x's shape.
absl::StatusOr<V> BroadcastBack(GradBuilder& b, V g, const Shape& x_shape, const std::vector<bool>& mask) {
  Shape keep = ReducedShape(x_shape, mask, /*keepdim=*/true);
  if (b.Meta(g).shape != keep) {
    LOOM_ASSIGN_OR_RETURN(g, b.Emit1("reshape", {g}, Attrs{{"shape", ToVec(keep)}}));
  }
  if (keep == x_shape) return g;
  return b.Emit1("broadcast_to", {g}, Attrs{{"shape", ToVec(x_shape)}});
}

OpDef MakeReduce(ReduceOp op, std::string doc) {
  OpDef def;
  def.name = std::string(OpName(op));
  def.doc = std::move(doc);
  def.num_inputs = 1;
  def.infer = [op](absl::Span<const TensorMeta> in, const Attrs& attrs) -> InferResult {
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesAttr(OpName(op), attrs));
    LOOM_ASSIGN_OR_RETURN(TensorMeta m, InferReduce(op, in[0], axes, attrs.GetBool("keepdim")));
    return std::vector<TensorMeta>{m};
  };
  auto mask_of = [op](const Tensor& x, const Attrs& attrs) -> absl::StatusOr<std::vector<bool>> {
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesAttr(OpName(op), attrs));
    return AxesMask(OpName(op), "axes", axes, x.ndim());
  };
  def.kernels[DeviceKind::kCPU] = [op, mask_of](absl::Span<const Tensor> in, absl::Span<Tensor> out,
                                                const Attrs& attrs) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(std::vector<bool> mask, mask_of(in[0], attrs));
    return ReduceKernel(op, in[0], mask, out[0]);
  };
  def.kernel_dtypes = CpuDTypes({DType::kF32, DType::kF64, DType::kBF16});
  def.reference = [op, mask_of](absl::Span<const Tensor> in, absl::Span<Tensor> out,
                                const Attrs& attrs) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(std::vector<bool> mask, mask_of(in[0], attrs));
    return ReduceReference(op, in[0], mask, out[0]);
  };
  def.grad = [op](GradBuilder& b, const GradContext& ctx) -> GradResult {
    const V g = ctx.grad_outputs[0], x = ctx.inputs[0];
    if (g == kNone) return std::vector<V>{kNone};
    const Shape xs = b.Meta(x).shape;
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesAttr(OpName(op), ctx.attrs));
    LOOM_ASSIGN_OR_RETURN(std::vector<bool> mask, AxesMask(OpName(op), "axes", axes, static_cast<int>(xs.size())));
    LOOM_ASSIGN_OR_RETURN(V gb, BroadcastBack(b, g, xs, mask));
    if (op == ReduceOp::kSum) return std::vector<V>{gb};
    if (op == ReduceOp::kMean) {
      int64_t count = 1;
      for (size_t d = 0; d < xs.size(); ++d)
        if (mask[d]) count *= xs[d];
      LOOM_ASSIGN_OR_RETURN(V gx, b.Emit1("scale", {gb}, Attrs{{"s", 1.0 / static_cast<double>(count)}}));
      return std::vector<V>{gx};
    }
    // max (min): keep g where x equals the max (min); max - x (x - min) > 0 elsewhere.
    LOOM_ASSIGN_OR_RETURN(V yb, BroadcastBack(b, ctx.outputs[0], xs, mask));
    std::vector<V> gap_args = op == ReduceOp::kMin ? std::vector<V>{x, yb} : std::vector<V>{yb, x};
    LOOM_ASSIGN_OR_RETURN(V gap, b.Emit1("sub", gap_args));
    LOOM_ASSIGN_OR_RETURN(V below, b.Emit1("relu_backward", {gb, gap}));
    LOOM_ASSIGN_OR_RETURN(V gx, b.Emit1("sub", {gb, below}));
    return std::vector<V>{gx};
  };
  using Ints = std::vector<int64_t>;
  def.cases = {
      Case("all_3x5x7", {Spec({3, 5, 7})}),
      Case("last_keepdim", {Spec({3, 5, 7})}, Attrs{{"axes", Ints{-1}}, {"keepdim", true}}),
      Case("first_cols", {Spec({7, 9})}, Attrs{{"axes", Ints{0}}}),
      Case("middle_run", {Spec({2, 3, 4, 5})}, Attrs{{"axes", Ints{1, 2}}}),
      Case("split_axes_keepdim", {Spec({3, 4, 5, 2})}, Attrs{{"axes", Ints{-1, 1}}, {"keepdim", true}}),
      Case("single_int_axis", {Spec({4, 6})}, Attrs{{"axes", int64_t{-2}}}),
  };
  if (op != ReduceOp::kMean) {
    def.cases.push_back(Case("i64_split_axes", {TypedSpec({3, 4, 5}, DType::kI64, -1000, 1000)},
                             Attrs{{"axes", Ints{0, 2}}, {"keepdim", true}}));
    def.cases.push_back(Case("i32_all", {TypedSpec({7, 9}, DType::kI32, -1000, 1000)}));
  }
  return def;
}

OpDef MakeSumTo() {
  OpDef def;
  def.name = "sum_to";
  def.doc = "sums x over its broadcast dims so the result has attr shape (the adjoint of broadcast_to)";
  def.num_inputs = 1;
  def.infer = [](absl::Span<const TensorMeta> in, const Attrs& attrs) -> InferResult {
    LOOM_RETURN_IF_ERROR(CheckFloating("sum_to", "x", in[0].dtype));
    if (!attrs.Has("shape")) return ArgError("sum_to", "shape", "missing attribute (a list of ints)");
    std::vector<int64_t> to = attrs.GetInts("shape");
    LOOM_RETURN_IF_ERROR(SumToMask(in[0].shape, to).status());
    return std::vector<TensorMeta>{{in[0].dtype, Shape(to.begin(), to.end())}};
  };
  def.kernels[DeviceKind::kCPU] = [](absl::Span<const Tensor> in, absl::Span<Tensor> out,
                                     const Attrs& attrs) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(std::vector<bool> mask, SumToMask(in[0].shape(), attrs.GetInts("shape")));
    return ReduceKernel(ReduceOp::kSum, in[0], mask, out[0]);
  };
  def.kernel_dtypes = CpuDTypes({DType::kF32, DType::kF64, DType::kBF16});
  def.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& attrs) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(std::vector<bool> mask, SumToMask(in[0].shape(), attrs.GetInts("shape")));
    return ReduceReference(ReduceOp::kSum, in[0], mask, out[0]);
  };
  def.grad = [](GradBuilder& b, const GradContext& ctx) -> GradResult {
    if (ctx.grad_outputs[0] == kNone) return std::vector<V>{kNone};
    LOOM_ASSIGN_OR_RETURN(V gx, b.Emit1("broadcast_to", {ctx.grad_outputs[0]},
                                        Attrs{{"shape", ToVec(b.Meta(ctx.inputs[0]).shape)}}));
    return std::vector<V>{gx};
  };
  using Ints = std::vector<int64_t>;
  def.cases = {
      Case("lead_and_inner", {Spec({3, 5, 7})}, Attrs{{"shape", Ints{5, 1}}}),
      Case("middle_one", {Spec({2, 3, 4})}, Attrs{{"shape", Ints{2, 1, 4}}}),
      Case("to_scalar", {Spec({4, 3})}, Attrs{{"shape", Ints{}}}),
      Case("identity", {Spec({3, 2})}, Attrs{{"shape", Ints{3, 2}}}),
  };
  return def;
}

LOOM_REGISTER_OP(MakeReduce(ReduceOp::kSum, "sum over attr axes (empty = all); attr keepdim"));
LOOM_REGISTER_OP(MakeReduce(ReduceOp::kMean, "mean over attr axes (empty = all); attr keepdim"));
LOOM_REGISTER_OP(MakeReduce(ReduceOp::kMax, "max over attr axes (empty = all); attr keepdim; NaN propagates"));
LOOM_REGISTER_OP(MakeReduce(ReduceOp::kMin, "min over attr axes (empty = all); attr keepdim; NaN propagates"));
LOOM_REGISTER_OP(MakeSumTo());

}  // namespace
}  // namespace loom::kernels::cpu::internal
