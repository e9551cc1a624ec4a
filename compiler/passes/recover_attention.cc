#include "compiler/passes/recover_attention.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::compiler::passes {
namespace {

using recover::GraphIndex;

// The largest finite fill taken as "masked" (see the header).
constexpr double kFiniteFillLimit = -1e4;

struct Mask {
  bool causal = false;
  bool finite = false;  // causal through a finite fill or additive value
  int keep = -1;        // a bool value passed as sdpa's mask
  int drop = -1;        // a bool value whose negation is sdpa's mask
  int additive = -1;    // a float value passed as sdpa's mask
  std::string text;     // for the log
};

struct AttnMatch {
  int q = -1, kt = -1, v = -1;
  bool k_trans = false;  // the product had trans_b: kt is k itself
  double scale = 1.0;
  int64_t T = 0, S = 0;
  Mask mask;
};

// Whether a known [.., T, S] mask keeps exactly the keys s <= t of query t.
// `negate`: the tensor marks dropped keys. Bool or float (additive) masks;
// for an additive one, `finite` is set when a masked value is finite.
bool IsCausal(const Tensor& m, bool negate, int64_t T, int64_t S, bool* finite) {
  if (m.ndim() < 2 || m.dim(-2) != T || m.dim(-1) != S) return false;
  const bool additive = m.dtype() != DType::kBool;
  for (int64_t i = 0; i < m.numel(); ++i) {
    const int64_t t = (i / S) % T, s = i % S;
    const double x = m.GetDouble(i);
    if (!additive) {
      if (((x != 0) != negate) != (s <= t)) return false;
    } else if (s <= t) {
      if (x != 0) return false;
    } else if (!(std::isinf(x) && x < 0)) {
      if (!std::isfinite(x) || x > kFiniteFillLimit) return false;
      *finite = true;
    }
  }
  return true;
}

// [scale]? matmul(q, kT) at v (v's own uses checked by the caller).
bool MatchProduct(const GraphIndex& idx, const ir::Graph& g, int v, AttnMatch& m) {
  int s = v;
  if (auto sc = recover::ScaledBy(idx, g, v)) {
    m.scale = sc->c;
    s = sc->value;
    if (idx.Uses(s) != 1) return false;
  }
  const ir::Node* mm = idx.DefOp(s, "matmul");
  if (mm == nullptr || mm->inputs.size() != 2 || mm->attrs.GetBool("trans_a", false)) return false;
  m.q = mm->inputs[0];
  m.kt = mm->inputs[1];
  m.k_trans = mm->attrs.GetBool("trans_b", false);
  return true;
}

// The where mask: cond (negated when it marks dropped keys) with its fill.
bool WhereMask(const GraphIndex& idx, int cond, bool negate, double fill, AttnMatch& m) {
  const bool neg_inf = std::isinf(fill) && fill < 0;
  const bool finite = std::isfinite(fill) && fill <= kFiniteFillLimit;
  const Tensor* c = idx.Constant(cond);
  bool unused = false;
  m.mask.text = absl::StrCat("where(", negate ? "" : "!", idx.Name(cond), " -> ", fill, ")");
  if (c != nullptr && (neg_inf || finite) && IsCausal(*c, negate, m.T, m.S, &unused)) {
    m.mask.causal = true;
    m.mask.finite = finite;
    absl::StrAppend(&m.mask.text, " causal");
    return true;
  }
  if (!neg_inf) return false;
  (negate ? m.mask.drop : m.mask.keep) = cond;
  return true;
}

// [where]? [scale]? matmul at v.
bool MatchWhere(const GraphIndex& idx, const ir::Graph& g, int v, AttnMatch& m) {
  const ir::Node* w = idx.DefOp(v, "where");
  if (w == nullptr) return MatchProduct(idx, g, v, m);
  for (int k = 1; k <= 2; ++k) {
    const int cont = w->inputs[k], fill = w->inputs[3 - k];
    std::optional<double> f = idx.Scalar(fill);
    if (!f || g.meta(cont).shape != g.meta(v).shape || idx.Uses(cont) != 1) continue;
    AttnMatch trial = m;
    // where(c, S, fill) keeps where c is true; where(c, fill, S) drops there.
    if (!MatchProduct(idx, g, cont, trial) || !WhereMask(idx, w->inputs[0], k == 2, *f, trial)) continue;
    m = trial;
    return true;
  }
  return false;
}

// The additive mask A (after any where mask).
bool AddMask(const GraphIndex& idx, const ir::Graph& g, int a, AttnMatch& m) {
  if (m.mask.keep >= 0 || m.mask.drop >= 0 || !IsFloating(g.meta(a).dtype)) return false;  // sdpa takes one mask
  absl::StrAppend(&m.mask.text, m.mask.text.empty() ? "" : " + ", idx.Name(a));
  const Tensor* c = idx.Constant(a);
  bool finite = false;
  if (c != nullptr && IsCausal(*c, false, m.T, m.S, &finite)) {
    m.mask.causal = true;
    m.mask.finite = m.mask.finite || finite;
    absl::StrAppend(&m.mask.text, " causal");
    return true;
  }
  m.mask.additive = a;
  return true;
}

// [add]? [where]? [scale]? matmul at z, the softmax's input.
bool MatchMasked(const GraphIndex& idx, const ir::Graph& g, int z, AttnMatch& m) {
  const ir::Node* add = idx.DefOp(z, "add");
  if (add != nullptr && add->inputs.size() == 2) {
    for (int k = 0; k < 2; ++k) {
      const int cont = add->inputs[k];
      if (g.meta(cont).shape != g.meta(z).shape || idx.Uses(cont) != 1) continue;
      AttnMatch trial = m;
      if (!MatchWhere(idx, g, cont, trial) || !AddMask(idx, g, add->inputs[1 - k], trial)) continue;
      m = trial;
      return true;
    }
  }
  return MatchWhere(idx, g, z, m);
}

std::optional<AttnMatch> MatchAttention(const GraphIndex& idx, const ir::Graph& g, const ir::Node& root) {
  if (root.op != "matmul" || root.inputs.size() != 2 || root.outputs.size() != 1) return std::nullopt;
  if (root.attrs.GetBool("trans_a", false) || root.attrs.GetBool("trans_b", false)) return std::nullopt;
  const int p = root.inputs[0];
  const ir::Node* sm = idx.DefOp(p, "softmax");
  const Shape& ps = g.meta(p).shape;
  if (sm == nullptr || idx.Uses(p) != 1 || ps.size() != 4 || idx.Uses(sm->inputs[0]) != 1) return std::nullopt;
  int64_t axis = sm->attrs.GetInt("axis", -1);
  if ((axis < 0 ? axis + 4 : axis) != 3) return std::nullopt;
  AttnMatch m;
  m.v = root.inputs[1];
  m.T = ps[2];
  m.S = ps[3];
  if (!MatchMasked(idx, g, sm->inputs[0], m)) return std::nullopt;
  const Shape &q = g.meta(m.q).shape, &kt = g.meta(m.kt).shape, &v = g.meta(m.v).shape;
  if (q.size() != 4 || kt.size() != 4 || v.size() != 4) return std::nullopt;
  const int64_t kd = m.k_trans ? kt[3] : kt[2], ks = m.k_trans ? kt[2] : kt[3];
  for (const Shape* s : {&kt, &v})
    if ((*s)[0] != q[0] || (*s)[1] != q[1]) return std::nullopt;  // no broadcast or grouped heads
  if (kd != q[3] || ks != m.S || v[2] != m.S || q[2] != m.T) return std::nullopt;
  const DType dt = g.meta(m.q).dtype;
  if (!IsFloating(dt) || g.meta(m.kt).dtype != dt || g.meta(m.v).dtype != dt) return std::nullopt;
  return m;
}

// k [B,H,S,D]: kT itself (trans_b), its permute's source with the last two
// dims swapped back, or a new permute of kT.
absl::StatusOr<int> KeyOf(ir::Graph& g, const GraphIndex& idx, const AttnMatch& m) {
  if (m.k_trans) return m.kt;
  std::vector<int64_t> dims = {0, 1, 3, 2};
  int src = m.kt;
  if (const ir::Node* p = idx.DefOp(m.kt, "permute")) {
    dims = p->attrs.GetInts("dims");
    std::swap(dims[2], dims[3]);
    src = p->inputs[0];
    if (dims == std::vector<int64_t>{0, 1, 2, 3}) return src;
  }
  return g.AddOp1("permute", {src}, ir::Attrs{{"dims", dims}});
}

// sdpa's mask input, or -1.
absl::StatusOr<int> MaskOf(ir::Graph& g, const GraphIndex& idx, const Mask& mask, recover::ConstantTable* consts) {
  if (mask.keep >= 0) return mask.keep;
  if (mask.additive >= 0) return mask.additive;
  if (mask.drop < 0) return -1;
  const Tensor* drop = idx.Constant(mask.drop);
  if (drop == nullptr || consts == nullptr) return g.AddOp1("logical_not", {mask.drop});
  Tensor keep = Tensor::MustEmpty(drop->shape(), DType::kBool);
  for (int64_t i = 0; i < keep.numel(); ++i) keep.SetDouble(i, drop->GetDouble(i) != 0 ? 0.0 : 1.0);
  return recover::AddConstant(g, *consts, idx.Name(mask.drop).substr(1) + "/keep", std::move(keep));
}

}  // namespace

