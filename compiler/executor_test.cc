#include "compiler/executor.h"

#include "base/allocator.h"
#include "compiler/ir/text.h"
#include "compiler/passes/fusion.h"
#include "gtest/gtest.h"

namespace loom::compiler {
namespace {

constexpr char kMlp[] = R"IR(graph @mlp(%x: f32[37, 24], %w: f32[24, 40] param, %b: f32[40] param) {
  %0 = test.matmul(%x, %w) : f32[37, 40]
  %1 = test.add(%0, %b) : f32[37, 40]
  %2 = test.relu(%1) : f32[37, 40]
  %3 = test.scale(%2) {s=0.5} : f32[37, 40]
  %4 = test.exp(%3) : f32[37, 40]
  %5 = test.sum(%4) : f32[]
  return %5, %4
}
)IR";

std::vector<Tensor> MlpInputs(DType dt) {
  std::vector<Tensor> in;
  for (auto shape : {Shape{37, 24}, Shape{24, 40}, Shape{40}}) {
    std::vector<double> v(NumElements(shape));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1 * std::sin(0.37 * i + shape[0]);
    in.push_back(Tensor::FromVector(shape, v, dt));
  }
  return in;
}

// The expected result, op by op through the registry.
std::vector<Tensor> Eager(const std::vector<Tensor>& in) {
  auto mm = kernels::RunOp("test.matmul", {in[0], in[1]});
  auto add = kernels::RunOp("test.add", {(*mm)[0], in[2]});
  auto relu = kernels::RunOp("test.relu", {(*add)[0]});
  auto sc = kernels::RunOp("test.scale", {(*relu)[0]}, kernels::Attrs{{"s", 0.5}});
  auto ex = kernels::RunOp("test.exp", {(*sc)[0]});
  auto sum = kernels::RunOp("test.sum", {(*ex)[0]});
  return {(*sum)[0], (*ex)[0]};
}

TEST(ExecutorTest, MatchesEagerExecutionWithAndWithoutFusion) {
  auto g = ir::ParseGraph(kMlp);
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<Tensor> in = MlpInputs(DType::kF32);
  std::vector<Tensor> want = Eager(in);
  for (bool fuse : {false, true}) {
    for (int64_t chunk : {int64_t{1}, int64_t{100}, int64_t{1} << 20}) {
      ir::Graph h = *g;
      if (fuse) {
        passes::ElementwiseFusion f;
        ASSERT_TRUE(*f.Run(h));
      }
      LoweringOptions opt;
      opt.fused_chunk_elems = chunk;
      auto exec = Executor::Create(h, opt);
      ASSERT_TRUE(exec.ok()) << exec.status();
      auto out = exec->Run(in);
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_EQ(out->size(), 2u);
      EXPECT_LT(RelativeError((*out)[0], want[0]), 1e-6) << fuse << " " << chunk;
      EXPECT_LT(RelativeError((*out)[1], want[1]), 1e-6) << fuse << " " << chunk;
      if (fuse) {
        EXPECT_EQ(exec->program().calls.size(), 3u);
        EXPECT_GT(exec->program().scratch_bytes, 0);
      }
    }
  }
}

TEST(ExecutorTest, RunsF64ThroughReferences) {
  std::string text = kMlp;
  for (size_t p; (p = text.find("f32")) != std::string::npos;) text.replace(p, 3, "f64");
  auto g = ir::ParseGraph(text);
  ASSERT_TRUE(g.ok()) << g.status();
  auto exec = Executor::Create(*g);
  ASSERT_TRUE(exec.ok()) << exec.status();
  std::vector<Tensor> in = MlpInputs(DType::kF64);
  auto out = exec->Run(in);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_LT(RelativeError((*out)[0], Eager(in)[0]), 1e-12);
}

TEST(ExecutorTest, NoAllocationAfterTheFirstStep) {
  auto g = ir::ParseGraph(kMlp);
  ASSERT_TRUE(g.ok());
  for (bool fuse : {false, true}) {
    ir::Graph h = *g;
    if (fuse) {
      ASSERT_TRUE(*passes::ElementwiseFusion().Run(h));
    }
    std::vector<Tensor> in = MlpInputs(DType::kF32);
    CountingAllocator counting(CpuAllocator::Get());
    ScopedDefaultAllocator use(&counting);
    auto exec = Executor::Create(h);
    ASSERT_TRUE(exec.ok());
    EXPECT_GE(counting.stats().allocations, 1);  // the arena (and fused scratch)
    std::vector<Tensor> outs;
    ASSERT_TRUE(exec->Run(in, &outs).ok());
    const int64_t after_first = counting.stats().allocations;
    double first = outs[0].GetDouble(0);
    for (int step = 0; step < 5; ++step) ASSERT_TRUE(exec->Run(in, &outs).ok());
    EXPECT_EQ(counting.stats().allocations, after_first) << "fuse=" << fuse;
    EXPECT_EQ(outs[0].GetDouble(0), first);
  }
}

