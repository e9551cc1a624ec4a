// Strided copies in the CUDA plan: ViewStrides (the view rule that composes
// reshape into a copy), the compose_copies pass and the copy launches
// (plan_copies.h).
#include "compiler/cuda/plan_copies.h"

#include <optional>
#include <string>
#include <vector>

namespace loom::compiler::cuda::plan_internal {

namespace {

std::vector<int64_t> Broadcast(absl::Span<const int64_t> in, absl::Span<const int64_t> out) {
  std::vector<int64_t> st(out.size(), 0);
  const std::vector<int64_t> c = Contig(in);
  const size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[lead + i] = in[i] == 1 && out[lead + i] != 1 ? 0 : c[i];
  return st;
}

// Element offset of slice node i's window in its input.
int64_t SliceOffset(const ir::Graph& g, int i) {
  const ir::Node& n = g.nodes()[i];
  const Shape& is = g.meta(n.inputs[0]).shape;
  const int64_t ax = NormAxis(n.attrs.GetInt("axis"), is.size());
  int64_t start = n.attrs.GetInt("start");
  if (start < 0) start += is[ax];
  return start * Contig(is)[ax];
}

// permute -> reshape -> concat: the permute's copy straight into the concat's
// window (its destination offset is the concat's to fill in).
bool DeferIntoConcat(PlanState& s, int i) {
  const ir::Graph& g = s.g;
  const ir::Node& n = g.nodes()[i];
  const int out0 = n.outputs[0];
  const int r = s.single_user(out0);
  const int c = r >= 0 && g.nodes()[r].op == "reshape" ? s.single_user(g.nodes()[r].outputs[0]) : -1;
  if (c < 0 || g.nodes()[c].op != "concat") return false;
  const Shape& cs = g.meta(g.nodes()[c].outputs[0]).shape;
  const int64_t ax = NormAxis(g.nodes()[c].attrs.GetInt("axis"), cs.size());
  const int r_out = g.nodes()[r].outputs[0];
  auto st = ViewStrides(g.meta(r_out).shape, Contig(cs), g.meta(out0).shape);
  if (!st || ax >= static_cast<int64_t>(cs.size())) return false;
  s.deferred[r_out] = CopyGeom{g.meta(out0).shape, 0, PermuteStrides(g, i), 0, *st};
  s.deferred_src[r_out] = n.inputs[0];
  s.Cover(i, i);
  s.Cover(r, i);
  s.virtual_value[out0] = s.virtual_value[r_out] = true;
  return true;
}

}  // namespace

std::vector<int64_t> PermuteStrides(const ir::Graph& g, int i) {
  const ir::Node& n = g.nodes()[i];
  const std::vector<int64_t> in = Contig(g.meta(n.inputs[0]).shape);
  std::vector<int64_t> ps;
  for (int64_t d : n.attrs.GetInts("dims")) ps.push_back(in[NormAxis(d, in.size())]);
  return ps;
}

std::optional<SliceChain> ComposeSliceChain(const PlanState& s, int i) {
  const ir::Graph& g = s.g;
  const ir::Node& n = g.nodes()[i];
  if (!s.options.compose_copies || n.op != "slice") return std::nullopt;
  const Shape& is = g.meta(n.inputs[0]).shape;
  const Shape& os = g.meta(n.outputs[0]).shape;
  const int r = s.single_user(n.outputs[0]);
  const int pm = r >= 0 && g.nodes()[r].op == "reshape" ? s.single_user(g.nodes()[r].outputs[0]) : -1;
  if (pm < 0 || g.nodes()[pm].op != "permute") return std::nullopt;
  const Shape& rs = g.meta(g.nodes()[r].outputs[0]).shape;
  auto st = ViewStrides(os, Contig(is), rs);
  if (!st) return std::nullopt;
  std::vector<int64_t> ps;
  for (int64_t d : g.nodes()[pm].attrs.GetInts("dims")) ps.push_back((*st)[NormAxis(d, rs.size())]);
  return SliceChain{r, pm, CopyGeom{g.meta(g.nodes()[pm].outputs[0]).shape, SliceOffset(g, i), ps, 0, {}}};
}

bool IsSliceChainPermute(const PlanState& s, int pm) {
  const int r = s.prod[s.g.nodes()[pm].inputs[0]];
  if (r < 0 || s.g.nodes()[r].op != "reshape") return false;
  const int sl = s.prod[s.g.nodes()[r].inputs[0]];
  if (sl < 0) return false;
  const std::optional<SliceChain> c = ComposeSliceChain(s, sl);
  return c && c->reshape == r && c->permute == pm;
}

absl::StatusOr<bool> ComposeCopiesPass::Run(PlanState& s) {
  if (!s.options.compose_copies) return false;
  bool changed = false;
  for (int i = 0; i < s.nn; ++i) {
    if (s.covered(i)) continue;
    const std::string& op = s.g.nodes()[i].op;
    if (op == "slice") {
      std::optional<SliceChain> c = ComposeSliceChain(s, i);
      if (!c) continue;
      s.Cover(c->reshape, i);
      s.Cover(c->permute, i);
      s.virtual_value[s.g.nodes()[i].outputs[0]] = true;
      s.virtual_value[s.g.nodes()[c->reshape].outputs[0]] = true;
      s.slice_chain[i] = *c;
      changed = true;
    } else if (op == "permute") {
      changed |= DeferIntoConcat(s, i);
    }
  }
  return changed;
}

void LowerCopy(const PlanState& s, int i, Launch& L) {
  const ir::Graph& g = s.g;
  const ir::Node& n = g.nodes()[i];
  L.kind = LaunchKind::kCopy;
  L.inputs = n.inputs;
  if (auto it = s.slice_chain.find(i); it != s.slice_chain.end()) {
    L.nodes = {i, it->second.reshape, it->second.permute};
    L.op = "slice+reshape+permute";
    L.outputs = {g.nodes()[it->second.permute].outputs[0]};
    L.copies = {it->second.geom};
    return;
  }
  const Shape& is = g.meta(n.inputs[0]).shape;
  CopyGeom cg{g.meta(n.outputs[0]).shape, 0, Contig(is), 0, {}};
  if (n.op == "permute") cg.src_strides = PermuteStrides(g, i);
  if (n.op == "slice") cg.src_offset = SliceOffset(g, i);
  if (n.op == "broadcast_to") cg.src_strides = Broadcast(is, cg.shape);
  L.copies = {cg};
}

}  // namespace loom::compiler::cuda::plan_internal

namespace loom::compiler::cuda {

using plan_internal::Contig;

std::optional<std::vector<int64_t>> ViewStrides(absl::Span<const int64_t> old_shape,
                                                absl::Span<const int64_t> old_strides,
                                                absl::Span<const int64_t> shape) {
  std::vector<int64_t> st(shape.size(), 0);
  int64_t numel = 1;
  for (int64_t d : old_shape) numel *= d;
  if (numel == 0 || old_shape.empty()) {
    if (NumElements(shape) != numel) return std::nullopt;
    return Contig(shape);
  }
  int view_d = static_cast<int>(shape.size()) - 1;
  int64_t chunk_base = old_strides.back(), tensor_numel = 1, view_numel = 1;
  for (int td = static_cast<int>(old_shape.size()) - 1; td >= 0; --td) {
    tensor_numel *= old_shape[td];
    if (td == 0 || (old_shape[td - 1] != 1 && old_strides[td - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        st[view_d] = view_numel * chunk_base;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (td > 0) {
        chunk_base = old_strides[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return st;
}

}  // namespace loom::compiler::cuda
