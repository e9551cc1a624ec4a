// Sharding propagation in IR text: each case gives the global graph, the
// input annotations and the expected local graph, whose @"..." annotations
// are each value's placements and whose all_reduce / all_gather /
// reduce_scatter / shard_slice nodes are the inserted redistributions.
#include "compiler/spmd/spmd.h"

#include <iostream>

#include "absl/strings/match.h"
#include "compiler/autodiff.h"
#include "compiler/ir/text.h"
#include "compiler/optimizer.h"
#include "compiler/spmd/bucketing.h"
#include "compiler/spmd/rules.h"
#include "gtest/gtest.h"
#include "kernels/registry.h"

namespace loom::compiler::spmd {
namespace {

using ir::Graph;
using ir::ParseGraph;
using ir::PrintGraph;

dtensor::MeshShape Mesh(std::vector<std::string> names, std::vector<int64_t> sizes) {
  return {std::move(names), std::move(sizes)};
}

absl::StatusOr<Graph> ParallelizeText(const Graph& g, const dtensor::MeshShape& mesh,
                                      const std::map<std::string, std::string>& specs, bool reduce_scatter) {
  SpmdOptions o;
  o.mesh = mesh;
  o.reduce_scatter_grads = reduce_scatter;
  for (const auto& [name, s] : specs) {
    auto spec = dtensor::ParseSpec(s, mesh);
    if (!spec.ok()) return spec.status();
    o.inputs[name] = *spec;
  }
  return Parallelize(g, o);
}

// The local graph's text, or "error: <message>".
std::string Par(const std::string& text, const dtensor::MeshShape& mesh,
                const std::map<std::string, std::string>& specs, bool reduce_scatter = true) {
  auto g = ParseGraph(text);
  if (!g.ok()) return "parse error: " + std::string(g.status().message());
  auto l = ParallelizeText(*g, mesh, specs, reduce_scatter);
  if (!l.ok()) return "error: " + std::string(l.status().message());
  return PrintGraph(*l);
}

// ---- Forward rules --------------------------------------------------------------

TEST(Spmd, DataParallelMeanIsPartialAvgThenAllReduce) {
  EXPECT_EQ(Par(R"(graph @dp(%x: f32[8, 4], %w: f32[4, 2] param) {
  %0 = matmul(%x, %w) : f32[8, 2]
  %1 = mean(%0) : f32[]
  return %1
})", Mesh({"dp"}, {2}), {{"x", "S(0)"}}),
            R"(graph @dp(%x: f32[4, 4] @"[dp=S(0)]", %w: f32[4, 2] @"[dp=R]" param) {
  %0 = matmul(%x, %w) : f32[4, 2] @"[dp=S(0)]"
  %1 = mean(%0) : f32[] @"[dp=P(avg)]"
  %2 = all_reduce(%1) {group="dp", reduce="avg", world=2} : f32[] @"[dp=R]"
  return %2
}
)");
}

TEST(Spmd, MegatronMlpColwiseThenRowwise) {
  EXPECT_EQ(Par(R"(graph @mlp(%x: f32[8, 4], %w1: f32[4, 6] param, %b1: f32[6] param, %w2: f32[6, 4] param) {
  %0 = matmul(%x, %w1) : f32[8, 6]
  %1 = add(%0, %b1) : f32[8, 6]
  %2 = gelu(%1) : f32[8, 6]
  %3 = matmul(%2, %w2) : f32[8, 4]
  %4 = sum(%3) {axes=[1]} : f32[8]
  return %4
})", Mesh({"tp"}, {2}), {{"w1", "S(1)"}, {"b1", "S(0)"}, {"w2", "S(0)"}}),
            R"(graph @mlp(%x: f32[8, 4] @"[tp=R]", %w1: f32[4, 3] @"[tp=S(1)]" param, %b1: f32[3] @"[tp=S(0)]" param, %w2: f32[3, 4] @"[tp=S(0)]" param) {
  %0 = matmul(%x, %w1) : f32[8, 3] @"[tp=S(1)]"
  %1 = add(%0, %b1) : f32[8, 3] @"[tp=S(1)]"
  %2 = gelu(%1) : f32[8, 3] @"[tp=S(1)]"
  %3 = matmul(%2, %w2) : f32[8, 4] @"[tp=P(sum)]"
  %4 = sum(%3) {axes=[1]} : f32[8] @"[tp=P(sum)]"
  %5 = all_reduce(%4) {group="tp", reduce="sum", world=2} : f32[8] @"[tp=R]"
  return %5
}
)");
}

