#include "compiler/spmd/spmd.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "compiler/ir/verifier.h"
#include "compiler/spmd/rules.h"

namespace loom::compiler::spmd {

using ir::Graph;
using ir::Node;
using dtensor::DTensorSpec;
using dtensor::PartialOp;

namespace {

std::string NodeName(const Graph& g, int index) {
  const Node& n = g.nodes()[index];
  return absl::StrCat("'", n.op, "' (node ", index, ")");
}

class Propagator {
 public:
  Propagator(const Graph& g, const SpmdOptions& o, SpmdStats* stats)
      : g_(g), o_(o), stats_(stats), l_(g.name()) {}

  absl::StatusOr<Graph> Run() {
    LOOM_RETURN_IF_ERROR(o_.mesh.Validate());
    LOOM_RETURN_IF_ERROR(CheckShardable(g_));
    for (const auto& [name, spec] : o_.inputs)
      if (g_.FindInput(name) < 0)
        return absl::InvalidArgumentError(absl::StrCat("sharding propagation: annotated input '", name,
                                                       "' is not an input of the graph"));
    local_.assign(g_.values().size(), -1);
    is_input_.assign(g_.values().size(), false);
    for (const auto& in : g_.inputs()) is_input_[in.value] = true;
    spec_.assign(g_.values().size(), DTensorSpec::Replicated(o_.mesh));
    for (const auto& in : g_.inputs()) {
      DTensorSpec spec = DTensorSpec::Replicated(o_.mesh);
      if (auto it = o_.inputs.find(in.name); it != o_.inputs.end()) spec = it->second;
      for (int k = 0; k < o_.mesh.ndim() && k < static_cast<int>(spec.placements.size()); ++k)
        if (o_.mesh.sizes[k] == 1) spec.placements[k] = Placement::Replicate();  // nothing to split
      if (!(spec.mesh == o_.mesh))
        return absl::InvalidArgumentError(absl::StrCat("input '", in.name, "': spec mesh ", spec.mesh.ToString(),
                                                       " is not the mesh ", o_.mesh.ToString()));
      const auto& m = g_.meta(in.value);
      LOOM_RETURN_IF_ERROR(Annotate(CheckSpec(m, spec), absl::StrCat("input '", in.name, "'")));
      LOOM_ASSIGN_OR_RETURN(auto shape, EvenLocalShape(m.shape, spec));
      const int v = l_.AddInput(in.name, {m.dtype, shape}, in.kind);
      l_.value(v).placement = spec.ToString();
      local_[in.value] = v;
      spec_[in.value] = spec;
    }
    // An optimizer update wants its gradient where its state is (ZeRO): a
    // grad_norm visited earlier then takes a partial gradient there directly
    // (reduce_scatter) rather than replicated.
    for (const Node& n : g_.nodes())
      if (n.op == "adamw" && n.inputs.size() >= 3) grad_hint_[n.inputs[1]] = spec_[n.inputs[2]];
    for (int i = 0; i < static_cast<int>(g_.nodes().size()); ++i)
      LOOM_RETURN_IF_ERROR(Annotate(Visit(i), absl::StrCat("sharding propagation at ", NodeName(g_, i))));
    for (size_t i = 0; i < g_.outputs().size(); ++i) {
      const auto& out = g_.outputs()[i];
      DTensorSpec want = DTensorSpec::Replicated(o_.mesh);
      if (out.updates >= 0) want = spec_[g_.inputs()[out.updates].value];
      if (out.updates < 0 && o_.unreduced_outputs.count(static_cast<int>(i))) want = spec_[out.value];
      Record(out.value, -1, want);
      LOOM_ASSIGN_OR_RETURN(int v, Redistribute(out.value, want));
      l_.AddOutput(v, out.updates);
    }
    LOOM_RETURN_IF_ERROR(Annotate(ir::Verify(l_), "sharding propagation produced an invalid graph"));
    return std::move(l_);
  }

