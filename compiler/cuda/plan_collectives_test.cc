// The launches of a parallel program's ops on one rank (plan_collectives.h).
// The copies around a collective on a non-leading axis are checked by
// running their geometry on host data for every rank, with the collective
// itself done by hand on the leading axis, against the op's definition.
#include "compiler/cuda/plan_collectives.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/cuda/plan_test_util.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

// dst[dst_offset + idx . dst_strides] = src[src_offset + idx . src_strides]
// for every index of geom.shape (the kCopy launch's definition, plan.h).
void ApplyCopy(const CopyGeom& geom, const std::vector<float>& src, std::vector<float>& dst) {
  const int nd = static_cast<int>(geom.shape.size());
  std::vector<int64_t> dst_strides = geom.dst_strides;
  if (dst_strides.empty()) {
    Strides c = ContiguousStrides(geom.shape);
    dst_strides.assign(c.begin(), c.end());
  }
  std::vector<int64_t> idx(nd, 0);
  for (int64_t e = 0; e < NumElements(geom.shape); ++e) {
    int64_t s = geom.src_offset, d = geom.dst_offset;
    for (int k = 0; k < nd; ++k) {
      s += idx[k] * geom.src_strides[k];
      d += idx[k] * dst_strides[k];
    }
    dst.at(d) = src.at(s);
    for (int k = nd - 1; k >= 0 && ++idx[k] == geom.shape[k]; --k) idx[k] = 0;
  }
}

// Rank r's input: element e is r * 1000 + e.
std::vector<float> RankInput(int r, int64_t n) {
  std::vector<float> v(n);
  for (int64_t e = 0; e < n; ++e) v[e] = static_cast<float>(r * 1000 + e);
  return v;
}

CudaPlan MustPlan(const std::string& text, bool bf16 = false, PlanOptions o = {}) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  auto p = PlanCuda(*g, bf16, o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : CudaPlan{};
}

// The plan of one node %0 = `node` over %x: f32[x_shape], returned; ASSERTs
// it has `launches` launches.
CudaPlan PlanOfOneNode(const std::string& x_shape, const std::string& node, size_t launches) {
  CudaPlan p = MustPlan(absl::StrCat("graph @g(%x: f32[", x_shape, "]) {\n  %0 = ", node, "\n  return %0\n}\n"));
  EXPECT_EQ(p.launches.size(), launches) << p.Describe();
  return p.launches.size() == launches ? p : CudaPlan{};
}

TEST(PlanCollectives, AllReduceIsOneHostLaunchOnTheGraphValues) {
  CudaPlan p = MustPlan(R"IR(graph @g(%x: f32[4, 8]) {
  %0 = all_reduce(%x) {group="dp", reduce="avg", world=2} : f32[4, 8]
  return %0
}
)IR");
  ASSERT_EQ(p.launches.size(), 1u) << p.Describe();
  const Launch& l = p.launches[0];
  EXPECT_EQ(l.kind, LaunchKind::kCollective);
  EXPECT_EQ(l.op, "all_reduce");
  EXPECT_EQ(l.inputs, std::vector<int>{0});
  EXPECT_EQ(l.outputs, std::vector<int>{1});
  EXPECT_EQ(l.attrs.GetString("group"), "dp");
  EXPECT_EQ(l.attrs.GetString("reduce"), "avg");
  EXPECT_GE(p.offset[1], 0) << "the result has its own arena bytes";
}

TEST(PlanCollectives, AllGatherOnAnInnerAxisGathersBlocksThenPlacesThem) {
  const int world = 2;
  CudaPlan p = PlanOfOneNode("3, 4", R"(all_gather(%x) {axis=1, group="tp", world=2} : f32[3, 8])", 2);
  ASSERT_EQ(p.launches.size(), 2u);
  const Launch& c = p.launches[0];
  const Launch& place = p.launches[1];
  ASSERT_EQ(c.kind, LaunchKind::kCollective);
  EXPECT_EQ(c.attrs.GetInt("axis", -1), 0) << "the collective itself gathers on the leading axis";
  ASSERT_EQ(c.outputs.size(), 1u);
  EXPECT_EQ(p.metas[c.outputs[0]].shape, (Shape{2, 3, 4}));
  ASSERT_EQ(place.kind, LaunchKind::kCopy);
  EXPECT_EQ(place.inputs, c.outputs);
  EXPECT_EQ(place.outputs, std::vector<int>{1});
  // The gathered buffer is every rank's input in rank order.
  std::vector<float> gathered;
  for (int r = 0; r < world; ++r) {
    std::vector<float> x = RankInput(r, 12);
    gathered.insert(gathered.end(), x.begin(), x.end());
  }
  std::vector<float> out(24, -1.f);
  ASSERT_EQ(place.copies.size(), 1u);
  ApplyCopy(place.copies[0], gathered, out);
  for (int i = 0; i < 3; ++i)
    for (int r = 0; r < world; ++r)
      for (int j = 0; j < 4; ++j) EXPECT_EQ(out[i * 8 + r * 4 + j], RankInput(r, 12)[i * 4 + j]) << i << "," << r << "," << j;
}