TEST(Spmd, HeadsReshapePermuteKeepTheShard) {
  EXPECT_EQ(Par(R"(graph @heads(%x: f32[2, 4, 8], %g: f32[8], %b: f32[8]) {
  %0 = reshape(%x) {shape=[2, 4, 2, 4]} : f32[2, 4, 2, 4]
  %1 = permute(%0) {dims=[0, 2, 1, 3]} : f32[2, 2, 4, 4]
  %2 = softmax(%1) : f32[2, 2, 4, 4]
  %3 = permute(%2) {dims=[0, 2, 1, 3]} : f32[2, 4, 2, 4]
  %4 = reshape(%3) {shape=[2, 4, 8]} : f32[2, 4, 8]
  %5, %6, %7 = layernorm(%4, %g, %b) : f32[2, 4, 8], f32[2, 4], f32[2, 4]
  return %5
})", Mesh({"tp"}, {2}), {{"x", "S(2)"}}),
            R"(graph @heads(%x: f32[2, 4, 4] @"[tp=S(2)]", %g: f32[8] @"[tp=R]", %b: f32[8] @"[tp=R]") {
  %0 = reshape(%x) {shape=[2, 4, 1, 4]} : f32[2, 4, 1, 4] @"[tp=S(2)]"
  %1 = permute(%0) {dims=[0, 2, 1, 3]} : f32[2, 1, 4, 4] @"[tp=S(1)]"
  %2 = softmax(%1) : f32[2, 1, 4, 4] @"[tp=S(1)]"
  %3 = permute(%2) {dims=[0, 2, 1, 3]} : f32[2, 4, 1, 4] @"[tp=S(2)]"
  %4 = reshape(%3) {shape=[2, 4, 4]} : f32[2, 4, 4] @"[tp=S(2)]"
  %5 = all_gather(%4) {axis=2, group="tp", world=2} : f32[2, 4, 8] @"[tp=R]"
  %6, %7, %8 = layernorm(%5, %g, %b) : f32[2, 4, 8] @"[tp=R]", f32[2, 4] @"[tp=R]", f32[2, 4] @"[tp=R]"
  return %6
}
)");
}

TEST(Spmd, TwoDimMesh) {
  EXPECT_EQ(Par(R"(graph @mm(%x: f32[8, 4], %w: f32[4, 6] param) {
  %0 = matmul(%x, %w) : f32[8, 6]
  %1 = relu(%0) : f32[8, 6]
  return %1
})", Mesh({"dp", "tp"}, {2, 2}), {{"x", "S(0),R"}, {"w", "R,S(1)"}}),
            R"(graph @mm(%x: f32[4, 4] @"[dp=S(0), tp=R]", %w: f32[4, 3] @"[dp=R, tp=S(1)]" param) {
  %0 = matmul(%x, %w) : f32[4, 3] @"[dp=S(0), tp=S(1)]"
  %1 = relu(%0) : f32[4, 3] @"[dp=S(0), tp=S(1)]"
  %2 = all_gather(%1) {axis=0, group="dp", world=2} : f32[8, 3] @"[dp=R, tp=S(1)]"
  %3 = all_gather(%2) {axis=1, group="tp", world=2} : f32[8, 6] @"[dp=R, tp=R]"
  return %3
}
)");
}

TEST(Spmd, ZeroThreeParamIsGatheredBeforeUse) {
  EXPECT_EQ(Par(R"(graph @z3(%x: f32[8, 4], %w: f32[4, 6] param) {
  %0 = matmul(%x, %w) : f32[8, 6]
  return %0
})", Mesh({"dp"}, {2}), {{"x", "S(0)"}, {"w", "S(0)"}}),
            R"(graph @z3(%x: f32[4, 4] @"[dp=S(0)]", %w: f32[2, 6] @"[dp=S(0)]" param) {
  %0 = all_gather(%w) {axis=0, group="dp", world=2} : f32[4, 6] @"[dp=R]"
  %1 = matmul(%x, %0) : f32[4, 6] @"[dp=S(0)]"
  %2 = all_gather(%1) {axis=0, group="dp", world=2} : f32[8, 6] @"[dp=R]"
  return %2
}
)");
}

