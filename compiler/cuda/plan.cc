// PlanCuda: storage dtypes, launch list with pattern fusions, arena plan.
// See plan.h for the contract.
// This file: the planner state (plan_internal.h), the walk over the graph's
// nodes that emits one launch per node (with casts, aliases, the multi-tensor
// AdamW and the fusions that live next to their node), and PlanCuda; the
// other passes are in the plan_*.cc files listed in plan_internal.h.
#include "compiler/cuda/plan.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/cuda/plan_internal.h"

namespace loom::compiler::cuda::plan_internal {

namespace {

// add -> layernorm (PlanOptions::add_layernorm): node i is an `add`, or a fused
// node made of adds only, of 2..4 float operands that are [.., C] and
// broadcast only over leading dims, whose output is read as x by a layernorm
// with weight and bias of the same storage dtype policy. Returns that
// layernorm's node, or -1.
int AddLayerNormUser(const Graph& g, int i, const std::vector<std::vector<int>>& users,
                     const std::vector<int>& prod, const std::vector<TensorMeta>& metas) {
  const Node& n = g.nodes()[i];
  if (n.outputs.size() != 1 || n.inputs.size() < 2 || n.inputs.size() > 4) return -1;
  if (n.op == kFusedOp) {
    if (!n.subgraph || n.subgraph->outputs().size() != 1) return -1;
    for (const Node& b : n.subgraph->nodes())
      if (b.op != "add") return -1;
  } else if (n.op != "add") {
    return -1;
  }
  const int h = n.outputs[0];
  const Shape& os = g.meta(h).shape;
  const DType dt = metas[h].dtype;
  if (os.empty() || (dt != DType::kF32 && dt != DType::kBF16)) return -1;
  for (int v : n.inputs) {
    const Shape& s = g.meta(v).shape;
    size_t lead = 0;
    while (lead < s.size() && s[lead] == 1 && s.size() - lead > 1) ++lead;
    if (s.empty() || s.size() - lead > os.size() || !std::equal(s.begin() + lead, s.end(), os.end() - (s.size() - lead)))
      return -1;
    if (metas[v].dtype != DType::kF32 && metas[v].dtype != DType::kBF16) return -1;
  }
  for (int j : users[h]) {
    const Node& u = g.nodes()[j];
    if (u.op != "layernorm" || u.inputs.size() != 3 || u.inputs[0] != h || u.inputs[1] == h || u.inputs[2] == h)
      continue;
    if (prod[u.inputs[1]] >= i || prod[u.inputs[2]] >= i) continue;
    if (metas[u.outputs[0]].dtype != dt || metas[u.outputs[1]].dtype != DType::kF32 ||
        metas[u.outputs[2]].dtype != DType::kF32)
      continue;
    return j;
  }
  return -1;
}

}  // namespace

absl::Status Unsupported(const Graph& g, int node, absl::string_view why) {
  return absl::UnimplementedError(absl::StrCat("cuda lowering: op '", g.nodes()[node].op, "' (node ", node,
                                               "): ", why));
}

Planner::Planner(const Graph& graph, bool bf16, const PlanOptions& opts) : g(graph), options(opts) {
  p.bf16 = bf16;
  st = StorageDTypes(g, bf16);
  const int nv = static_cast<int>(g.values().size());
  for (int v = 0; v < nv; ++v) p.metas.push_back({st[v], g.meta(v).shape});
  p.root.assign(nv, -1);
  p.input_of.assign(nv, -1);
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const int v = g.inputs()[k].value;
    p.root[v] = v;
    p.input_of[v] = static_cast<int>(k);
  }
  p.shadow.assign(g.inputs().size(), -1);
  is_shadow.assign(nv, false);
  prod = Producers(g);
  users = Users(g);
  is_output.assign(nv, false);
  for (const GraphOutput& o : g.outputs()) is_output[o.value] = true;
  nn = static_cast<int>(g.nodes().size());
  done.assign(nn, false);
  cdt = bf16 ? DType::kBF16 : DType::kF32;
  attn_views = options.attn_views && bf16;
}

int Planner::new_value(TensorMeta m) {
  const int id = static_cast<int>(p.metas.size());
  p.metas.push_back(std::move(m));
  p.root.push_back(id);
  p.input_of.push_back(-1);
  is_shadow.push_back(false);
  return id;
}

