// Flash attention with strided operands in the CUDA plan
// (PlanOptions::attn_views): which sdpa nodes qualify, the layout rules, and
// the sdpa / sdpa_backward launches whose q, k, v, o, dout, dq, dk, dv are
// windows of other values (no permute / concat copies around them).
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/cuda/plan.h"
#include "compiler/cuda/plan_internal.h"

namespace loom::compiler::cuda::plan_internal {

// A flash-eligible sdpa / sdpa_backward node: the executor runs flash
// attention (bf16, D 64/128, no mask or dropout), which takes strides.
bool Planner::flash_node(int u) const {
  const Node& an = g.nodes()[u];
  const bool fwd = an.op == "sdpa" && an.inputs.size() == 3;
  const bool bwd = an.op == "sdpa_backward" && an.inputs.size() == 6;
  if (!(fwd || bwd) || an.attrs.GetFloat("dropout_p", 0.0) != 0.0) return false;
  const Shape& os = g.meta(an.outputs[0]).shape;
  if (os.size() != 4 || (os[3] != 64 && os[3] != 128) || st[an.outputs[0]] != DType::kBF16) return false;
  for (int v : an.inputs)
    if (g.meta(v).shape.size() == 4 && st[v] != DType::kBF16) return false;
  if (bwd && (st[an.outputs[1]] != DType::kBF16 || st[an.outputs[2]] != DType::kBF16 ||
              st[an.inputs[5]] != DType::kF32))
    return false;
  return true;
}

// v is read only by flash nodes, as q, k, v or dout (not as o or lse).
bool Planner::feeds_flash_only(int v) const {
  if (is_output[v] || users[v].empty()) return false;
  for (int u : users[v]) {
    if (!flash_node(u)) return false;
    const Node& an = g.nodes()[u];
    for (size_t k = 4; k < an.inputs.size() && an.op == "sdpa_backward"; ++k)
      if (an.inputs[k] == v) return false;
  }
  return true;
}

// Flash's layout rules: the last dim contiguous, 16-byte aligned rows.
bool Planner::flash_strides_ok(int64_t offset, const std::vector<int64_t>& s, int64_t d) {
  if (s.size() != 4 || s[3] != 1 || offset % 8 != 0 || s[2] < d) return false;
  for (int i = 0; i < 3; ++i)
    if (s[i] <= 0 || s[i] % 8 != 0) return false;
  return true;
}

// Values read through a strided window (never materialised, or o stored
// [B, T, H, D]); anything else a flash node reads is contiguous.
AttnView Planner::view_of(int v) const {
  auto it = attn_view.find(v);
  if (it != attn_view.end()) return it->second;
  return AttnView{v, g.meta(v).shape, 0, Contig(g.meta(v).shape)};
}

// An sdpa node that flash_node accepts: fills L with its views.
void Planner::PlanSdpaViews(int i, Launch& L) {
  const Node& n = g.nodes()[i];
  const int out0 = n.outputs.empty() ? -1 : n.outputs[0];
  L.kind = LaunchKind::kSdpa;
  L.op = "sdpa(views)";
  AttnView o = view_of(out0);
  // o stored [B, T, H, D] when its only readers are one permute to that
  // order (which becomes an alias) and sdpa_backward.
  const Shape& oshape = g.meta(out0).shape;
  int perm = -1;
  bool others_ok = !is_output[out0];
  for (int u : users[out0]) {
    const Node& un = g.nodes()[u];
    if (un.op == "permute" && perm < 0 && un.attrs.GetInts("dims") == std::vector<int64_t>{0, 2, 1, 3} &&
        !is_output[un.outputs[0]])
      perm = u;
    else if (!(un.op == "sdpa_backward" && flash_node(u) && un.inputs[4] == out0 && un.inputs[0] != out0 &&
               un.inputs[1] != out0 && un.inputs[2] != out0 && un.inputs[3] != out0))
      others_ok = false;
  }
  if (perm >= 0 && others_ok) {
    const int64_t h = oshape[1], t = oshape[2], d = oshape[3];
    o.strides = {t * h * d, d, h * d, 1};
    attn_view[out0] = o;
    const int pout = g.nodes()[perm].outputs[0];
    p.root[out0] = out0;
    p.root[pout] = out0;
    done[perm] = true;
    L.nodes.push_back(perm);
    L.op = "sdpa(views)+permute";
  }
  L.attn = {view_of(n.inputs[0]), view_of(n.inputs[1]), view_of(n.inputs[2]), o};
  L.inputs = {L.attn[0].value, L.attn[1].value, L.attn[2].value};
}

// An sdpa_backward node that flash_node accepts: fills L with its views.
void Planner::PlanSdpaBackwardViews(int i, Launch& L) {
  const Node& n = g.nodes()[i];
  L.kind = LaunchKind::kSdpaBackward;
  L.op = "sdpa_backward(views)";
  L.attn = {view_of(n.inputs[0]), view_of(n.inputs[1]), view_of(n.inputs[2]), view_of(n.inputs[3]),
            view_of(n.inputs[4])};
  std::vector<AttnView> grads = {view_of(n.outputs[0]), view_of(n.outputs[1]), view_of(n.outputs[2])};
  // dq, dk, dv -> permute -> reshape -> one concat: written straight into
  // their windows of the concat's output.
  int concat = -1;
  std::vector<int> pm(3, -1), rs(3, -1);
  bool direct = options.compose_copies;
  for (int k = 0; k < 3 && direct; ++k) {
    pm[k] = single_user(n.outputs[k]);
    if (pm[k] < 0 || g.nodes()[pm[k]].op != "permute") {
      direct = false;
      break;
    }
    rs[k] = single_user(g.nodes()[pm[k]].outputs[0]);
    if (rs[k] < 0 || g.nodes()[rs[k]].op != "reshape") {
      direct = false;
      break;
    }
    const int c = single_user(g.nodes()[rs[k]].outputs[0]);
    if (c < 0 || g.nodes()[c].op != "concat" || (concat >= 0 && c != concat)) direct = false;
    concat = c;
  }
  if (direct && (g.nodes()[concat].inputs.size() != 3 || st[g.nodes()[concat].outputs[0]] != DType::kBF16))
    direct = false;
  if (direct) {
    const Node& cn = g.nodes()[concat];
    const int cout = cn.outputs[0];
    const Shape& cs = g.meta(cout).shape;
    const std::vector<int64_t> ost = Contig(cs);
    const int64_t ax = NormAxis(cn.attrs.GetInt("axis"), cs.size());
    std::vector<AttnView> into(3);
    int64_t pos = 0;
    for (int v : cn.inputs) {
      int k = 0;
      while (k < 3 && g.nodes()[rs[k]].outputs[0] != v) ++k;
      if (k == 3 || into[k].value >= 0) {
        direct = false;
        break;
      }
      const Shape& ps = g.meta(g.nodes()[pm[k]].outputs[0]).shape;
      auto vs = ViewStrides(g.meta(v).shape, ost, ps);
      const std::vector<int64_t> dims = g.nodes()[pm[k]].attrs.GetInts("dims");
      if (!vs || ax >= static_cast<int64_t>(cs.size()) || dims.size() != 4) {
        direct = false;
        break;
      }
      std::vector<int64_t> gs(4, 0);
      for (size_t j = 0; j < 4; ++j) gs[NormAxis(dims[j], 4)] = (*vs)[j];
      into[k] = AttnView{cout, g.meta(n.outputs[k]).shape, pos * ost[ax], gs};
      if (!flash_strides_ok(into[k].offset, gs, gs.size() == 4 ? ps.back() : 0)) direct = false;
      pos += g.meta(v).shape[ax];
    }
    if (direct) {
      grads = into;
      for (int k = 0; k < 3; ++k) {
        done[pm[k]] = done[rs[k]] = true;
        L.nodes.push_back(pm[k]);
        L.nodes.push_back(rs[k]);
      }
      done[concat] = true;
      L.nodes.push_back(concat);
      L.op = "sdpa_backward(views)+concat";
    }
  }
  if (!direct) {
    // A gradient whose only reader is a permute to [B, T, H, D] is written
    // in that order; the permute becomes an alias (llama: dq/dk/dv -> rope).
    for (int k = 0; k < 3; ++k) {
      const int gout = n.outputs[k];
      const int u = single_user(gout);
      if (u < 0 || g.nodes()[u].op != "permute" || is_output[gout] ||
          g.nodes()[u].attrs.GetInts("dims") != std::vector<int64_t>{0, 2, 1, 3})
        continue;
      const Shape& gs = g.meta(gout).shape;
      grads[k].strides = {gs[2] * gs[1] * gs[3], gs[3], gs[1] * gs[3], 1};
      if (!flash_strides_ok(0, grads[k].strides, gs[3])) {
        grads[k] = view_of(gout);
        continue;
      }
      p.root[gout] = gout;
      p.root[g.nodes()[u].outputs[0]] = gout;
      done[u] = true;
      L.nodes.push_back(u);
      absl::StrAppend(&L.op, "+permute");
    }
  }
  for (const AttnView& gv : grads) L.attn.push_back(gv);
  L.inputs = {L.attn[0].value, L.attn[1].value, L.attn[2].value, L.attn[3].value, L.attn[4].value,
              n.inputs[5]};
  L.outputs = {grads[0].value, grads[1].value, grads[2].value};
}

}  // namespace loom::compiler::cuda::plan_internal