TEST(PlanCollectives, ReduceScatterOnAnInnerAxisLaysOutBlocksFirst) {
  const int world = 2;
  CudaPlan p = PlanOfOneNode("3, 8", R"(reduce_scatter(%x) {axis=1, group="tp", reduce="sum", world=2} : f32[3, 4])", 2);
  ASSERT_EQ(p.launches.size(), 2u);
  const Launch& lay = p.launches[0];
  const Launch& c = p.launches[1];
  ASSERT_EQ(lay.kind, LaunchKind::kCopy);
  ASSERT_EQ(c.kind, LaunchKind::kCollective);
  EXPECT_EQ(c.inputs, lay.outputs);
  EXPECT_EQ(c.outputs, std::vector<int>{1});
  EXPECT_EQ(c.attrs.GetInt("axis", -1), 0);
  // Each rank lays its input out [world, 3, 4]; the sum over ranks, block q,
  // is rank q's result.
  std::vector<float> sum(24, 0.f);
  for (int r = 0; r < world; ++r) {
    std::vector<float> blocks(24, -1.f);
    ApplyCopy(lay.copies.at(0), RankInput(r, 24), blocks);
    for (int e = 0; e < 24; ++e) sum[e] += blocks[e];
  }
  for (int q = 0; q < world; ++q)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) {
        float want = 0;
        for (int r = 0; r < world; ++r) want += RankInput(r, 24)[i * 8 + q * 4 + j];
        EXPECT_EQ(sum[q * 12 + i * 4 + j], want) << q << "," << i << "," << j;
      }
}

TEST(PlanCollectives, ShardSliceCopiesThisRanksBlock) {
  const std::string text = R"IR(graph @g(%x: f32[4, 6]) {
  %0 = shard_slice(%x) {axis=1, group="tp", world=2} : f32[4, 3]
  return %0
}
)IR";
  for (int rank : {0, 1}) {
    PlanOptions o;
    o.group_rank["tp"] = rank;
    CudaPlan p = MustPlan(text, false, o);
    ASSERT_EQ(p.launches.size(), 1u) << p.Describe();
    ASSERT_EQ(p.launches[0].kind, LaunchKind::kCopy);
    std::vector<float> x = RankInput(0, 24), out(12, -1.f);
    ApplyCopy(p.launches[0].copies.at(0), x, out);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(out[i * 3 + j], x[i * 6 + rank * 3 + j]) << rank << ": " << i << "," << j;
  }
}

TEST(PlanCollectives, VocabOnehotRunsAtThisRanksBlock) {
  PlanOptions o;
  o.group_rank["tp"] = 1;
  CudaPlan p = MustPlan(R"IR(graph @g(%t: i32[6]) {
  %0, %1 = vocab_onehot(%t) {group="tp", ignore_index=-100, num_classes=5, world=2} : f32[6, 5], f32[6]
  return %0, %1
}
)IR",
                        false, o);
  ASSERT_EQ(p.launches.size(), 1u) << p.Describe();
  EXPECT_EQ(p.launches[0].kind, LaunchKind::kVocabOnehot);
  EXPECT_EQ(p.launches[0].attrs.GetInt("rank", -1), 1);
  EXPECT_EQ(p.launches[0].outputs, (std::vector<int>{1, 2}));
}

// A dp step's update: the weight gradient all_reduced, clipped, AdamW.
constexpr char kDpUpdate[] = R"IR(graph @g(%w: f32[4, 3] param, %x: f32[8, 4], %dy: f32[8, 3], %w.m: f32[4, 3] state, %w.v: f32[4, 3] state, %lr: f32[], %step: f32[]) {
  %0 = matmul(%x, %dy) {trans_a=true, trans_b=false} : f32[4, 3]
  %1 = all_reduce(%0) {group="dp", reduce="sum", world=2} : f32[4, 3]
  %2 = grad_norm(%1) : f32[]
  %3, %4, %5 = adamw(%w, %1, %w.m, %w.v, %2, %lr, %step) {beta1=0.9, beta2=0.999, eps=1e-08, max_norm=1.0, weight_decay=0.0} : f32[4, 3], f32[4, 3], f32[4, 3]
  return %3 -> %w, %4 -> %w.m, %5 -> %w.v
}
)IR";

TEST(PlanCollectives, GradientsStayF32ThroughTheirCollectivesUnderBf16) {
  CudaPlan p = MustPlan(kDpUpdate, /*bf16=*/true);
  ASSERT_FALSE(p.launches.empty());
  EXPECT_EQ(p.metas[7].dtype, DType::kF32) << "the weight gradient, before its all_reduce\n" << p.Describe();
  EXPECT_EQ(p.metas[8].dtype, DType::kF32) << "the reduced gradient\n" << p.Describe();
  EXPECT_EQ(CountOp(p, LaunchKind::kCollective, "all_reduce"), 1);
}

