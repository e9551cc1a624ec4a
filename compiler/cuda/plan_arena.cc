// The assign_arena pass (plan_arena.h): liveness of every launch output over
// launch positions, then the offsets of compiler/passes/memory_plan.h's
// placement (PlaceBest: best fit, the best of its orders).
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/cuda/plan_arena.h"
#include "compiler/passes/memory_plan.h"

namespace loom::compiler::cuda::plan_internal {

namespace {

int64_t RoundUp(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

}  // namespace

absl::StatusOr<bool> AssignArenaPass::Run(PlanState& s) {
  const ir::Graph& g = s.g;
  CudaPlan& p = s.p;
  const std::vector<bool>& is_shadow = s.is_shadow;
  const int nvals = static_cast<int>(p.metas.size());
  for (const Launch& l : p.launches)
    for (int v : l.outputs)
      if (p.root[v] < 0) p.root[v] = v;
  p.offset.assign(nvals, -1);
  auto in_arena = [&](int r) { return r >= 0 && p.input_of[r] < 0 && !is_shadow[r]; };
  std::vector<int> first(nvals, -1), last(nvals, -1);
  const int npos = static_cast<int>(p.launches.size());
  for (int pos = 0; pos < npos; ++pos) {
    const Launch& l = p.launches[pos];
    for (int v : l.outputs) {
      const int r = p.root[v];
      if (!in_arena(r)) continue;
      if (first[r] < 0) first[r] = pos;
      last[r] = std::max(last[r], pos);
    }
  }
  for (int pos = 0; pos < npos; ++pos)
    for (int v : p.launches[pos].inputs) {
      const int r = v < nvals ? p.root[v] : -1;
      if (r < 0) return absl::InternalError(absl::StrCat("cuda lowering: launch ", pos, " reads %", v, " which no launch writes"));
      if (!in_arena(r)) continue;
      if (first[r] < 0 || first[r] > pos)
        return absl::InternalError(absl::StrCat("cuda lowering: launch ", pos, " reads %", v, " before it is written"));
      last[r] = std::max(last[r], pos);
    }
  for (const ir::GraphOutput& o : g.outputs()) {
    const int r = p.root[o.value];
    if (r < 0) return absl::InternalError(absl::StrCat("cuda lowering: output %", o.value, " is not materialised"));
    if (in_arena(r)) last[r] = npos;
  }
  if (s.options.guard_bytes < 0)
    return absl::InvalidArgumentError(absl::StrCat("guard_bytes: expected >= 0, got ", s.options.guard_bytes));
  const int64_t guard = RoundUp(s.options.guard_bytes, p.alignment);
  std::vector<passes::BufferAssignment> bufs;
  for (int v = 0; v < nvals; ++v)
    if (first[v] >= 0)
      bufs.push_back({v, 0, RoundUp(std::max<int64_t>(p.Bytes(v), 1), p.alignment) + guard, first[v], last[v]});
  const passes::Placement placed = passes::PlaceBest(bufs, npos);
  p.guards.clear();
  for (const passes::BufferAssignment& b : bufs) {
    p.offset[b.value] = b.offset;
    if (guard > 0)
      p.guards.push_back(
          {b.value, first[b.value], last[b.value], b.offset + p.Bytes(b.value), b.size - p.Bytes(b.value)});
  }
  p.live_bytes_bound = placed.live_bytes_bound;
  p.arena_bytes = placed.peak_bytes;
  return true;
}

}  // namespace loom::compiler::cuda::plan_internal
