#include "compiler/passes/memory_plan.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"

namespace loom::compiler::passes {
namespace {

// Liveness bound computed independently of the planner: at each node position
// t, the sum over values alive at t (defined at or before t, used at or after
// t, graph outputs to the end) of their sizes rounded up to 64 bytes.
int64_t IndependentBound(const ir::Graph& g) {
  const int n = static_cast<int>(g.nodes().size());
  std::vector<int> def(g.values().size(), -1), last(g.values().size(), -1);
  for (int i = 0; i < n; ++i) {
    for (int v : g.nodes()[i].outputs) def[v] = last[v] = i;
    for (int v : g.nodes()[i].inputs) last[v] = i;
  }
  for (const ir::GraphOutput& o : g.outputs()) last[o.value] = n;
  int64_t bound = 0;
  for (int t = 0; t <= n; ++t) {
    int64_t sum = 0;
    for (size_t v = 0; v < def.size(); ++v) {
      if (def[v] < 0 || def[v] > t || last[v] < t) continue;
      int64_t bytes = NumElements(g.meta(v).shape) * DTypeSize(g.meta(v).dtype);
      sum += (bytes + 63) / 64 * 64;
    }
    bound = std::max(bound, sum);
  }
  return bound;
}

void CheckPlan(const ir::Graph& g, const MemoryPlan& plan, bool expect_tight) {
  for (const BufferAssignment& b : plan.buffers) {
    EXPECT_EQ(b.offset % 64, 0);
    EXPECT_LE(b.offset + b.size, plan.peak_bytes);
  }
  for (size_t i = 0; i < plan.buffers.size(); ++i)
    for (size_t j = i + 1; j < plan.buffers.size(); ++j) {
      const auto &a = plan.buffers[i], &b = plan.buffers[j];
      bool live_together = a.first <= b.last && b.first <= a.last;
      bool bytes_overlap = a.size > 0 && b.size > 0 && a.offset < b.offset + b.size && b.offset < a.offset + a.size;
      EXPECT_FALSE(live_together && bytes_overlap) << "values " << a.value << " and " << b.value;
    }
  int64_t bound = IndependentBound(g);
  EXPECT_EQ(plan.live_bytes_bound, bound);
  EXPECT_GE(plan.peak_bytes, bound);
  if (expect_tight) {
    EXPECT_LE(plan.peak_bytes, bound);
  }
}

std::string Planned(const ir::Graph& g, const MemoryPlan& plan) {
  ir::PrintOptions opt;
  opt.node_comment = [&](int node) { return plan.Describe(g, node); };
  return absl::StrCat("# peak_bytes=", plan.peak_bytes, "\n", ir::PrintGraph(g, opt));
}

TEST(MemoryPlanTest, ChainReusesBuffers) {
  // Text in, planned text (offsets as comments) out.
  auto g = ir::ParseGraph(R"IR(graph @g(%x: f32[16]) {
  %0 = test.exp(%x) : f32[16]
  %1 = test.relu(%0) : f32[16]
  %2 = test.exp(%1) : f32[16]
  %3 = test.relu(%2) : f32[4]
  return %3
}
)IR");
  // (f32[4] from a f32[16] input is wrong: fix below.)
  ASSERT_FALSE(g.ok());
  g = ir::ParseGraph(R"IR(graph @g(%x: f32[16]) {
  %0 = test.exp(%x) : f32[16]
  %1 = test.relu(%0) : f32[16]
  %2 = test.exp(%1) : f32[16]
  %3 = test.sum(%2) : f32[]
  return %3
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  MemoryPlanPass pass;
  auto changed = pass.Run(*g);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(Planned(*g, pass.plan()), R"IR(# peak_bytes=128
graph @g(%x: f32[16]) {
  %0 = test.exp(%x) : f32[16]  # offset=0 size=64
  %1 = test.relu(%0) : f32[16]  # offset=64 size=64
  %2 = test.exp(%1) : f32[16]  # offset=0 size=64
  %3 = test.sum(%2) : f32[]  # offset=64 size=64
  return %3
}
)IR");
  CheckPlan(*g, pass.plan(), true);
  // The planned dump is still valid IR.
  EXPECT_TRUE(ir::ParseGraph(Planned(*g, pass.plan())).ok());
}

TEST(MemoryPlanTest, DiamondAndMultiOutput) {
  auto g = ir::ParseGraph(R"IR(graph @g(%x: f32[64], %b: f32[8, 64]) {
  %0, %1 = test.dup(%x) : f32[64], f32[64]
  %2 = test.add(%b, %0) : f32[8, 64]
  %3 = test.exp(%2) : f32[8, 64]
  %4 = test.mul(%3, %1) : f32[8, 64]
  %5 = test.sum(%4) : f32[]
  %6 = test.sum(%2) : f32[]
  %7 = test.add(%5, %6) : f32[]
  return %7, %0
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto plan = PlanMemory(*g);
  ASSERT_TRUE(plan.ok());
  CheckPlan(*g, *plan, true);
}

TEST(MemoryPlanTest, TrainingStepGraphReachesTheBound) {
  // A forward + backward + AdamW step after fusion (compile_test's "fused" stage).
  auto g = ir::ParseGraph(
      R"IR(graph @net(%x: f32[7, 3], %w1: f32[3, 5] param, %b: f32[5] param, %w2: f32[6, 5] param, %lr: f32[], %step: f32[], %w1.m: f32[3, 5] state, %w1.v: f32[3, 5] state, %b.m: f32[5] state, %b.v: f32[5] state, %w2.m: f32[6, 5] state, %w2.v: f32[6, 5] state) {
  %0 = test.matmul(%x, %w1) : f32[7, 5]
  %1 = test.add(%0, %b) : f32[7, 5]
  %2 = test.relu(%1) : f32[7, 5]
  %3 = test.mul(%2, %2) : f32[7, 5]
  %4 = test.matmul(%3, %w2) {trans_b=true} : f32[7, 6]
  %5 = fused(%4) : f32[7, 6] graph @fused_0(%x0: f32[7, 6]) {
    %0 = test.scale(%x0) {s=0.10000000000000001} : f32[7, 6]
    %1 = test.exp(%0) : f32[7, 6]
    return %1
  }
  %6 = test.sum(%5) : f32[]
  %7 = test.fill() {dtype="f32", shape=[], value=1.0} : f32[]
  %8 = test.broadcast_to(%7) {shape=[7, 6]} : f32[7, 6]
  %9 = fused(%8, %5) : f32[7, 6] graph @fused_1(%x0: f32[7, 6], %x1: f32[7, 6]) {
    %0 = test.mul(%x0, %x1) : f32[7, 6]
    %1 = test.scale(%0) {s=0.10000000000000001} : f32[7, 6]
    return %1
  }
  %10 = test.matmul(%9, %w2) {trans_a=false, trans_b=false} : f32[7, 5]
  %11 = test.matmul(%9, %3) {trans_a=true, trans_b=false} : f32[6, 5]
  %12 = fused(%10, %2, %1) : f32[7, 5] graph @fused_2(%x0: f32[7, 5], %x1: f32[7, 5], %x2: f32[7, 5]) {
    %0 = test.mul(%x0, %x1) : f32[7, 5]
    %1 = test.add(%0, %0) : f32[7, 5]
    %2 = test.relu_grad(%1, %x2) : f32[7, 5]
    return %2
  }
  %13 = test.sum_to(%12) {shape=[5]} : f32[5]
  %14 = test.matmul(%x, %12) {trans_a=true, trans_b=false} : f32[3, 5]
  %15 = test.grad_norm(%14, %13, %11) : f32[]
  %16, %17, %18 = test.adamw(%w1, %14, %w1.m, %w1.v, %15, %lr, %step) {beta1=0.9, max_norm=1.0} : f32[3, 5], f32[3, 5], f32[3, 5]
  %19, %20, %21 = test.adamw(%b, %13, %b.m, %b.v, %15, %lr, %step) {beta1=0.9, max_norm=1.0} : f32[5], f32[5], f32[5]
  %22, %23, %24 = test.adamw(%w2, %11, %w2.m, %w2.v, %15, %lr, %step) {beta1=0.9, max_norm=1.0} : f32[6, 5], f32[6, 5], f32[6, 5]
  return %6, %16 -> %w1, %17 -> %w1.m, %18 -> %w1.v, %19 -> %b, %20 -> %b.m, %21 -> %b.v, %22 -> %w2, %23 -> %w2.m, %24 -> %w2.v
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto plan = PlanMemory(*g);
  ASSERT_TRUE(plan.ok());
  CheckPlan(*g, *plan, true);
}

// Random DAGs over a few shapes: never overlapping, never below the bound.
TEST(MemoryPlanTest, RandomGraphsNeverOverlap) {
  std::mt19937 rng(7);
  int tight = 0;
  const int kGraphs = 60;
  for (int trial = 0; trial < kGraphs; ++trial) {
    ir::Graph g("r");
    std::vector<int> vals = {g.AddInput("x", {DType::kF32, {int64_t(1 + rng() % 50)}})};
    int n = 5 + rng() % 30;
    for (int i = 0; i < n; ++i) {
      int a = vals[rng() % vals.size()];
      int op = rng() % 4;
      absl::StatusOr<int> r;
      if (op == 0) r = g.AddOp1("test.exp", {a});
      if (op == 1) {
        int64_t k = 1 + rng() % 8;
        std::vector<int64_t> s = {k};
        for (int64_t d : g.meta(a).shape) s.push_back(d);
        if (s.size() > 3) s = {k};
        r = g.AddOp1("test.broadcast_to", {a}, kernels::Attrs{{"shape", s}});
      }
      if (op == 2) r = g.AddOp1("test.sum", {a});
      if (op == 3) {
        int b = vals[rng() % vals.size()];
        r = g.AddOp1("test.add", {a, b});
      }
      if (r.ok()) vals.push_back(*r);
    }
    for (int k = 0; k < 2; ++k) g.AddOutput(vals[rng() % vals.size()]);
    auto plan = PlanMemory(g);
    ASSERT_TRUE(plan.ok()) << plan.status();
    CheckPlan(g, *plan, false);
    if (plan->peak_bytes == plan->live_bytes_bound) ++tight;
    else std::printf("  miss: peak %lld bound %lld (%d nodes)\n", (long long)plan->peak_bytes, (long long)plan->live_bytes_bound, (int)g.nodes().size());
  }
  // Report how often greedy reaches the bound (not a pass criterion).
  std::printf("greedy plan reached the liveness bound in %d of %d random graphs\n", tight, kGraphs);
}

// The plain placement: for each buffer, every placed buffer it overlaps in
// time, sorted by address, then the best-fitting gap.
int64_t ReferencePlace(std::vector<BufferAssignment>& bufs, const std::vector<int>& order) {
  std::vector<int> placed;
  int64_t peak = 0;
  for (int i : order) {
    BufferAssignment& b = bufs[i];
    if (b.size == 0) {
      b.offset = 0;
      continue;
    }
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (int j : placed)
      if (b.first <= bufs[j].last && bufs[j].first <= b.last) busy.push_back({bufs[j].offset, bufs[j].offset + bufs[j].size});
    std::sort(busy.begin(), busy.end());
    int64_t best = -1, best_gap = 0, prev_end = 0;
    for (const auto& [off, end] : busy) {
      if (off - prev_end >= b.size && (best < 0 || off - prev_end < best_gap)) best = prev_end, best_gap = off - prev_end;
      prev_end = std::max(prev_end, end);
    }
    b.offset = best >= 0 ? best : prev_end;
    peak = std::max(peak, b.offset + b.size);
    placed.push_back(i);
  }
  return peak;
}

// PlaceBuffers (address-sorted placed list) gives the reference's offsets,
// buffer by buffer, on random lifetimes and sizes (many equal ones, so ties
// in (offset, end) occur) in random orders.
TEST(MemoryPlanTest, PlacementMatchesThePlainReference) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int nb = 1 + static_cast<int>(rng() % 120), steps = 1 + static_cast<int>(rng() % 60);
    std::vector<BufferAssignment> bufs(nb);
    for (BufferAssignment& b : bufs) {
      b.first = static_cast<int>(rng() % steps);
      b.last = b.first + static_cast<int>(rng() % (steps - b.first));
      b.size = 64 * static_cast<int64_t>(rng() % 6);  // 0 .. 320: zeros and repeats
    }
    std::vector<int> order(nb);
    for (int i = 0; i < nb; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<BufferAssignment> fast = bufs, ref = bufs;
    const int64_t fast_peak = internal::PlaceBuffers(fast, order);
    const int64_t ref_peak = ReferencePlace(ref, order);
    ASSERT_EQ(fast_peak, ref_peak) << "trial " << trial;
    for (int i = 0; i < nb; ++i) ASSERT_EQ(fast[i].offset, ref[i].offset) << "trial " << trial << " buffer " << i;
  }
}

}  // namespace
}  // namespace loom::compiler::passes