// `v` in storage dtype `dt`: itself, a param's bf16 shadow, or a cast.
int Planner::want(int v, DType dt) {
  if (p.metas[v].dtype == dt) return v;
  const int k = p.input_of[v];
  if (k >= 0 && p.root[v] == g.inputs()[k].value && g.inputs()[k].kind == InputKind::kParam &&
      dt == DType::kBF16 && p.metas[v].dtype == DType::kF32 && v == g.inputs()[k].value) {
    if (p.shadow[k] < 0) {
      p.shadow[k] = new_value({DType::kBF16, p.metas[v].shape});
      is_shadow[p.shadow[k]] = true;
    }
    return p.shadow[k];
  }
  const int t = new_value({dt, p.metas[v].shape});
  Launch c;
  c.kind = LaunchKind::kCopy;
  c.op = "cast";
  c.inputs = {v};
  c.outputs = {t};
  c.copies = {CopyGeom{p.metas[v].shape, 0, Contig(p.metas[v].shape), 0, {}}};
  p.launches.push_back(std::move(c));
  return t;
}

bool Planner::available_before(int v, int node) const { return prod[v] < node; }  // inputs: prod -1

int Planner::single_user(int v) const {
  if (is_output[v] || users[v].size() != 1) return -1;
  const Node& u = g.nodes()[users[v][0]];
  int uses = 0;
  for (int x : u.inputs) uses += x == v;
  return uses == 1 ? users[v][0] : -1;
}