// An exporter writes Add(bias, x): the bias's ZeRO-3 shard over dp comes
// first in operand order, but the full-shaped activation's batch shard is the
// one that follows through (the bias is gathered), never the other way round.
TEST(Spmd, ABroadcastOperandDoesNotMoveTheActivationsShard) {
  EXPECT_EQ(Par(R"(graph @bias(%x: f32[8, 4], %b: f32[4] param) {
  %0 = add(%b, %x) : f32[8, 4]
  return %0
})", Mesh({"dp"}, {2}), {{"x", "S(0)"}, {"b", "S(0)"}}),
            R"(graph @bias(%x: f32[4, 4] @"[dp=S(0)]", %b: f32[2] @"[dp=S(0)]" param) {
  %0 = all_gather(%b) {axis=0, group="dp", world=2} : f32[4] @"[dp=R]"
  %1 = add(%0, %x) : f32[4, 4] @"[dp=S(0)]"
  %2 = all_gather(%1) {axis=0, group="dp", world=2} : f32[8, 4] @"[dp=R]"
  return %2
}
)");
}

// Propagation records every placement change it makes, by global value and
// the node that needed it (what parallel/tp_plan.h's honoured check reads).
TEST(Spmd, RedistributionsAreRecordedWithTheNodeThatNeedsThem) {
  auto g = ParseGraph(R"(graph @r(%x: f32[8, 4], %w: f32[4, 6] param, %n: f32[6] param) {
  %0 = matmul(%x, %w) : f32[8, 6]
  %1, %2, %3 = layernorm(%0, %n, %n) {eps=1e-05} : f32[8, 6], f32[8], f32[8]
  return %1
})");
  ASSERT_TRUE(g.ok()) << g.status();
  SpmdOptions o;
  o.mesh = Mesh({"tp"}, {2});
  o.inputs["w"] = *dtensor::ParseSpec("S(1)", o.mesh);
  SpmdStats stats;
  ASSERT_TRUE(Parallelize(*g, o, &stats).ok());
  // The layernorm (node 1) needs the matmul's output (value 3) whole.
  ASSERT_EQ(stats.redistributions.size(), 1u);
  const Redistribution& r = stats.redistributions[0];
  EXPECT_EQ(r.node, 1);
  EXPECT_EQ(r.value, g->nodes()[0].outputs[0]);
  EXPECT_EQ(r.mesh_dim, 0);
  EXPECT_EQ(r.from, dtensor::Placement::Shard(1));
  EXPECT_EQ(r.to, dtensor::Placement::Replicate());
}

// ---- The redistribution table -------------------------------------------------------

