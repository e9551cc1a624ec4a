// Registers the shape and data-movement ops (kernels in shape_ops.h):
//   reshape (attr shape, one -1 allowed), permute (attr dims), slice (attrs
//   axis, start, length, step = 1), slice_backward (attrs axis, start,
//   full_len, step = 1), concat
//   (variadic, attr axis), broadcast_to (attr shape), cast (attr dtype),
//   fill (no inputs; attrs shape, dtype = "f32", value = 0), zeros_like,
//   ones_like.
//
// Gradients: reshape back; inverse permute; slice -> slice_backward (pad with
// zeros) and back; concat -> one slice of the gradient per input;
// broadcast_to -> sum_to; cast -> cast back to the input dtype (none from an
// integer or bool input).
//
// Every op here takes any dtype; the integer and bool cases below check that
// the kernels move those elements exactly as the references do.
#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/op_util.h"
#include "kernels/cpu/shape_ops.h"

namespace loom::kernels::cpu::internal {
namespace {

constexpr V kNone = GradBuilder::kNone;
using Ints = std::vector<int64_t>;
using KernelSpan = absl::Span<const Tensor>;
using OutSpan = absl::Span<Tensor>;

// Movement ops take any dtype; these are the ones the consistency test runs.
std::map<DeviceKind, std::vector<DType>> MoveDTypes() {
  return CpuDTypes({DType::kF32, DType::kF64, DType::kBF16});
}

// Integer and bool inputs of `shape` (i64 values in [-1000, 1000)).
kernels::InputSpec I64(std::vector<int64_t> shape) { return TypedSpec(std::move(shape), DType::kI64, -1000, 1000); }
kernels::InputSpec Bool(std::vector<int64_t> shape) { return TypedSpec(std::move(shape), DType::kBool); }

absl::Status RequireAttr(absl::string_view op, const Attrs& attrs, const std::string& name,
                         absl::string_view what) {
  if (attrs.Has(name)) return absl::OkStatus();
  return ArgError(op, name, absl::StrCat("missing attribute (", what, ")"));
}

OpDef MakeReshape() {
  OpDef def;
  def.name = "reshape";
  def.doc = "x viewed with attr shape (same element count, row-major; one -1 is inferred)";
  def.infer = [](absl::Span<const TensorMeta> in, const Attrs& attrs) -> InferResult {
    LOOM_RETURN_IF_ERROR(RequireAttr("reshape", attrs, "shape", "a list of ints"));
    LOOM_ASSIGN_OR_RETURN(Shape s, InferReshape(in[0].shape, attrs.GetInts("shape")));
    return std::vector<TensorMeta>{{in[0].dtype, s}};
  };
  def.kernels[DeviceKind::kCPU] = [](KernelSpan in, OutSpan out, const Attrs&) { return ReshapeKernel(in[0], out[0]); };
  def.kernel_dtypes = MoveDTypes();
  def.reference = [](KernelSpan in, OutSpan out, const Attrs&) { return ReshapeReference(in[0], out[0]); };
  def.grad = [](GradBuilder& b, const GradContext& ctx) -> GradResult {
    if (ctx.grad_outputs[0] == kNone) return std::vector<V>{kNone};
    LOOM_ASSIGN_OR_RETURN(V gx, b.Emit1("reshape", {ctx.grad_outputs[0]},
                                        Attrs{{"shape", ToVec(b.Meta(ctx.inputs[0]).shape)}}));
    return std::vector<V>{gx};
  };
  def.cases = {
      Case("infer_dim", {Spec({3, 5, 7})}, Attrs{{"shape", Ints{5, -1}}}),
      Case("split_merge", {Spec({2, 3, 4})}, Attrs{{"shape", Ints{4, 1, 6}}}),
      Case("to_scalar", {Spec({1, 1})}, Attrs{{"shape", Ints{}}}),
      Case("i64", {I64({3, 5, 7})}, Attrs{{"shape", Ints{7, -1}}}),
      Case("bool", {Bool({2, 6})}, Attrs{{"shape", Ints{3, 4}}}),
  };
  return def;
}

OpDef MakePermute() {
  OpDef def;
  def.name = "permute";
  def.doc = "out dim i is x dim dims[i] (attr dims, a permutation; negatives allowed)";
  def.infer = [](absl::Span<const TensorMeta> in, const Attrs& attrs) -> InferResult {
    LOOM_RETURN_IF_ERROR(RequireAttr("permute", attrs, "dims", "a permutation"));
    LOOM_ASSIGN_OR_RETURN(std::vector<int> p, NormalizePerm(attrs.GetInts("dims"), in[0].shape.size()));
    Shape s;
    for (int d : p) s.push_back(in[0].shape[d]);
    return std::vector<TensorMeta>{{in[0].dtype, s}};
  };
  def.kernels[DeviceKind::kCPU] = [](KernelSpan in, OutSpan out, const Attrs& attrs) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(std::vector<int> p, NormalizePerm(attrs.GetInts("dims"), in[0].ndim()));
    return PermuteKernel(in[0], p, out[0]);
  };
  def.kernel_dtypes = MoveDTypes();
  def.reference = [](KernelSpan in, OutSpan out, const Attrs& attrs) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(std::vector<int> p, NormalizePerm(attrs.GetInts("dims"), in[0].ndim()));
    return PermuteReference(in[0], p, out[0]);
  };
  def.grad = [](GradBuilder& b, const GradContext& ctx) -> GradResult {
    if (ctx.grad_outputs[0] == kNone) return std::vector<V>{kNone};
    LOOM_ASSIGN_OR_RETURN(std::vector<int> p,
                          NormalizePerm(ctx.attrs.GetInts("dims"), b.Meta(ctx.inputs[0]).shape.size()));
    Ints inv(p.size());
    for (size_t i = 0; i < p.size(); ++i) inv[p[i]] = static_cast<int64_t>(i);
    LOOM_ASSIGN_OR_RETURN(V gx, b.Emit1("permute", {ctx.grad_outputs[0]}, Attrs{{"dims", inv}}));
    return std::vector<V>{gx};
  };
  def.cases = {
      Case("rotate_3x5x7", {Spec({3, 5, 7})}, Attrs{{"dims", Ints{2, 0, 1}}}),
      Case("neg_dims_4d", {Spec({2, 3, 4, 5})}, Attrs{{"dims", Ints{-1, 0, 2, 1}}}),
      Case("i64", {I64({3, 5, 7})}, Attrs{{"dims", Ints{2, 0, 1}}}),
      Case("bool", {Bool({4, 9})}, Attrs{{"dims", Ints{1, 0}}}),
  };
  return def;
}

