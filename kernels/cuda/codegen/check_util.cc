#include "kernels/cuda/codegen/check_util.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/rng.h"
#include "base/status.h"
#include "kernels/cuda/codegen/op_cases.h"
#include "kernels/registry.h"

namespace loom::kernels::cuda::codegen {
namespace {

using Ints = std::vector<int64_t>;
const Ints kOut = {33, 262};  // numel 8646: the vector path (W = 4 or 8) plus a tail
// "sliced": the output window starts at (1, 3) of a {34, 266} buffer.
const Ints kSlicedOut = {kOut[0] + 1, kOut[1] + 4};

// Evaluates `body` on f64 inputs with the registry references.
absl::StatusOr<Tensor> ReferenceF64(const PwBody& body, const std::vector<Tensor>& in) {
  std::vector<Tensor> val(in.begin(), in.end());
  for (const PwNode& n : body.nodes) {
    std::vector<Tensor> args;
    for (int v : n.inputs) args.push_back(val.at(v));
    LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> out, kernels::RunOp(n.op, args, n.attrs, kernels::Impl::kReference));
    val.push_back(out[0].dtype() == DType::kF64 ? out[0] : out[0].To(DType::kF64));
  }
  const Tensor& r = val.at(body.output);
  return r.dtype() == DType::kF64 ? r : r.To(DType::kF64);
}

}  // namespace

std::vector<PwCheckCase> AllCheckCases() {
  std::vector<PwCheckCase> cases;
  for (const PwOpCase& c : AllPwOpCases())
    cases.push_back({c.label, SingleOpBody(c.op, c.attrs, c.num_inputs), c.num_inputs, c.lo, c.hi, {},
                     c.bool_inputs, PwOpWritesBool(c.op)});
  cases.push_back({"copy", CopyBody(), 1, -2, 2, {}});  // an empty body
  {  // fused: (x + b) -> gelu(tanh) -> * w -> scale
    PwBody g;
    g.num_inputs = 3;
    g.nodes = {{"add", {0, 1}, {}},
               {"gelu", {3}, kernels::Attrs{{"approximate", std::string("tanh")}}},
               {"mul", {4, 2}, {}},
               {"scale", {5}, kernels::Attrs{{"s", 0.5}}}};
    g.output = 6;
    cases.push_back({"fused_add_gelu_mul_scale", g, 3, -2, 2, {}});
  }
  // Mixed storage: bf16 + f32 (the row's dtype is the output's).
  cases.push_back({"mixed_add_bf16_f32", SingleOpBody("add", {}, 2), 2, -2, 2, {DType::kBF16, DType::kF32}});
  cases.push_back({"fill_0.1", SingleOpBody("fill", kernels::Attrs{{"shape", kOut}, {"value", 0.1}}, 0), 0, 0, 0, {}});
  return cases;
}

bool LayoutApplies(const PwCheckCase& c, const std::string& layout) {
  return c.nin > 0 || layout == "contiguous" || layout == "sliced";
}