TEST(Spmd, RedistributionsToOutputPlacements) {
  // The outputs update inputs, so they must reach those inputs' placements.
  const std::string g = R"(graph @r(%a: f32[4, 6] param, %b: f32[4, 6] param, %c: f32[4, 4] param, %p: f32[4, 6] param, %x: f32[4, 6]) {
  %0 = matmul(%x, %p) {trans_b=true} : f32[4, 4]
  %1 = add(%0, %0) : f32[4, 4]
  %2 = slice(%a) {axis=0, start=0, length=4} : f32[4, 6]
  %3 = neg(%b) : f32[4, 6]
  return %2 -> %b, %3 -> %a, %1 -> %c
})";
  // a: S(0) -> (slice keeps it) -> to b's S(1): all_gather + shard_slice;
  // b: S(1) -> neg -> to a's S(0): the same; matmul over K shards -> P(sum) ->
  // c's S(0): reduce_scatter (or all_reduce + shard_slice).
  const std::map<std::string, std::string> specs = {{"a", "S(0)"}, {"b", "S(1)"}, {"c", "S(0)"}, {"x", "S(1)"}, {"p", "S(1)"}};
  EXPECT_EQ(Par(g, Mesh({"tp"}, {2}), specs), R"(graph @r(%a: f32[2, 6] @"[tp=S(0)]" param, %b: f32[4, 3] @"[tp=S(1)]" param, %c: f32[2, 4] @"[tp=S(0)]" param, %p: f32[4, 3] @"[tp=S(1)]" param, %x: f32[4, 3] @"[tp=S(1)]") {
  %0 = matmul(%x, %p) {trans_b=true} : f32[4, 4] @"[tp=P(sum)]"
  %1 = add(%0, %0) : f32[4, 4] @"[tp=P(sum)]"
  %2 = all_gather(%a) {axis=0, group="tp", world=2} : f32[4, 6] @"[tp=R]"
  %3 = slice(%2) {axis=0, length=4, start=0} : f32[4, 6] @"[tp=R]"
  %4 = neg(%b) : f32[4, 3] @"[tp=S(1)]"
  %5 = shard_slice(%3) {axis=1, group="tp", world=2} : f32[4, 3] @"[tp=S(1)]"
  %6 = all_gather(%4) {axis=1, group="tp", world=2} : f32[4, 6] @"[tp=R]"
  %7 = shard_slice(%6) {axis=0, group="tp", world=2} : f32[2, 6] @"[tp=S(0)]"
  %8 = reduce_scatter(%1) {axis=0, group="tp", reduce="sum", world=2} : f32[2, 4] @"[tp=S(0)]"
  return %5 -> %b, %7 -> %a, %8 -> %c
}
)");
  EXPECT_EQ(Par(g, Mesh({"tp"}, {2}), specs, /*reduce_scatter=*/false), R"(graph @r(%a: f32[2, 6] @"[tp=S(0)]" param, %b: f32[4, 3] @"[tp=S(1)]" param, %c: f32[2, 4] @"[tp=S(0)]" param, %p: f32[4, 3] @"[tp=S(1)]" param, %x: f32[4, 3] @"[tp=S(1)]") {
  %0 = matmul(%x, %p) {trans_b=true} : f32[4, 4] @"[tp=P(sum)]"
  %1 = add(%0, %0) : f32[4, 4] @"[tp=P(sum)]"
  %2 = all_gather(%a) {axis=0, group="tp", world=2} : f32[4, 6] @"[tp=R]"
  %3 = slice(%2) {axis=0, length=4, start=0} : f32[4, 6] @"[tp=R]"
  %4 = neg(%b) : f32[4, 3] @"[tp=S(1)]"
  %5 = shard_slice(%3) {axis=1, group="tp", world=2} : f32[4, 3] @"[tp=S(1)]"
  %6 = all_gather(%4) {axis=1, group="tp", world=2} : f32[4, 6] @"[tp=R]"
  %7 = shard_slice(%6) {axis=0, group="tp", world=2} : f32[2, 6] @"[tp=S(0)]"
  %8 = all_reduce(%1) {group="tp", reduce="sum", world=2} : f32[4, 4] @"[tp=R]"
  %9 = shard_slice(%8) {axis=0, group="tp", world=2} : f32[2, 4] @"[tp=S(0)]"
  return %5 -> %b, %7 -> %a, %9 -> %c
}
)");
}

// ---- Backward and optimizer ------------------------------------------------------------