absl::StatusOr<bool> RecoverAttention::Run(ir::Graph& g) {
  bool changed = false;
  const size_t logged = log_ != nullptr ? log_->size() : 0;
  std::optional<GraphIndex> index;
  for (int i = static_cast<int>(g.nodes().size()) - 1; i >= 0; --i) {
    if (!index) index.emplace(g, consts_);
    const GraphIndex& idx = *index;
    std::optional<AttnMatch> m = MatchAttention(idx, g, g.nodes()[i]);
    if (!m) continue;
    const int64_t D = g.meta(m->q).shape[3];
    ir::Attrs attrs;
    if (m->mask.causal) attrs.Set("is_causal", true);
    const bool default_scale = recover::SameConstant(m->scale, 1.0 / std::sqrt(static_cast<double>(D)));
    if (!default_scale) attrs.Set("scale", m->scale);
    // Check sdpa takes these operands before changing anything.
    const ir::TensorMeta qm = g.meta(m->q);  // a copy: the value table grows below
    std::vector<ir::TensorMeta> metas = {qm, {qm.dtype, {qm.shape[0], qm.shape[1], m->S, D}}, g.meta(m->v)};
    for (int mv : {m->mask.keep, m->mask.drop, m->mask.additive})
      if (mv >= 0) metas.push_back(g.meta(mv));
    auto inferred = ir::InferOp("sdpa", metas, attrs, nullptr);
    const int root = g.nodes()[i].outputs[0];
    if (!inferred.ok() || !((*inferred)[0] == g.meta(root))) continue;
    const size_t first_new = g.nodes().size();
    LOOM_ASSIGN_OR_RETURN(int k, KeyOf(g, idx, *m));
    LOOM_ASSIGN_OR_RETURN(int mask, MaskOf(g, idx, m->mask, consts_));
    std::vector<int> in = {m->q, k, m->v};
    if (mask >= 0) in.push_back(mask);
    LOOM_ASSIGN_OR_RETURN(std::vector<int> out, g.AddOp("sdpa", in, attrs));
    if (log_ != nullptr)
      log_->push_back(absl::StrCat("attention: q ", qm.ToString(), ", scale ", m->scale,
                                   default_scale ? " (1/sqrt(D))" : "", ", mask ",
                                   m->mask.text.empty() ? "none" : m->mask.text, m->mask.finite ? " (finite fill)" : "",
                                   " -> sdpa", attrs.values().empty() ? "" : attrs.ToString(),
                                   mask >= 0 ? " with a mask tensor" : ""));
    i = recover::Commit(g, first_new, i, root, out[0]);
    index.reset();
    changed = true;
  }
  if (log_ != nullptr) std::reverse(log_->begin() + logged, log_->end());  // graph order
  return changed;
}

}  // namespace loom::compiler::passes
