#include "compiler/spmd/rules.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"

namespace loom::compiler::spmd {
namespace {

using dtensor::PartialOp;
const Placement kR = Placement::Replicate();
Placement S(int d) { return Placement::Shard(d); }
Placement P(PartialOp o = PartialOp::kSum) { return Placement::Partial(o); }

int Rank(const TensorMeta& m) { return static_cast<int>(m.shape.size()); }
int Norm(int64_t axis, int nd) { return static_cast<int>(axis < 0 ? axis + nd : axis); }

RuleResult AllR(const RuleInput& r) {
  RuleResult res;
  res.in.assign(r.in.size(), kR);
  res.out.assign(r.out.size(), kR);
  return res;
}

// ---- Pointwise (broadcasting) ------------------------------------------------
// additive: P+P -> P (all inputs partial with one op). linear_mask: bit i set
// when the op is linear in input i with the others fixed (one P, rest R -> P).
RuleResult Pointwise(const RuleInput& r, bool additive, unsigned linear_mask) {
  const TensorMeta& o = r.out[0];
  const int ond = Rank(o);
  int od = -1;
  // A full-shaped input's shard first: a broadcast operand (a bias, whatever
  // its operand position) must not move the activation's shard (ZeRO-3's
  // dp shard of add(bias, x) would otherwise re-shard x from batch to
  // features).
  for (int pass = 0; pass < 2 && od < 0; ++pass)
    for (size_t i = 0; i < r.in.size() && od < 0; ++i) {
      if (!r.place[i].is_shard() || (pass == 0) != (r.in[i].shape == o.shape)) continue;
      const int d = r.place[i].dim, cand = d + ond - Rank(r.in[i]);
      if (cand >= 0 && r.in[i].shape[d] == o.shape[cand] && CanShard(o, cand, r.world)) od = cand;
    }
  RuleResult res;
  if (od >= 0) {
    for (size_t i = 0; i < r.in.size(); ++i) {
      const int ad = od - (ond - Rank(r.in[i]));
      res.in.push_back(ad >= 0 && r.in[i].shape[ad] == o.shape[od] ? S(ad) : kR);
    }
    res.out.assign(r.out.size(), S(od));
    return res;
  }
  std::vector<int> partial;
  for (size_t i = 0; i < r.in.size(); ++i)
    if (r.place[i].is_partial()) partial.push_back(static_cast<int>(i));
  if (partial.empty()) return AllR(r);
  const PartialOp op = r.place[partial[0]].op;
  bool same_op = true;
  for (int i : partial) same_op &= r.place[i].op == op;
  // P + P -> P; P + R -> P too, the R term turned into a P one (scale by
  // 1/world, no communication), so a rowwise partial sum plus its bias (and
  // the residual) can be reduce_scattered later instead of all_reduced here.
  if (additive && same_op && op == PartialOp::kSum) {
    res.in.assign(r.in.size(), P(op));
    res.out.assign(r.out.size(), P(op));
    return res;
  }
  if (additive && same_op && partial.size() == r.in.size()) {
    res.in = r.place;
    res.out.assign(r.out.size(), P(op));
    return res;
  }
  if (partial.size() == 1 && (linear_mask >> partial[0]) & 1u) {
    res.in.assign(r.in.size(), kR);
    res.in[partial[0]] = r.place[partial[0]];
    res.out.assign(r.out.size(), P(op));
    return res;
  }
  return AllR(r);
}

ShardingRule PointwiseRule(bool additive, unsigned linear_mask) {
  return [=](const RuleInput& r) -> absl::StatusOr<RuleResult> { return Pointwise(r, additive, linear_mask); };
}

// ---- matmul -------------------------------------------------------------------
absl::StatusOr<RuleResult> Matmul(const RuleInput& r) {
  const TensorMeta &a = r.in[0], &b = r.in[1], &o = r.out[0];
  const bool ta = r.attrs->GetBool("trans_a"), tb = r.attrs->GetBool("trans_b");
  const int na = Rank(a), nb = Rank(b), no = Rank(o);
  if (na < 2 || nb < 2) return AllR(r);
  const int aM = ta ? na - 1 : na - 2, aK = ta ? na - 2 : na - 1;
  const int bK = tb ? nb - 1 : nb - 2, bN = tb ? nb - 2 : nb - 1;
  const Placement pa = r.place[0], pb = r.place[1];
  RuleResult res;
  // A shard on a batch dim of x (x = a or b): the other follows when it has that
  // batch dim (not broadcast), else is replicated.
  auto batch = [&](int which) -> bool {
    const Placement& p = r.place[which];
    const TensorMeta& x = r.in[which];
    const int nx = which == 0 ? na : nb;
    if (!p.is_shard() || p.dim >= nx - 2) return false;
    const int od = p.dim + no - nx;
    if (x.shape[p.dim] != o.shape[od] || !CanShard(o, od, r.world)) return false;
    const TensorMeta& y = r.in[1 - which];
    const int ny = which == 0 ? nb : na;
    const int yd = od - (no - ny);
    const Placement py = (yd >= 0 && yd < ny - 2 && y.shape[yd] == o.shape[od]) ? S(yd) : kR;
    res.in = which == 0 ? std::vector<Placement>{p, py} : std::vector<Placement>{py, p};
    res.out = {S(od)};
    return true;
  };
  if (batch(0) || batch(1)) return res;
  // N before M: with both (sequence parallel: activations S(seq) into a
  // colwise weight) the activation is gathered and the weight stays sharded.
  if (pb.is_shard(bN) && CanShard(b, bN, r.world)) return RuleResult{{kR, S(bN)}, {S(no - 1)}, {}};
  if (pa.is_shard(aM) && CanShard(a, aM, r.world)) return RuleResult{{S(aM), kR}, {S(no - 2)}, {}};
  if ((pa.is_shard(aK) || pb.is_shard(bK)) && CanShard(a, aK, r.world) && CanShard(b, bK, r.world))
    return RuleResult{{S(aK), S(bK)}, {P()}, {}};
  if (pa.is_partial()) return RuleResult{{pa, kR}, {P(pa.op)}, {}};
  if (pb.is_partial()) return RuleResult{{kR, pb}, {P(pb.op)}, {}};
  return AllR(r);
}

// ---- Reductions ------------------------------------------------------------------
std::vector<int> ReduceAxes(const RuleInput& r) {
  const int nd = Rank(r.in[0]);
  std::vector<int> axes;
  auto it = r.attrs->values().find("axes");
  if (it != r.attrs->values().end()) {
    if (const auto* v = absl::get_if<int64_t>(&it->second)) axes.push_back(Norm(*v, nd));
    if (const auto* v = absl::get_if<std::vector<int64_t>>(&it->second))
      for (int64_t a : *v) axes.push_back(Norm(a, nd));
  }
  if (axes.empty())
    for (int d = 0; d < nd; ++d) axes.push_back(d);
  return axes;
}

ShardingRule ReduceRule(absl::string_view kind) {
  const std::string k(kind);
  return [k](const RuleInput& r) -> absl::StatusOr<RuleResult> {
    const Placement p = r.place[0];
    const bool extremum = k == "max" || k == "min";
    if (p.is_partial()) {
      if (extremum) return AllR(r);
      return RuleResult{{p}, {p}, {}};
    }
    if (!p.is_shard()) return AllR(r);
    const std::vector<int> axes = ReduceAxes(r);
    if (std::count(axes.begin(), axes.end(), p.dim)) {
      if (extremum) return AllR(r);
      return RuleResult{{p}, {P(k == "mean" ? PartialOp::kAvg : PartialOp::kSum)}, {}};
    }
    int od = p.dim;
    if (!r.attrs->GetBool("keepdim"))
      for (int a : axes) od -= a < p.dim ? 1 : 0;
    return RuleResult{{p}, {S(od)}, {}};
  };
}

absl::StatusOr<RuleResult> SumTo(const RuleInput& r) {
  const Placement p = r.place[0];
  if (p.is_partial()) return RuleResult{{p}, {p}, {}};
  if (!p.is_shard()) return AllR(r);
  const int lead = Rank(r.in[0]) - Rank(r.out[0]);
  const int od = p.dim - lead;
  if (od < 0 || r.out[0].shape[od] != r.in[0].shape[p.dim]) return RuleResult{{p}, {P()}, {}};
  return RuleResult{{p}, {S(od)}, {}};
}

absl::StatusOr<RuleResult> BroadcastTo(const RuleInput& r) {
  const Placement p = r.place[0];
  if (p.is_partial()) return RuleResult{{p}, {p}, {}};
  if (!p.is_shard()) return AllR(r);
  const int od = p.dim + Rank(r.out[0]) - Rank(r.in[0]);
  if (r.out[0].shape[od] != r.in[0].shape[p.dim]) return AllR(r);
  return RuleResult{{p}, {S(od)}, {}};
}

// ---- Shape ops -------------------------------------------------------------------
// reshape: input dim d maps to output dim j when the products of the dims
// before them agree and both sizes divide by world (then row-major blocks
// coincide).
absl::StatusOr<RuleResult> Reshape(const RuleInput& r) {
  const Placement p = r.place[0];
  if (p.is_partial()) return RuleResult{{p}, {p}, {}};
  if (!p.is_shard()) return AllR(r);
  const auto &in = r.in[0].shape, &out = r.out[0].shape;
  int64_t pre_in = 1;
  for (int d = 0; d < p.dim; ++d) pre_in *= in[d];
  if (in[p.dim] % r.world != 0) return AllR(r);
  int64_t pre_out = 1;
  for (size_t j = 0; j < out.size(); ++j) {
    if (pre_out == pre_in && out[j] % r.world == 0 && out[j] >= r.world)
      return RuleResult{{p}, {S(static_cast<int>(j))}, {}};
    pre_out *= out[j];
    if (pre_out > pre_in) break;
  }
  return AllR(r);
}

absl::StatusOr<RuleResult> Permute(const RuleInput& r) {
  const Placement p = r.place[0];
  if (p.is_partial()) return RuleResult{{p}, {p}, {}};
  if (!p.is_shard()) return AllR(r);
  const std::vector<int64_t> dims = r.attrs->GetInts("dims");
  const int nd = Rank(r.in[0]);
  for (size_t i = 0; i < dims.size(); ++i)
    if (Norm(dims[i], nd) == p.dim) return RuleResult{{p}, {S(static_cast<int>(i))}, {}};
  return AllR(r);
}

// slice / slice_backward: anything but the sliced axis follows; linear.
absl::StatusOr<RuleResult> SliceLike(const RuleInput& r) {
  const Placement p = r.place[0];
  if (p.is_partial()) return RuleResult{{p}, {p}, {}};
  if (p.is_shard() && p.dim != Norm(r.attrs->GetInt("axis"), Rank(r.in[0]))) return RuleResult{{p}, {p}, {}};
  return AllR(r);
}

// gather(x, indices) {axis}: a shard of x on another dim survives (shifted
// past the index dims); a partial x stays partial (gather is a selection).
// indices are replicated.
absl::StatusOr<RuleResult> Gather(const RuleInput& r) {
  const Placement p = r.place[0];
  const int q = Rank(r.in[1]), axis = Norm(r.attrs->GetInt("axis"), Rank(r.in[0]));
  if (p.is_partial()) return RuleResult{{p, kR}, {p}, {}};
  if (p.is_shard() && p.dim != axis) return RuleResult{{p, kR}, {S(p.dim < axis ? p.dim : p.dim + q - 1)}, {}};
  return AllR(r);
}

// gather_backward(dy, indices) {axis, dim_size}: the mirror of Gather (a
// scatter-add is linear in dy, so P stays P).
absl::StatusOr<RuleResult> GatherBackward(const RuleInput& r) {
  const Placement p = r.place[0];
  const int q = Rank(r.in[1]), axis = Norm(r.attrs->GetInt("axis"), Rank(r.in[0]) - q + 1);
  if (p.is_partial()) return RuleResult{{p, kR}, {p}, {}};
  if (p.is_shard() && (p.dim < axis || p.dim >= axis + q))
    return RuleResult{{p, kR}, {S(p.dim < axis ? p.dim : p.dim - q + 1)}, {}};
  return AllR(r);
}

absl::StatusOr<RuleResult> Concat(const RuleInput& r) {
  const int axis = Norm(r.attrs->GetInt("axis"), Rank(r.in[0]));
  for (const Placement& p : r.place)
    if (p.is_shard() && p.dim != axis) {
      bool ok = true;
      for (const TensorMeta& m : r.in) ok &= CanShard(m, p.dim, r.world);
      if (!ok) break;
      return RuleResult{std::vector<Placement>(r.in.size(), p), {p}, {}};
    }
  return Pointwise(r, /*additive=*/true, 0);  // all-P -> P, else R (no shard survives: axis)
}

// ---- Norms and softmax ----------------------------------------------------------
// Inputs listed in `follow` (rank = x's, or x's minus the last dim for stats)
// share x's shard on any dim but the normalised last one; the others are R.
// Outputs: `out_follow` share it, the rest (dw, db) become P(sum).
// With no shard: P on input 0 (dy) and R elsewhere gives P outputs when
// linear_dy.
RuleResult NormLike(const RuleInput& r, const std::vector<int>& follow, int x_index, const std::vector<int>& out_follow,
                    bool linear_dy, int norm_dim /* in x's dims; -1 = last */) {
  const int nd = Rank(r.in[x_index]);
  const int nd_axis = norm_dim < 0 ? nd - 1 : norm_dim;
  int d = -1;
  for (int i : follow)
    if (r.place[i].is_shard() && Rank(r.in[i]) == nd && r.place[i].dim != nd_axis &&
        CanShard(r.in[x_index], r.place[i].dim, r.world)) {
      d = r.place[i].dim;
      break;
    }
  RuleResult res;
  if (d >= 0) {
    res.in.assign(r.in.size(), kR);
    for (int i : follow) res.in[i] = S(d);
    res.out.assign(r.out.size(), P());
    for (int i : out_follow) res.out[i] = S(d);
    return res;
  }
  if (linear_dy && r.place[0].is_partial()) {
    res.in.assign(r.in.size(), kR);
    res.in[0] = r.place[0];
    res.out.assign(r.out.size(), P(r.place[0].op));
    return res;
  }
  return AllR(r);
}

ShardingRule Softmax(bool backward) {
  return [backward](const RuleInput& r) -> absl::StatusOr<RuleResult> {
    const int axis = Norm(r.attrs->GetInt("axis", -1), Rank(r.in[0]));
    if (backward) return NormLike(r, {0, 1}, 1, {0}, true, axis);
    return NormLike(r, {0}, 0, {0}, false, axis);
  };
}

// ---- nn ops ------------------------------------------------------------------------
absl::StatusOr<RuleResult> Embedding(const RuleInput& r) {
  const Placement pw = r.place[0], pi = r.place[1];
  if (pi.is_shard() && CanShard(r.in[1], pi.dim, r.world)) return RuleResult{{kR, pi}, {pi}, {}};
  if (pw.is_shard(1) && CanShard(r.in[0], 1, r.world)) return RuleResult{{pw, kR}, {S(Rank(r.out[0]) - 1)}, {}};
  // Vocab-parallel: each rank looks up the ids in its own block (propagation
  // expands this into a one-hot matmul) and the rows sum up: P(sum).
  if (pw.is_shard(0) && CanShard(r.in[0], 0, r.world)) return RuleResult{{pw, kR}, {P()}, {}};
  if (pw.is_partial()) return RuleResult{{pw, kR}, {pw}, {}};
  return AllR(r);
}

absl::StatusOr<RuleResult> EmbeddingBackward(const RuleInput& r) {
  const Placement pd = r.place[0], pi = r.place[1];
  const int nd = Rank(r.in[0]);
  int d = -1;
  if (pi.is_shard()) d = pi.dim;
  else if (pd.is_shard() && pd.dim < nd - 1) d = pd.dim;
  if (d >= 0 && CanShard(r.in[1], d, r.world)) return RuleResult{{S(d), S(d)}, {P()}, {}};
  if (pd.is_shard(nd - 1) && CanShard(r.in[0], nd - 1, r.world)) return RuleResult{{pd, kR}, {S(1)}, {}};
  if (pd.is_partial()) return RuleResult{{pd, kR}, {pd}, {}};
  return AllR(r);
}

bool AnyShard0(const RuleInput& r, std::initializer_list<int> idx) {
  for (int i : idx)
    if (r.place[i].is_shard(0)) return true;
  return false;
}

// Rows (N) shard: the loss is the mean of equal-sized local means.
// Row split: the loss is P(avg) once the propagation pass (spmd.cc,
// SplitLossRows) reweights each rank's mean by its share of the counted targets.
absl::StatusOr<RuleResult> CrossEntropy(const RuleInput& r) {
  if (AnyShard0(r, {0, 1}) && CanShard(r.in[0], 0, r.world))
    return RuleResult{{S(0), S(0)}, {P(PartialOp::kAvg), S(0)}, {}};
  // Vocab shard: propagation expands the op into a vocab-parallel loss
  // (max / sum-exp / target-pick all_reduces); the full logits never exist.
  if (r.place[0].is_shard(1) && CanShard(r.in[0], 1, r.world)) return RuleResult{{S(1), kR}, {kR, kR}, {}};
  return AllR(r);
}

// Row split: the kernel divides by the local count of non-ignored targets;
// the propagation pass (spmd.cc, SplitLossRows) scales dloss by that count
// over the global one, so the gradient is that of the global mean.
absl::StatusOr<RuleResult> CrossEntropyBackward(const RuleInput& r) {
  if (AnyShard0(r, {1, 2, 3}) && CanShard(r.in[1], 0, r.world))
    return RuleResult{{kR, S(0), S(0), S(0)}, {S(0)}, {}};
  if (r.place[1].is_shard(1) && CanShard(r.in[1], 1, r.world)) return RuleResult{{kR, S(1), kR, kR}, {S(1)}, {}};
  return AllR(r);
}

// Attention: batch (0) and head (1) shards follow through q, k, v (and the
// forward's out / lse in the backward); a mask follows where it is not broadcast.
ShardingRule Attention(int num_tensor_inputs) {
  return [num_tensor_inputs](const RuleInput& r) -> absl::StatusOr<RuleResult> {
    int d = -1;
    for (int i = 0; i < num_tensor_inputs && d < 0; ++i)
      if (Rank(r.in[i]) == 4 && (r.place[i].is_shard(0) || r.place[i].is_shard(1))) d = r.place[i].dim;
    if (d < 0) return AllR(r);
    for (int i = 0; i < num_tensor_inputs; ++i)
      if (Rank(r.in[i]) < 3 || !CanShard(r.in[i], d, r.world)) return AllR(r);
    RuleResult res;
    for (size_t i = 0; i < r.in.size(); ++i) {
      if (static_cast<int>(i) < num_tensor_inputs) {
        res.in.push_back(S(d));
      } else {  // mask, aligned to the right of [B, H, Tq, Tk]
        const int ad = d - (4 - Rank(r.in[i]));
        res.in.push_back(ad >= 0 && r.in[i].shape[ad] > 1 ? S(ad) : kR);
      }
    }
    res.out.assign(r.out.size(), S(d));
    return res;
  };
}

absl::StatusOr<RuleResult> Rope(const RuleInput& r) {
  const Placement p = r.place[0];
  if (p.is_partial()) return RuleResult{{p}, {p}, {}};
  if (p.is_shard(0) || p.is_shard(2)) return RuleResult{{p}, {p}, {}};
  return AllR(r);
}

absl::StatusOr<RuleResult> LikeOp(const RuleInput& r) {
  const Placement p = r.place[0];
  if (p.is_shard()) return RuleResult{{p}, {p}, {}};
  return RuleResult{{p}, {kR}, {}};  // reads only the shape: any P is fine as it is
}

absl::StatusOr<RuleResult> GradNorm(const RuleInput& r) {
  RuleResult res;
  for (const Placement& p : r.place) res.in.push_back(p.is_shard() ? p : kR);
  res.out = {kR};
  return res;
}

// adamw(p, g, m, v, gn, lr, step): the update is elementwise over p, g, m, v;
// it follows the optimizer state's shard (ZeRO), else the parameter's.
absl::StatusOr<RuleResult> AdamW(const RuleInput& r) {
  for (int i : {2, 3, 0, 1}) {
    const Placement p = r.place[i];
    if (p.is_shard() && CanShard(r.in[0], p.dim, r.world))
      return RuleResult{{p, p, p, p, kR, kR, kR}, {p, p, p}, {}};
  }
  return AllR(r);
}

absl::StatusOr<RuleResult> Replicated(const RuleInput& r) { return AllR(r); }

const std::vector<std::string>& UnshardableList() {
  static const auto* v = new std::vector<std::string>{"all_gather", "all_reduce", "reduce_scatter", "shard_slice", "vocab_onehot", "fill"};
  return *v;
}

const std::map<std::string, ShardingRule, std::less<>>& Table() {
  static const auto* t = [] {
    auto* m = new std::map<std::string, ShardingRule, std::less<>>();
    auto& t = *m;
    for (const char* op : {"abs", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "relu", "gelu", "silu",
                           "pow_scalar", "add_scalar", "maximum", "minimum", "pow", "erf", "sin", "cos",
                           "reciprocal", "equal", "less", "less_equal", "greater", "greater_equal",
                           "logical_and", "logical_or", "logical_not", "where"})
      t[op] = PointwiseRule(false, 0);
    for (const char* op : {"neg", "scale", "cast", "div", "relu_backward", "gelu_backward", "silu_backward"})
      t[op] = PointwiseRule(false, 1u);
    t["mul"] = PointwiseRule(false, 3u);
    t["add"] = PointwiseRule(true, 0);
    t["sub"] = PointwiseRule(true, 0);
    t["matmul"] = Matmul;
    t["sum"] = ReduceRule("sum");
    t["mean"] = ReduceRule("mean");
    t["max"] = ReduceRule("max");
    t["min"] = ReduceRule("min");
    t["sum_to"] = SumTo;
    t["broadcast_to"] = BroadcastTo;
    t["reshape"] = Reshape;
    t["permute"] = Permute;
    t["slice"] = SliceLike;
    t["slice_backward"] = SliceLike;
    t["concat"] = Concat;
    // The mask depends on each element's index in the whole tensor.
    t["dropout"] = Replicated;
    t["gather"] = Gather;
    t["gather_backward"] = GatherBackward;
    t["layernorm"] = [](const RuleInput& r) -> absl::StatusOr<RuleResult> {
      return NormLike(r, {0}, 0, {0, 1, 2}, false, -1);
    };
    // (dy, x, w, mean, rstd) -> (dx, dw, db); mean/rstd have x's dims but the last.
    t["layernorm_backward"] = [](const RuleInput& r) -> absl::StatusOr<RuleResult> {
      RuleResult res = NormLike(r, {0, 1}, 1, {0}, true, -1);
      if (res.in[1].is_shard()) res.in[3] = res.in[4] = res.in[1];
      return res;
    };
    t["rmsnorm"] = [](const RuleInput& r) -> absl::StatusOr<RuleResult> {
      return NormLike(r, {0}, 0, {0, 1}, false, -1);
    };
    t["rmsnorm_backward"] = [](const RuleInput& r) -> absl::StatusOr<RuleResult> {
      RuleResult res = NormLike(r, {0, 1}, 1, {0}, true, -1);
      if (res.in[1].is_shard()) res.in[3] = res.in[1];
      return res;
    };
    t["softmax"] = Softmax(false);
    t["log_softmax"] = Softmax(false);
    t["softmax_backward"] = Softmax(true);
    t["log_softmax_backward"] = Softmax(true);
    t["embedding"] = Embedding;
    t["embedding_backward"] = EmbeddingBackward;
    t["cross_entropy"] = CrossEntropy;
    t["cross_entropy_backward"] = CrossEntropyBackward;
    t["sdpa"] = Attention(3);
    t["sdpa_backward"] = Attention(6);
    t["rope"] = Rope;
    t["ones_like"] = LikeOp;
    t["zeros_like"] = LikeOp;
    t["grad_norm"] = GradNorm;
    t["adamw"] = AdamW;
    for (const std::string& op : UnshardableList()) t[op] = Replicated;
    return m;
  }();
  return *t;
}

}  // namespace

bool CanShard(const TensorMeta& m, int d, int64_t world) {
  return d >= 0 && d < Rank(m) && m.shape[d] % world == 0 && m.shape[d] >= world;
}

const ShardingRule* FindShardingRule(absl::string_view op) {
  auto it = Table().find(op);
  return it == Table().end() ? nullptr : &it->second;
}

const std::vector<std::string>& UnshardableOps() { return UnshardableList(); }

}  // namespace loom::compiler::spmd