TEST(Spmd, JointGraphDataParallelAllReducesGradients) {
  auto fwd = ParseGraph(R"(graph @lin(%w: f32[4, 3] param, %b: f32[3] param, %x: f32[8, 4], %y: i32[8]) {
  %0 = matmul(%x, %w) : f32[8, 3]
  %1 = add(%0, %b) : f32[8, 3]
  %2, %3 = cross_entropy(%1, %y) : f32[], f32[8]
  return %2
})");
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  auto j = compiler::BuildJointGraph(*fwd);
  ASSERT_TRUE(j.ok()) << j.status();
  compiler::AdamWOptions adam;
  adam.max_norm = 1.0;
  ASSERT_TRUE(compiler::AppendAdamW(*j, adam).ok());
  auto l = ParallelizeText(j->graph, Mesh({"dp"}, {2}), {{"x", "S(0)"}, {"y", "S(0)"}}, true);
  ASSERT_TRUE(l.ok()) << l.status();
  // The loss's rows are split: the count of non-ignored targets (%2..%6) is
  // all_reduced once (%7); its local share (%10) weights the P(avg) loss
  // (%13, %14) and the backward's dloss (%16).
  EXPECT_EQ(PrintGraph(*l), R"(graph @lin(%w: f32[4, 3] @"[dp=R]" param, %b: f32[3] @"[dp=R]" param, %x: f32[4, 4] @"[dp=S(0)]", %y: i32[4] @"[dp=S(0)]", %lr: f32[] @"[dp=R]", %step: f32[] @"[dp=R]", %w.m: f32[4, 3] @"[dp=R]" state, %w.v: f32[4, 3] @"[dp=R]" state, %b.m: f32[3] @"[dp=R]" state, %b.v: f32[3] @"[dp=R]" state) {
  %0 = matmul(%x, %w) : f32[4, 3] @"[dp=S(0)]"
  %1 = add(%0, %b) : f32[4, 3] @"[dp=S(0)]"
  %2 = fill() {dtype="i32", shape=[], value=-100.0} : i32[]
  %3 = equal(%y, %2) : bool[4]
  %4 = logical_not(%3) : bool[4]
  %5 = cast(%4) {dtype="f32"} : f32[4]
  %6 = sum(%5) : f32[] @"[dp=P(sum)]"
  %7 = all_reduce(%6) {group="dp", reduce="sum", world=2} : f32[] @"[dp=R]"
  %8 = fill() {dtype="f32", shape=[], value=1.0} : f32[]
  %9 = maximum(%7, %8) : f32[]
  %10 = div(%6, %9) : f32[]
  %11, %12 = cross_entropy(%1, %y) : f32[], f32[4] @"[dp=S(0)]"
  %13 = mul(%11, %10) : f32[]
  %14 = scale(%13) {s=2.0} : f32[] @"[dp=P(avg)]"
  %15 = fill() {dtype="f32", shape=[], value=1.0} : f32[] @"[dp=R]"
  %16 = mul(%15, %10) : f32[] @"[dp=R]"
  %17 = cross_entropy_backward(%16, %1, %y, %12) : f32[4, 3] @"[dp=S(0)]"
  %18 = sum_to(%17) {shape=[3]} : f32[3] @"[dp=P(sum)]"
  %19 = matmul(%17, %w) {trans_a=false, trans_b=true} : f32[4, 4] @"[dp=S(0)]"
  %20 = matmul(%x, %17) {trans_a=true, trans_b=false} : f32[4, 3] @"[dp=P(sum)]"
  %21 = all_reduce(%20) {group="dp", reduce="sum", world=2} : f32[4, 3] @"[dp=R]"
  %22 = all_reduce(%18) {group="dp", reduce="sum", world=2} : f32[3] @"[dp=R]"
  %23 = grad_norm(%21, %22) : f32[] @"[dp=R]"
  %24, %25, %26 = adamw(%w, %21, %w.m, %w.v, %23, %lr, %step) {beta1=0.90000000000000002, beta2=0.999, eps=1e-08, max_norm=1.0, weight_decay=0.0} : f32[4, 3] @"[dp=R]", f32[4, 3] @"[dp=R]", f32[4, 3] @"[dp=R]"
  %27, %28, %29 = adamw(%b, %22, %b.m, %b.v, %23, %lr, %step) {beta1=0.90000000000000002, beta2=0.999, eps=1e-08, max_norm=1.0, weight_decay=0.0} : f32[3] @"[dp=R]", f32[3] @"[dp=R]", f32[3] @"[dp=R]"
  %30 = all_reduce(%14) {group="dp", reduce="avg", world=2} : f32[] @"[dp=R]"
  return %30, %24 -> %w, %25 -> %w.m, %26 -> %w.v, %27 -> %b, %28 -> %b.m, %29 -> %b.v
}
)");
  // ZeRO-2 over the same graph: state S(0) on dp; grads reduce_scatter; the
  // update's param all_gathered back to R; grad_norm over shards all_reduced.
  auto z = ParallelizeText(j->graph, Mesh({"dp"}, {2}),
                           {{"x", "S(0)"}, {"y", "S(0)"}, {"w.m", "S(0)"}, {"w.v", "S(0)"}}, true);
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(PrintGraph(*z), R"(graph @lin(%w: f32[4, 3] @"[dp=R]" param, %b: f32[3] @"[dp=R]" param, %x: f32[4, 4] @"[dp=S(0)]", %y: i32[4] @"[dp=S(0)]", %lr: f32[] @"[dp=R]", %step: f32[] @"[dp=R]", %w.m: f32[2, 3] @"[dp=S(0)]" state, %w.v: f32[2, 3] @"[dp=S(0)]" state, %b.m: f32[3] @"[dp=R]" state, %b.v: f32[3] @"[dp=R]" state) {
  %0 = matmul(%x, %w) : f32[4, 3] @"[dp=S(0)]"
  %1 = add(%0, %b) : f32[4, 3] @"[dp=S(0)]"
  %2 = fill() {dtype="i32", shape=[], value=-100.0} : i32[]
  %3 = equal(%y, %2) : bool[4]
  %4 = logical_not(%3) : bool[4]
  %5 = cast(%4) {dtype="f32"} : f32[4]
  %6 = sum(%5) : f32[] @"[dp=P(sum)]"
  %7 = all_reduce(%6) {group="dp", reduce="sum", world=2} : f32[] @"[dp=R]"
  %8 = fill() {dtype="f32", shape=[], value=1.0} : f32[]
  %9 = maximum(%7, %8) : f32[]
  %10 = div(%6, %9) : f32[]
  %11, %12 = cross_entropy(%1, %y) : f32[], f32[4] @"[dp=S(0)]"
  %13 = mul(%11, %10) : f32[]
  %14 = scale(%13) {s=2.0} : f32[] @"[dp=P(avg)]"
  %15 = fill() {dtype="f32", shape=[], value=1.0} : f32[] @"[dp=R]"
  %16 = mul(%15, %10) : f32[] @"[dp=R]"
  %17 = cross_entropy_backward(%16, %1, %y, %12) : f32[4, 3] @"[dp=S(0)]"
  %18 = sum_to(%17) {shape=[3]} : f32[3] @"[dp=P(sum)]"
  %19 = matmul(%17, %w) {trans_a=false, trans_b=true} : f32[4, 4] @"[dp=S(0)]"
  %20 = matmul(%x, %17) {trans_a=true, trans_b=false} : f32[4, 3] @"[dp=P(sum)]"
  %21 = reduce_scatter(%20) {axis=0, group="dp", reduce="sum", world=2} : f32[2, 3] @"[dp=S(0)]"
  %22 = all_reduce(%18) {group="dp", reduce="sum", world=2} : f32[3] @"[dp=R]"
  %23 = grad_norm(%22) : f32[] @"[dp=R]"
  %24 = mul(%23, %23) : f32[] @"[dp=R]"
  %25 = grad_norm(%21) : f32[]
  %26 = mul(%25, %25) : f32[] @"[dp=P(sum)]"
  %27 = all_reduce(%26) {group="dp", reduce="sum", world=2} : f32[] @"[dp=R]"
  %28 = add(%24, %27) : f32[] @"[dp=R]"
  %29 = sqrt(%28) : f32[] @"[dp=R]"
  %30 = shard_slice(%w) {axis=0, group="dp", world=2} : f32[2, 3] @"[dp=S(0)]"
  %31, %32, %33 = adamw(%30, %21, %w.m, %w.v, %29, %lr, %step) {beta1=0.90000000000000002, beta2=0.999, eps=1e-08, max_norm=1.0, weight_decay=0.0} : f32[2, 3] @"[dp=S(0)]", f32[2, 3] @"[dp=S(0)]", f32[2, 3] @"[dp=S(0)]"
  %34, %35, %36 = adamw(%b, %22, %b.m, %b.v, %29, %lr, %step) {beta1=0.90000000000000002, beta2=0.999, eps=1e-08, max_norm=1.0, weight_decay=0.0} : f32[3] @"[dp=R]", f32[3] @"[dp=R]", f32[3] @"[dp=R]"
  %37 = all_reduce(%14) {group="dp", reduce="avg", world=2} : f32[] @"[dp=R]"
  %38 = all_gather(%31) {axis=0, group="dp", world=2} : f32[4, 3] @"[dp=R]"
  return %37, %38 -> %w, %32 -> %w.m, %33 -> %w.v, %34 -> %b, %35 -> %b.m, %36 -> %b.v
}
)");
}