absl::StatusOr<SliceArgs> SliceOf(absl::Span<const int64_t> x, const Attrs& attrs) {
  LOOM_RETURN_IF_ERROR(RequireAttr("slice", attrs, "start", "an int"));
  LOOM_RETURN_IF_ERROR(RequireAttr("slice", attrs, "length", "an int"));
  return NormalizeSlice(x, attrs.GetInt("axis"), attrs.GetInt("start"), attrs.GetInt("length"),
                        attrs.GetInt("step", 1));
}

// The attrs of slice / slice_backward with `step` only when it is not 1, so
// graphs without steps print as they always have.
Attrs SliceAttrs(int64_t axis, int64_t start, const char* len_name, int64_t len, int64_t step) {
  Attrs a{{"axis", axis}, {"start", start}, {len_name, len}};
  if (step != 1) a.Set("step", step);
  return a;
}

OpDef MakeSlice() {
  OpDef def;
  def.name = "slice";
  def.doc = "length elements x[start + k * step] along attr axis (start may be negative; step default 1, may be negative)";
  def.infer = [](absl::Span<const TensorMeta> in, const Attrs& attrs) -> InferResult {
    LOOM_ASSIGN_OR_RETURN(SliceArgs s, SliceOf(in[0].shape, attrs));
    Shape out = in[0].shape;
    out[s.axis] = s.length;
    return std::vector<TensorMeta>{{in[0].dtype, out}};
  };
  def.kernels[DeviceKind::kCPU] = [](KernelSpan in, OutSpan out, const Attrs& attrs) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(SliceArgs s, SliceOf(in[0].shape(), attrs));
    return SliceKernel(in[0], s, out[0]);
  };
  def.kernel_dtypes = MoveDTypes();
  def.reference = [](KernelSpan in, OutSpan out, const Attrs& attrs) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(SliceArgs s, SliceOf(in[0].shape(), attrs));
    return SliceReference(in[0], s, out[0]);
  };
  def.grad = [](GradBuilder& b, const GradContext& ctx) -> GradResult {
    if (ctx.grad_outputs[0] == kNone) return std::vector<V>{kNone};
    const Shape xs = b.Meta(ctx.inputs[0]).shape;
    LOOM_ASSIGN_OR_RETURN(SliceArgs s, SliceOf(xs, ctx.attrs));
    LOOM_ASSIGN_OR_RETURN(V gx, b.Emit1("slice_backward", {ctx.grad_outputs[0]},
                                        SliceAttrs(s.axis, s.start, "full_len", xs[s.axis], s.step)));
    return std::vector<V>{gx};
  };
  def.cases = {
      Case("middle_3x5x7", {Spec({3, 5, 7})}, Attrs{{"axis", int64_t{1}}, {"start", int64_t{1}}, {"length", int64_t{3}}}),
      Case("neg_axis_neg_start", {Spec({3, 5, 7})}, Attrs{{"axis", int64_t{-1}}, {"start", int64_t{-4}}, {"length", int64_t{4}}}),
      Case("empty", {Spec({4, 3})}, Attrs{{"axis", int64_t{0}}, {"start", int64_t{2}}, {"length", int64_t{0}}}),
      Case("i64", {I64({3, 5, 7})}, Attrs{{"axis", int64_t{2}}, {"start", int64_t{-5}}, {"length", int64_t{3}}}),
      Case("bool", {Bool({6, 4})}, Attrs{{"axis", int64_t{0}}, {"start", int64_t{1}}, {"length", int64_t{4}}}),
      Case("step2", {Spec({3, 8, 5})}, SliceAttrs(1, 1, "length", 4, 2)),
      Case("reverse", {Spec({3, 5, 7})}, SliceAttrs(-1, -1, "length", 7, -1)),
      Case("neg_step3_neg_start", {Spec({11, 4})}, SliceAttrs(0, -2, "length", 3, -3)),
      Case("step_i64", {I64({4, 9})}, SliceAttrs(1, 0, "length", 3, 4)),
  };
  return def;
}