TEST(ExecutorTest, ChecksInputsAndAppliesUpdates) {
  auto g = ir::ParseGraph(R"IR(graph @upd(%p: f32[3] param, %g: f32[3]) {
  %0 = test.scale(%g) {s=-1} : f32[3]
  %1 = test.add(%p, %0) : f32[3]
  return %1 -> %p, %g
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto exec = Executor::Create(*g);
  ASSERT_TRUE(exec.ok());
  std::vector<Tensor> in = {Tensor::FromVector({3}, {1, 2, 3}), Tensor::FromVector({3}, {0.5, 0.5, 0.5})};
  std::vector<Tensor> outs;
  ASSERT_TRUE(exec->Run(in, &outs).ok());
  EXPECT_EQ(outs[1].storage(), in[1].storage());  // an input returned as is
  ASSERT_TRUE(exec->ApplyUpdates(absl::MakeSpan(in), outs).ok());
  ASSERT_TRUE(exec->Run(in, &outs).ok());
  ASSERT_TRUE(exec->ApplyUpdates(absl::MakeSpan(in), outs).ok());
  EXPECT_EQ(in[0].ToVector(), (std::vector<double>{0, 1, 2}));

  absl::Status s = exec->Run({in[0]}, &outs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = exec->Run({in[0], Tensor::FromVector({4}, {1, 2, 3, 4})}, &outs);
  EXPECT_NE(std::string(s.message()).find("input %g"), std::string::npos) << s;
}

TEST(ExecutorTest, ProgramListing) {
  auto g = ir::ParseGraph(kMlp);
  auto exec = Executor::Create(*g);
  ASSERT_TRUE(exec.ok());
  std::string listing = exec->program().ToString();
  EXPECT_NE(listing.find("0: test.matmul(%x, %w) -> @"), std::string::npos) << listing;
}

}  // namespace
}  // namespace loom::compiler

#include "base/thread_pool.h"

namespace loom::compiler {
namespace {

TEST(ExecutorTest, FusedLoopsRunInParallelWithTheSameResult) {
  auto g = ir::ParseGraph(R"IR(graph @big(%x: f32[301, 17], %b: f32[17]) {
  %0 = test.add(%x, %b) : f32[301, 17]
  %1 = test.relu(%0) : f32[301, 17]
  %2 = test.exp(%1) : f32[301, 17]
  %3 = test.mul(%2, %x) : f32[301, 17]
  return %3
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  ir::Graph fused = *g;
  ASSERT_TRUE(*passes::ElementwiseFusion().Run(fused));
  std::vector<double> xv(301 * 17), bv(17);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::cos(0.1 * i);
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = 0.3 - 0.05 * i;
  std::vector<Tensor> in = {Tensor::FromVector({301, 17}, xv), Tensor::FromVector({17}, bv)};
  auto ref = Executor::Create(*g);
  ASSERT_TRUE(ref.ok());
  std::vector<double> want = (*ref->Run(in))[0].ToVector();
  const int saved = NumThreads();
  for (int threads : {1, 3, 4}) {
    SetNumThreads(threads);
    LoweringOptions opt;
    opt.fused_chunk_elems = 40;  // 2 rows per chunk: 151 chunks
    auto exec = Executor::Create(fused, opt);
    ASSERT_TRUE(exec.ok());
    for (int rep = 0; rep < 3; ++rep) {
      auto out = exec->Run(in);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ((*out)[0].ToVector(), want) << threads;
    }
    CountingAllocator counting(CpuAllocator::Get());
    ScopedDefaultAllocator use(&counting);
    std::vector<Tensor> outs;
    ASSERT_TRUE(exec->Run(in, &outs).ok());
    EXPECT_EQ(counting.stats().allocations, 0) << threads;
  }
  SetNumThreads(saved);
}

}  // namespace
}  // namespace loom::compiler

namespace loom::compiler {
namespace {

TEST(ExecutorTest, InPlaceUpdatesWriteIntoTheInputs) {
  // %p is last read by the add that produces its update: in place. %q is read
  // after its update is computed: it stays a copy.
  auto g = ir::ParseGraph(R"IR(graph @upd(%p: f32[3] param, %q: f32[3] param, %g: f32[3]) {
  %0 = test.scale(%g) {s=-1} : f32[3]
  %1 = test.add(%p, %0) : f32[3]
  %2 = test.add(%q, %1) : f32[3]
  %3 = test.mul(%q, %2) : f32[3]
  return %1 -> %p, %2 -> %q, %3
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  LoweringOptions copy_opt, in_place_opt;
  in_place_opt.in_place_updates = true;
  auto copy = Executor::Create(*g, copy_opt);
  auto in_place = Executor::Create(*g, in_place_opt);
  ASSERT_TRUE(copy.ok() && in_place.ok());
  EXPECT_EQ(in_place->program().input_written, (std::vector<bool>{true, false, false}));
  EXPECT_LT(in_place->program().plan.peak_bytes, copy->program().plan.peak_bytes);
  auto make = [] {
    return std::vector<Tensor>{Tensor::FromVector({3}, {1, 2, 3}), Tensor::FromVector({3}, {4, 5, 6}),
                               Tensor::FromVector({3}, {0.5, 0.25, 0.125})};
  };
  std::vector<Tensor> a = make(), b = make();
  std::vector<Tensor> oa, ob;
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(copy->Run(a, &oa).ok());
    ASSERT_TRUE(copy->ApplyUpdates(absl::MakeSpan(a), oa).ok());
    ASSERT_TRUE(in_place->Run(b, &ob).ok());
    EXPECT_EQ(ob[0].storage(), b[0].storage());
    ASSERT_TRUE(in_place->ApplyUpdates(absl::MakeSpan(b), ob).ok());
    for (int k = 0; k < 3; ++k) EXPECT_EQ(a[k].ToVector(), b[k].ToVector()) << step << " " << k;
    EXPECT_EQ(oa[2].ToVector(), ob[2].ToVector());
  }
  EXPECT_NE(in_place->program().ToString().find("%p (in place)"), std::string::npos)
      << in_place->program().ToString();
}

}  // namespace
}  // namespace loom::compiler
