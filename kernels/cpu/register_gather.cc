// Registers gather(x, indices) {axis = 0} and gather_backward(dy, indices)
// {axis, dim_size} (kernels in gather.h).
//
// Gradients: gather -> gather_backward(dy, indices) with dim_size = x's size
// along axis; gather_backward -> gather(ddx, indices) (it is linear in dy).
// indices take none.
#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/gather.h"
#include "kernels/cpu/op_util.h"

namespace loom::kernels::cpu::internal {
namespace {

constexpr V kNone = GradBuilder::kNone;
using KernelSpan = absl::Span<const Tensor>;
using OutSpan = absl::Span<Tensor>;

Attrs AxisAttr(int64_t axis) { return Attrs{{"axis", axis}}; }

OpDef MakeGather() {
  OpDef def;
  def.name = "gather";
  def.doc = "x indexed along attr axis (default 0) by i32/i64 indices (ONNX Gather; negative indices from the end)";
  def.num_inputs = 2;
  def.infer = [](absl::Span<const TensorMeta> in, const Attrs& attrs) -> InferResult {
    LOOM_ASSIGN_OR_RETURN(GatherGeometry g, InferGather(in[0], in[1], attrs.GetInt("axis")));
    return std::vector<TensorMeta>{g.out};
  };
  def.kernels[DeviceKind::kCPU] = [](KernelSpan in, OutSpan out, const Attrs& attrs) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(GatherGeometry g,
                          InferGather(kernels::MetaOf(in[0]), kernels::MetaOf(in[1]), attrs.GetInt("axis")));
    return GatherKernel(in[0], in[1], g.axis, out[0]);
  };
  def.kernel_dtypes = CpuDTypes({DType::kF32, DType::kF64, DType::kBF16});
  def.reference = [](KernelSpan in, OutSpan out, const Attrs& attrs) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(GatherGeometry g,
                          InferGather(kernels::MetaOf(in[0]), kernels::MetaOf(in[1]), attrs.GetInt("axis")));
    return GatherReference(in[0], in[1], g.axis, out[0]);
  };
  def.grad = [](GradBuilder& b, const GradContext& ctx) -> GradResult {
    const TensorMeta x = b.Meta(ctx.inputs[0]);
    if (ctx.grad_outputs[0] == kNone || !IsFloating(x.dtype)) return std::vector<V>{kNone, kNone};
    LOOM_ASSIGN_OR_RETURN(GatherGeometry g, InferGather(x, b.Meta(ctx.inputs[1]), ctx.attrs.GetInt("axis")));
    LOOM_ASSIGN_OR_RETURN(V dx, b.Emit1("gather_backward", {ctx.grad_outputs[0], ctx.inputs[1]},
                                        Attrs{{"axis", int64_t{g.axis}}, {"dim_size", x.shape[g.axis]}}));
    return std::vector<V>{dx, kNone};
  };
  // Indices drawn from [-dim, dim): negative ones and repeats in every case.
  def.cases = {
      Case("axis0_rows", {Spec({7, 5}), TypedSpec({9}, DType::kI64, -7, 7)}, AxisAttr(0)),
      Case("axis1_2d_indices", {Spec({3, 5, 4}), TypedSpec({2, 3}, DType::kI32, -5, 5)}, AxisAttr(1)),
      Case("last_axis_scalar_index", {Spec({3, 5, 4}), TypedSpec({}, DType::kI64, -4, 4)}, AxisAttr(-1)),
      Case("i64_shape_values", {TypedSpec({6, 3}, DType::kI64, -1000, 1000), TypedSpec({2}, DType::kI64, -6, 6)},
           AxisAttr(0)),
      Case("bool", {TypedSpec({4, 6}, DType::kBool), TypedSpec({3}, DType::kI32, -6, 6)}, AxisAttr(1)),
  };
  return def;
}

OpDef MakeGatherBackward() {
  OpDef def;
  def.name = "gather_backward";
  def.doc = "zeros with dim axis = dim_size, dy's rows scatter-added at indices in index order (adjoint of gather)";
  def.num_inputs = 2;
  def.infer = [](absl::Span<const TensorMeta> in, const Attrs& attrs) -> InferResult {
    if (!attrs.Has("dim_size")) return ArgError("gather_backward", "dim_size", "missing attribute (an int)");
    LOOM_ASSIGN_OR_RETURN(GatherGeometry g,
                          InferGatherBackward(in[0], in[1], attrs.GetInt("axis"), attrs.GetInt("dim_size")));
    return std::vector<TensorMeta>{g.out};
  };
  auto geometry = [](KernelSpan in, const Attrs& attrs) {
    return InferGatherBackward(kernels::MetaOf(in[0]), kernels::MetaOf(in[1]), attrs.GetInt("axis"),
                               attrs.GetInt("dim_size"));
  };
  def.kernels[DeviceKind::kCPU] = [geometry](KernelSpan in, OutSpan out, const Attrs& attrs) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(GatherGeometry g, geometry(in, attrs));
    return GatherBackwardKernel(in[0], in[1], g.axis, out[0]);
  };
  def.kernel_dtypes = CpuDTypes({DType::kF32, DType::kF64});
  def.reference = [geometry](KernelSpan in, OutSpan out, const Attrs& attrs) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(GatherGeometry g, geometry(in, attrs));
    return GatherBackwardReference(in[0], in[1], g.axis, out[0]);
  };
  def.grad = [](GradBuilder& b, const GradContext& ctx) -> GradResult {
    if (ctx.grad_outputs[0] == kNone) return std::vector<V>{kNone, kNone};
    LOOM_ASSIGN_OR_RETURN(GatherGeometry g, InferGatherBackward(b.Meta(ctx.inputs[0]), b.Meta(ctx.inputs[1]),
                                                                ctx.attrs.GetInt("axis"),
                                                                ctx.attrs.GetInt("dim_size")));
    LOOM_ASSIGN_OR_RETURN(V ddy, b.Emit1("gather", {ctx.grad_outputs[0], ctx.inputs[1]}, AxisAttr(g.axis)));
    return std::vector<V>{ddy, kNone};
  };
  auto attrs = [](int64_t axis, int64_t dim_size) { return Attrs{{"axis", axis}, {"dim_size", dim_size}}; };
  def.cases = {
      Case("axis0_repeats", {Spec({9, 5}), TypedSpec({9}, DType::kI64, -4, 4)}, attrs(0, 4)),
      Case("axis1_2d_indices", {Spec({3, 2, 3, 4}), TypedSpec({2, 3}, DType::kI32, -5, 5)}, attrs(1, 5)),
      Case("neg_axis_scalar_index", {Spec({3, 5}), TypedSpec({}, DType::kI64, -4, 4)}, attrs(-1, 4)),
  };
  return def;
}

LOOM_REGISTER_OP(MakeGather());
LOOM_REGISTER_OP(MakeGatherBackward());

}  // namespace
}  // namespace loom::kernels::cpu::internal
