// compose_copies and the copy launches: composed view geometry against the
// registry's ops on the host, ViewStrides, and the launches the pass removes.
#include "compiler/cuda/plan_copies.h"

#include <map>
#include <vector>

#include "compiler/cuda/plan_test_util.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"
#include "kernels/registry.h"

namespace loom::compiler::cuda {
namespace {

TEST(ViewStrides, FollowsPyTorchViewRules) {
  // Split the last dim of a slice of [2, 3, 12] (strides 36, 12, 1).
  auto st = ViewStrides({2, 3, 4}, {36, 12, 1}, {2, 3, 2, 2});
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(*st, (std::vector<int64_t>{36, 12, 2, 1}));
  // Dims 0 and 1 of the slice are still adjacent in memory: they merge.
  auto m = ViewStrides({2, 3, 4}, {36, 12, 1}, {6, 4});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(*m, (std::vector<int64_t>{12, 1}));
  // A transposed matrix cannot be flattened without a copy.
  EXPECT_FALSE(ViewStrides({3, 4}, {1, 3}, {12}).has_value());
  auto c = ViewStrides({2, 6}, {6, 1}, {3, 4});
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(*c, (std::vector<int64_t>{4, 1}));
}

// Runs the plan's copy launches on the host (element-wise, f64).
std::vector<double> HostCopy(const CudaPlan& p, const std::map<int, std::vector<double>>& vals, int out) {
  std::vector<double> dst(NumElements(p.metas[out].shape), 0.0);
  for (const Launch& l : p.launches) {
    if (l.outputs.empty() || l.outputs[0] != out) continue;
    for (size_t k = 0; k < l.copies.size(); ++k) {
      const CopyGeom& c = l.copies[k];
      const std::vector<double>& src = vals.at(l.inputs[k]);
      std::vector<int64_t> dst_st = c.dst_strides;
      if (dst_st.empty()) {
        dst_st.assign(c.shape.size(), 1);
        for (int d = static_cast<int>(c.shape.size()) - 2; d >= 0; --d) dst_st[d] = dst_st[d + 1] * c.shape[d + 1];
      }
      const int64_t n = NumElements(c.shape);
      for (int64_t i = 0; i < n; ++i) {
        int64_t rem = i, so = c.src_offset, dof = c.dst_offset;
        for (int d = static_cast<int>(c.shape.size()) - 1; d >= 0; --d) {
          const int64_t idx = rem % c.shape[d];
          rem /= c.shape[d];
          so += idx * c.src_strides[d];
          dof += idx * dst_st[d];
        }
        dst[dof] = src[so];
      }
    }
  }
  return dst;
}

constexpr char kChains[] = R"IR(graph @g(%x: f32[2, 3, 12], %a: f32[2, 2, 3, 2], %b: f32[2, 2, 3, 2]) {
  %0 = slice(%x) {axis=2, start=4, length=4} : f32[2, 3, 4]
  %1 = reshape(%0) {shape=[2, 3, 2, 2]} : f32[2, 3, 2, 2]
  %2 = permute(%1) {dims=[0, 2, 1, 3]} : f32[2, 2, 3, 2]
  %3 = permute(%a) {dims=[0, 2, 1, 3]} : f32[2, 3, 2, 2]
  %4 = reshape(%3) {shape=[2, 3, 4]} : f32[2, 3, 4]
  %5 = permute(%b) {dims=[0, 2, 1, 3]} : f32[2, 3, 2, 2]
  %6 = reshape(%5) {shape=[2, 3, 4]} : f32[2, 3, 4]
  %7 = concat(%4, %6) {axis=2} : f32[2, 3, 8]
  return %2, %7
}
)IR";

// The composed copies equal the op chains they replace (the registry's ops on
// the same values).
TEST(ComposeCopies, ComposedCopiesMatchTheOps) {
  auto g = ir::ParseGraph(kChains);
  ASSERT_TRUE(g.ok()) << g.status();
  auto p = PlanCuda(*g, false);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->launches.size(), 2u) << p->Describe();
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "slice+reshape+permute"), 1);
  EXPECT_EQ(CountOp(*p, LaunchKind::kConcat, "permute+reshape+concat"), 1);
  std::map<int, std::vector<double>> vals;
  std::vector<Tensor> ins;
  for (int k = 0; k < 3; ++k) {
    const int v = g->inputs()[k].value;
    std::vector<double> d(NumElements(g->meta(v).shape));
    for (size_t i = 0; i < d.size(); ++i) d[i] = 100 * k + static_cast<double>(i);
    vals[v] = d;
    ins.push_back(Tensor::FromVector(g->meta(v).shape, d, DType::kF32));
  }
  auto s0 =
      kernels::RunOp("slice", {ins[0]}, ir::Attrs{{"axis", int64_t{2}}, {"start", int64_t{4}}, {"length", int64_t{4}}});
  ASSERT_TRUE(s0.ok()) << s0.status();
  auto r0 = kernels::RunOp("reshape", {(*s0)[0]}, ir::Attrs{{"shape", std::vector<int64_t>{2, 3, 2, 2}}});
  auto q = kernels::RunOp("permute", {(*r0)[0]}, ir::Attrs{{"dims", std::vector<int64_t>{0, 2, 1, 3}}});
  ASSERT_TRUE(q.ok()) << q.status();
  std::vector<double> got = HostCopy(*p, vals, g->outputs()[0].value);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], (*q)[0].GetDouble(i)) << i;
  std::vector<Tensor> parts;
  for (int k = 1; k < 3; ++k) {
    auto pm = kernels::RunOp("permute", {ins[k]}, ir::Attrs{{"dims", std::vector<int64_t>{0, 2, 1, 3}}});
    auto rs = kernels::RunOp("reshape", {(*pm)[0]}, ir::Attrs{{"shape", std::vector<int64_t>{2, 3, 4}}});
    parts.push_back((*rs)[0]);
  }
  auto cat = kernels::RunOp("concat", parts, ir::Attrs{{"axis", int64_t{2}}});
  ASSERT_TRUE(cat.ok()) << cat.status();
  got = HostCopy(*p, vals, g->outputs()[1].value);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], (*cat)[0].GetDouble(i)) << i;
}

// Off: one launch per copy op (slice, permute, two permutes + a concat).
TEST(ComposeCopies, OffKeepsOneCopyPerOp) {
  auto g = ir::ParseGraph(kChains);
  ASSERT_TRUE(g.ok()) << g.status();
  PlanOptions o;
  o.compose_copies = false;
  auto p = PlanCuda(*g, false, o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "slice"), 1);
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "permute"), 3);
  EXPECT_EQ(CountOp(*p, LaunchKind::kConcat, "concat"), 1);
  EXPECT_EQ(p->launches.size(), 5u);
}

// On the gpt joint graph in f32 (no attention views): q, k, v one copy each,
// dq, dk, dv straight into dqkv; the attention output and dout keep their
// permute copies.
TEST(ComposeCopies, Gpt) {
  ir::Graph g = GptJoint(2);
  auto p = PlanCuda(g, false);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "slice+reshape+permute"), 3 * 2) << "q, k, v: one copy each";
  EXPECT_EQ(CountOp(*p, LaunchKind::kConcat, "permute+reshape+concat"), 2) << "dq, dk, dv straight into dqkv";
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "permute"), 2 * 2);
  auto off = PlanCuda(g, false, NoFusions());
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(CountOp(*off, LaunchKind::kCopy, "slice+reshape+permute"), 0);
  EXPECT_EQ(CountOp(*off, LaunchKind::kCopy, "slice"), 3 * 2);
}

}  // namespace
}  // namespace loom::compiler::cuda