 private:
  absl::Status CheckSpec(const TensorMeta& m, const DTensorSpec& spec) {
    LOOM_RETURN_IF_ERROR(spec.Validate(static_cast<int>(m.shape.size())));
    std::vector<int> by(m.shape.size(), -1);
    for (int k = 0; k < o_.mesh.ndim(); ++k) {
      const Placement& p = spec.placements[k];
      if (!p.is_shard()) continue;
      if (by[p.dim] >= 0)
        return absl::UnimplementedError(absl::StrCat("tensor dim ", p.dim, " of ", m.ToString(),
                                                     " is sharded by two mesh dims (", o_.mesh.names[by[p.dim]],
                                                     ", ", o_.mesh.names[k], ")"));
      by[p.dim] = k;
      if (m.shape[p.dim] % o_.mesh.sizes[k] != 0)
        return absl::InvalidArgumentError(absl::StrCat("dim ", p.dim, " of ", m.ToString(), " does not split evenly over ",
                                                       o_.mesh.names[k], "=", o_.mesh.sizes[k]));
    }
    return absl::OkStatus();
  }

  // Notes each mesh dim on which global value `gv` must change placement for
  // `node` (stats' redistributions).
  void Record(int gv, int node, const DTensorSpec& want) {
    if (stats_ == nullptr) return;
    for (int k = 0; k < o_.mesh.ndim(); ++k)
      if (spec_[gv].placements[k] != want.placements[k])
        stats_->redistributions.push_back({gv, node, k, spec_[gv].placements[k], want.placements[k]});
  }

  Attrs CollAttrs(int k) const {
    Attrs a;
    a.Set("group", o_.mesh.names[k]);
    a.Set("world", o_.mesh.sizes[k]);
    return a;
  }

  // Emits one node in the local graph and annotates its output.
  absl::StatusOr<int> Emit(absl::string_view op, int in, Attrs a, const DTensorSpec& spec) {
    // A per-use gather (reuse_input_redistributions = false) carries its use
    // number, so CSE (which keys on op, inputs and attrs) keeps it separate.
    if (use_mark_ >= 0 && op == "all_gather") a.Set("use", int64_t{use_mark_});
    LOOM_ASSIGN_OR_RETURN(int v, l_.AddOp1(op, {in}, std::move(a)));
    l_.value(v).placement = spec.ToString();
    if (op == "shard_slice") {
      if (stats_) ++stats_->shard_slices;
    } else if (op != "scale") {
      if (stats_) ++stats_->collectives;
    }
    return v;
  }

  // One mesh dim k: local value v from placement `from` to `to`; `spec` is
  // updated to the new placements.
  absl::StatusOr<int> Step(int v, int k, const Placement& to, DTensorSpec& spec) {
    const Placement from = spec.placements[k];
    const int64_t world = o_.mesh.sizes[k];
    auto with = [&](const Placement& p) {
      spec.placements[k] = p;
      return spec;
    };
    const char* rk = from.op == PartialOp::kAvg ? "avg" : "sum";
    if (from == to) return v;
    if (to.is_replicate()) {
      if (from.is_shard()) {
        Attrs a = CollAttrs(k);
        a.Set("axis", int64_t{from.dim});
        return Emit("all_gather", v, a, with(to));
      }
      Attrs a = CollAttrs(k);
      a.Set("reduce", std::string(rk));
      return Emit("all_reduce", v, a, with(to));
    }
    if (to.is_shard()) {
      if (from.is_partial() && o_.reduce_scatter_grads) {
        Attrs a = CollAttrs(k);
        a.Set("axis", int64_t{to.dim});
        a.Set("reduce", std::string(rk));
        return Emit("reduce_scatter", v, a, with(to));
      }
      if (!from.is_replicate()) {
      LOOM_ASSIGN_OR_RETURN(v, Step(v, k, Placement::Replicate(), spec));
    }
      Attrs a = CollAttrs(k);
      a.Set("axis", int64_t{to.dim});
      return Emit("shard_slice", v, a, with(to));
    }
    // to partial
    if (!from.is_replicate()) {
      LOOM_ASSIGN_OR_RETURN(v, Step(v, k, Placement::Replicate(), spec));
    }
    if (to.op == PartialOp::kAvg) {
      spec.placements[k] = to;
      return v;
    }
    return Emit("scale", v, {{"s", 1.0 / static_cast<double>(world)}}, with(to));
  }