OpDef MakeSliceBackward() {
  OpDef def;
  def.name = "slice_backward";
  def.doc = "zeros with dim axis = full_len, dy written at start + k * step (step default 1): the adjoint of slice";
  def.infer = [](absl::Span<const TensorMeta> in, const Attrs& attrs) -> InferResult {
    LOOM_RETURN_IF_ERROR(RequireAttr("slice_backward", attrs, "full_len", "an int"));
    LOOM_ASSIGN_OR_RETURN(Shape s, InferSliceBackward(in[0].shape, attrs.GetInt("axis"), attrs.GetInt("start"),
                                                      attrs.GetInt("full_len"), attrs.GetInt("step", 1)));
    return std::vector<TensorMeta>{{in[0].dtype, s}};
  };
  def.kernels[DeviceKind::kCPU] = [](KernelSpan in, OutSpan out, const Attrs& attrs) {
    return SliceBackwardKernel(in[0], attrs.GetInt("axis"), attrs.GetInt("start"), out[0], attrs.GetInt("step", 1));
  };
  def.kernel_dtypes = MoveDTypes();
  def.reference = [](KernelSpan in, OutSpan out, const Attrs& attrs) {
    return SliceBackwardReference(in[0], attrs.GetInt("axis"), attrs.GetInt("start"), out[0],
                                  attrs.GetInt("step", 1));
  };
  def.grad = [](GradBuilder& b, const GradContext& ctx) -> GradResult {
    if (ctx.grad_outputs[0] == kNone) return std::vector<V>{kNone};
    const Shape dys = b.Meta(ctx.inputs[0]).shape;
    LOOM_ASSIGN_OR_RETURN(int axis, NormalizeAxis("slice_backward", "axis", ctx.attrs.GetInt("axis"), dys.size()));
    LOOM_ASSIGN_OR_RETURN(V g, b.Emit1("slice", {ctx.grad_outputs[0]},
                                       SliceAttrs(axis, ctx.attrs.GetInt("start"), "length", dys[axis],
                                                  ctx.attrs.GetInt("step", 1))));
    return std::vector<V>{g};
  };
  def.cases = {
      Case("pad_middle", {Spec({3, 2, 7})},
           Attrs{{"axis", int64_t{1}}, {"start", int64_t{1}}, {"full_len", int64_t{5}}}),
      Case("neg_axis_at_end", {Spec({4, 3})},
           Attrs{{"axis", int64_t{-1}}, {"start", int64_t{2}}, {"full_len", int64_t{5}}}),
      Case("step3", {Spec({3, 4, 2})}, SliceAttrs(1, 1, "full_len", 11, 3)),
      Case("reverse_step2", {Spec({3, 5})}, SliceAttrs(0, 6, "full_len", 7, -2)),
  };
  return def;
}

