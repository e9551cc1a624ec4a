// The lower_nodes pass (plan_lower.h): the walk over the graph and one
// function per family of ops.
#include "compiler/cuda/plan_lower.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/cuda/plan_collectives.h"
#include "compiler/cuda/plan_copies.h"
#include "compiler/cuda/plan_gemm.h"
#include "kernels/registry.h"

namespace loom::compiler::cuda::plan_internal {

namespace {

// Every adamw node as ONE launch: inputs param, grad, m, v per node, then the
// shared grad_norm, lr and step.
absl::Status LowerAdamW(PlanState& s, const std::vector<int>& adamw_nodes, Launch L) {
  const ir::Graph& g = s.g;
  CudaPlan& p = s.p;
  const int last_adamw = adamw_nodes.back();
  const ir::Node& n0 = g.nodes()[adamw_nodes[0]];
  L.kind = LaunchKind::kAdamW;
  L.nodes = adamw_nodes;
  L.attrs = n0.attrs;
  for (int j : adamw_nodes) {
    const ir::Node& an = g.nodes()[j];
    for (int k = 4; k < 7; ++k)
      if (an.inputs[k] != n0.inputs[k]) return Unsupported(g, j, "every adamw node must share grad_norm, lr and step");
    for (const char* key : {"beta1", "beta2", "eps", "max_norm"})
      if (an.attrs.GetFloat(key, -1) != n0.attrs.GetFloat(key, -1))
        return Unsupported(g, j, absl::StrCat("adamw nodes differ in attr ", key));
    for (int k : {0, 2, 3}) {
      const int v = an.inputs[k];
      // Each may also be a value of the step, updated in place there: this
      // rank's shard_slice of a replicated param (ZeRO-1/2) or of its state
      // (a sequence-parallel gradient), all_gathered back afterwards.
      const bool own = p.root[v] == v && (p.input_of[v] >= 0 || s.prod[v] >= 0);
      const DType want = k > 0 && s.options.memory.bf16_adam_states ? DType::kBF16 : DType::kF32;
      if (!own || p.metas[v].dtype != want)
        return Unsupported(g, j, "param, m and v must be graph inputs or values of the step, f32 (m and v: bf16 "
                                 "under the bf16-state memory policy)");
      for (int u : s.users[v])
        if (u > last_adamw) return Unsupported(g, u, "reads a parameter after its adamw update");
      const int o = an.outputs[k == 0 ? 0 : k == 2 ? 1 : 2];
      p.root[o] = v;
      p.input_of[o] = p.input_of[v];
    }
    const DType gdt = p.metas[an.inputs[1]].dtype;
    L.inputs.push_back(an.inputs[0]);
    L.inputs.push_back(gdt == DType::kF32 || gdt == DType::kBF16 ? an.inputs[1] : s.want(an.inputs[1], DType::kF32));
    L.inputs.push_back(an.inputs[2]);
    L.inputs.push_back(an.inputs[3]);
  }
  L.inputs.push_back(s.want(n0.inputs[4], DType::kF32));
  L.inputs.push_back(s.want(n0.inputs[5], DType::kF32));
  const DType sdt = p.metas[n0.inputs[6]].dtype;
  L.inputs.push_back(sdt == DType::kF32 || sdt == DType::kI32 || sdt == DType::kI64 ? n0.inputs[6]
                                                                                     : s.want(n0.inputs[6], DType::kF32));
  p.launches.push_back(std::move(L));
  return absl::OkStatus();
}

// A fused node or one elementwise op (the generated pointwise kernel), or
// with its layernorm or rmsnorm (add_layernorm) one generated norm launch.
void LowerPointwise(PlanState& s, int i, Launch& L) {
  const ir::Node& n = s.g.nodes()[i];
  L.kind = LaunchKind::kPointwise;
  L.inputs = n.inputs;
  auto it = s.add_layernorm.find(i);
  if (it == s.add_layernorm.end()) return;
  const int j = it->second;
  const ir::Node& ln = s.g.nodes()[j];
  L.kind = LaunchKind::kLayerNorm;
  L.op = absl::StrCat(n.op, "+", ln.op);
  L.node = j;
  L.nodes = {i, j};
  L.attrs = ln.attrs;
  if (ln.op == "rmsnorm") L.attrs.Set("rms", true);
  for (size_t k = 1; k < ln.inputs.size(); ++k) L.inputs.push_back(s.want(ln.inputs[k], DType::kF32));
  L.outputs.insert(L.outputs.end(), ln.outputs.begin(), ln.outputs.end());
}

// slice_backward (zero-fill + one copy into the window) and concat (one copy
// per input into its window; a deferred permute copies from its own source).
absl::Status LowerWindowCopies(const PlanState& s, int i, Launch& L) {
  const ir::Graph& g = s.g;
  const ir::Node& n = g.nodes()[i];
  const Shape& os = g.meta(n.outputs[0]).shape;
  const std::vector<int64_t> ost = Contig(os);
  const int64_t ax = NormAxis(n.attrs.GetInt("axis"), os.size());
  if (n.op == "slice_backward") {
    int64_t start = n.attrs.GetInt("start");
    if (start < 0) start += os[ax];
    const Shape& is = g.meta(n.inputs[0]).shape;
    L.kind = LaunchKind::kSliceBackward;
    L.inputs = n.inputs;
    L.copies = {CopyGeom{is, 0, Contig(is), start * ost[ax], ost}};
    return absl::OkStatus();
  }
  L.kind = LaunchKind::kConcat;
  int64_t pos = 0;
  for (int v : n.inputs) {
    auto it = s.deferred.find(v);
    if (it != s.deferred.end()) {
      CopyGeom cg = it->second;
      cg.dst_offset = pos * ost[ax];
      L.inputs.push_back(s.deferred_src.at(v));
      L.copies.push_back(cg);
      L.op = "permute+reshape+concat";
    } else {
      if (s.p.root[v] < 0) return Unsupported(g, i, "input is not materialised");
      const Shape& is = g.meta(v).shape;
      L.inputs.push_back(v);
      L.copies.push_back(CopyGeom{is, 0, Contig(is), pos * ost[ax], ost});
    }
    pos += g.meta(v).shape[ax];
  }
  return absl::OkStatus();
}

// v as stored when that is f32 or bf16, else cast to dt.
int FloatOr(PlanState& s, int v, DType dt) {
  const DType have = s.p.metas[v].dtype;
  return have == DType::kF32 || have == DType::kBF16 ? v : s.want(v, dt);
}

// layernorm, layernorm_backward (+ the residual add residual_grad folded),
// rmsnorm, rmsnorm_backward: activations in the output's dtype, weights and
// statistics f32; except a forward norm's x, read in its own float dtype (an
// f32 residual stream normalised into bf16: the generated norm, whose rmsnorm
// form is a kLayerNorm launch with attr rms), and rmsnorm_backward's dy, x
// and residual gradient, each read as stored (the kernel takes a dtype for
// each; the f32 stream's GEMMs read a bf16 dy).
absl::Status LowerNorm(PlanState& s, int i, Launch& L) {
  const ir::Node& n = s.g.nodes()[i];
  const CudaPlan& p = s.p;
  const DType dt = p.metas[n.outputs[0]].dtype;
  const DType f32 = DType::kF32;
  if (n.op == "layernorm") {
    if (n.inputs.size() != 3) return Unsupported(s.g, i, "layernorm without bias");
    L.kind = LaunchKind::kLayerNorm;
    L.inputs = {FloatOr(s, n.inputs[0], dt), s.want(n.inputs[1], f32), s.want(n.inputs[2], f32)};
    if (p.metas[n.outputs[1]].dtype != f32 || p.metas[n.outputs[2]].dtype != f32)
      return Unsupported(s.g, i, "mean/rstd must be f32");
  } else if (n.op == "layernorm_backward") {
    L.kind = LaunchKind::kLayerNormBackward;
    L.inputs = {s.want(n.inputs[0], dt), s.want(n.inputs[1], dt), s.want(n.inputs[2], f32),
                s.want(n.inputs[3], f32), s.want(n.inputs[4], f32)};
    if (p.metas[n.outputs[1]].dtype != f32 || p.metas[n.outputs[2]].dtype != f32)
      return Unsupported(s.g, i, "dweight/dbias must be f32");
  } else if (n.op == "rmsnorm") {
    if (p.metas[n.outputs[1]].dtype != f32) return Unsupported(s.g, i, "rstd must be f32");
    const int x = FloatOr(s, n.inputs[0], dt);
    L.kind = LaunchKind::kRmsNorm;
    if (p.metas[x].dtype != dt) {
      L.kind = LaunchKind::kLayerNorm;
      L.attrs.Set("rms", true);
    }
    L.inputs = {x, s.want(n.inputs[1], f32)};
  } else {
    if (p.metas[n.outputs[1]].dtype != f32) return Unsupported(s.g, i, "dweight must be f32");
    L.kind = LaunchKind::kRmsNormBackward;  // dy and x as stored (the f32 stream's norm reads bf16 dy)
    L.inputs = {FloatOr(s, n.inputs[0], dt), FloatOr(s, n.inputs[1], dt), s.want(n.inputs[2], f32),
                s.want(n.inputs[3], f32)};
  }
  if (auto it = s.residual_add.find(i); it != s.residual_add.end()) {  // the norm backward + add (residual_grad)
    const ir::Node& a = s.g.nodes()[it->second];
    const int dres = a.inputs[0] == n.outputs[0] ? a.inputs[1] : a.inputs[0];
    L.inputs.push_back(L.kind == LaunchKind::kRmsNormBackward ? FloatOr(s, dres, dt) : dres);
    L.outputs[0] = a.outputs[0];
    L.nodes.push_back(it->second);
    L.op = absl::StrCat(n.op, "+add");
  }
  return absl::OkStatus();
}

// sdpa / sdpa_backward: from attention_views' claim, else on contiguous
// operands in the output's dtype (no mask, no dropout: the graph op has none
// on CUDA).
absl::Status LowerAttention(PlanState& s, int i, Launch& L) {
  const ir::Node& n = s.g.nodes()[i];
  if (auto it = s.attn.find(i); it != s.attn.end()) {
    const AttnClaim& c = it->second;
    L.kind = c.kind;
    L.op = c.op;
    L.nodes = c.nodes;
    L.attn = c.views;
    L.inputs = c.inputs;
    L.outputs = c.outputs;
    for (const auto& [v, r] : c.roots) s.p.root[v] = r;
    return absl::OkStatus();
  }
  const bool bwd = n.op == "sdpa_backward";
  if (n.inputs.size() != (bwd ? 6u : 3u)) return Unsupported(s.g, i, "attention masks are not supported");
  if (n.attrs.GetFloat("dropout_p", 0.0) != 0.0) return Unsupported(s.g, i, "dropout is not supported");
  const DType dt = s.p.metas[n.outputs[0]].dtype;
  if (!bwd) {
    L.kind = LaunchKind::kSdpa;
    L.inputs = {s.want(n.inputs[0], dt), s.want(n.inputs[1], dt), s.want(n.inputs[2], dt)};
    return absl::OkStatus();
  }
  if (s.p.metas[n.outputs[1]].dtype != dt || s.p.metas[n.outputs[2]].dtype != dt)
    return Unsupported(s.g, i, "dq, dk, dv must share a dtype");
  L.kind = LaunchKind::kSdpaBackward;
  L.inputs = {s.want(n.inputs[0], dt), s.want(n.inputs[1], dt), s.want(n.inputs[2], dt),
              s.want(n.inputs[3], dt), s.want(n.inputs[4], dt), s.want(n.inputs[5], DType::kF32)};
  return absl::OkStatus();
}

// Whether sum / max node i reduces a suffix of its input's axes (axes empty:
// all of them).
bool ReducesTrailingAxes(const ir::Graph& g, int i) {
  const ir::Node& n = g.nodes()[i];
  const size_t nd = g.meta(n.inputs[0]).shape.size();
  std::vector<int64_t> axes = n.attrs.GetInts("axes");
  if (axes.empty()) return true;
  for (int64_t& a : axes) a = NormAxis(a, nd);
  std::sort(axes.begin(), axes.end());
  for (size_t k = 0; k < axes.size(); ++k)
    if (axes[k] != static_cast<int64_t>(nd - axes.size() + k)) return false;
  return true;
}

// The row kernels that take their operands as the graph has them: fill,
// embedding (+backward), sum_to, rope, cross-entropy (+backward), sum and max
// over trailing axes, grad_norm.
// False: not one of them.
absl::StatusOr<bool> LowerRowOp(PlanState& s, int i, Launch& L) {
  const ir::Node& n = s.g.nodes()[i];
  const std::string& op = n.op;
  const CudaPlan& p = s.p;
  const int out0 = n.outputs.empty() ? -1 : n.outputs[0];
  if (op == "fill") {
    L.kind = LaunchKind::kFill;
  } else if (op == "embedding") {
    if (!IsFloating(p.metas[n.inputs[0]].dtype)) return Unsupported(s.g, i, "weight must be floating");
    L.kind = LaunchKind::kEmbedding;
    L.inputs = n.inputs;
  } else if (op == "embedding_backward") {
    if (p.metas[out0].dtype != DType::kF32) return Unsupported(s.g, i, "output must be f32");
    L.kind = s.options.deterministic || s.options.sorted_embedding_backward ? LaunchKind::kEmbeddingBackwardSorted
                                                                             : LaunchKind::kEmbeddingBackward;
    L.inputs = n.inputs;
  } else if (op == "sum_to") {
    const Shape& in = s.g.meta(n.inputs[0]).shape;
    const Shape& os = s.g.meta(out0).shape;
    if (os.size() > in.size() || !std::equal(os.begin(), os.end(), in.end() - os.size()))
      return Unsupported(s.g, i, absl::StrCat("only sums over leading dims are supported (", ShapeToString(in),
                                              " -> ", ShapeToString(os), ")"));
    L.kind = LaunchKind::kSumTo;
    L.inputs = n.inputs;
  } else if (op == "rope") {
    if (s.g.meta(out0).shape.size() != 4 || s.g.meta(out0).shape[3] % 2 != 0)
      return Unsupported(s.g, i, "expected x[B, T, H, D] with even D");
    L.kind = LaunchKind::kRope;
    L.inputs = {s.want(n.inputs[0], p.metas[out0].dtype)};
  } else if (op == "cross_entropy") {
    if (p.metas[n.outputs[0]].dtype != DType::kF32 || p.metas[n.outputs[1]].dtype != DType::kF32)
      return Unsupported(s.g, i, "loss/lse must be f32");
    L.kind = LaunchKind::kCrossEntropy;
    L.inputs = n.inputs;
  } else if (op == "cross_entropy_backward") {
    L.kind = LaunchKind::kCrossEntropyBackward;
    L.inputs = {s.want(n.inputs[0], DType::kF32), s.want(n.inputs[1], p.metas[out0].dtype), n.inputs[2],
                s.want(n.inputs[3], DType::kF32)};
  } else if (op == "sum" || op == "max") {
    if (!ReducesTrailingAxes(s.g, i))
      return Unsupported(s.g, i, "only reductions over trailing axes are supported");
    L.kind = LaunchKind::kRowReduce;
    L.inputs = n.inputs;
  } else if (op == "grad_norm") {
    L.kind = LaunchKind::kGradNorm;
    for (int v : n.inputs) {
      const DType dt = s.p.metas[v].dtype;
      L.inputs.push_back(dt == DType::kF32 || dt == DType::kBF16 ? v : s.want(v, DType::kF32));
    }
  } else {
    return false;
  }
  return true;
}

// The launch of node i (not covered; L: op, node, attrs set), or an alias.
absl::Status LowerNode(PlanState& s, int i, Launch L, const std::vector<int>& adamw_nodes) {
  const ir::Graph& g = s.g;
  const ir::Node& n = g.nodes()[i];
  const std::string& op = n.op;
  CudaPlan& p = s.p;
  if (op == "reshape") {
    const int in = n.inputs[0], out = n.outputs[0];
    if (p.root[in] < 0) return Unsupported(g, i, "input is not materialised");
    p.root[out] = p.root[in];
    p.input_of[out] = p.input_of[in];
    p.metas[out].dtype = p.metas[in].dtype;
    return absl::OkStatus();
  }
  if (op == "matmul") return LowerMatmul(s, i, std::move(L));
  if (op == "adamw") return i == adamw_nodes.back() ? LowerAdamW(s, adamw_nodes, std::move(L)) : absl::OkStatus();
  if (IsSpmdOp(op)) return LowerSpmdOp(s, i, std::move(L));
  L.outputs = n.outputs;
  const kernels::OpDef* def = op == ir::kFusedOp ? nullptr : kernels::OpRegistry::Global().Find(op);
  if (op == ir::kFusedOp || (def && def->elementwise && n.outputs.size() == 1)) {
    LowerPointwise(s, i, L);
  } else if (op == "permute" || op == "slice" || op == "cast" || op == "broadcast_to") {
    LowerCopy(s, i, L);
  } else if (op == "slice_backward" || op == "concat") {
    LOOM_RETURN_IF_ERROR(LowerWindowCopies(s, i, L));
  } else if (op == "layernorm" || op == "layernorm_backward" || op == "rmsnorm" || op == "rmsnorm_backward") {
    LOOM_RETURN_IF_ERROR(LowerNorm(s, i, L));
  } else if (op == "sdpa" || op == "sdpa_backward") {
    LOOM_RETURN_IF_ERROR(LowerAttention(s, i, L));
  } else {
    LOOM_ASSIGN_OR_RETURN(const bool row_op, LowerRowOp(s, i, L));
    if (!row_op) return Unsupported(g, i, "no CUDA launch for this op");
  }
  // An f32 dx of a bf16 plan (the f32 residual stream's gradient): the
  // launch can write its bf16 copy too, for the GEMMs that read it (want).
  if (L.kind == LaunchKind::kRmsNormBackward && p.bf16 && p.metas[L.outputs[0]].dtype == DType::kF32)
    s.bf16_copy_at[L.outputs[0]] = static_cast<int>(p.launches.size());
  p.launches.push_back(std::move(L));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> LowerNodesPass::Run(PlanState& s) {
  const ir::Graph& g = s.g;
  std::vector<int> adamw_nodes;
  for (int i = 0; i < s.nn; ++i)
    if (g.nodes()[i].op == "adamw") adamw_nodes.push_back(i);
  size_t rooted = 0;  // launches whose outputs have their root set
  for (int i = 0; i < s.nn; ++i) {
    for (; rooted < s.p.launches.size(); ++rooted)
      for (int v : s.p.launches[rooted].outputs)
        if (s.p.root[v] < 0) s.p.root[v] = v;
    if (s.covered(i)) continue;
    const ir::Node& n = g.nodes()[i];
    for (int v : n.outputs)
      if (g.meta(v).dtype == DType::kF64) return Unsupported(g, i, "f64 values are not supported on CUDA");
    Launch L;
    L.op = n.op;
    L.node = i;
    L.nodes = {i};
    L.attrs = n.attrs;
    LOOM_RETURN_IF_ERROR(LowerNode(s, i, std::move(L), adamw_nodes));
  }
  return !s.p.launches.empty();
}

}  // namespace loom::compiler::cuda::plan_internal