absl::StatusOr<PwCheckInstance> MakeCheckInstance(const PwCheckCase& c, DType dt, const std::string& layout,
                                                  uint64_t seed) {
  PwCheckInstance inst;
  inst.label = c.label;
  inst.dtype = std::string(DTypeName(dt));
  inst.layout = layout;
  inst.tol = dt == DType::kF32 ? 1e-5 : 1e-2;
  inst.out_dtype = c.bool_output ? DType::kBool : dt;
  inst.spec.body = &c.body;
  inst.spec.out_shape = kOut;
  inst.spec.out_dtype = inst.out_dtype;
  const bool is_div = c.body.nodes.size() == 1 && c.body.nodes[0].op == "div";
  std::vector<Tensor> ref_in;
  for (int k = 0; k < c.nin; ++k) {
    const bool bool_in = (c.bool_inputs >> k) & 1u;
    const DType idt = bool_in ? DType::kBool : c.in_dtypes.empty() ? dt : c.in_dtypes[k];
    double lo = c.lo, hi = c.hi;
    if (is_div && k == 0) lo = -2, hi = 2;  // only the denominator stays away from 0
    Ints sshape;
    if (layout == "contiguous") sshape = kOut;
    else if (layout == "broadcast") sshape = c.nin == 1 ? Ints{1, kOut[1]} : (k == 0 ? Ints{kOut[0], 1} : Ints{kOut[1]});
    else if (layout == "permuted") sshape = {kOut[1], kOut[0]};
    else if (layout == "offset") sshape = {kOut[0] * kOut[1] + 8};
    else sshape = {kOut[0] + 2, kOut[1] + 8};  // sliced
    LOOM_ASSIGN_OR_RETURN(Tensor storage, Tensor::Empty(sshape, idt));
    Philox rng(seed, 1000 + k);
    for (int64_t i = 0; i < storage.numel(); ++i)
      storage.SetDouble(i, bool_in ? (rng.Uniform(i) < 0.5 ? 1.0 : 0.0) : lo + (hi - lo) * rng.Uniform(i));
    Tensor view;
    if (layout == "contiguous") view = storage;
    else if (layout == "broadcast") { LOOM_ASSIGN_OR_RETURN(view, storage.Expand(kOut)); }
    else if (layout == "permuted") view = storage.Transpose(0, 1);
    else if (layout == "offset") {  // contiguous at element offset 8 (still 16-byte aligned)
      LOOM_ASSIGN_OR_RETURN(view, storage.Narrow(0, 8, kOut[0] * kOut[1]).Reshape(kOut));
    }
    else view = storage.Narrow(0, 1, kOut[0]).Narrow(1, 5, kOut[1]);
    inst.spec.inputs.push_back({idt, Ints(view.strides().begin(), view.strides().end()), view.offset()});
    ref_in.push_back(bool_in ? view.Contiguous() : view.To(DType::kF64));  // bool inputs stay bool
    inst.in_storage.push_back(storage);
  }
  if (layout == "sliced") {
    inst.out_storage_shape = kSlicedOut;
    inst.spec.out_strides = {kSlicedOut[1], 1};
    inst.spec.out_offset = kSlicedOut[1] + 3;
  } else {
    inst.out_storage_shape = kOut;
  }
  LOOM_ASSIGN_OR_RETURN(inst.ref, ReferenceF64(c.body, ref_in));
  return inst;
}

PwCheckResult EvaluateCheck(const PwCheckInstance& inst, const Tensor& out_storage) {
  PwCheckResult res;
  const bool sliced = inst.layout == "sliced";
  Tensor got = sliced ? out_storage.Narrow(0, 1, kOut[0]).Narrow(1, 3, kOut[1]) : out_storage;
  Tensor got64 = got.To(DType::kF64);
  res.err = RelativeError(got64, inst.ref);
  bool finite = true;
  for (int64_t i = 0; i < got64.numel(); ++i) finite = finite && std::isfinite(got64.GetDouble(i));
  res.pass = finite && res.err < inst.tol;
  if (!finite) res.detail = "non-finite output (poison left?)";
  if (sliced) {
    const unsigned char* b = static_cast<const unsigned char*>(out_storage.raw_data());
    const size_t es = DTypeSize(inst.out_dtype);
    int64_t touched = 0;
    for (int64_t r = 0; r < kSlicedOut[0]; ++r)
      for (int64_t col = 0; col < kSlicedOut[1]; ++col) {
        if (r >= 1 && r < 1 + kOut[0] && col >= 3 && col < 3 + kOut[1]) continue;
        const unsigned char* e = b + (r * kSlicedOut[1] + col) * es;
        for (size_t j = 0; j < es; ++j) touched += e[j] != 0xFF;
      }
    if (touched) {
      res.pass = false;
      res.detail = absl::StrCat(touched, " bytes outside the output window were written");
    }
  }
  return res;
}

}  // namespace loom::kernels::cuda::codegen