OpDef MakeConcat() {
  OpDef def;
  def.name = "concat";
  def.doc = "joins the inputs along attr axis (variadic; same dtype and shape outside axis)";
  def.num_inputs = -1;
  def.infer = [](absl::Span<const TensorMeta> in, const Attrs& attrs) -> InferResult {
    LOOM_ASSIGN_OR_RETURN(TensorMeta m, InferConcat(in, attrs.GetInt("axis")));
    return std::vector<TensorMeta>{m};
  };
  auto axis_of = [](KernelSpan in, const Attrs& attrs) -> absl::StatusOr<int> {
    if (in.empty()) return ArgError("concat", "inputs", "needs at least one input");
    return NormalizeAxis("concat", "axis", attrs.GetInt("axis"), in[0].ndim());
  };
  def.kernels[DeviceKind::kCPU] = [axis_of](KernelSpan in, OutSpan out, const Attrs& attrs) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(int axis, axis_of(in, attrs));
    return ConcatKernel(in, axis, out[0]);
  };
  def.kernel_dtypes = MoveDTypes();
  def.reference = [axis_of](KernelSpan in, OutSpan out, const Attrs& attrs) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(int axis, axis_of(in, attrs));
    return ConcatReference(in, axis, out[0]);
  };
  def.grad = [](GradBuilder& b, const GradContext& ctx) -> GradResult {
    std::vector<V> grads(ctx.inputs.size(), kNone);
    const V g = ctx.grad_outputs[0];
    if (g == kNone) return grads;
    LOOM_ASSIGN_OR_RETURN(int axis, NormalizeAxis("concat", "axis", ctx.attrs.GetInt("axis"),
                                                  b.Meta(ctx.inputs[0]).shape.size()));
    int64_t off = 0;
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      const int64_t len = b.Meta(ctx.inputs[i]).shape[axis];
      LOOM_ASSIGN_OR_RETURN(grads[i], b.Emit1("slice", {g}, Attrs{{"axis", int64_t{axis}}, {"start", off},
                                                                  {"length", len}}));
      off += len;
    }
    return grads;
  };
  def.cases = {
      Case("three_middle", {Spec({3, 2, 7}), Spec({3, 5, 7}), Spec({3, 1, 7})}, Attrs{{"axis", int64_t{1}}}),
      Case("rows", {Spec({2, 3}), Spec({4, 3})}, Attrs{{"axis", int64_t{0}}}),
      Case("neg_axis_with_empty", {Spec({3, 4}), Spec({3, 0}), Spec({3, 1})}, Attrs{{"axis", int64_t{-1}}}),
      Case("i64", {I64({2}), I64({1}), I64({3})}, Attrs{{"axis", int64_t{0}}}),
      Case("bool", {Bool({2, 3}), Bool({2, 2})}, Attrs{{"axis", int64_t{1}}}),
  };
  return def;
}

