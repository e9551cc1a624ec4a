// The attention_views pass (plan_attention.h).
#include "compiler/cuda/plan_attention.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/cuda/plan_copies.h"

namespace loom::compiler::cuda::plan_internal {

bool FlashNode(const PlanState& s, int u) {
  const ir::Node& an = s.g.nodes()[u];
  const bool fwd = an.op == "sdpa" && an.inputs.size() == 3;
  const bool bwd = an.op == "sdpa_backward" && an.inputs.size() == 6;
  if (!(fwd || bwd) || an.attrs.GetFloat("dropout_p", 0.0) != 0.0) return false;
  const Shape& os = s.g.meta(an.outputs[0]).shape;
  if (os.size() != 4 || (os[3] != 64 && os[3] != 128) || s.st[an.outputs[0]] != DType::kBF16) return false;
  for (int v : an.inputs)
    if (s.g.meta(v).shape.size() == 4 && s.st[v] != DType::kBF16) return false;
  if (bwd && (s.st[an.outputs[1]] != DType::kBF16 || s.st[an.outputs[2]] != DType::kBF16 ||
              s.st[an.inputs[5]] != DType::kF32))
    return false;
  return true;
}

bool FlashStridesOk(int64_t offset, const std::vector<int64_t>& st, int64_t d) {
  if (st.size() != 4 || st[3] != 1 || offset % 8 != 0 || st[2] < d) return false;
  for (int i = 0; i < 3; ++i)
    if (st[i] <= 0 || st[i] % 8 != 0) return false;
  return true;
}

namespace {

// v is read only by flash nodes, as q, k, v or dout (not as o or lse).
bool FeedsFlashOnly(const PlanState& s, int v) {
  if (s.is_output[v] || s.users[v].empty()) return false;
  for (int u : s.users[v]) {
    if (!FlashNode(s, u)) return false;
    const ir::Node& an = s.g.nodes()[u];
    for (size_t k = 4; k < an.inputs.size() && an.op == "sdpa_backward"; ++k)
      if (an.inputs[k] == v) return false;
  }
  return true;
}

// The window flash reads v through: a recorded view, or v itself, contiguous.
AttnView ViewOf(const PlanState& s, int v) {
  auto it = s.attn_view.find(v);
  if (it != s.attn_view.end()) return it->second;
  return AttnView{v, s.g.meta(v).shape, 0, Contig(s.g.meta(v).shape)};
}

// A slice -> reshape -> permute chain (q, k or v out of the fused qkv) read
// only by flash: the permute's output is a window of the slice's input.
bool SliceView(PlanState& s, int i) {
  const std::optional<SliceChain> c = ComposeSliceChain(s, i);
  if (!c) return false;
  const int in = s.g.nodes()[i].inputs[0], pm_out = s.g.nodes()[c->permute].outputs[0];
  if (!FeedsFlashOnly(s, pm_out) || s.p.metas[in].dtype != DType::kBF16 || !s.materialized(in) ||
      s.attn_view.count(in) || !FlashStridesOk(c->geom.src_offset, c->geom.src_strides, c->geom.shape.back()))
    return false;
  s.attn_view[pm_out] = AttnView{in, c->geom.shape, c->geom.src_offset, c->geom.src_strides};
  for (int x : {i, c->reshape, c->permute}) {
    s.Cover(x, i);
    s.virtual_value[s.g.nodes()[x].outputs[0]] = true;
  }
  return true;
}

// A permute read only by flash (dout; q/k/v in other graphs): a view of its input.
bool PermuteView(PlanState& s, int i) {
  const ir::Node& n = s.g.nodes()[i];
  const int in = n.inputs[0], out = n.outputs[0];
  // The permute of a slice chain compose_copies takes is that chain's.
  if (IsSliceChainPermute(s, i)) return false;
  if (!FeedsFlashOnly(s, out) || !s.materialized(in) || s.attn_view.count(in) ||
      s.p.metas[in].dtype != DType::kBF16)
    return false;
  const std::vector<int64_t> ps = PermuteStrides(s.g, i);
  if (!FlashStridesOk(0, ps, s.g.meta(out).shape.back())) return false;
  s.attn_view[out] = AttnView{in, s.g.meta(out).shape, 0, ps};
  s.Cover(i, i);
  s.virtual_value[out] = true;
  return true;
}

// sdpa: q, k, v as views; o stored [B, T, H, D] when its only readers are one
// permute to that order (an alias from now on) and sdpa_backward.
void SdpaViews(PlanState& s, int i) {
  const ir::Node& n = s.g.nodes()[i];
  const int out0 = n.outputs[0];
  AttnClaim c;
  c.kind = LaunchKind::kSdpa;
  c.op = "sdpa(views)";
  c.nodes = {i};
  AttnView o = ViewOf(s, out0);
  const Shape& oshape = s.g.meta(out0).shape;
  int perm = -1;
  bool others_ok = !s.is_output[out0];
  for (int u : s.users[out0]) {
    const ir::Node& un = s.g.nodes()[u];
    if (un.op == "permute" && perm < 0 && un.attrs.GetInts("dims") == std::vector<int64_t>{0, 2, 1, 3} &&
        !s.is_output[un.outputs[0]])
      perm = u;
    else if (!(un.op == "sdpa_backward" && FlashNode(s, u) && un.inputs[4] == out0 && un.inputs[0] != out0 &&
               un.inputs[1] != out0 && un.inputs[2] != out0 && un.inputs[3] != out0))
      others_ok = false;
  }
  if (perm >= 0 && others_ok) {
    const int64_t h = oshape[1], t = oshape[2], d = oshape[3];
    o.strides = {t * h * d, d, h * d, 1};
    s.attn_view[out0] = o;
    const int pout = s.g.nodes()[perm].outputs[0];
    c.roots = {{out0, out0}, {pout, out0}};
    s.Cover(perm, i);
    c.nodes.push_back(perm);
    c.op = "sdpa(views)+permute";
  }
  c.views = {ViewOf(s, n.inputs[0]), ViewOf(s, n.inputs[1]), ViewOf(s, n.inputs[2]), o};
  c.inputs = {c.views[0].value, c.views[1].value, c.views[2].value};
  c.outputs = n.outputs;
  s.attn[i] = std::move(c);
}

// dq, dk, dv -> permute -> reshape -> one concat: the windows of the concat's
// output each gradient is written into, and the nodes they replace (empty:
// the pattern does not hold).
std::vector<AttnView> GradsIntoConcat(const PlanState& s, int i, std::vector<int>* covered) {
  const ir::Graph& g = s.g;
  const ir::Node& n = g.nodes()[i];
  int concat = -1;
  std::vector<int> pm(3, -1), rs(3, -1);
  for (int k = 0; k < 3; ++k) {
    pm[k] = s.single_user(n.outputs[k]);
    if (pm[k] < 0 || g.nodes()[pm[k]].op != "permute") return {};
    rs[k] = s.single_user(g.nodes()[pm[k]].outputs[0]);
    if (rs[k] < 0 || g.nodes()[rs[k]].op != "reshape") return {};
    const int c = s.single_user(g.nodes()[rs[k]].outputs[0]);
    if (c < 0 || g.nodes()[c].op != "concat" || (concat >= 0 && c != concat)) return {};
    concat = c;
  }
  const ir::Node& cn = g.nodes()[concat];
  if (cn.inputs.size() != 3 || s.st[cn.outputs[0]] != DType::kBF16) return {};
  const int cout = cn.outputs[0];
  const Shape& cs = g.meta(cout).shape;
  const std::vector<int64_t> ost = Contig(cs);
  const int64_t ax = NormAxis(cn.attrs.GetInt("axis"), cs.size());
  std::vector<AttnView> into(3);
  int64_t pos = 0;
  for (int v : cn.inputs) {
    int k = 0;
    while (k < 3 && g.nodes()[rs[k]].outputs[0] != v) ++k;
    if (k == 3 || into[k].value >= 0) return {};
    const Shape& ps = g.meta(g.nodes()[pm[k]].outputs[0]).shape;
    auto vs = ViewStrides(g.meta(v).shape, ost, ps);
    const std::vector<int64_t> dims = g.nodes()[pm[k]].attrs.GetInts("dims");
    if (!vs || ax >= static_cast<int64_t>(cs.size()) || dims.size() != 4) return {};
    std::vector<int64_t> gs(4, 0);
    for (size_t j = 0; j < 4; ++j) gs[NormAxis(dims[j], 4)] = (*vs)[j];
    into[k] = AttnView{cout, g.meta(n.outputs[k]).shape, pos * ost[ax], gs};
    if (!FlashStridesOk(into[k].offset, gs, gs.size() == 4 ? ps.back() : 0)) return {};
    pos += g.meta(v).shape[ax];
  }
  *covered = {pm[0], rs[0], pm[1], rs[1], pm[2], rs[2], concat};
  return into;
}

// sdpa_backward: dout, q, k, v, o as views; dq, dk, dv into the concat of
// their permutes, else each in [B, T, H, D] order when only a permute to that
// order reads it (the permute becomes an alias: llama's dq/dk/dv -> rope).
void SdpaBackwardViews(PlanState& s, int i) {
  const ir::Node& n = s.g.nodes()[i];
  AttnClaim c;
  c.kind = LaunchKind::kSdpaBackward;
  c.op = "sdpa_backward(views)";
  c.nodes = {i};
  c.views = {ViewOf(s, n.inputs[0]), ViewOf(s, n.inputs[1]), ViewOf(s, n.inputs[2]), ViewOf(s, n.inputs[3]),
             ViewOf(s, n.inputs[4])};
  std::vector<int> covered;
  std::vector<AttnView> grads = s.options.compose_copies ? GradsIntoConcat(s, i, &covered) : std::vector<AttnView>{};
  if (!grads.empty()) {
    for (int x : covered) {
      s.Cover(x, i);
      c.nodes.push_back(x);
      if (s.g.nodes()[x].op != "concat") s.virtual_value[s.g.nodes()[x].outputs[0]] = true;
    }
    for (int v : n.outputs) s.virtual_value[v] = true;
    c.op = "sdpa_backward(views)+concat";
  } else {
    grads = {ViewOf(s, n.outputs[0]), ViewOf(s, n.outputs[1]), ViewOf(s, n.outputs[2])};
    for (int k = 0; k < 3; ++k) {
      const int gout = n.outputs[k];
      const int u = s.single_user(gout);
      if (u < 0 || s.g.nodes()[u].op != "permute" || s.is_output[gout] ||
          s.g.nodes()[u].attrs.GetInts("dims") != std::vector<int64_t>{0, 2, 1, 3})
        continue;
      const Shape& gs = s.g.meta(gout).shape;
      const std::vector<int64_t> st = {gs[2] * gs[1] * gs[3], gs[3], gs[1] * gs[3], 1};
      if (!FlashStridesOk(0, st, gs[3])) continue;
      grads[k].strides = st;
      c.roots.push_back({gout, gout});
      c.roots.push_back({s.g.nodes()[u].outputs[0], gout});
      s.Cover(u, i);
      c.nodes.push_back(u);
      absl::StrAppend(&c.op, "+permute");
    }
  }
  for (const AttnView& gv : grads) c.views.push_back(gv);
  c.inputs = {c.views[0].value, c.views[1].value, c.views[2].value, c.views[3].value, c.views[4].value,
              n.inputs[5]};
  c.outputs = {grads[0].value, grads[1].value, grads[2].value};
  s.attn[i] = std::move(c);
}

}  // namespace

absl::StatusOr<bool> AttentionViewsPass::Run(PlanState& s) {
  if (!s.attn_views) return false;
  bool changed = false;
  for (int i = 0; i < s.nn; ++i) {
    if (s.covered(i)) continue;
    const std::string& op = s.g.nodes()[i].op;
    if (op == "slice") {
      changed |= SliceView(s, i);
    } else if (op == "permute") {
      changed |= PermuteView(s, i);
    } else if (op == "sdpa" && FlashNode(s, i)) {
      SdpaViews(s, i);
      changed = true;
    } else if (op == "sdpa_backward" && FlashNode(s, i)) {
      SdpaBackwardViews(s, i);
      changed = true;
    }
  }
  return changed;
}

}  // namespace loom::compiler::cuda::plan_internal