  // The local value holding global value `gv` with spec `want` (cached).
  absl::StatusOr<int> Redistribute(int gv, const DTensorSpec& want) {
    DTensorSpec cur = spec_[gv];
    if (cur == want) return local_[gv];
    const bool reuse = o_.reuse_input_redistributions || !is_input_[gv];
    const std::string key = absl::StrCat(gv, "|", want.ToString());
    if (auto it = cache_.find(key); reuse && it != cache_.end()) return it->second;
    LOOM_RETURN_IF_ERROR(CheckSpec(g_.meta(gv), want));
    int v = local_[gv];
    // Start from a version already made whose remaining steps are only
    // R -> S (shard_slice, no communication), if any.
    for (const auto& [have, lv] : reuse ? made_[gv] : std::vector<std::pair<DTensorSpec, int>>{}) {
      bool ok = true;
      for (int k = 0; k < o_.mesh.ndim(); ++k)
        ok &= have.placements[k] == want.placements[k] ||
              (have.placements[k].is_replicate() && want.placements[k].is_shard());
      if (ok) {
        cur = have;
        v = lv;
        break;
      }
    }
    // Towards R (and partial) first, so no tensor dim is ever split twice.
    use_mark_ = reuse ? -1 : next_use_++;
    for (int pass = 0; pass < 2; ++pass)
      for (int k = 0; k < o_.mesh.ndim(); ++k) {
        const Placement& to = want.placements[k];
        if ((pass == 0) != (!to.is_shard())) continue;
        LOOM_ASSIGN_OR_RETURN(v, Step(v, k, to, cur));
      }
    use_mark_ = -1;
    cache_[key] = v;
    made_[gv].push_back({want, v});
    return v;
  }

  Attrs LocalAttrs(const Node& n, const std::vector<Shape>& out_local) {
    Attrs a = n.attrs;
    if (n.op == "reshape" || n.op == "broadcast_to" || n.op == "sum_to" || n.op == "fill")
      a.Set("shape", std::vector<int64_t>(out_local[0].begin(), out_local[0].end()));
    if (n.op == "embedding_backward") a.Set("num_embeddings", out_local[0][0]);
    if (n.op == "slice_backward") {
      int64_t axis = n.attrs.GetInt("axis");
      if (axis < 0) axis += static_cast<int64_t>(out_local[0].size());
      a.Set("full_len", out_local[0][axis]);
    }
    return a;
  }

  // grad_norm over inputs sharded on various mesh dims: per group of inputs
  // with the same set of sharding mesh dims, the squared norm, all_reduced
  // over those dims; then sqrt of the total.
  absl::StatusOr<int> GradNorm(const Node& n, const std::vector<int>& in, const std::vector<DTensorSpec>& specs) {
    std::map<unsigned, std::vector<int>> groups;
    for (size_t i = 0; i < in.size(); ++i) {
      unsigned mask = 0;
      for (int k = 0; k < o_.mesh.ndim(); ++k)
        if (specs[i].placements[k].is_shard()) mask |= 1u << k;
      groups[mask].push_back(in[i]);
    }
    const DTensorSpec rep = DTensorSpec::Replicated(o_.mesh);
    if (groups.size() == 1 && groups.begin()->first == 0) {
      LOOM_ASSIGN_OR_RETURN(int v, l_.AddOp1(n.op, in, n.attrs));
      return v;
    }
    int total = -1;
    for (const auto& [mask, vals] : groups) {
      LOOM_ASSIGN_OR_RETURN(int gn, l_.AddOp1(n.op, vals, n.attrs));
      LOOM_ASSIGN_OR_RETURN(int sq, l_.AddOp1("mul", {gn, gn}));
      // A group's squared norm is a sum of squares over shards: P(sum) on the
      // mesh dims that shard it.
      DTensorSpec part = rep;
      for (int k = 0; k < o_.mesh.ndim(); ++k)
        if (mask & (1u << k)) part.placements[k] = Placement::Partial();
      l_.value(gn).placement = mask ? "" : rep.ToString();
      l_.value(sq).placement = part.ToString();
      for (int k = 0; k < o_.mesh.ndim(); ++k) {
        if (!(mask & (1u << k))) continue;
        Attrs a = CollAttrs(k);
        a.Set("reduce", std::string("sum"));
        part.placements[k] = Placement::Replicate();
        LOOM_ASSIGN_OR_RETURN(sq, Emit("all_reduce", sq, a, part));
      }
      if (total < 0) {
        total = sq;
      } else {
        LOOM_ASSIGN_OR_RETURN(total, l_.AddOp1("add", {total, sq}));
        l_.value(total).placement = rep.ToString();
      }
    }
    return l_.AddOp1("sqrt", {total});
  }

