// Rank-dependent ops used by sharding propagation (compiler/spmd/).
//
//   shard_slice(x) {axis, group, world} -> this rank's block of x along axis
//
// x is replicated over the ranks of `group`; the output is block r (of `world`
// equal blocks, r = the rank in the group) along `axis`: the R -> S(axis)
// redistribution, which needs no communication. Like the collective ops its
// kernel and reference give the one-rank semantics (world 1: a copy);
// compiler/lowering binds the node to its group's communicator to learn the
// rank (OpDef::collective = true). The gradient is the adjoint: all_gather
// along the same axis.
//
//   vocab_onehot(targets[N] i32|i64) {num_classes, ignore_index, group, world}
//     -> (onehot f32[N, num_classes], valid f32[N])
//
// For a vocab-parallel cross-entropy: this rank holds vocabulary entries
// [r * num_classes, (r + 1) * num_classes); onehot[i, j] = 1 where
// targets[i] == r * num_classes + j, and valid[i] = 1 unless targets[i] is
// ignore_index (default -100). No gradient (integer input).
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "kernels/registry.h"
#include "kernels/spmd_ops.h"

namespace loom::kernels {

absl::Status VocabOnehotBlock(const Tensor& targets, Tensor& onehot, Tensor& valid, int64_t rank,
                              int64_t ignore_index) {
  const int64_t n = onehot.shape()[0], c = onehot.shape()[1];
  Tensor t = targets.To(DType::kI64).Contiguous();
  const int64_t* ids = t.data<int64_t>();
  float* oh = onehot.data<float>();
  float* ok = valid.data<float>();
  for (int64_t i = 0; i < n * c; ++i) oh[i] = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    ok[i] = ids[i] == ignore_index ? 0.f : 1.f;
    const int64_t j = ids[i] - rank * c;
    if (ids[i] != ignore_index && j >= 0 && j < c) oh[i * c + j] = 1.f;
  }
  return absl::OkStatus();
}

namespace {

OpDef ShardSlice() {
  OpDef d;
  d.name = "shard_slice";
  d.doc = "this rank's block along attr axis of a tensor replicated over attr group (attr world = group size)";
  d.collective = true;
  d.infer = [](absl::Span<const TensorMeta> in, const Attrs& a) -> absl::StatusOr<std::vector<TensorMeta>> {
    const int64_t nd = static_cast<int64_t>(in[0].shape.size());
    int64_t axis = a.GetInt("axis", 0);
    if (nd == 0 || axis < -nd || axis >= nd)
      return absl::InvalidArgumentError(
          absl::StrCat("shard_slice: axis ", axis, " is out of range for ", in[0].ToString()));
    if (axis < 0) axis += nd;
    const int64_t w = a.GetInt("world", 1);
    if (w < 1) return absl::InvalidArgumentError(absl::StrCat("shard_slice: world must be >= 1, got ", w));
    TensorMeta m = in[0];
    if (m.shape[axis] % w != 0)
      return absl::InvalidArgumentError(absl::StrCat("shard_slice: dim ", axis, " of ", m.ToString(),
                                                     " is not divisible by world ", w));
    m.shape[axis] /= w;
    return std::vector<TensorMeta>{m};
  };
  KernelFn one_rank = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) -> absl::Status {
    if (a.GetInt("world", 1) != 1)
      return absl::FailedPreconditionError(
          absl::StrCat("shard_slice over group '", a.GetString("group", "world"), "' of world ", a.GetInt("world", 1),
                       " runs only inside a compiled Program with a communicator bound for that group"));
    return out[0].CopyFrom(in[0]);
  };
  d.kernels[DeviceKind::kCPU] = one_rank;
  d.kernel_dtypes[DeviceKind::kCPU] = {DType::kF32, DType::kF64};  // lowering copies any dtype
  d.reference = one_rank;
  d.grad = [](GradBuilder& b, const GradContext& c) -> absl::StatusOr<std::vector<GradBuilder::Value>> {
    Attrs a;
    a.Set("axis", c.attrs.GetInt("axis", 0));
    a.Set("group", c.attrs.GetString("group", "world"));
    a.Set("world", c.attrs.GetInt("world", 1));
    LOOM_ASSIGN_OR_RETURN(auto g, b.Emit1("all_gather", {c.grad_outputs[0]}, a));
    return std::vector<GradBuilder::Value>{g};
  };
  d.cases.push_back({"vec7", {{{DType::kF32, {7}}}}, {}});
  d.cases.push_back({"3x4_axis1", {{{DType::kF32, {3, 4}}}}, {{"axis", int64_t{1}}}});
  return d;
}

OpDef VocabOnehot() {
  OpDef d;
  d.name = "vocab_onehot";
  d.doc = "vocab_onehot(targets[N]) attrs num_classes, ignore_index, group, world -> (onehot f32[N, num_classes] of "
          "this rank's vocabulary block, valid f32[N])";
  d.num_outputs = 2;
  d.collective = true;
  d.infer = [](absl::Span<const TensorMeta> in, const Attrs& a) -> absl::StatusOr<std::vector<TensorMeta>> {
    if (in[0].shape.size() != 1 || (in[0].dtype != DType::kI32 && in[0].dtype != DType::kI64))
      return absl::InvalidArgumentError(
          absl::StrCat("vocab_onehot: targets: expected i32 or i64 [N], got ", in[0].ToString()));
    const int64_t c = a.GetInt("num_classes", 0);
    if (c < 1) return absl::InvalidArgumentError(absl::StrCat("vocab_onehot: num_classes must be >= 1, got ", c));
    return std::vector<TensorMeta>{{DType::kF32, {in[0].shape[0], c}}, {DType::kF32, {in[0].shape[0]}}};
  };
  d.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) -> absl::Status {
    return VocabOnehotBlock(in[0], out[0], out[1], 0, a.GetInt("ignore_index", -100));
  };
  d.kernels[DeviceKind::kCPU] = d.reference;
  d.kernel_dtypes[DeviceKind::kCPU] = {DType::kI32, DType::kI64};
  d.no_grad_reason = "integer input";
  ConsistencyCase c;
  c.name = "ids6_c4";
  c.inputs.push_back({{DType::kI32, {6}}, 0, 4, false});
  c.attrs = {{"num_classes", int64_t{4}}};
  c.grad_outputs = {};
  d.cases.push_back(c);
  return d;
}

LOOM_REGISTER_OP(ShardSlice());
LOOM_REGISTER_OP(VocabOnehot());

}  // namespace
}  // namespace loom::kernels
