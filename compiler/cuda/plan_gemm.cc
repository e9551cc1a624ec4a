// The gemm_epilogues pass and the GEMM launch (plan_gemm.h).
#include "compiler/cuda/plan_gemm.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace loom::compiler::cuda::plan_internal {

namespace {

int64_t Prod(const Shape& s, size_t lo, size_t hi) {
  int64_t p = 1;
  for (size_t i = lo; i < hi; ++i) p *= s[i];
  return p;
}

// The GEMM of matmul node i, with the weight-gradient sum_to folded in when it
// follows; false for operand shapes the GEMM does not take.
bool GemmShape(const PlanState& s, int i, GemmClaim* c) {
  const ir::Graph& g = s.g;
  const ir::Node& n = g.nodes()[i];
  const int a = n.inputs[0], b = n.inputs[1], out = n.outputs[0];
  const Shape& A = g.meta(a).shape;
  const Shape& B = g.meta(b).shape;
  const bool ta = n.attrs.GetBool("trans_a", false), tb = n.attrs.GetBool("trans_b", false);
  const size_t ra = A.size(), rb = B.size();
  GemmPlan& m = c->gemm;
  m.trans_a = ta;
  m.trans_b = tb;
  c->nodes = {i};
  c->outputs = {out};
  c->op = "matmul";
  const int su = s.single_user(out);
  if (ta && !tb && ra >= 3 && ra == rb && std::equal(A.begin(), A.end() - 2, B.begin()) && su >= 0 &&
      g.nodes()[su].op == "sum_to" && g.meta(g.nodes()[su].outputs[0]).shape == Shape{A[ra - 1], B[rb - 1]}) {
    m.weight_grad = true;
    m.m = A[ra - 1];
    m.n = B[rb - 1];
    m.k = Prod(A, 0, ra - 1);
    c->nodes.push_back(su);
    c->outputs = {g.nodes()[su].outputs[0]};
    c->op = "matmul+sum_to";
  } else if (rb == 2 && !ta && ra >= 2) {
    m.m = Prod(A, 0, ra - 1);
    m.k = A[ra - 1];
    m.n = tb ? B[0] : B[1];
  } else if (ra >= 2 && rb >= 2 && (ra == 2 || rb == 2 || (ra == rb && std::equal(A.begin(), A.end() - 2, B.begin())))) {
    const Shape& O = g.meta(out).shape;
    m.m = O[O.size() - 2];
    m.n = O[O.size() - 1];
    m.k = ta ? A[ra - 2] : A[ra - 1];
    m.batch = Prod(O, 0, O.size() - 2);
    m.stride_a = ra == 2 ? 0 : A[ra - 2] * A[ra - 1];
    m.stride_b = rb == 2 ? 0 : B[rb - 2] * B[rb - 1];
    m.stride_d = m.m * m.n;
  } else {
    return false;
  }
  return true;
}

// The bias (+ tanh GELU) or dgelu epilogue of a single-GEMM matmul, in bf16
// plans only. In f32, cuBLASLt's DGELU ends about 10x further from an f64
// reference than the plain GEMM (gpu_check: 3.4e-6 against 2-3e-7), and with
// the bias and GELU epilogues f32 GPT training ends 2.6-3.1x further from its
// f64 run than torch's f32 runs, against 1.0-1.3x with every GEMM plain
// (gpt_cuda_parity --only=f32, docs/perf.md). In bf16 both lie far below
// the operands' rounding. An f32 plan runs the bias add, GELU and its
// backward as kernels of their own.
void Epilogue(const PlanState& s, int i, GemmClaim* c) {
  if (s.cdt != DType::kBF16) return;
  const ir::Graph& g = s.g;
  const int out = g.nodes()[i].outputs[0];
  const int su = s.single_user(out);
  GemmPlan& m = c->gemm;
  if (m.weight_grad || m.batch != 1 || su < 0) return;
  const ir::Node& u = g.nodes()[su];
  if (u.op == "add" && s.st[u.outputs[0]] == s.cdt && g.meta(u.outputs[0]).shape == g.meta(out).shape) {
    const int bias = u.inputs[0] == out ? u.inputs[1] : u.inputs[0];
    if (g.meta(bias).shape != Shape{m.n} || !s.available_before(bias, i) || !s.materialized(bias)) return;
    const int pre = u.outputs[0];
    int gelu = -1;
    for (int w : s.users[pre]) {
      const ir::Node& gn = g.nodes()[w];
      if (gn.op == "gelu" && gn.attrs.GetString("approximate", "none") == "tanh" && gelu < 0 &&
          s.st[gn.outputs[0]] == s.cdt)
        gelu = w;
    }
    c->nodes.push_back(su);
    c->extra_in.push_back(bias);
    if (gelu >= 0 && m.n % 8 == 0) {
      m.epilogue = GemmEpilogue::kBiasGeluAux;
      c->nodes.push_back(gelu);
      c->outputs = {g.nodes()[gelu].outputs[0], pre};
      c->op = "matmul+add+gelu";
    } else {
      m.epilogue = GemmEpilogue::kBias;
      c->outputs = {pre};
      c->op = "matmul+add";
    }
  } else if (u.op == "gelu_backward" && u.inputs[0] == out && u.inputs[1] != out &&
             u.attrs.GetString("approximate", "none") == "tanh" && m.n % 8 == 0 && s.st[u.outputs[0]] == s.cdt &&
             s.st[u.inputs[1]] == s.cdt && s.available_before(u.inputs[1], i) && s.materialized(u.inputs[1]) &&
             g.meta(u.inputs[1]).shape == g.meta(out).shape) {
    m.epilogue = GemmEpilogue::kDGelu;
    c->nodes.push_back(su);
    c->extra_in.push_back(u.inputs[1]);
    c->outputs = {u.outputs[0]};
    c->op = "matmul+gelu_backward";
  }
}

}  // namespace