TEST(Spmd, VocabParallelCrossEntropyNeverGathersLogits) {
  // Logits vocab-sharded on tp: max / sum-exp / target-pick all_reduces; the
  // backward stays vocab-sharded.
  EXPECT_EQ(Par(R"(graph @ce(%l: f32[4, 8], %t: i32[4]) {
  %0, %1 = cross_entropy(%l, %t) : f32[], f32[4]
  %2 = fill() {dtype="f32", shape=[], value=1.0} : f32[]
  %3 = cross_entropy_backward(%2, %l, %t, %1) : f32[4, 8]
  return %0, %3
})", Mesh({"tp"}, {2}), {{"l", "S(1)"}}),
            R"(graph @ce(%l: f32[4, 4] @"[tp=S(1)]", %t: i32[4] @"[tp=R]") {
  %0, %1 = vocab_onehot(%t) {group="tp", ignore_index=-100, num_classes=4, world=2} : f32[4, 4] @"[tp=S(1)]", f32[4] @"[tp=R]"
  %2 = sum(%1) : f32[]
  %3 = fill() {dtype="f32", shape=[], value=1.0} : f32[]
  %4 = maximum(%2, %3) : f32[]
  %5 = max(%l) {axes=[1], keepdim=true} : f32[4, 1]
  %6 = all_reduce(%5) {group="tp", reduce="max", world=2} : f32[4, 1] @"[tp=R]"
  %7 = sub(%l, %6) : f32[4, 4] @"[tp=S(1)]"
  %8 = exp(%7) : f32[4, 4] @"[tp=S(1)]"
  %9 = sum(%8) {axes=[1]} : f32[4]
  %10 = all_reduce(%9) {group="tp", reduce="sum", world=2} : f32[4] @"[tp=R]"
  %11 = log(%10) : f32[4] @"[tp=R]"
  %12 = reshape(%6) {shape=[4]} : f32[4] @"[tp=R]"
  %13 = add(%11, %12) : f32[4] @"[tp=R]"
  %14 = mul(%l, %0) : f32[4, 4] @"[tp=S(1)]"
  %15 = sum(%14) {axes=[1]} : f32[4]
  %16 = all_reduce(%15) {group="tp", reduce="sum", world=2} : f32[4] @"[tp=R]"
  %17 = sub(%13, %16) : f32[4] @"[tp=R]"
  %18 = mul(%17, %1) : f32[4] @"[tp=R]"
  %19 = sum(%18) : f32[]
  %20 = div(%19, %4) : f32[] @"[tp=R]"
  %21 = fill() {dtype="f32", shape=[], value=1.0} : f32[] @"[tp=R]"
  %22, %23 = vocab_onehot(%t) {group="tp", ignore_index=-100, num_classes=4, world=2} : f32[4, 4] @"[tp=S(1)]", f32[4] @"[tp=R]"
  %24 = sum(%23) : f32[]
  %25 = fill() {dtype="f32", shape=[], value=1.0} : f32[]
  %26 = maximum(%24, %25) : f32[]
  %27 = reshape(%13) {shape=[4, 1]} : f32[4, 1] @"[tp=R]"
  %28 = sub(%l, %27) : f32[4, 4] @"[tp=S(1)]"
  %29 = exp(%28) : f32[4, 4] @"[tp=S(1)]"
  %30 = sub(%29, %22) : f32[4, 4] @"[tp=S(1)]"
  %31 = reshape(%23) {shape=[4, 1]} : f32[4, 1] @"[tp=R]"
  %32 = mul(%30, %31) : f32[4, 4] @"[tp=S(1)]"
  %33 = div(%21, %26) : f32[]
  %34 = mul(%32, %33) : f32[4, 4] @"[tp=S(1)]"
  %35 = all_gather(%34) {axis=1, group="tp", world=2} : f32[4, 8] @"[tp=R]"
  return %20, %35
}
)");
}