TEST(PlanCollectives, ZeroUpdatesThisRanksShardThenGathersIntoTheParameter) {
  // ZeRO-1/2: AdamW on this rank's shard_slice of the replicated param (in
  // place), the updated shards all_gathered and written back into %w.
  CudaPlan p = MustPlan(R"IR(graph @g(%w: f32[4, 3] param, %x: f32[8, 4], %dy: f32[8, 3], %w.m: f32[2, 3] state, %w.v: f32[2, 3] state, %lr: f32[], %step: f32[]) {
  %0 = matmul(%x, %dy) {trans_a=true, trans_b=false} : f32[4, 3]
  %1 = reduce_scatter(%0) {axis=0, group="dp", reduce="sum", world=2} : f32[2, 3]
  %2 = grad_norm(%1) : f32[]
  %3 = shard_slice(%w) {axis=0, group="dp", world=2} : f32[2, 3]
  %4, %5, %6 = adamw(%3, %1, %w.m, %w.v, %2, %lr, %step) {beta1=0.9, beta2=0.999, eps=1e-08, max_norm=1.0, weight_decay=0.0} : f32[2, 3], f32[2, 3], f32[2, 3]
  %7 = all_gather(%4) {axis=0, group="dp", world=2} : f32[4, 3]
  return %7 -> %w, %5 -> %w.m, %6 -> %w.v
}
)IR",
                        /*bf16=*/true);
  ASSERT_FALSE(p.launches.empty());
  const int shard = 10, updated = 11, gathered = 14;
  EXPECT_EQ(p.metas[shard].dtype, DType::kF32) << "AdamW updates an f32 master shard\n" << p.Describe();
  EXPECT_EQ(p.root[updated], shard) << "in place";
  EXPECT_EQ(p.metas[gathered].dtype, DType::kF32) << "written back into the f32 parameter\n" << p.Describe();
  EXPECT_EQ(CountOp(p, LaunchKind::kCollective, "reduce_scatter"), 1);
  EXPECT_EQ(CountOp(p, LaunchKind::kCollective, "all_gather"), 1);
  EXPECT_EQ(CountOp(p, LaunchKind::kCopyBack), 1);
  // Order: the gradient is scattered before AdamW; the gather follows it,
  // and the copy back into %w comes last.
  int scatter = -1, adamw = -1, gather = -1, back = -1;
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const Launch& l = p.launches[i];
    if (l.op == "reduce_scatter") scatter = static_cast<int>(i);
    if (l.kind == LaunchKind::kAdamW) adamw = static_cast<int>(i);
    if (l.op == "all_gather") gather = static_cast<int>(i);
    if (l.kind == LaunchKind::kCopyBack) back = static_cast<int>(i);
  }
  EXPECT_LT(scatter, adamw);
  EXPECT_LT(adamw, gather);
  EXPECT_LT(gather, back);
}

TEST(PlanCollectives, GatheredShardsKeepTheirDtype) {
  // ZeRO-3 under bf16: the f32 parameter shard is gathered as f32 (a norm
  // may read it); the GEMM reads a bf16 cast of the gathered copy. An
  // activation gathered under sequence parallelism stays bf16.
  CudaPlan p = MustPlan(R"IR(graph @g(%w: f32[2, 4] param, %x: f32[8, 4], %h: f32[4, 4]) {
  %0 = all_gather(%w) {axis=0, group="dp", world=2} : f32[4, 4]
  %1 = matmul(%x, %0) : f32[8, 4]
  %2 = exp(%h) : f32[4, 4]
  %3 = all_gather(%2) {axis=0, group="tp", world=2} : f32[8, 4]
  return %1, %3
}
)IR",
                        /*bf16=*/true);
  ASSERT_FALSE(p.launches.empty());
  EXPECT_EQ(p.metas[3].dtype, DType::kF32) << p.Describe();
  EXPECT_EQ(p.metas[5].dtype, DType::kBF16) << p.Describe();
  EXPECT_EQ(p.metas[6].dtype, DType::kBF16) << p.Describe();
  int weight_cast = 0;  // a cast of the gathered weight, read by the GEMM
  for (const Launch& l : p.launches)
    if (l.op == "cast" && l.inputs == std::vector<int>{3})
      for (const Launch& m : p.launches)
        if (m.kind == LaunchKind::kGemm && m.inputs.size() > 1 && m.inputs[1] == l.outputs[0]) ++weight_cast;
  EXPECT_EQ(weight_cast, 1) << p.Describe();
  EXPECT_EQ(CountOp(p, LaunchKind::kCollective, "all_gather"), 2);
}

TEST(PlanCollectives, OnlyTheParallelOpsAreSpmdOps) {
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "shard_slice", "vocab_onehot"})
    EXPECT_TRUE(plan_internal::IsSpmdOp(op)) << op;
  for (const char* op : {"add", "matmul", "embedding", "slice"}) EXPECT_FALSE(plan_internal::IsSpmdOp(op)) << op;
}

}  // namespace
}  // namespace loom::compiler::cuda
