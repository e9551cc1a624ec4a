#include "dtensor/redistribute_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"

namespace loom::dtensor {
namespace {

absl::string_view KindName(StepKind k) {
  switch (k) {
    case StepKind::kAllGather: return "all_gather";
    case StepKind::kAllReduce: return "all_reduce";
    case StepKind::kReduceScatter: return "reduce_scatter";
    case StepKind::kAllToAll: return "all_to_all";
    case StepKind::kSlice: return "slice";
    case StepKind::kPadToPartial: return "pad_to_partial";
    case StepKind::kScale: return "scale";
    case StepKind::kZeroUnlessFirst: return "zero_unless_first";
  }
  return "?";
}

// Mesh dims (ascending) that shard tensor dim d.
std::vector<int> Sharders(const std::vector<Placement>& pl, int d) {
  std::vector<int> out;
  for (int m = 0; m < static_cast<int>(pl.size()); ++m)
    if (pl[m].is_shard(d)) out.push_back(m);
  return out;
}

bool NoShardAfter(const std::vector<Placement>& pl, int m, int d) {
  for (int m2 = m + 1; m2 < static_cast<int>(pl.size()); ++m2)
    if (pl[m2].is_shard(d)) return false;
  return true;
}

class Planner {
 public:
  Planner(const DTensorSpec& from, const DTensorSpec& to)
      : state_(from.placements), to_(to.placements), sizes_(from.mesh.sizes) {}

  // Appends a step after checking its nesting precondition.
  absl::Status Add(std::vector<RedistributeStep>* out, StepKind kind, int m, const Placement& target) {
    const Placement& src = state_[m];
    if (src.is_shard() && !NoShardAfter(state_, m, src.dim))
      return absl::InternalError(absl::StrCat("redistribute plan: mesh dim ", m, " is not the innermost split of ",
                                              "tensor dim ", src.dim, " when undoing it"));
    if (target.is_shard() && !NoShardAfter(state_, m, target.dim))
      return absl::InternalError(absl::StrCat("redistribute plan: mesh dim ", m, " would not be the innermost ",
                                              "split of tensor dim ", target.dim));
    out->push_back({kind, m, src, target});
    state_[m] = target;
    return absl::OkStatus();
  }