TEST(Spmd, VocabParallelEmbeddingIsPartialSum) {
  EXPECT_EQ(Par(R"(graph @emb(%w: f32[8, 4] param, %ids: i32[2, 3]) {
  %0 = embedding(%w, %ids) : f32[2, 3, 4]
  %1 = relu(%0) : f32[2, 3, 4]
  return %1
})", Mesh({"tp"}, {2}), {{"w", "S(0)"}}),
            R"(graph @emb(%w: f32[4, 4] @"[tp=S(0)]" param, %ids: i32[2, 3] @"[tp=R]") {
  %0 = reshape(%ids) {shape=[6]} : i32[6]
  %1, %2 = vocab_onehot(%0) {group="tp", ignore_index=-1, num_classes=4, world=2} : f32[6, 4], f32[6]
  %3 = matmul(%1, %w) : f32[6, 4]
  %4 = reshape(%3) {shape=[2, 3, 4]} : f32[2, 3, 4] @"[tp=P(sum)]"
  %5 = all_reduce(%4) {group="tp", reduce="sum", world=2} : f32[2, 3, 4] @"[tp=R]"
  %6 = relu(%5) : f32[2, 3, 4] @"[tp=R]"
  return %6
}
)");
}

TEST(Spmd, GradientAllReducesAreBucketed) {
  auto g = ParseGraph(R"(graph @b(%a: f32[2, 3], %b: f32[4], %c: f32[5]) {
  %0 = all_reduce(%a) {group="dp", reduce="sum", world=2} : f32[2, 3]
  %1 = neg(%b) : f32[4]
  %2 = all_reduce(%1) {group="dp", reduce="sum", world=2} : f32[4]
  %3 = all_reduce(%c) {group="dp", reduce="sum", world=2} : f32[5]
  %4 = add(%2, %2) : f32[4]
  return %0, %3, %4
})");
  ASSERT_TRUE(g.ok()) << g.status();
  BucketOptions o;
  o.bucket_bytes = 40;  // 6 + 4 floats fill the first bucket; %3 is alone
  auto s = BucketAllReduces(*g, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->all_reduces_before, 3);
  EXPECT_EQ(s->all_reduces_after, 2);
  EXPECT_EQ(PrintGraph(*g), R"(graph @b(%a: f32[2, 3], %b: f32[4], %c: f32[5]) {
  %0 = neg(%b) : f32[4]
  %1 = reshape(%a) {shape=[6]} : f32[6]
  %2 = reshape(%0) {shape=[4]} : f32[4]
  %3 = concat(%1, %2) {axis=0} : f32[10]
  %4 = all_reduce(%3) {group="dp", reduce="sum", world=2} : f32[10]
  %5 = slice(%4) {axis=0, length=6, start=0} : f32[6]
  %6 = reshape(%5) {shape=[2, 3]} : f32[2, 3]
  %7 = slice(%4) {axis=0, length=4, start=6} : f32[4]
  %8 = reshape(%7) {shape=[4]} : f32[4]
  %9 = add(%8, %8) : f32[4]
  %10 = all_reduce(%c) {group="dp", reduce="sum", world=2} : f32[5]
  return %6, %10, %9
}
)");
}

