// Registers the ops `sdpa` and `sdpa_backward` (contract in sdpa.h and the op
// catalogue). The CPU kernel dispatches through SelectSdpaImpl (attr impl
// overrides); the reference is the math implementation.
//
//   sdpa(q, k, v, [mask]) -> (out, lse)
//   sdpa_backward(dout, q, k, v, out, lse, [mask]) -> (dq, dk, dv)
//
// Grad rule: sdpa -> sdpa_backward for the gradient of `out`; the mask receives
// none; a gradient flowing into `lse` is not supported (Unimplemented).
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "kernels/registry.h"
#include "kernels/sdpa/sdpa.h"

namespace loom::kernels::sdpa {
namespace {

using kernels::Attrs;
using kernels::TensorMeta;

absl::StatusOr<SdpaParams> ParamsFromTensors(absl::Span<const Tensor> in, size_t first, const Attrs& attrs) {
  std::vector<TensorMeta> metas;
  for (size_t i = first; i < in.size(); ++i) metas.push_back(kernels::MetaOf(in[i]));
  LOOM_ASSIGN_OR_RETURN(SdpaParams p, MakeSdpaParams(metas, attrs));
  p.device = in[first].device();
  return p;
}

absl::StatusOr<std::vector<TensorMeta>> InferForward(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  LOOM_ASSIGN_OR_RETURN(SdpaParams p, MakeSdpaParams(in, attrs));
  LOOM_RETURN_IF_ERROR(SelectSdpaImpl(p).status());  // an impossible impl override fails here
  return std::vector<TensorMeta>{{p.dtype, {p.B, p.H, p.T, p.Dv}}, {DType::kF32, {p.B, p.H, p.T}}};
}

absl::Status CheckMeta(const TensorMeta& m, absl::string_view name, const TensorMeta& want) {
  if (m == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, ": expected ", want.ToString(), ", got ", m.ToString()));
}

absl::StatusOr<std::vector<TensorMeta>> InferBackward(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  if (in.size() != 6 && in.size() != 7)
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs: expected dout, q, k, v, out, lse and an optional mask (6 or 7 inputs), got ", in.size()));
  std::vector<TensorMeta> qkvm = {in[1], in[2], in[3]};
  if (in.size() == 7) qkvm.push_back(in[6]);
  LOOM_ASSIGN_OR_RETURN(SdpaParams p, MakeSdpaParams(qkvm, attrs));
  LOOM_RETURN_IF_ERROR(SelectSdpaImpl(p).status());
  TensorMeta out{p.dtype, {p.B, p.H, p.T, p.Dv}};
  LOOM_RETURN_IF_ERROR(CheckMeta(in[0], "dout", out));
  LOOM_RETURN_IF_ERROR(CheckMeta(in[4], "out", out));
  LOOM_RETURN_IF_ERROR(CheckMeta(in[5], "lse", {DType::kF32, {p.B, p.H, p.T}}));
  return std::vector<TensorMeta>{in[1], in[2], in[3]};
}

absl::Status ForwardKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& attrs, bool reference) {
  LOOM_ASSIGN_OR_RETURN(SdpaParams p, ParamsFromTensors(in, 0, attrs));
  SdpaImpl impl = SdpaImpl::kMath;
  if (!reference) {
    LOOM_ASSIGN_OR_RETURN(SdpaSelection sel, SelectSdpaImpl(p));
    impl = sel.impl;
  }
  const Tensor* mask = in.size() == 4 ? &in[3] : nullptr;
  return SdpaForward(impl, p, in[0], in[1], in[2], mask, out[0], out[1]);
}

absl::Status BackwardKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& attrs,
                            bool reference) {
  std::vector<Tensor> qkvm = {in[1], in[2], in[3]};
  if (in.size() == 7) qkvm.push_back(in[6]);
  LOOM_ASSIGN_OR_RETURN(SdpaParams p, ParamsFromTensors(qkvm, 0, attrs));
  SdpaImpl impl = SdpaImpl::kMath;
  if (!reference) {
    LOOM_ASSIGN_OR_RETURN(SdpaSelection sel, SelectSdpaImpl(p));
    impl = sel.impl;
  }
  const Tensor* mask = in.size() == 7 ? &in[6] : nullptr;
  return SdpaBackward(impl, p, in[0], in[1], in[2], in[3], in[4], in[5], mask, out[0], out[1], out[2]);
}