  std::vector<Placement> state_;
  const std::vector<Placement>& to_;
  const std::vector<int64_t>& sizes_;
};

}  // namespace

bool RedistributeStep::is_collective() const {
  return kind == StepKind::kAllGather || kind == StepKind::kAllReduce || kind == StepKind::kReduceScatter ||
         kind == StepKind::kAllToAll;
}

std::string RedistributeStep::ToString() const {
  return absl::StrCat(KindName(kind), "(", mesh_dim, ": ", from.ToString(), "->", to.ToString(), ")");
}

std::string PlanToString(const std::vector<RedistributeStep>& plan) {
  if (plan.empty()) return "(none)";
  std::vector<std::string> parts;
  for (const auto& s : plan) parts.push_back(s.ToString());
  return absl::StrJoin(parts, "; ");
}

absl::StatusOr<std::vector<RedistributeStep>> PlanRedistribute(const DTensorSpec& from, const DTensorSpec& to,
                                                               int tensor_ndim) {
  LOOM_RETURN_IF_ERROR(Annotate(from.mesh.Validate(), "from_spec"));
  LOOM_RETURN_IF_ERROR(Annotate(from.Validate(tensor_ndim), "from_spec"));
  LOOM_RETURN_IF_ERROR(Annotate(to.Validate(tensor_ndim), "to_spec"));
  if (!(from.mesh == to.mesh))
    return absl::InvalidArgumentError(absl::StrCat("to_spec: mesh ", to.mesh.ToString(), " != from_spec mesh ",
                                                   from.mesh.ToString()));
  const int nm = from.mesh.ndim();
  const auto& fp = from.placements;
  const auto& tp = to.placements;

  // Shards kept in place: the common prefix of from/to sharders per tensor dim.
  std::vector<bool> kept(nm, false);
  for (int d = 0; d < tensor_ndim; ++d) {
    std::vector<int> a = Sharders(fp, d), b = Sharders(tp, d);
    for (size_t i = 0; i < a.size() && i < b.size() && a[i] == b[i]; ++i) kept[a[i]] = true;
  }

  Planner p(from, to);
  std::vector<RedistributeStep> undo, redo;
  int64_t grow = 1, shrink = 1;
  // 1. Undo shards, last mesh dim first.
  for (int m = nm - 1; m >= 0; --m) {
    if (!fp[m].is_shard() || kept[m]) continue;
    const Placement& target = tp[m];
    if (target.is_partial()) {
      LOOM_RETURN_IF_ERROR(p.Add(&undo, StepKind::kPadToPartial, m, target));
      grow *= p.sizes_[m];
      continue;
    }
    if (target.is_shard() && target.dim != fp[m].dim) {
      // Direct all_to_all when m ends up as the innermost split of e and the
      // splits of e are then exactly those of `to` up to m.
      std::vector<Placement> after = p.state_;
      after[m] = target;
      std::vector<int> now = Sharders(after, target.dim), want;
      for (int x : Sharders(tp, target.dim))
        if (x <= m) want.push_back(x);
      if (now == want && NoShardAfter(p.state_, m, target.dim)) {
        LOOM_RETURN_IF_ERROR(p.Add(&undo, StepKind::kAllToAll, m, target));
        continue;
      }
    }
    LOOM_RETURN_IF_ERROR(p.Add(&undo, StepKind::kAllGather, m, Placement::Replicate()));
    grow *= p.sizes_[m];
  }
  // 2. Make the remaining target shards, first mesh dim first.
  for (int m = 0; m < nm; ++m) {
    if (!tp[m].is_shard() || p.state_[m] == tp[m]) continue;
    if (p.state_[m].is_replicate()) {
      LOOM_RETURN_IF_ERROR(p.Add(&redo, StepKind::kSlice, m, tp[m]));
    } else if (p.state_[m].is_partial()) {
      LOOM_RETURN_IF_ERROR(p.Add(&redo, StepKind::kReduceScatter, m, tp[m]));
    } else {
      return absl::InternalError(absl::StrCat("redistribute plan: mesh dim ", m, " still holds ",
                                              p.state_[m].ToString(), " before resharding"));
    }
    shrink *= p.sizes_[m];
  }
  // P -> R reductions, where the block is smallest.
  std::vector<RedistributeStep> reduce;
  for (int m = 0; m < nm; ++m) {
    if (p.state_[m].is_partial() && tp[m].is_replicate())
      LOOM_RETURN_IF_ERROR(p.Add(&reduce, StepKind::kAllReduce, m, tp[m]));
  }
  std::vector<RedistributeStep> plan;
  if (grow > shrink) plan.insert(plan.end(), reduce.begin(), reduce.end());
  plan.insert(plan.end(), undo.begin(), undo.end());
  plan.insert(plan.end(), redo.begin(), redo.end());
  if (grow <= shrink) plan.insert(plan.end(), reduce.begin(), reduce.end());
  // Partial relabels.
  for (int m = 0; m < nm; ++m) {
    const Placement& s = p.state_[m];
    if (s == tp[m]) continue;
    if (s.is_partial() && tp[m].is_partial()) {
      LOOM_RETURN_IF_ERROR(p.Add(&plan, StepKind::kScale, m, tp[m]));
    } else if (s.is_replicate() && tp[m].is_partial()) {
      if (tp[m].op == PartialOp::kSum) {
        LOOM_RETURN_IF_ERROR(p.Add(&plan, StepKind::kZeroUnlessFirst, m, tp[m]));
      } else {
        p.state_[m] = tp[m];  // R -> P(avg): every term is the value already
      }
    }
  }
  if (p.state_ != tp) {
    DTensorSpec got{from.mesh, p.state_};
    return absl::InternalError(absl::StrCat("redistribute plan: ended at ", got.ToString(), " instead of ",
                                            to.ToString()));
  }
  return plan;
}

}  // namespace loom::dtensor