absl::StatusOr<bool> GemmEpiloguesPass::Run(PlanState& s) {
  bool changed = false;
  for (int i = 0; i < s.nn; ++i) {
    if (s.g.nodes()[i].op != "matmul" || s.covered(i)) continue;
    GemmClaim c;
    if (!GemmShape(s, i, &c)) continue;
    if (s.options.gemm_epilogues) Epilogue(s, i, &c);
    for (size_t k = 1; k < c.nodes.size(); ++k) s.Cover(c.nodes[k], i);
    if (c.nodes.size() > 1) {
      s.virtual_value[s.g.nodes()[i].outputs[0]] = true;
      changed = true;
    }
    s.gemm[i] = std::move(c);
  }
  return changed;
}

absl::Status LowerMatmul(PlanState& s, int i, Launch L) {
  auto it = s.gemm.find(i);
  if (it == s.gemm.end()) {
    const Shape& A = s.g.meta(s.g.nodes()[i].inputs[0]).shape;
    const Shape& B = s.g.meta(s.g.nodes()[i].inputs[1]).shape;
    return Unsupported(s.g, i, absl::StrCat("operand shapes ", ShapeToString(A), " x ", ShapeToString(B)));
  }
  const GemmClaim& c = it->second;
  const ir::Node& n = s.g.nodes()[i];
  L.gemm = c.gemm;
  GemmPlan& m = L.gemm;
  m.ab_dtype = s.cdt;
  m.d_dtype = s.p.metas[c.outputs[0]].dtype;
  if (m.d_dtype != s.cdt &&
      !(s.cdt == DType::kBF16 && m.d_dtype == DType::kF32 && m.epilogue == GemmEpilogue::kNone))
    return Unsupported(s.g, i, absl::StrCat("output dtype ", DTypeName(m.d_dtype)));
  L.kind = LaunchKind::kGemm;
  L.op = c.op;
  L.nodes = c.nodes;
  L.inputs = {s.want(n.inputs[0], s.cdt), s.want(n.inputs[1], s.cdt)};
  for (int x : c.extra_in) L.inputs.push_back(s.want(x, s.cdt));
  L.outputs = c.outputs;
  s.p.launches.push_back(std::move(L));
  return absl::OkStatus();
}

}  // namespace loom::compiler::cuda::plan_internal
