// Strided copies and views in the CUDA plan: ViewStrides (the view rule that
// composes reshape into a copy), contiguous / broadcast strides, and the
// permute / slice / cast / broadcast_to launches with their compositions
// (slice -> reshape -> permute as one copy or a flash view, permute ->
// reshape deferred into a later concat).
#include <optional>
#include <string>
#include <vector>

#include "compiler/cuda/plan.h"
#include "compiler/cuda/plan_internal.h"

namespace loom::compiler::cuda::plan_internal {

namespace {

std::vector<int64_t> Broadcast(absl::Span<const int64_t> in, absl::Span<const int64_t> out) {
  std::vector<int64_t> st(out.size(), 0);
  const std::vector<int64_t> c = Contig(in);
  const size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[lead + i] = in[i] == 1 && out[lead + i] != 1 ? 0 : c[i];
  return st;
}

}  // namespace

std::vector<int64_t> Contig(absl::Span<const int64_t> shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * shape[i + 1];
  return st;
}

int64_t NormAxis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

// A permute / slice / cast / broadcast_to node i: fills L as a kCopy launch, or
// returns false when the node needs no launch (a flash view, or deferred into
// a concat).
bool Planner::PlanCopy(int i, Launch& L) {
  const Node& n = g.nodes()[i];
  const std::string& op = n.op;
  const int out0 = n.outputs.empty() ? -1 : n.outputs[0];
  const Shape& is = g.meta(n.inputs[0]).shape;
  const Shape& os = g.meta(out0).shape;
  CopyGeom cg{os, 0, Contig(is), 0, {}};
  if (op == "permute") {
    // Read only by flash attention (dout, or q/k/v in other graphs): a view.
    if (attn_views && feeds_flash_only(out0) && p.root[n.inputs[0]] >= 0 && !attn_view.count(n.inputs[0]) &&
        p.metas[n.inputs[0]].dtype == DType::kBF16) {
      std::vector<int64_t> ps;
      for (int64_t d : n.attrs.GetInts("dims")) ps.push_back(cg.src_strides[NormAxis(d, is.size())]);
      if (flash_strides_ok(0, ps, os.back())) {
        attn_view[out0] = AttnView{n.inputs[0], os, 0, ps};
        return false;
      }
    }
    // Deferred into a later concat: permute -> reshape -> concat becomes
    // one copy from the permute's source into the concat's window.
    const int r = single_user(out0);
    const int c = r >= 0 && g.nodes()[r].op == "reshape" ? single_user(g.nodes()[r].outputs[0]) : -1;
    if (options.compose_copies && c >= 0 && g.nodes()[c].op == "concat") {
      const Shape& cs = g.meta(g.nodes()[c].outputs[0]).shape;
      const int64_t ax = NormAxis(g.nodes()[c].attrs.GetInt("axis"), cs.size());
      auto st = ViewStrides(g.meta(g.nodes()[r].outputs[0]).shape, Contig(cs), os);
      if (st && ax < static_cast<int64_t>(cs.size())) {
        std::vector<int64_t> src;
        for (int64_t d : n.attrs.GetInts("dims")) src.push_back(cg.src_strides[NormAxis(d, is.size())]);
        deferred[g.nodes()[r].outputs[0]] = CopyGeom{os, 0, src, 0, *st};
        deferred_src[g.nodes()[r].outputs[0]] = n.inputs[0];
        done[r] = true;
        return false;
      }
    }
    std::vector<int64_t> ps;
    for (int64_t d : n.attrs.GetInts("dims")) ps.push_back(cg.src_strides[NormAxis(d, is.size())]);
    cg.src_strides = ps;
  } else if (op == "slice") {
    const int64_t ax = NormAxis(n.attrs.GetInt("axis"), is.size());
    int64_t start = n.attrs.GetInt("start");
    if (start < 0) start += is[ax];
    cg.src_offset = start * cg.src_strides[ax];
    // slice -> reshape -> permute (q, k, v out of the fused qkv): one copy.
    const int r = single_user(out0);
    const int pm = r >= 0 && g.nodes()[r].op == "reshape" ? single_user(g.nodes()[r].outputs[0]) : -1;
    if (options.compose_copies && pm >= 0 && g.nodes()[pm].op == "permute") {
      const Shape& rs = g.meta(g.nodes()[r].outputs[0]).shape;
      auto st = ViewStrides(os, cg.src_strides, rs);
      if (st) {
        std::vector<int64_t> ps;
        for (int64_t d : g.nodes()[pm].attrs.GetInts("dims")) ps.push_back((*st)[NormAxis(d, rs.size())]);
        cg.shape = g.meta(g.nodes()[pm].outputs[0]).shape;
        const int pm_out = g.nodes()[pm].outputs[0];
        if (attn_views && feeds_flash_only(pm_out) && p.metas[n.inputs[0]].dtype == DType::kBF16 &&
            p.root[n.inputs[0]] >= 0 && !attn_view.count(n.inputs[0]) &&
            flash_strides_ok(cg.src_offset, ps, cg.shape.back())) {
          // q/k/v read by flash straight out of the fused qkv output.
          attn_view[pm_out] = AttnView{n.inputs[0], cg.shape, cg.src_offset, ps};
          done[r] = done[pm] = true;
          return false;
        }
        cg.src_strides = ps;
        done[r] = done[pm] = true;
        L.nodes = {i, r, pm};
        L.op = "slice+reshape+permute";
        L.outputs = {g.nodes()[pm].outputs[0]};
      }
    }
  } else if (op == "broadcast_to") {
    cg.src_strides = Broadcast(is, os);
  }
  L.kind = LaunchKind::kCopy;
  L.inputs = n.inputs;
  L.copies = {cg};
  return true;
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