  // cross_entropy / cross_entropy_backward over logits whose vocabulary is
  // sharded on mesh dim k (local logits L[n, v]):
  //   m = all_reduce_max(max(L, 1)); s = all_reduce_sum(sum(exp(L - m), 1));
  //   lse = log(s) + m; oh, valid = vocab_onehot(t);
  //   picked = all_reduce_sum(sum(L * oh, 1));
  //   loss = sum((lse - picked) * valid) / max(sum(valid), 1)
  //   dlogits = (exp(L - lse) - oh) * valid * dloss / max(sum(valid), 1)
  // (0, not NaN, when every target is ignored, as the one-rank kernel.)
  absl::StatusOr<std::vector<int>> VocabParallel(const Node& n, const std::vector<int>& in, int k,
                                                 const std::vector<DTensorSpec>& outs) {
    const bool fwd = n.op == "cross_entropy";
    const int L = fwd ? in[0] : in[1], t = fwd ? in[1] : in[2];
    const int64_t rows = l_.meta(L).shape[0], v = l_.meta(L).shape[1];
    // Row-shaped values keep the rows' placements (dp) and are R on k;
    // pre-reduction terms get no annotation (they are not DTensor values).
    DTensorSpec row = fwd ? outs[1] : outs[0];
    row.placements[k] = Placement::Replicate();
    const std::string none;
    DTensorSpec vocab = row;
    vocab.placements[k] = Placement::Shard(1);
    auto op = [&](absl::string_view name, std::vector<int> args, Attrs a, const std::string& spec) -> absl::StatusOr<int> {
      LOOM_ASSIGN_OR_RETURN(int x, l_.AddOp1(name, std::move(args), std::move(a)));
      l_.value(x).placement = spec;
      return x;
    };
    auto reduce = [&](int x, const char* how) -> absl::StatusOr<int> {
      Attrs a = CollAttrs(k);
      a.Set("reduce", std::string(how));
      return Emit("all_reduce", x, a, row);
    };
    Attrs oa = CollAttrs(k);
    oa.Set("num_classes", v);
    oa.Set("ignore_index", n.attrs.GetInt("ignore_index", -100));
    LOOM_ASSIGN_OR_RETURN(auto ohv, l_.AddOp("vocab_onehot", {t}, oa));
    const std::string R = row.ToString(), V = vocab.ToString();
    l_.value(ohv[0]).placement = V;
    l_.value(ohv[1]).placement = R;
    const Attrs last{{"axes", std::vector<int64_t>{1}}};
    LOOM_ASSIGN_OR_RETURN(int nvalid, op("sum", {ohv[1]}, {}, none));
    const std::string dt(DTypeName(l_.meta(L).dtype));
    LOOM_ASSIGN_OR_RETURN(int one, op("fill", {}, {{"dtype", dt}, {"shape", std::vector<int64_t>{}}, {"value", 1.0}}, none));
    LOOM_ASSIGN_OR_RETURN(nvalid, op("maximum", {nvalid, one}, {}, none));
    const int valid = ohv[1];
    if (fwd) {
      LOOM_ASSIGN_OR_RETURN(int m, op("max", {L}, {{"axes", std::vector<int64_t>{1}}, {"keepdim", true}}, none));
      LOOM_ASSIGN_OR_RETURN(m, reduce(m, "max"));
      LOOM_ASSIGN_OR_RETURN(int d, op("sub", {L, m}, {}, V));
      LOOM_ASSIGN_OR_RETURN(int e, op("exp", {d}, {}, V));
      LOOM_ASSIGN_OR_RETURN(int s, op("sum", {e}, last, none));
      LOOM_ASSIGN_OR_RETURN(s, reduce(s, "sum"));
      LOOM_ASSIGN_OR_RETURN(int ls, op("log", {s}, {}, R));
      LOOM_ASSIGN_OR_RETURN(int m1, op("reshape", {m}, {{"shape", std::vector<int64_t>{rows}}}, R));
      LOOM_ASSIGN_OR_RETURN(int lse, op("add", {ls, m1}, {}, R));
      LOOM_ASSIGN_OR_RETURN(int lp, op("mul", {L, ohv[0]}, {}, V));
      LOOM_ASSIGN_OR_RETURN(int picked, op("sum", {lp}, last, none));
      LOOM_ASSIGN_OR_RETURN(picked, reduce(picked, "sum"));
      LOOM_ASSIGN_OR_RETURN(int nll, op("sub", {lse, picked}, {}, R));
      LOOM_ASSIGN_OR_RETURN(int nllv, op("mul", {nll, valid}, {}, R));
      LOOM_ASSIGN_OR_RETURN(int tot, op("sum", {nllv}, {}, none));
      LOOM_ASSIGN_OR_RETURN(int loss, op("div", {tot, nvalid}, {}, outs[0].ToString()));
      return std::vector<int>{loss, lse};
    }
    const int dloss = in[0], lse = in[3];
    LOOM_ASSIGN_OR_RETURN(int lse2, op("reshape", {lse}, {{"shape", std::vector<int64_t>{rows, 1}}}, R));
    LOOM_ASSIGN_OR_RETURN(int d, op("sub", {L, lse2}, {}, V));
    LOOM_ASSIGN_OR_RETURN(int p, op("exp", {d}, {}, V));
    LOOM_ASSIGN_OR_RETURN(int g, op("sub", {p, ohv[0]}, {}, V));
    LOOM_ASSIGN_OR_RETURN(int v2, op("reshape", {valid}, {{"shape", std::vector<int64_t>{rows, 1}}}, R));
    LOOM_ASSIGN_OR_RETURN(g, op("mul", {g, v2}, {}, V));
    LOOM_ASSIGN_OR_RETURN(int coef, op("div", {dloss, nvalid}, {}, none));
    LOOM_ASSIGN_OR_RETURN(g, op("mul", {g, coef}, {}, outs[0].ToString()));
    return std::vector<int>{g};
  }

