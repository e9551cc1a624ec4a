// Registers op "matmul" (see matmul.h for the kernel contract).
//
// Gradient, with op(X) = X or X^T per trans flag, C = op(A) op(B):
//   trans_a trans_b   dA                     dB
//     F       F      dC B^T   = mm(dC,B,F,T)   A^T dC   = mm(A,dC,T,F)
//     F       T      dC B     = mm(dC,B,F,F)   dC^T A   = mm(dC,A,T,F)
//     T       F      B dC^T   = mm(B,dC,F,T)   A dC     = mm(A,dC,F,F)
//     T       T      B^T dC^T = mm(B,dC,T,T)   dC^T A^T = mm(dC,A,T,T)
// then sum_to over the batch dims each input was broadcast along.
#include "kernels/cpu/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/op_util.h"

namespace loom::kernels::cpu::internal {
namespace {

Attrs Trans(bool ta, bool tb) { return Attrs{{"trans_a", ta}, {"trans_b", tb}}; }

OpDef MakeMatMulOp() {
  OpDef def;
  def.name = "matmul";
  def.doc = "out[..., M, N] = op(a)[..., M, K] @ op(b)[..., K, N]; attrs trans_a, trans_b; batch dims broadcast";
  def.num_inputs = 2;
  def.infer = [](absl::Span<const TensorMeta> in, const Attrs& attrs) -> InferResult {
    LOOM_RETURN_IF_ERROR(CheckFloating("matmul", "a", in[0].dtype));
    LOOM_RETURN_IF_ERROR(CheckSameDType("matmul", "a", in[0].dtype, "b", in[1].dtype));
    LOOM_ASSIGN_OR_RETURN(Shape s, MatMulShape(in[0].shape, in[1].shape, attrs.GetBool("trans_a"),
                                               attrs.GetBool("trans_b")));
    return std::vector<TensorMeta>{{in[0].dtype, s}};
  };
  def.kernels[DeviceKind::kCPU] = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& attrs) {
    return MatMul(in[0], in[1], attrs.GetBool("trans_a"), attrs.GetBool("trans_b"), out[0]);
  };
  def.kernel_dtypes = CpuDTypes({DType::kF32, DType::kF64, DType::kBF16});
  def.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& attrs) {
    return MatMulReference(in[0], in[1], attrs.GetBool("trans_a"), attrs.GetBool("trans_b"), out[0]);
  };
  def.grad = [](GradBuilder& b, const GradContext& ctx) -> GradResult {
    const bool ta = ctx.attrs.GetBool("trans_a"), tb = ctx.attrs.GetBool("trans_b");
    const V A = ctx.inputs[0], B = ctx.inputs[1], dC = ctx.grad_outputs[0];
    if (dC == GradBuilder::kNone) return std::vector<V>{GradBuilder::kNone, GradBuilder::kNone};
    absl::StatusOr<V> da, db;
    if (!ta && !tb) {
      da = b.Emit1("matmul", {dC, B}, Trans(false, true));
      db = b.Emit1("matmul", {A, dC}, Trans(true, false));
    } else if (!ta && tb) {
      da = b.Emit1("matmul", {dC, B}, Trans(false, false));
      db = b.Emit1("matmul", {dC, A}, Trans(true, false));
    } else if (ta && !tb) {
      da = b.Emit1("matmul", {B, dC}, Trans(false, true));
      db = b.Emit1("matmul", {A, dC}, Trans(false, false));
    } else {
      da = b.Emit1("matmul", {B, dC}, Trans(true, true));
      db = b.Emit1("matmul", {dC, A}, Trans(true, true));
    }
    if (!da.ok()) return da.status();
    if (!db.ok()) return db.status();
    LOOM_ASSIGN_OR_RETURN(V ga, SumToShape(b, *da, b.Meta(A).shape));
    LOOM_ASSIGN_OR_RETURN(V gb, SumToShape(b, *db, b.Meta(B).shape));
    return std::vector<V>{ga, gb};
  };
  def.cases = {
      Case("odd_2d", {Spec({3, 5}), Spec({5, 7})}),
      Case("batch_b_2d", {Spec({2, 3, 5}), Spec({5, 4})}),
      Case("a_2d_b_batched_trans_a", {Spec({4, 3}), Spec({2, 4, 6})}, Trans(true, false)),
      Case("bcast_batch_trans_both", {Spec({2, 1, 5, 3}), Spec({3, 4, 5})}, Trans(true, true)),
      Case("trans_b_4d", {Spec({2, 3, 3, 5}), Spec({1, 3, 7, 5})}, Trans(false, true)),
  };
  return def;
}

LOOM_REGISTER_OP(MakeMatMulOp());

}  // namespace
}  // namespace loom::kernels::cpu::internal
