// The collective ops: all_reduce, all_gather, reduce_scatter.
//
// Registered here so that every op lives in the registry and the consistency
// test covers them; their kernels and reference give the one-rank semantics.
// compiler/lowering binds them to a Communicator per process group (see
// compiler/comm/communicator.h for the contract and the gradient rules).
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "kernels/registry.h"

namespace loom::kernels {
namespace {

absl::Status CheckReduce(const Attrs& a, absl::string_view op) {
  std::string r = a.GetString("reduce", "sum");
  if (r == "sum" || r == "avg" || r == "max" || r == "min") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": reduce: expected sum, avg, max or min, got '", r, "'"));
}


absl::StatusOr<int> Axis(const TensorMeta& m, const Attrs& a, absl::string_view op) {
  int64_t axis = a.GetInt("axis", 0);
  const int64_t nd = static_cast<int64_t>(m.shape.size());
  if (axis < -nd || axis >= nd || nd == 0)
    return absl::InvalidArgumentError(absl::StrCat(op, ": axis ", axis, " is out of range for ", m.ToString()));
  return static_cast<int>(axis < 0 ? axis + nd : axis);
}

absl::StatusOr<int64_t> World(const Attrs& a, absl::string_view op) {
  int64_t w = a.GetInt("world", 1);
  if (w < 1) return absl::InvalidArgumentError(absl::StrCat(op, ": world must be >= 1, got ", w));
  return w;
}

// One-rank semantics; a larger world needs the communicator lowering binds.
KernelFn OneRank(const char* op) {
  return [op](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) -> absl::Status {
    if (a.GetInt("world", 1) != 1)
      return absl::FailedPreconditionError(
          absl::StrCat(op, " over group '", a.GetString("group", "world"), "' of world ", a.GetInt("world", 1),
                       " runs only inside a compiled Program with a communicator bound for that group"));
    return out[0].CopyFrom(in[0]);
  };
}

std::vector<ConsistencyCase> Cases(Attrs extra) {
  std::vector<ConsistencyCase> cs;
  cs.push_back({"vec7", {{{DType::kF32, {7}}}}, extra});
  Attrs a2 = extra;
  a2.Set("axis", int64_t{1});
  cs.push_back({"3x5x2_axis1", {{{DType::kF32, {3, 5, 2}}}}, a2});
  return cs;
}

OpDef AllReduce() {
  OpDef d;
  d.name = "all_reduce";
  d.doc = "reduce over the ranks of attr group (reduce = sum|avg|max|min)";
  d.collective = true;
  d.infer = [](absl::Span<const TensorMeta> in, const Attrs& a) -> absl::StatusOr<std::vector<TensorMeta>> {
    LOOM_RETURN_IF_ERROR(CheckReduce(a, "all_reduce"));
    return std::vector<TensorMeta>{in[0]};
  };
  d.kernels[DeviceKind::kCPU] = OneRank("all_reduce");
  d.kernel_dtypes[DeviceKind::kCPU] = {DType::kF32, DType::kF64};
  d.reference = OneRank("all_reduce");
  d.grad = [](GradBuilder& b, const GradContext& c) -> absl::StatusOr<std::vector<GradBuilder::Value>> {
    std::string r = c.attrs.GetString("reduce", "sum");
    if (r != "sum" && r != "avg")
      return absl::UnimplementedError(absl::StrCat("all_reduce with reduce=", r, " has no gradient"));
    LOOM_ASSIGN_OR_RETURN(auto g, b.Emit1("all_reduce", {c.grad_outputs[0]}, c.attrs));
    return std::vector<GradBuilder::Value>{g};
  };
  d.cases = Cases({{"reduce", std::string("sum")}});
  return d;
}

OpDef AllGather() {
  OpDef d;
  d.name = "all_gather";
  d.doc = "concatenate over the ranks of attr group along attr axis (attr world = group size)";
  d.collective = true;
  d.infer = [](absl::Span<const TensorMeta> in, const Attrs& a) -> absl::StatusOr<std::vector<TensorMeta>> {
    LOOM_ASSIGN_OR_RETURN(int axis, Axis(in[0], a, "all_gather"));
    LOOM_ASSIGN_OR_RETURN(int64_t w, World(a, "all_gather"));
    TensorMeta m = in[0];
    m.shape[axis] *= w;
    return std::vector<TensorMeta>{m};
  };
  d.kernels[DeviceKind::kCPU] = OneRank("all_gather");
  d.kernel_dtypes[DeviceKind::kCPU] = {DType::kF32, DType::kF64};
  d.reference = OneRank("all_gather");
  d.grad = [](GradBuilder& b, const GradContext& c) -> absl::StatusOr<std::vector<GradBuilder::Value>> {
    Attrs a = c.attrs;
    a.Set("reduce", std::string("sum"));
    LOOM_ASSIGN_OR_RETURN(auto g, b.Emit1("reduce_scatter", {c.grad_outputs[0]}, a));
    return std::vector<GradBuilder::Value>{g};
  };
  d.cases = Cases({});
  return d;
}

OpDef ReduceScatter() {
  OpDef d;
  d.name = "reduce_scatter";
  d.doc = "reduce over the ranks of attr group, keep this rank's block along attr axis";
  d.collective = true;
  d.infer = [](absl::Span<const TensorMeta> in, const Attrs& a) -> absl::StatusOr<std::vector<TensorMeta>> {
    LOOM_ASSIGN_OR_RETURN(int axis, Axis(in[0], a, "reduce_scatter"));
    LOOM_ASSIGN_OR_RETURN(int64_t w, World(a, "reduce_scatter"));
    LOOM_RETURN_IF_ERROR(CheckReduce(a, "reduce_scatter"));
    TensorMeta m = in[0];
    if (m.shape[axis] % w != 0)
      return absl::InvalidArgumentError(absl::StrCat("reduce_scatter: dim ", axis, " of ", m.ToString(),
                                                     " is not divisible by world ", w));
    m.shape[axis] /= w;
    return std::vector<TensorMeta>{m};
  };
  d.kernels[DeviceKind::kCPU] = OneRank("reduce_scatter");
  d.kernel_dtypes[DeviceKind::kCPU] = {DType::kF32, DType::kF64};
  d.reference = OneRank("reduce_scatter");
  d.grad = [](GradBuilder& b, const GradContext& c) -> absl::StatusOr<std::vector<GradBuilder::Value>> {
    std::string r = c.attrs.GetString("reduce", "sum");
    if (r != "sum" && r != "avg")
      return absl::UnimplementedError(absl::StrCat("reduce_scatter with reduce=", r, " has no gradient"));
    LOOM_ASSIGN_OR_RETURN(auto g, b.Emit1("all_gather", {c.grad_outputs[0]}, c.attrs));
    if (r == "avg") {
      LOOM_ASSIGN_OR_RETURN(g, b.Emit1("scale", {g}, {{"s", 1.0 / c.attrs.GetInt("world", 1)}}));
    }
    return std::vector<GradBuilder::Value>{g};
  };
  d.cases = Cases({{"reduce", std::string("sum")}});
  return d;
}

LOOM_REGISTER_OP(AllReduce());
LOOM_REGISTER_OP(AllGather());
LOOM_REGISTER_OP(ReduceScatter());

}  // namespace
}  // namespace loom::kernels
