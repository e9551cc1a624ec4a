// The assign_arena pass (plan_arena.h): liveness of every launch output over
// launch positions, then best-fit offsets (the best of three placement orders).
#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/cuda/plan_arena.h"

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
  struct Buf {
    int v;
    int64_t size;
    int first, last;
    int64_t offset = 0;
  };
  std::vector<Buf> bufs;
  for (int v = 0; v < nvals; ++v)
    if (first[v] >= 0) bufs.push_back({v, RoundUp(std::max<int64_t>(p.Bytes(v), 1), p.alignment), first[v], last[v]});
  for (int t = 0; t <= npos; ++t) {
    int64_t live = 0;
    for (const Buf& b : bufs)
      if (b.first <= t && t <= b.last) live += b.size;
    p.live_bytes_bound = std::max(p.live_bytes_bound, live);
  }
  std::vector<std::function<bool(const Buf&, const Buf&)>> orders = {
      [](const Buf& a, const Buf& b) { return a.size > b.size; },
      [](const Buf& a, const Buf& b) { return a.first < b.first; },
      [](const Buf& a, const Buf& b) { return a.size * (a.last - a.first + 1) > b.size * (b.last - b.first + 1); },
  };
  std::vector<Buf> best;
  int64_t best_peak = -1;
  for (const auto& less : orders) {
    std::vector<Buf> order = bufs;
    std::stable_sort(order.begin(), order.end(), less);
    std::vector<const Buf*> placed;
    int64_t peak = 0;
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (Buf& b : order) {
      busy.clear();
      for (const Buf* q : placed)
        if (q->first <= b.last && b.first <= q->last) busy.push_back({q->offset, q->offset + q->size});
      std::sort(busy.begin(), busy.end());
      int64_t best_off = -1, best_gap = 0, prev_end = 0;
      for (const auto& [off, end] : busy) {
        const int64_t gap = off - prev_end;
        if (gap >= b.size && (best_off < 0 || gap < best_gap)) {
          best_off = prev_end;
          best_gap = gap;
        }
        prev_end = std::max(prev_end, end);
      }
      b.offset = best_off >= 0 ? best_off : prev_end;
      peak = std::max(peak, b.offset + b.size);
      placed.push_back(&b);
    }
    if (best_peak < 0 || peak < best_peak) {
      best_peak = peak;
      best = order;
    }
  }
  for (const Buf& b : best) p.offset[b.v] = b.offset;
  p.arena_bytes = std::max<int64_t>(best_peak, 0);
  return true;
}

}  // namespace loom::compiler::cuda::plan_internal