  // Mean cross-entropy over rows split on the mesh dims in `dims` (a batch or
  // token split): the kernel divides by this rank's count c of non-ignored
  // targets, and ranks hold different counts when targets are ignored. With
  // C = all_reduce_sum(c) on those dims and f = c / max(C, 1):
  //   forward:  loss_local * f * W, so the P(avg) over W ranks is the global
  //             sum of losses / C;
  //   backward: dloss * f enters the kernel, which divides by c again: dloss / C.
  // A rank with c = 0 contributes 0; with C = 0 everything is 0, as on one rank.
  // f is exactly 1/W when every rank counts the same (W a power of two).
  // The forward and the backward over the same local targets share one count.
  absl::StatusOr<int> LocalShareOfCount(const Node& n, int targets, DType dt, const std::vector<int>& dims) {
    const std::string key = absl::StrCat(targets, "/", n.attrs.GetInt("ignore_index", -100), "/", DTypeName(dt), "/",
                                         absl::StrJoin(dims, ","));
    auto hit = count_share_.find(key);
    if (hit != count_share_.end()) return hit->second;
    LOOM_ASSIGN_OR_RETURN(int share, NewShareOfCount(n, targets, dt, dims));
    count_share_[key] = share;
    return share;
  }

  absl::StatusOr<int> NewShareOfCount(const Node& n, int targets, DType dt, const std::vector<int>& dims) {
    const TensorMeta& tm = l_.meta(targets);
    const std::string fdt(DTypeName(dt));
    LOOM_ASSIGN_OR_RETURN(int ig, l_.AddOp1("fill", {}, {{"dtype", std::string(DTypeName(tm.dtype))},
                                                         {"shape", std::vector<int64_t>{}},
                                                         {"value", static_cast<double>(n.attrs.GetInt("ignore_index", -100))}}));
    LOOM_ASSIGN_OR_RETURN(int eq, l_.AddOp1("equal", {targets, ig}));
    LOOM_ASSIGN_OR_RETURN(int ok, l_.AddOp1("logical_not", {eq}));
    LOOM_ASSIGN_OR_RETURN(int okf, l_.AddOp1("cast", {ok}, {{"dtype", fdt}}));
    LOOM_ASSIGN_OR_RETURN(int c, l_.AddOp1("sum", {okf}));
    DTensorSpec part = DTensorSpec::Replicated(o_.mesh);
    for (int k : dims) part.placements[k] = Placement::Partial();
    l_.value(c).placement = part.ToString();
    int total = c;
    for (int k : dims) {
      Attrs a = CollAttrs(k);
      a.Set("reduce", std::string("sum"));
      part.placements[k] = Placement::Replicate();
      LOOM_ASSIGN_OR_RETURN(total, Emit("all_reduce", total, a, part));
    }
    LOOM_ASSIGN_OR_RETURN(int one, l_.AddOp1("fill", {}, {{"dtype", fdt}, {"shape", std::vector<int64_t>{}}, {"value", 1.0}}));
    LOOM_ASSIGN_OR_RETURN(int denom, l_.AddOp1("maximum", {total, one}));
    return l_.AddOp1("div", {c, denom});
  }