// ---- Refusals ----------------------------------------------------------------------------

TEST(Spmd, OpWithoutRuleIsRefusedNamingIt) {
  // A registry op with no sharding rule (registered here for the test).
  static bool registered = [] {
    kernels::OpDef d;
    d.name = "spmd_test.norule";
    d.infer = [](absl::Span<const kernels::TensorMeta> in,
                 const kernels::Attrs&) -> absl::StatusOr<std::vector<kernels::TensorMeta>> {
      return std::vector<kernels::TensorMeta>{in[0]};
    };
    d.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const kernels::Attrs&) {
      return out[0].CopyFrom(in[0]);
    };
    d.no_grad_reason = "test op";
    return kernels::OpRegistry::Global().Register(std::move(d)).ok();
  }();
  ASSERT_TRUE(registered);
  const std::string out = Par(R"(graph @n(%x: f32[4]) {
  %0 = neg(%x) : f32[4]
  %1 = spmd_test.norule(%0) : f32[4]
  return %1
})", Mesh({"dp"}, {2}), {});
  EXPECT_TRUE(absl::StrContains(out, "op 'spmd_test.norule' (node 1) has no sharding rule")) << out;
}

TEST(Spmd, EveryRegistryOpHasARule) {
  for (const std::string& op : kernels::OpRegistry::Global().Names()) {
    if (absl::StartsWith(op, "spmd_test.")) continue;
    EXPECT_NE(FindShardingRule(op), nullptr) << "op '" << op << "' has no sharding rule (compiler/spmd/rules.cc)";
  }
  EXPECT_GE(kernels::OpRegistry::Global().Names().size(), 58u);
}

TEST(Spmd, UnevenOrDoubleShardsAreRefused) {
  const std::string g = R"(graph @u(%x: f32[5, 4]) {
  %0 = neg(%x) : f32[5, 4]
  return %0
})";
  EXPECT_TRUE(absl::StrContains(Par(g, Mesh({"dp"}, {2}), {{"x", "S(0)"}}), "does not split evenly")) << Par(g, Mesh({"dp"}, {2}), {{"x", "S(0)"}});
  EXPECT_TRUE(absl::StrContains(Par(g, Mesh({"dp", "tp"}, {2, 2}), {{"x", "S(1),S(1)"}}), "sharded by two mesh dims"))
      << Par(g, Mesh({"dp", "tp"}, {2, 2}), {{"x", "S(1),S(1)"}});
}

}  // namespace
}  // namespace loom::compiler::spmd