OpDef MakeBroadcastTo() {
  OpDef def;
  def.name = "broadcast_to";
  def.doc = "x broadcast (numpy rules) to attr shape, materialised";
  def.infer = [](absl::Span<const TensorMeta> in, const Attrs& attrs) -> InferResult {
    LOOM_RETURN_IF_ERROR(RequireAttr("broadcast_to", attrs, "shape", "a list of ints"));
    Ints to = attrs.GetInts("shape");
    LOOM_RETURN_IF_ERROR(CheckShapeAttr("broadcast_to", "shape", to));
    LOOM_RETURN_IF_ERROR(CheckBroadcastableTo("broadcast_to", "x", in[0].shape, to));
    return std::vector<TensorMeta>{{in[0].dtype, Shape(to.begin(), to.end())}};
  };
  def.kernels[DeviceKind::kCPU] = [](KernelSpan in, OutSpan out, const Attrs&) { return BroadcastToKernel(in[0], out[0]); };
  def.kernel_dtypes = MoveDTypes();
  def.reference = [](KernelSpan in, OutSpan out, const Attrs&) { return BroadcastToReference(in[0], out[0]); };
  def.grad = [](GradBuilder& b, const GradContext& ctx) -> GradResult {
    if (ctx.grad_outputs[0] == kNone) return std::vector<V>{kNone};
    LOOM_ASSIGN_OR_RETURN(V gx, SumToShape(b, ctx.grad_outputs[0], b.Meta(ctx.inputs[0]).shape));
    return std::vector<V>{gx};
  };
  def.cases = {
      Case("lead_and_inner", {Spec({5, 1})}, Attrs{{"shape", Ints{3, 5, 7}}}),
      Case("from_scalar", {Spec({})}, Attrs{{"shape", Ints{2, 3}}}),
      Case("middle", {Spec({3, 1, 4})}, Attrs{{"shape", Ints{3, 2, 4}}}),
      Case("i64", {I64({5, 1})}, Attrs{{"shape", Ints{2, 5, 3}}}),
      Case("bool", {Bool({1, 4})}, Attrs{{"shape", Ints{3, 4}}}),
  };
  return def;
}

OpDef MakeCast() {
  OpDef def;
  def.name = "cast";
  def.doc = "x converted to attr dtype (\"f32\", \"bf16\", ...; round to nearest even)";
  def.infer = [](absl::Span<const TensorMeta> in, const Attrs& attrs) -> InferResult {
    LOOM_RETURN_IF_ERROR(RequireAttr("cast", attrs, "dtype", "a dtype name"));
    auto dt = ParseDType(attrs.GetString("dtype"));
    if (!dt.ok()) return ArgError("cast", "dtype", dt.status().message());
    return std::vector<TensorMeta>{{*dt, in[0].shape}};
  };
  def.kernels[DeviceKind::kCPU] = [](KernelSpan in, OutSpan out, const Attrs&) { return CastKernel(in[0], out[0]); };
  def.kernel_dtypes = MoveDTypes();
  def.reference = [](KernelSpan in, OutSpan out, const Attrs&) { return CastReference(in[0], out[0]); };
  def.grad = [](GradBuilder& b, const GradContext& ctx) -> GradResult {
    const DType in_dt = b.Meta(ctx.inputs[0]).dtype;
    if (ctx.grad_outputs[0] == kNone || !IsFloating(in_dt)) return std::vector<V>{kNone};
    LOOM_ASSIGN_OR_RETURN(V gx, b.Emit1("cast", {ctx.grad_outputs[0]},
                                        Attrs{{"dtype", std::string(DTypeName(in_dt))}}));
    return std::vector<V>{gx};
  };
  // Narrowing casts make finite differences meaningless: those inputs are
  // checked forward only.
  kernels::InputSpec narrow = Spec({3, 5, 7});
  narrow.differentiable = false;
  kernels::InputSpec narrow_vec = Spec({13});
  narrow_vec.differentiable = false;
  // Quarters in [-8, 8): exact in bf16, so truncation toward zero (of 2.75,
  // -2.75, ...) gives the same integers from every floating dtype.
  kernels::InputSpec quarters = Spec({3, 5, 7});
  quarters.differentiable = false;
  quarters.fill = [](Tensor& t, const Philox& rng) {
    for (int64_t e = 0; e < t.numel(); ++e) t.SetDouble(e, std::floor(64 * rng.Uniform(e)) / 4 - 8);
  };
  // i64 values past the i32 range, which the cast to i32 wraps.
  kernels::InputSpec wide = TypedSpec({13}, DType::kI64);
  wide.fill = [](Tensor& t, const Philox& rng) {
    for (int64_t e = 0; e < t.numel(); ++e)
      SetInt(t, e, static_cast<int64_t>(rng.Bits(e)) * 3 - (int64_t{3} << 31));
  };
  auto to = [](const char* dt) { return Attrs{{"dtype", std::string(dt)}}; };
  def.cases = {
      Case("to_f64", {Spec({3, 5, 7})}, to("f64")),
      Case("to_f32", {narrow}, to("f32")),
      Case("to_bf16", {narrow_vec}, to("bf16")),
      Case("float_to_i32", {quarters}, to("i32")),
      Case("float_to_i64", {quarters}, to("i64")),
      Case("float_to_bool", {WholeSpec({4, 6})}, to("bool")),
      Case("i64_to_f32", {I64({3, 5, 7})}, to("f32")),
      Case("i64_to_i32_wraps", {wide}, to("i32")),
      Case("i32_to_i64", {TypedSpec({4, 5}, DType::kI32, -1000, 1000)}, to("i64")),
      Case("i64_to_bool", {TypedSpec({13}, DType::kI64, -2, 2)}, to("bool")),
      Case("bool_to_f32", {Bool({3, 4})}, to("f32")),
      Case("bool_to_i64", {Bool({3, 4})}, to("i64")),
  };
  return def;
}