  struct LossRows {
    int share = -1;     // local value c / max(C, 1), or -1 when the rows are whole
    int64_t world = 1;  // ranks splitting the rows
  };

  // For cross_entropy(_backward) whose targets are split by rows: the local
  // share of the global count, and (backward) dloss in `in` scaled by it.
  absl::StatusOr<LossRows> SplitLossRows(const Node& n, const std::vector<DTensorSpec>& req, std::vector<int>* in) {
    LossRows r;
    const int tgt = n.op == "cross_entropy" ? 1 : n.op == "cross_entropy_backward" ? 2 : -1;
    if (tgt < 0) return r;
    std::vector<int> dims;
    for (int k = 0; k < o_.mesh.ndim(); ++k)
      if (o_.mesh.sizes[k] > 1 && req[tgt].placements[k].is_shard(0)) {
        dims.push_back(k);
        r.world *= o_.mesh.sizes[k];
      }
    if (dims.empty()) return r;
    LOOM_ASSIGN_OR_RETURN(r.share, LocalShareOfCount(n, (*in)[tgt], l_.meta((*in)[0]).dtype, dims));
    if (n.op == "cross_entropy_backward") {
      LOOM_ASSIGN_OR_RETURN(int d, l_.AddOp1("mul", {(*in)[0], r.share}));
      l_.value(d).placement = req[0].ToString();
      (*in)[0] = d;
    }
    return r;
  }

  // embedding(W[V, C] rows sharded on mesh dim k, ids): this rank's rows
  // contribute onehot(ids - offset) @ W_local; the output is P(sum) on k.
  absl::StatusOr<int> VocabEmbedding(const std::vector<int>& in, int k, const DTensorSpec& out,
                                     const Shape& out_local) {
    const int w = in[0], ids = in[1];
    const int64_t vl = l_.meta(w).shape[0];
    int64_t n = 1;
    for (int64_t d : l_.meta(ids).shape) n *= d;
    LOOM_ASSIGN_OR_RETURN(int flat, l_.AddOp1("reshape", {ids}, {{"shape", std::vector<int64_t>{n}}}));
    Attrs oa = CollAttrs(k);
    oa.Set("num_classes", vl);
    oa.Set("ignore_index", int64_t{-1});  // ids are never negative: no row is ignored
    LOOM_ASSIGN_OR_RETURN(auto ohv, l_.AddOp("vocab_onehot", {flat}, oa));
    LOOM_ASSIGN_OR_RETURN(int rows, l_.AddOp1("matmul", {ohv[0], w}));
    LOOM_ASSIGN_OR_RETURN(int y, l_.AddOp1("reshape", {rows}, {{"shape", std::vector<int64_t>(out_local.begin(), out_local.end())}}));
    l_.value(y).placement = out.ToString();
    return y;
  }

