#include "compiler/passes/memory_plan.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "compiler/ir/verifier.h"

namespace loom::compiler::passes {
namespace {

int64_t RoundUp(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

bool Overlap(const BufferAssignment& a, const BufferAssignment& b) {
  return a.first <= b.last && b.first <= a.last;
}

// The placed buffers are kept sorted by
// (offset, end), so those a buffer overlaps in time come out in address order.
}  // namespace

int64_t internal::PlaceBuffers(std::vector<BufferAssignment>& bufs, const std::vector<int>& order) {
  using Placed = std::pair<std::pair<int64_t, int64_t>, int>;  // ((offset, end), buffer)
  std::vector<Placed> placed;
  int64_t peak = 0;
  for (int i : order) {
    BufferAssignment& b = bufs[i];
    if (b.size == 0) {
      b.offset = 0;
      continue;
    }
    int64_t best = -1, best_gap = 0, prev_end = 0;
    for (const Placed& p : placed) {
      if (!Overlap(b, bufs[p.second])) continue;
      const auto [off, end] = p.first;
      int64_t gap = off - prev_end;
      if (gap >= b.size && (best < 0 || gap < best_gap)) {
        best = prev_end;
        best_gap = gap;
      }
      prev_end = std::max(prev_end, end);
    }
    b.offset = best >= 0 ? best : prev_end;
    peak = std::max(peak, b.offset + b.size);
    const Placed p{{b.offset, b.offset + b.size}, i};
    placed.insert(std::upper_bound(placed.begin(), placed.end(), p,
                                   [](const Placed& x, const Placed& y) { return x.first < y.first; }),
                  p);
  }
  return peak;
}

std::string MemoryPlan::Describe(const ir::Graph& g, int node) const {
  std::vector<std::string> parts;
  for (int v : g.nodes()[node].outputs) {
    const BufferAssignment* b = Find(v);
    if (b) parts.push_back(absl::StrCat("offset=", b->offset, " size=", b->size));
  }
  return absl::StrJoin(parts, "; ");
}

absl::StatusOr<MemoryPlan> PlanMemory(const ir::Graph& g, int64_t alignment, const std::vector<int>& external) {
  if (alignment <= 0) return absl::InvalidArgumentError("alignment: must be positive");
  LOOM_RETURN_IF_ERROR(ir::Verify(g));
  MemoryPlan plan;
  plan.alignment = alignment;
  plan.buffer_of_value.assign(g.values().size(), -1);
  const int n = static_cast<int>(g.nodes().size());
  std::vector<bool> is_external(g.values().size(), false);
  for (int v : external)
    if (v >= 0 && v < static_cast<int>(is_external.size())) is_external[v] = true;
  for (int i = 0; i < n; ++i) {
    for (int v : g.nodes()[i].outputs) {
      if (is_external[v]) continue;
      BufferAssignment b;
      b.value = v;
      const ir::TensorMeta& m = g.meta(v);
      b.size = RoundUp(NumElements(m.shape) * static_cast<int64_t>(DTypeSize(m.dtype)), alignment);
      b.first = b.last = i;
      plan.buffer_of_value[v] = static_cast<int>(plan.buffers.size());
      plan.buffers.push_back(b);
    }
    for (int v : g.nodes()[i].inputs) {
      int k = plan.buffer_of_value[v];
      if (k >= 0) plan.buffers[k].last = std::max(plan.buffers[k].last, i);
    }
  }
  for (const ir::GraphOutput& o : g.outputs()) {
    int k = plan.buffer_of_value[o.value];
    if (k >= 0) plan.buffers[k].last = n;
  }
  const Placement placed = PlaceBest(plan.buffers, n);
  plan.live_bytes_bound = placed.live_bytes_bound;
  plan.peak_bytes = placed.peak_bytes;
  return plan;
}

Placement PlaceBest(std::vector<BufferAssignment>& bufs_io, int positions) {
  Placement out;
  // The most bytes live at once: a sweep over the positions, each buffer
  // added at its first position and dropped after its last.
  std::vector<int64_t> delta(positions + 2, 0);
  for (const BufferAssignment& b : bufs_io) {
    delta[b.first] += b.size;
    delta[b.last + 1] -= b.size;
  }
  int64_t live = 0;
  for (int t = 0; t <= positions; ++t) {
    live += delta[t];
    out.live_bytes_bound = std::max(out.live_bytes_bound, live);
  }
  // Several greedy orders; keep the smallest arena (ties: the first order).
  const int nb = static_cast<int>(bufs_io.size());
  const auto& bufs = bufs_io;
  auto span = [&](int i) { return int64_t{bufs[i].last - bufs[i].first + 1}; };
  std::vector<std::function<bool(int, int)>> orders = {
      [&](int a, int b) { return bufs[a].size != bufs[b].size ? bufs[a].size > bufs[b].size : span(a) > span(b); },
      [&](int a, int b) { return bufs[a].first < bufs[b].first; },
      [&](int a, int b) { return span(a) != span(b) ? span(a) > span(b) : bufs[a].size > bufs[b].size; },
      [&](int a, int b) { return bufs[a].size * span(a) > bufs[b].size * span(b); },
  };
  std::vector<BufferAssignment> best;
  int64_t peak_size = -1;
  for (const auto& less : orders) {
    std::vector<int> order(nb);
    for (int i = 0; i < nb; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), less);
    std::vector<BufferAssignment> trial = bufs;
    int64_t peak = internal::PlaceBuffers(trial, order);
    if (peak_size < 0 || peak < peak_size) {
      peak_size = peak;
      best = std::move(trial);
    }
    if (peak_size == out.live_bytes_bound) break;  // cannot do better
  }
  bufs_io = std::move(best);
  out.peak_bytes = std::max<int64_t>(peak_size, 0);
  return out;
}

absl::StatusOr<bool> MemoryPlanPass::Run(ir::Graph& g) {
  LOOM_ASSIGN_OR_RETURN(plan_, PlanMemory(g));
  return false;
}

}  // namespace loom::compiler::passes
