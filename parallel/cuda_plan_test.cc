// The CUDA plan and executor build of every parallel layout's training step
// (compiler/cuda: plan_collectives.h, CudaOptions::communicators), without a
// GPU: CompileParallel's fused program plans under f32 and bf16 with every
// collective op as a collective launch, and CudaExecutor::Create builds every
// launch (the collectives bound to their groups' communicators), so the
// only error left is the missing device.
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/cuda/cuda_executor.h"
#include "compiler/cuda/plan.h"
#include "compiler/cuda/plan_test_util.h"
#include "compiler/models/models.h"
#include "gtest/gtest.h"
#include "parallel/styles.h"

namespace loom::parallel {
namespace {

// Only rank() and size() are read while the executor is built.
class IdleCommunicator final : public compiler::comm::Communicator {
 public:
  IdleCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduce(const Tensor&, Tensor&, compiler::comm::ReduceKind) override { return Never(); }
  absl::Status AllGather(const Tensor&, Tensor&, int) override { return Never(); }
  absl::Status ReduceScatter(const Tensor&, Tensor&, int, compiler::comm::ReduceKind) override { return Never(); }

 private:
  static absl::Status Never() { return absl::InternalError("no step runs in this test"); }
  int rank_, size_;
};

v1::ModelSpec Model(const std::string& family) {
  v1::ModelSpec m;
  m.set_family(family);
  m.set_n_layer(1);
  m.set_n_head(4);
  if (family == "llama") m.set_n_kv_head(2);
  m.set_d_model(64);
  m.set_seq_len(16);
  m.set_vocab(128);
  return m;
}

struct Case {
  std::string name;
  Layout layout;
};

std::vector<Case> Layouts() {
  std::vector<Case> c;
  auto add = [&](std::string name, int dp, int tp, int zero, bool sp) {
    Layout l;
    l.dp = dp;
    l.tp = tp;
    l.zero_stage = zero;
    l.sequence_parallel = sp;
    c.push_back({std::move(name), l});
  };
  add("dp2", 2, 1, 0, false);
  add("tp2", 1, 2, 0, false);
  add("tp2_sp", 1, 2, 0, true);
  add("dp2_tp2", 2, 2, 0, false);
  add("zero1", 2, 1, 1, false);
  add("zero2", 2, 1, 2, false);
  add("zero3", 2, 1, 3, false);
  add("dp2_tp2_zero3", 2, 2, 3, false);
  return c;
}

absl::StatusOr<compiler::ir::Graph> FusedStep(const v1::ModelSpec& m, const Layout& l) {
  compiler::models::BuildOptions bo;
  bo.batch = 4;
  LOOM_ASSIGN_OR_RETURN(auto fwd, compiler::models::BuildForward(m, bo));
  compiler::CompileOptions co;
  co.adamw = compiler::AdamWOptions{};
  co.adamw->max_norm = 1.0;
  co.lowering.in_place_updates = true;
  co.lower = false;  // the trainer's CUDA compile: the executor lowers "fused"
  LOOM_ASSIGN_OR_RETURN(auto c, CompileParallel(fwd, co, m, bo.batch, l));
  return std::move(c.stages.at("fused"));
}

int CollectiveNodes(const compiler::ir::Graph& g) {
  int n = 0;
  for (const auto& node : g.nodes())
    n += node.op == "all_reduce" || node.op == "all_gather" || node.op == "reduce_scatter";
  return n;
}

TEST(ParallelCudaPlan, EveryLayoutPlansWithItsCollectivesAsCollectiveLaunches) {
  for (const char* family : {"gpt", "llama"}) {
    for (const Case& c : Layouts()) {
      SCOPED_TRACE(absl::StrCat(family, " ", c.name));
      auto g = FusedStep(Model(family), c.layout);
      ASSERT_TRUE(g.ok()) << g.status();
      const int nodes = CollectiveNodes(*g);
      EXPECT_GT(nodes, 0);
      for (bool bf16 : {false, true}) {
        compiler::cuda::PlanOptions o;
        o.group_rank = {{"dp", c.layout.dp - 1}, {"tp", c.layout.tp - 1}};
        auto p = compiler::cuda::PlanCuda(*g, bf16, o);
        ASSERT_TRUE(p.ok()) << (bf16 ? "bf16: " : "f32: ") << p.status().message();
        int launches = 0;
        for (const auto& l : p->launches) launches += l.kind == compiler::cuda::LaunchKind::kCollective;
        EXPECT_EQ(launches, nodes) << p->Describe();
        EXPECT_EQ(compiler::cuda::ArenaProblems(*g, *p), std::vector<std::string>{});
      }
    }
  }
}

TEST(ParallelCudaPlan, EveryLayoutBuildsOnTheExecutorWithItsCommunicators) {
  if (const char* tmp = std::getenv("TEST_TMPDIR")) setenv("LOOM_KERNEL_CACHE", tmp, 1);
  for (const char* family : {"gpt", "llama"}) {
    for (const Case& c : Layouts()) {
      SCOPED_TRACE(absl::StrCat(family, " ", c.name));
      auto g = FusedStep(Model(family), c.layout);
      ASSERT_TRUE(g.ok()) << g.status();
      IdleCommunicator dp(c.layout.dp - 1, c.layout.dp), tp(c.layout.tp - 1, c.layout.tp);
      compiler::cuda::CudaOptions o;
      o.bf16 = true;
      if (c.layout.dp > 1) o.communicators["dp"] = &dp;
      if (c.layout.tp > 1) o.communicators["tp"] = &tp;
      auto e = compiler::cuda::CudaExecutor::Create(*g, o);
      if (!e.ok()) {
        EXPECT_EQ(e.status().code(), absl::StatusCode::kUnavailable) << e.status();
      }
      // A group left without its communicator is named.
      o.communicators.clear();
      e = compiler::cuda::CudaExecutor::Create(*g, o);
      ASSERT_FALSE(e.ok());
      EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition) << e.status();
      EXPECT_NE(e.status().message().find("no communicator is bound for group"), std::string::npos) << e.status();
    }
  }
}

}  // namespace
}  // namespace loom::parallel