OpDef MakeFill() {
  OpDef def;
  def.name = "fill";
  def.doc = "a tensor of attr shape and dtype (default f32) filled with attr value (default 0)";
  def.num_inputs = 0;
  def.infer = [](absl::Span<const TensorMeta>, const Attrs& attrs) -> InferResult {
    LOOM_RETURN_IF_ERROR(RequireAttr("fill", attrs, "shape", "a list of ints"));
    Ints shape = attrs.GetInts("shape");
    LOOM_RETURN_IF_ERROR(CheckShapeAttr("fill", "shape", shape));
    auto dt = ParseDType(attrs.GetString("dtype", "f32"));
    if (!dt.ok()) return ArgError("fill", "dtype", dt.status().message());
    return std::vector<TensorMeta>{{*dt, Shape(shape.begin(), shape.end())}};
  };
  def.kernels[DeviceKind::kCPU] = [](KernelSpan, OutSpan out, const Attrs& attrs) {
    return FillKernel(attrs.GetFloat("value"), out[0]);
  };
  def.reference = [](KernelSpan, OutSpan out, const Attrs& attrs) {
    return FillReference(attrs.GetFloat("value"), out[0]);
  };
  def.no_grad_reason = "constant";
  def.cases = {
      Case("f32_3x5", {}, Attrs{{"shape", Ints{3, 5}}, {"dtype", std::string("f32")}, {"value", 1.5}}),
      Case("f64_scalar", {}, Attrs{{"shape", Ints{}}, {"dtype", std::string("f64")}, {"value", -2.0}}),
  };
  return def;
}

OpDef MakeConstantLike(const std::string& name, double value) {
  OpDef def;
  def.name = name;
  def.doc = absl::StrCat("a tensor like x (shape, dtype) filled with ", value);
  def.infer = [](absl::Span<const TensorMeta> in, const Attrs&) -> InferResult {
    return std::vector<TensorMeta>{in[0]};
  };
  def.kernels[DeviceKind::kCPU] = [value](KernelSpan, OutSpan out, const Attrs&) { return FillKernel(value, out[0]); };
  def.kernel_dtypes = MoveDTypes();
  def.reference = [value](KernelSpan, OutSpan out, const Attrs&) { return FillReference(value, out[0]); };
  def.no_grad_reason = "constant (depends only on the input's shape and dtype)";
  def.cases = {Case("odd_3x5x7", {Spec({3, 5, 7})}), Case("scalar", {Spec({})})};
  return def;
}

LOOM_REGISTER_OP(MakeReshape());
LOOM_REGISTER_OP(MakePermute());
LOOM_REGISTER_OP(MakeSlice());
LOOM_REGISTER_OP(MakeSliceBackward());
LOOM_REGISTER_OP(MakeConcat());
LOOM_REGISTER_OP(MakeBroadcastTo());
LOOM_REGISTER_OP(MakeCast());
LOOM_REGISTER_OP(MakeFill());
LOOM_REGISTER_OP(MakeConstantLike("zeros_like", 0.0));
LOOM_REGISTER_OP(MakeConstantLike("ones_like", 1.0));

}  // namespace
}  // namespace loom::kernels::cpu::internal
