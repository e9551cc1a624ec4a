// matmul -> GEMM launches in the CUDA plan, with their pattern fusions: the
// bias (+ tanh GELU with aux) epilogue, dgelu, the weight-gradient matmul +
// sum_to as one GEMM, and batched GEMMs.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/cuda/plan.h"
#include "compiler/cuda/plan_internal.h"

namespace loom::compiler::cuda::plan_internal {

namespace {

int64_t Prod(const Shape& s, size_t lo, size_t hi) {
  int64_t p = 1;
  for (size_t i = lo; i < hi; ++i) p *= s[i];
  return p;
}

}  // namespace

// Matmul node i (L: its launch so far): pushes the GEMM launch.
absl::Status Planner::PlanMatmul(int i, Launch L) {
  const Node& n = g.nodes()[i];
  const int a = n.inputs[0], b = n.inputs[1], out = n.outputs[0];
  const Shape& A = g.meta(a).shape;
  const Shape& B = g.meta(b).shape;
  const bool ta = n.attrs.GetBool("trans_a", false), tb = n.attrs.GetBool("trans_b", false);
  const size_t ra = A.size(), rb = B.size();
  GemmPlan& m = L.gemm;
  m.ab_dtype = cdt;
  m.trans_a = ta;
  m.trans_b = tb;
  int d = out;
  const int su = single_user(out);
  if (ta && !tb && ra >= 3 && ra == rb && std::equal(A.begin(), A.end() - 2, B.begin()) && su >= 0 &&
      g.nodes()[su].op == "sum_to" &&
      g.meta(g.nodes()[su].outputs[0]).shape == Shape{A[ra - 1], B[rb - 1]}) {
    m.weight_grad = true;
    m.m = A[ra - 1];
    m.n = B[rb - 1];
    m.k = Prod(A, 0, ra - 1);
    d = g.nodes()[su].outputs[0];
    done[su] = true;
    L.nodes.push_back(su);
    L.op = "matmul+sum_to";
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
    return Unsupported(g, i, absl::StrCat("operand shapes ", ShapeToString(A), " x ", ShapeToString(B)));
  }
  std::vector<int> extra_in;
  std::vector<int> outs = {d};
  if (!m.weight_grad && m.batch == 1 && su >= 0) {
    const Node& u = g.nodes()[su];
    if (u.op == "add" && st[u.outputs[0]] == cdt && g.meta(u.outputs[0]).shape == g.meta(out).shape) {
      const int bias = u.inputs[0] == out ? u.inputs[1] : u.inputs[0];
      if (g.meta(bias).shape == Shape{m.n} && available_before(bias, i) && p.root[bias] >= 0) {
        // Bias (+ GELU with aux) epilogue.
        const int pre = u.outputs[0];
        int gelu = -1;
        for (int w : users[pre]) {
          const Node& gn = g.nodes()[w];
          if (gn.op == "gelu" && gn.attrs.GetString("approximate", "none") == "tanh" && gelu < 0 &&
              st[gn.outputs[0]] == cdt)
            gelu = w;
        }
        done[su] = true;
        L.nodes.push_back(su);
        extra_in.push_back(bias);
        if (gelu >= 0 && m.n % 8 == 0) {
          m.epilogue = GemmEpilogue::kBiasGeluAux;
          done[gelu] = true;
          L.nodes.push_back(gelu);
          outs = {g.nodes()[gelu].outputs[0], pre};
          L.op = "matmul+add+gelu";
        } else {
          m.epilogue = GemmEpilogue::kBias;
          outs = {pre};
          L.op = "matmul+add";
        }
      }
    } else if (u.op == "gelu_backward" && u.inputs[0] == out && u.inputs[1] != out &&
               u.attrs.GetString("approximate", "none") == "tanh" && m.n % 8 == 0 &&
               st[u.outputs[0]] == cdt && st[u.inputs[1]] == cdt && available_before(u.inputs[1], i) &&
               p.root[u.inputs[1]] >= 0 && g.meta(u.inputs[1]).shape == g.meta(out).shape) {
      m.epilogue = GemmEpilogue::kDGelu;
      done[su] = true;
      L.nodes.push_back(su);
      extra_in.push_back(u.inputs[1]);
      outs = {u.outputs[0]};
      L.op = "matmul+gelu_backward";
    }
  }
  m.d_dtype = p.metas[outs[0]].dtype;
  if (m.d_dtype != cdt && !(cdt == DType::kBF16 && m.d_dtype == DType::kF32 && m.epilogue == GemmEpilogue::kNone))
    return Unsupported(g, i, absl::StrCat("output dtype ", DTypeName(m.d_dtype)));
  L.kind = LaunchKind::kGemm;
  L.inputs = {want(a, cdt), want(b, cdt)};
  for (int x : extra_in) L.inputs.push_back(want(x, cdt));
  L.outputs = outs;
  p.launches.push_back(std::move(L));
  return absl::OkStatus();
}

}  // namespace loom::compiler::cuda::plan_internal