// One launch per node in graph order (the fusions cover more nodes), then a
// copy_back per output that updates an input but was not written in place.
absl::Status Planner::PlanLaunches() {
  // AdamW grouping.
  std::vector<int> adamw_nodes;
  for (int i = 0; i < nn; ++i)
    if (g.nodes()[i].op == "adamw") adamw_nodes.push_back(i);
  const int last_adamw = adamw_nodes.empty() ? -1 : adamw_nodes.back();

  size_t rooted = 0;  // launches whose outputs have their root set
  for (int i = 0; i < nn; ++i) {
    for (; rooted < p.launches.size(); ++rooted)
      for (int v : p.launches[rooted].outputs)
        if (p.root[v] < 0) p.root[v] = v;
    if (done[i]) continue;
    const Node& n = g.nodes()[i];
    const std::string& op = n.op;
    for (int v : n.outputs)
      if (g.meta(v).dtype == DType::kF64) return Unsupported(g, i, "f64 values are not supported on CUDA");
    Launch L;
    L.op = op;
    L.node = i;
    L.nodes = {i};
    L.attrs = n.attrs;
    const ops::OpDef* def = op == kFusedOp ? nullptr : ops::OpRegistry::Global().Find(op);

    if (op == "reshape") {
      const int in = n.inputs[0], out = n.outputs[0];
      if (p.root[in] < 0) return Unsupported(g, i, "input is not materialised");
      p.root[out] = p.root[in];
      p.input_of[out] = p.input_of[in];
      p.metas[out].dtype = p.metas[in].dtype;
      continue;
    }
    if (op == "matmul") {
      LOOM_RETURN_IF_ERROR(PlanMatmul(i, std::move(L)));
      continue;
    }
    if (op == "adamw") {
      if (i != last_adamw) continue;  // emitted once, at the last adamw node
      const Node& n0 = g.nodes()[adamw_nodes[0]];
      L.kind = LaunchKind::kAdamW;
      L.nodes = adamw_nodes;
      L.attrs = n0.attrs;
      for (int j : adamw_nodes) {
        const Node& an = g.nodes()[j];
        for (int s = 4; s < 7; ++s)
          if (an.inputs[s] != n0.inputs[s])
            return Unsupported(g, j, "every adamw node must share grad_norm, lr and step");
        for (const char* key : {"beta1", "beta2", "eps", "max_norm"})
          if (an.attrs.GetFloat(key, -1) != n0.attrs.GetFloat(key, -1))
            return Unsupported(g, j, absl::StrCat("adamw nodes differ in attr ", key));
        for (int s : {0, 2, 3}) {
          const int v = an.inputs[s];
          if (p.input_of[v] < 0 || p.root[v] != v || p.metas[v].dtype != DType::kF32)
            return Unsupported(g, j, "param, m and v must be f32 graph inputs");
          for (int u : users[v])
            if (u > last_adamw) return Unsupported(g, u, "reads a parameter after its adamw update");
          const int o = an.outputs[s == 0 ? 0 : s == 2 ? 1 : 2];
          p.root[o] = v;
          p.input_of[o] = p.input_of[v];
        }
        const DType gdt = p.metas[an.inputs[1]].dtype;
        L.inputs.push_back(an.inputs[0]);
        L.inputs.push_back(gdt == DType::kF32 || gdt == DType::kBF16 ? an.inputs[1] : want(an.inputs[1], DType::kF32));
        L.inputs.push_back(an.inputs[2]);
        L.inputs.push_back(an.inputs[3]);
      }
      L.inputs.push_back(want(n0.inputs[4], DType::kF32));
      L.inputs.push_back(want(n0.inputs[5], DType::kF32));
      const DType sdt = p.metas[n0.inputs[6]].dtype;
      L.inputs.push_back(sdt == DType::kF32 || sdt == DType::kI32 || sdt == DType::kI64 ? n0.inputs[6]
                                                                                         : want(n0.inputs[6], DType::kF32));
      p.launches.push_back(std::move(L));
      continue;
    }

    const int out0 = n.outputs.empty() ? -1 : n.outputs[0];
    L.outputs = n.outputs;
    if (op == kFusedOp || (def && def->elementwise && n.outputs.size() == 1)) {
      L.kind = LaunchKind::kPointwise;
      L.inputs = n.inputs;
      // add -> layernorm: one generated launch (codegen/rowwise.h) writes the
      // sum (the next residual) and the norm; emitted here, at the add.
      if (const int j = options.add_layernorm ? AddLayerNormUser(g, i, users, prod, p.metas) : -1; j >= 0) {
        const Node& ln = g.nodes()[j];
        L.kind = LaunchKind::kLayerNorm;
        L.op = absl::StrCat(op, "+layernorm");
        L.node = j;
        L.nodes = {i, j};
        L.attrs = ln.attrs;
        L.inputs.push_back(want(ln.inputs[1], DType::kF32));
        L.inputs.push_back(want(ln.inputs[2], DType::kF32));
        L.outputs.insert(L.outputs.end(), ln.outputs.begin(), ln.outputs.end());
        done[j] = true;
      }
    } else if ((op == "slice" || op == "slice_backward") && n.attrs.GetInt("step", 1) != 1) {
      return Unsupported(g, i, "slices with a step other than 1 are not supported");
    } else if (op == "permute" || op == "slice" || op == "cast" || op == "broadcast_to") {
      if (!PlanCopy(i, L)) continue;
    } else if (op == "slice_backward") {
      const Shape& os = g.meta(out0).shape;
      const std::vector<int64_t> ost = Contig(os);
      const int64_t ax = NormAxis(n.attrs.GetInt("axis"), os.size());
      int64_t start = n.attrs.GetInt("start");
      if (start < 0) start += os[ax];
      const Shape& is = g.meta(n.inputs[0]).shape;
      L.kind = LaunchKind::kSliceBackward;
      L.inputs = n.inputs;
      L.copies = {CopyGeom{is, 0, Contig(is), start * ost[ax], ost}};
    } else if (op == "concat") {
      const Shape& os = g.meta(out0).shape;
      const std::vector<int64_t> ost = Contig(os);
      const int64_t ax = NormAxis(n.attrs.GetInt("axis"), os.size());
      L.kind = LaunchKind::kConcat;
      int64_t pos = 0;
      for (int v : n.inputs) {
        auto it = deferred.find(v);
        if (it != deferred.end()) {
          CopyGeom cg = it->second;
          cg.dst_offset = pos * ost[ax];
          L.inputs.push_back(deferred_src.at(v));
          L.copies.push_back(cg);
          L.op = "permute+reshape+concat";
        } else {
          if (p.root[v] < 0) return Unsupported(g, i, "input is not materialised");
          const Shape& is = g.meta(v).shape;
          L.inputs.push_back(v);
          L.copies.push_back(CopyGeom{is, 0, Contig(is), pos * ost[ax], ost});
        }
        pos += g.meta(v).shape[ax];
      }
    } else if (op == "fill") {
      L.kind = LaunchKind::kFill;
    } else if (op == "embedding") {
      if (!IsFloating(p.metas[n.inputs[0]].dtype)) return Unsupported(g, i, "weight must be floating");
      L.kind = LaunchKind::kEmbedding;
      L.inputs = n.inputs;
    } else if (op == "embedding_backward") {
      if (p.metas[out0].dtype != DType::kF32) return Unsupported(g, i, "output must be f32");
      L.kind = LaunchKind::kEmbeddingBackward;
      L.inputs = n.inputs;
    } else if (op == "sum_to") {
      const Shape& in = g.meta(n.inputs[0]).shape;
      const Shape& os = g.meta(out0).shape;
      if (os.size() > in.size() || !std::equal(os.begin(), os.end(), in.end() - os.size()))
        return Unsupported(g, i, absl::StrCat("only sums over leading dims are supported (", ShapeToString(in),
                                              " -> ", ShapeToString(os), ")"));
      L.kind = LaunchKind::kSumTo;
      L.inputs = n.inputs;
    } else if (op == "layernorm") {
      if (n.inputs.size() != 3) return Unsupported(g, i, "layernorm without bias");
      const DType dt = p.metas[out0].dtype;
      L.kind = LaunchKind::kLayerNorm;
      L.inputs = {want(n.inputs[0], dt), want(n.inputs[1], DType::kF32), want(n.inputs[2], DType::kF32)};
      if (p.metas[n.outputs[1]].dtype != DType::kF32 || p.metas[n.outputs[2]].dtype != DType::kF32)
        return Unsupported(g, i, "mean/rstd must be f32");
    } else if (op == "layernorm_backward") {
      const DType dt = p.metas[out0].dtype;
      L.kind = LaunchKind::kLayerNormBackward;
      L.inputs = {want(n.inputs[0], dt), want(n.inputs[1], dt), want(n.inputs[2], DType::kF32),
                  want(n.inputs[3], DType::kF32), want(n.inputs[4], DType::kF32)};
      if (p.metas[n.outputs[1]].dtype != DType::kF32 || p.metas[n.outputs[2]].dtype != DType::kF32)
        return Unsupported(g, i, "dweight/dbias must be f32");
      // layernorm_backward -> add(other, dx): the kernel adds the residual
      // branch's gradient itself (dresidual) and writes the sum.
      const int su = single_user(out0);
      if (options.fold_residual_grad && su >= 0 && g.nodes()[su].op == "add") {
        const Node& a = g.nodes()[su];
        const int other = a.inputs[0] == out0 ? a.inputs[1] : a.inputs[0];
        if (other != out0 && g.meta(other).shape == g.meta(out0).shape && p.metas[other].dtype == dt &&
            p.metas[a.outputs[0]].dtype == dt && g.meta(a.outputs[0]).shape == g.meta(out0).shape &&
            available_before(other, i) && p.root[other] >= 0) {
          L.inputs.push_back(other);
          L.outputs[0] = a.outputs[0];
          L.nodes.push_back(su);
          L.op = "layernorm_backward+add";
          done[su] = true;
        }
      }
      // The column sums of dx (a linear's bias gradient) in the same kernel:
      // outputs {dx, dweight, dbias, dx_colsum}.
      if (options.bias_grad_in_layernorm) {
        const int dxv = L.outputs[0];
        const Shape& ds = g.meta(dxv).shape;
        for (int u : users[dxv]) {
          const Node& sn = g.nodes()[u];
          if (done[u] || sn.op != "sum_to" || sn.inputs[0] != dxv || ds.empty()) continue;
          const int so = sn.outputs[0];
          if (g.meta(so).shape != Shape{ds.back()} || p.metas[so].dtype != DType::kF32) continue;
          L.outputs.push_back(so);
          L.nodes.push_back(u);
          L.op += "+sum_to";
          done[u] = true;
          break;
        }
      }
    } else if (op == "rmsnorm") {
      const DType dt = p.metas[out0].dtype;
      if (p.metas[n.outputs[1]].dtype != DType::kF32) return Unsupported(g, i, "rstd must be f32");
      L.kind = LaunchKind::kRmsNorm;
      L.inputs = {want(n.inputs[0], dt), want(n.inputs[1], DType::kF32)};
    } else if (op == "rmsnorm_backward") {
      const DType dt = p.metas[out0].dtype;
      if (p.metas[n.outputs[1]].dtype != DType::kF32) return Unsupported(g, i, "dweight must be f32");
      L.kind = LaunchKind::kRmsNormBackward;
      L.inputs = {want(n.inputs[0], dt), want(n.inputs[1], dt), want(n.inputs[2], DType::kF32),
                  want(n.inputs[3], DType::kF32)};
    } else if (op == "rope") {
      if (g.meta(out0).shape.size() != 4 || g.meta(out0).shape[3] % 2 != 0)
        return Unsupported(g, i, "expected x[B, T, H, D] with even D");
      L.kind = LaunchKind::kRope;
      L.inputs = {want(n.inputs[0], p.metas[out0].dtype)};
    } else if (op == "cross_entropy") {
      if (p.metas[n.outputs[0]].dtype != DType::kF32 || p.metas[n.outputs[1]].dtype != DType::kF32)
        return Unsupported(g, i, "loss/lse must be f32");
      L.kind = LaunchKind::kCrossEntropy;
      L.inputs = n.inputs;
    } else if (op == "cross_entropy_backward") {
      L.kind = LaunchKind::kCrossEntropyBackward;
      L.inputs = {want(n.inputs[0], DType::kF32), want(n.inputs[1], p.metas[out0].dtype), n.inputs[2],
                  want(n.inputs[3], DType::kF32)};
    } else if (op == "sdpa" && attn_views && flash_node(i)) {
      PlanSdpaViews(i, L);
    } else if (op == "sdpa_backward" && attn_views && flash_node(i)) {
      PlanSdpaBackwardViews(i, L);
    } else if (op == "sdpa") {
      if (n.inputs.size() != 3) return Unsupported(g, i, "attention masks are not supported");
      if (n.attrs.GetFloat("dropout_p", 0.0) != 0.0) return Unsupported(g, i, "dropout is not supported");
      const DType dt = p.metas[out0].dtype;
      L.kind = LaunchKind::kSdpa;
      L.inputs = {want(n.inputs[0], dt), want(n.inputs[1], dt), want(n.inputs[2], dt)};
    } else if (op == "sdpa_backward") {
      if (n.inputs.size() != 6) return Unsupported(g, i, "attention masks are not supported");
      if (n.attrs.GetFloat("dropout_p", 0.0) != 0.0) return Unsupported(g, i, "dropout is not supported");
      const DType dt = p.metas[out0].dtype;
      if (p.metas[n.outputs[1]].dtype != dt || p.metas[n.outputs[2]].dtype != dt)
        return Unsupported(g, i, "dq, dk, dv must share a dtype");
      L.kind = LaunchKind::kSdpaBackward;
      L.inputs = {want(n.inputs[0], dt), want(n.inputs[1], dt), want(n.inputs[2], dt),
                  want(n.inputs[3], dt), want(n.inputs[4], dt), want(n.inputs[5], DType::kF32)};
    } else if (op == "grad_norm") {
      L.kind = LaunchKind::kGradNorm;
      for (int v : n.inputs) {
        const DType dt = p.metas[v].dtype;
        L.inputs.push_back(dt == DType::kF32 || dt == DType::kBF16 ? v : want(v, DType::kF32));
      }
    } else {
      return Unsupported(g, i, "no CUDA launch for this op");
    }
    p.launches.push_back(std::move(L));
  }

  // Outputs that update an input but were not written in place.
  for (const GraphOutput& o : g.outputs()) {
    if (o.updates < 0) continue;
    if (p.input_of[o.value] == o.updates && p.root[o.value] == g.inputs()[o.updates].value) continue;
    Launch c;
    c.kind = LaunchKind::kCopyBack;
    c.op = "copy_back";
    c.inputs = {o.value};
    c.copy_back_input = o.updates;
    p.launches.push_back(std::move(c));
  }
  return absl::OkStatus();
}

}  // namespace loom::compiler::cuda::plan_internal

namespace loom::compiler::cuda {

absl::StatusOr<CudaPlan> PlanCuda(const Graph& g, bool bf16, const PlanOptions& options) {
  plan_internal::Planner planner(g, bf16, options);
  LOOM_RETURN_IF_ERROR(planner.PlanLaunches());
  if (options.fuse_cross_entropy) FuseCrossEntropy(planner.p);
  LOOM_RETURN_IF_ERROR(planner.AssignArena());
  return std::move(planner.p);
}

}  // namespace loom::compiler::cuda