absl::StatusOr<std::vector<kernels::GradBuilder::Value>> SdpaGradRule(kernels::GradBuilder& b,
                                                                      const kernels::GradContext& c) {
  using V = kernels::GradBuilder::Value;
  std::vector<V> res(c.inputs.size(), kernels::GradBuilder::kNone);
  if (c.grad_outputs.size() > 1 && c.grad_outputs[1] != kernels::GradBuilder::kNone)
    return absl::UnimplementedError("sdpa: a gradient flowing into lse is not supported");
  if (c.grad_outputs.empty() || c.grad_outputs[0] == kernels::GradBuilder::kNone) return res;
  std::vector<V> ins = {c.grad_outputs[0], c.inputs[0], c.inputs[1], c.inputs[2], c.outputs[0], c.outputs[1]};
  if (c.inputs.size() == 4) ins.push_back(c.inputs[3]);
  LOOM_ASSIGN_OR_RETURN(std::vector<V> g, b.Emit("sdpa_backward", ins, c.attrs));
  res[0] = g[0];
  res[1] = g[1];
  res[2] = g[2];
  return res;
}

kernels::InputSpec Spec(DType dt, Shape shape, bool differentiable = true) {
  kernels::InputSpec s;
  s.meta = {dt, std::move(shape)};
  s.differentiable = differentiable;
  return s;
}

// Bool mask with a random pattern where key 0 is always visible.
kernels::InputSpec BoolMaskSpec(Shape shape) {
  kernels::InputSpec s = Spec(DType::kBool, std::move(shape), false);
  s.fill = [](Tensor& t, const Philox& rng) {
    const int64_t S = t.dim(-1);
    for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, (i % S == 0 || rng.Uniform(i) < 0.6f) ? 1.0 : 0.0);
  };
  return s;
}

std::vector<kernels::ConsistencyCase> Cases() {
  const DType f = DType::kF64;
  std::vector<kernels::ConsistencyCase> cases;
  auto add = [&](std::string name, std::vector<kernels::InputSpec> in, Attrs attrs) {
    kernels::ConsistencyCase c;
    c.name = std::move(name);
    c.inputs = std::move(in);
    c.attrs = std::move(attrs);
    c.grad_outputs = {0};  // lse carries no gradient
    cases.push_back(std::move(c));
  };
  add("odd_T5_S7_D8_Dv6", {Spec(f, {2, 2, 5, 8}), Spec(f, {2, 2, 7, 8}), Spec(f, {2, 2, 7, 6})}, {});
  add("gqa_4_2_causal", {Spec(f, {1, 4, 5, 8}), Spec(f, {1, 2, 7, 8}), Spec(f, {1, 2, 7, 8})},
      {{"is_causal", true}});
  add("bool_mask_broadcast", {Spec(f, {1, 2, 5, 8}), Spec(f, {1, 2, 7, 8}), Spec(f, {1, 2, 7, 8}), BoolMaskSpec({1, 1, 5, 7})},
      {});
  kernels::InputSpec additive = Spec(DType::kF32, {5, 7}, false);
  additive.lo = -2.0;
  additive.hi = 1.0;
  add("additive_mask_scale", {Spec(f, {2, 4, 5, 8}), Spec(f, {2, 2, 7, 8}), Spec(f, {2, 2, 7, 8}), additive},
      {{"scale", 0.3}});
  return cases;
}

kernels::OpDef MakeSdpaOp() {
  kernels::OpDef def;
  def.name = "sdpa";
  def.doc = "Scaled dot-product attention (PyTorch contract): (q, k, v, [mask]) -> (out, lse). See kernels/sdpa/sdpa.h.";
  def.num_inputs = -1;
  def.num_outputs = 2;
  def.infer = InferForward;
  def.kernels[DeviceKind::kCPU] = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
    return ForwardKernel(in, out, a, false);
  };
  def.kernel_dtypes[DeviceKind::kCPU] = {DType::kF32, DType::kF64};
  def.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
    return ForwardKernel(in, out, a, true);
  };
  def.grad = SdpaGradRule;
  def.cases = Cases();
  return def;
}

kernels::OpDef MakeSdpaBackwardOp() {
  kernels::OpDef def;
  def.name = "sdpa_backward";
  def.doc = "Gradient of sdpa: (dout, q, k, v, out, lse, [mask]) -> (dq, dk, dv).";
  def.num_inputs = -1;
  def.num_outputs = 3;
  def.infer = InferBackward;
  def.kernels[DeviceKind::kCPU] = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
    return BackwardKernel(in, out, a, false);
  };
  def.kernel_dtypes[DeviceKind::kCPU] = {DType::kF32, DType::kF64};
  def.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
    return BackwardKernel(in, out, a, true);
  };
  def.no_grad_reason = "backward op of sdpa";
  return def;
}

}  // namespace

LOOM_REGISTER_OP(MakeSdpaOp());
LOOM_REGISTER_OP(MakeSdpaBackwardOp());

}  // namespace loom::kernels::sdpa