  absl::Status Visit(int index) {
    const Node& n = g_.nodes()[index];
    const ShardingRule* rule = FindShardingRule(n.op);
    const int nin = static_cast<int>(n.inputs.size()), nout = static_cast<int>(n.outputs.size());
    std::vector<DTensorSpec> req(nin, DTensorSpec::Replicated(o_.mesh));
    std::vector<DTensorSpec> outs(nout, DTensorSpec::Replicated(o_.mesh));
    std::vector<double> scale(nin, 1.0);
    RuleInput ri;
    ri.op = n.op;
    ri.attrs = &n.attrs;
    for (int v : n.inputs) ri.in.push_back(g_.meta(v));
    for (int v : n.outputs) ri.out.push_back(g_.meta(v));
    for (int k = 0; k < o_.mesh.ndim(); ++k) {
      ri.world = o_.mesh.sizes[k];
      ri.place.clear();
      for (int v : n.inputs) ri.place.push_back(spec_[v].placements[k]);
      if (ri.world == 1) {
        for (int i = 0; i < nin; ++i) req[i].placements[k] = Placement::Replicate();
        continue;
      }
      LOOM_ASSIGN_OR_RETURN(RuleResult r, (*rule)(ri));
      if (static_cast<int>(r.in.size()) != nin || static_cast<int>(r.out.size()) != nout ||
          (!r.in_scale.empty() && static_cast<int>(r.in_scale.size()) != nin))
        return absl::InternalError(absl::StrCat("the sharding rule of ", n.op, " returned ", r.in.size(), " inputs and ",
                                                r.out.size(), " outputs"));
      for (int i = 0; i < nin; ++i) req[i].placements[k] = r.in[i];
      if (n.op == "grad_norm" && o_.reduce_scatter_grads)
        for (int i = 0; i < nin; ++i) {
          auto h = grad_hint_.find(n.inputs[i]);
          if (h != grad_hint_.end() && ri.place[i].is_partial() && h->second.placements[k].is_shard())
            req[i].placements[k] = h->second.placements[k];
        }
      for (int i = 0; i < nout; ++i) outs[i].placements[k] = r.out[i];
      for (size_t i = 0; i < r.in_scale.size(); ++i) scale[i] *= r.in_scale[i];
    }
    std::vector<int> in;
    for (int i = 0; i < nin; ++i) {
      Record(n.inputs[i], index, req[i]);
      LOOM_ASSIGN_OR_RETURN(int v, Redistribute(n.inputs[i], req[i]));
      if (scale[i] != 1.0) {
        LOOM_ASSIGN_OR_RETURN(v, l_.AddOp1("scale", {v}, {{"s", scale[i]}}));
        l_.value(v).placement = req[i].ToString();
      }
      in.push_back(v);
    }
    LOOM_ASSIGN_OR_RETURN(LossRows rows, SplitLossRows(n, req, &in));
    std::vector<Shape> out_local;
    for (int i = 0; i < nout; ++i) {
      LOOM_RETURN_IF_ERROR(CheckSpec(g_.meta(n.outputs[i]), outs[i]));
      LOOM_ASSIGN_OR_RETURN(auto s, EvenLocalShape(g_.meta(n.outputs[i]).shape, outs[i]));
      out_local.push_back(std::move(s));
    }
    int vocab_k = -1;  // mesh dim sharding the logits' vocabulary
    const int logits = n.op == "cross_entropy" ? 0 : n.op == "cross_entropy_backward" ? 1 : -1;
    if (logits >= 0)
      for (int k = 0; k < o_.mesh.ndim(); ++k)
        if (o_.mesh.sizes[k] > 1 && req[logits].placements[k].is_shard(1)) vocab_k = k;
    int embed_k = -1;  // mesh dim sharding the embedding table's rows
    if (n.op == "embedding")
      for (int k = 0; k < o_.mesh.ndim(); ++k)
        if (o_.mesh.sizes[k] > 1 && req[0].placements[k].is_shard(0)) embed_k = k;
    std::vector<int> got;
    if (embed_k >= 0) {
      LOOM_ASSIGN_OR_RETURN(int v, VocabEmbedding(in, embed_k, outs[0], out_local[0]));
      got = {v};
    } else if (vocab_k >= 0) {
      LOOM_ASSIGN_OR_RETURN(got, VocabParallel(n, in, vocab_k, outs));
    } else if (n.op == "grad_norm") {
      LOOM_ASSIGN_OR_RETURN(int v, GradNorm(n, in, req));
      got = {v};
    } else {
      auto r = l_.AddOp(n.op, in, LocalAttrs(n, out_local));
      if (!r.ok()) return Annotate(r.status(), "building the local node");
      got = *r;
    }
    if (rows.share >= 0 && n.op == "cross_entropy") {
      LOOM_ASSIGN_OR_RETURN(int v, l_.AddOp1("mul", {got[0], rows.share}));
      LOOM_ASSIGN_OR_RETURN(got[0], l_.AddOp1("scale", {v}, {{"s", static_cast<double>(rows.world)}}));
    }
    for (int i = 0; i < nout; ++i) {
      const auto& m = l_.meta(got[i]);
      if (m.shape != out_local[i])
        return absl::InternalError(absl::StrCat("output ", i, " has local shape ", m.ToString(), " but spec ",
                                                outs[i].ToString(), " of ", g_.meta(n.outputs[i]).ToString(),
                                                " expects ", ShapeToString(out_local[i])));
      l_.value(got[i]).placement = outs[i].ToString();
      local_[n.outputs[i]] = got[i];
      spec_[n.outputs[i]] = outs[i];
    }
    return absl::OkStatus();
  }

