// Registers the comparison, logical and selection ops (kernels in compare.h):
//   equal, less, less_equal, greater, greater_equal (a, b) -> bool
//   logical_and, logical_or (a, b) -> bool, logical_not(x) -> bool
//   where(cond, a, b)
// All broadcast numpy-style and are elementwise (fusion candidates).
//
// Gradients: none for the bool-valued ops. where sends dy to a where cond
// holds and to b elsewhere (zeros in the other places), each sum_to'd back to
// its input's shape; cond takes none.
#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/compare.h"
#include "kernels/cpu/op_util.h"

namespace loom::kernels::cpu::internal {
namespace {

constexpr V kNone = GradBuilder::kNone;
using KernelSpan = absl::Span<const Tensor>;
using OutSpan = absl::Span<Tensor>;

OpDef MakeCompare(CompareOp op, std::string doc) {
  OpDef def;
  def.name = std::string(OpName(op));
  def.doc = std::move(doc);
  def.num_inputs = 2;
  def.elementwise = true;
  def.infer = [op](absl::Span<const TensorMeta> in, const Attrs&) -> InferResult {
    LOOM_ASSIGN_OR_RETURN(TensorMeta m, InferCompare(op, in[0], in[1]));
    return std::vector<TensorMeta>{m};
  };
  def.kernels[DeviceKind::kCPU] = [op](KernelSpan in, OutSpan out, const Attrs&) {
    return CompareKernel(op, in[0], in[1], out[0]);
  };
  def.kernel_dtypes = CpuDTypes({DType::kF32, DType::kF64, DType::kBF16});
  def.reference = [op](KernelSpan in, OutSpan out, const Attrs&) {
    return CompareReference(op, in[0], in[1], out[0]);
  };
  def.no_grad_reason = "bool output";
  if (op == CompareOp::kLogicalAnd || op == CompareOp::kLogicalOr) {
    def.cases = {
        Case("bool_bcast", {TypedSpec({3, 5, 7}, DType::kBool), TypedSpec({5, 1}, DType::kBool)}),
        Case("bool_scalar", {TypedSpec({}, DType::kBool), TypedSpec({4, 3}, DType::kBool)}),
    };
    return def;
  }
  // Whole numbers in a small range: plenty of ties, exact in every dtype.
  def.cases = {
      Case("whole_bcast", {WholeSpec({3, 5, 7}), WholeSpec({5, 1})}),
      Case("whole_scalar_a", {WholeSpec({}), WholeSpec({2, 9})}),
      Case("i64_bcast", {TypedSpec({4, 1, 6}, DType::kI64, -3, 3), TypedSpec({5, 1}, DType::kI64, -3, 3)}),
      Case("i32_same", {TypedSpec({13}, DType::kI32, -2, 2), TypedSpec({13}, DType::kI32, -2, 2)}),
  };
  if (op == CompareOp::kEqual)
    def.cases.push_back(Case("bool", {TypedSpec({3, 4}, DType::kBool), TypedSpec({4}, DType::kBool)}));
  return def;
}

OpDef MakeLogicalNot() {
  OpDef def;
  def.name = "logical_not";
  def.doc = "!x (bool)";
  def.elementwise = true;
  def.infer = [](absl::Span<const TensorMeta> in, const Attrs&) -> InferResult {
    LOOM_ASSIGN_OR_RETURN(TensorMeta m, InferLogicalNot(in[0]));
    return std::vector<TensorMeta>{m};
  };
  def.kernels[DeviceKind::kCPU] = [](KernelSpan in, OutSpan out, const Attrs&) {
    return LogicalNotKernel(in[0], out[0]);
  };
  def.reference = [](KernelSpan in, OutSpan out, const Attrs&) { return LogicalNotReference(in[0], out[0]); };
  def.no_grad_reason = "bool output";
  def.cases = {Case("bool_3x5x7", {TypedSpec({3, 5, 7}, DType::kBool)}), Case("scalar", {TypedSpec({}, DType::kBool)})};
  return def;
}

OpDef MakeWhere() {
  OpDef def;
  def.name = "where";
  def.doc = "a where cond else b (cond bool; a, b one dtype; all three broadcast)";
  def.num_inputs = 3;
  def.elementwise = true;
  def.infer = [](absl::Span<const TensorMeta> in, const Attrs&) -> InferResult {
    LOOM_ASSIGN_OR_RETURN(TensorMeta m, InferWhere(in[0], in[1], in[2]));
    return std::vector<TensorMeta>{m};
  };
  def.kernels[DeviceKind::kCPU] = [](KernelSpan in, OutSpan out, const Attrs&) {
    return WhereKernel(in[0], in[1], in[2], out[0]);
  };
  def.kernel_dtypes = CpuDTypes({DType::kF32, DType::kF64, DType::kBF16});
  def.reference = [](KernelSpan in, OutSpan out, const Attrs&) {
    return WhereReference(in[0], in[1], in[2], out[0]);
  };
  def.grad = [](GradBuilder& b, const GradContext& ctx) -> GradResult {
    const V g = ctx.grad_outputs[0];
    if (g == kNone) return std::vector<V>{kNone, kNone, kNone};
    LOOM_ASSIGN_OR_RETURN(V zeros, b.Emit1("zeros_like", {g}));
    LOOM_ASSIGN_OR_RETURN(V ga, b.Emit1("where", {ctx.inputs[0], g, zeros}));
    LOOM_ASSIGN_OR_RETURN(V gb, b.Emit1("where", {ctx.inputs[0], zeros, g}));
    LOOM_ASSIGN_OR_RETURN(ga, SumToShape(b, ga, b.Meta(ctx.inputs[1]).shape));
    LOOM_ASSIGN_OR_RETURN(gb, SumToShape(b, gb, b.Meta(ctx.inputs[2]).shape));
    return std::vector<V>{kNone, ga, gb};
  };
  def.cases = {
      Case("same_3x5x7", {TypedSpec({3, 5, 7}, DType::kBool), Spec({3, 5, 7}), Spec({3, 5, 7})}),
      Case("bcast_all_three", {TypedSpec({5, 1}, DType::kBool), Spec({3, 1, 7}), Spec({7})}),
      Case("scalar_b", {TypedSpec({4, 6}, DType::kBool), Spec({4, 6}), Spec({})}),
      Case("cond_bigger", {TypedSpec({2, 3, 4}, DType::kBool), Spec({4}), Spec({3, 1})}),
      Case("i64", {TypedSpec({3, 5}, DType::kBool), TypedSpec({3, 5}, DType::kI64, -100, 100),
                   TypedSpec({5}, DType::kI64, -100, 100)}),
      Case("bool", {TypedSpec({6}, DType::kBool), TypedSpec({2, 6}, DType::kBool), TypedSpec({}, DType::kBool)}),
  };
  return def;
}

LOOM_REGISTER_OP(MakeCompare(CompareOp::kEqual, "a == b -> bool (broadcasting; NaN is not equal to itself)"));
LOOM_REGISTER_OP(MakeCompare(CompareOp::kLess, "a < b -> bool (broadcasting)"));
LOOM_REGISTER_OP(MakeCompare(CompareOp::kLessEqual, "a <= b -> bool (broadcasting)"));
LOOM_REGISTER_OP(MakeCompare(CompareOp::kGreater, "a > b -> bool (broadcasting)"));
LOOM_REGISTER_OP(MakeCompare(CompareOp::kGreaterEqual, "a >= b -> bool (broadcasting)"));
LOOM_REGISTER_OP(MakeCompare(CompareOp::kLogicalAnd, "a && b on bool (broadcasting)"));
LOOM_REGISTER_OP(MakeCompare(CompareOp::kLogicalOr, "a || b on bool (broadcasting)"));
LOOM_REGISTER_OP(MakeLogicalNot());
LOOM_REGISTER_OP(MakeWhere());

}  // namespace
}  // namespace loom::kernels::cpu::internal