  const Graph& g_;
  const SpmdOptions& o_;
  SpmdStats* stats_;
  Graph l_;
  std::vector<int> local_;
  std::vector<bool> is_input_;
  std::vector<DTensorSpec> spec_;
  std::map<std::string, int> cache_;
  int use_mark_ = -1;  // >= 0 while emitting a per-use redistribution (its "use" attr)
  int next_use_ = 0;
  std::map<int, std::vector<std::pair<DTensorSpec, int>>> made_;  // global value -> versions made
  std::map<int, DTensorSpec> grad_hint_;  // gradient value -> its adamw state's spec
  std::map<std::string, int> count_share_;  // local targets, ignore_index, dtype, dims -> c / max(C, 1)
};

}  // namespace

absl::StatusOr<Shape> EvenLocalShape(const Shape& global, const DTensorSpec& spec) {
  Shape s = global;
  for (int k = 0; k < spec.mesh.ndim(); ++k) {
    const Placement& p = spec.placements[k];
    if (!p.is_shard()) continue;
    if (p.dim < 0 || p.dim >= static_cast<int>(s.size()) || s[p.dim] % spec.mesh.sizes[k] != 0)
      return absl::InvalidArgumentError(absl::StrCat("spec ", spec.ToString(), " does not split ",
                                                     ShapeToString(global), " evenly"));
    s[p.dim] /= spec.mesh.sizes[k];
  }
  return s;
}

absl::Status CheckShardable(const Graph& g) {
  for (int i = 0; i < static_cast<int>(g.nodes().size()); ++i)
    if (FindShardingRule(g.nodes()[i].op) == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("sharding propagation: op '", g.nodes()[i].op, "' (node ", i,
                                                     ") has no sharding rule; add one in compiler/spmd/rules.cc"));
  return absl::OkStatus();
}

absl::StatusOr<Graph> Parallelize(const Graph& global, const SpmdOptions& options, SpmdStats* stats) {
  Propagator p(global, options, stats);
  return p.Run();
}

}  // namespace loom::compiler::spmd
