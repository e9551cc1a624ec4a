// The planner's per-layout memory estimate against the real local programs:
// for every acceptance layout (dp=4; tp=4; tp=2 x dp=2; tp=2 + SP; dp=4 with
// ZeRO-1/2/3; tp=2 x dp=2 with ZeRO-3) and the single process, the training step
// is compiled exactly like ParallelTrainer does (CompileParallel) and lowered
// with do-nothing communicators (never run), which allocates its arena. The
// rank's state (its blocks of parameters and AdamW m, v, from the program's
// inputs) plus that arena must be within 15% of Estimate's total() -
// workspace (ParallelTrainer compiles no evaluation program). Fast subset by
// default; LOOM_FULL=1 adds a second config per family and batch 32.
#include <cmath>
#include <cstdlib>

#include "base/status.h"
#include "compiler/comm/communicator.h"
#include "compiler/models/models.h"
#include "gtest/gtest.h"
#include "parallel/planner.h"
#include "parallel/styles.h"

namespace loom::parallel {
namespace {

class NullCommunicator final : public compiler::Communicator {
 public:
  explicit NullCommunicator(int n) : n_(n) {}
  int rank() const override { return 0; }
  int size() const override { return n_; }
  absl::Status AllReduce(const Tensor&, Tensor&, compiler::ReduceKind) override { return absl::OkStatus(); }
  absl::Status AllGather(const Tensor&, Tensor&, int) override { return absl::OkStatus(); }
  absl::Status ReduceScatter(const Tensor&, Tensor&, int, compiler::ReduceKind) override {
    return absl::OkStatus();
  }

 private:
  int n_;
};

// State bytes + arena bytes of one rank's lowered training step.
absl::StatusOr<int64_t> Planned(const v1::ModelSpec& model, int64_t batch, const Layout& l) {
  models::BuildOptions bo;
  bo.batch = batch;
  LOOM_ASSIGN_OR_RETURN(compiler::Graph forward, models::BuildForward(model, bo));
  NullCommunicator dp(l.dp), tp(l.tp);
  compiler::CompileOptions co;
  co.lowering.in_place_updates = true;
  if (l.dp > 1) co.lowering.communicators["dp"] = &dp;
  if (l.tp > 1) co.lowering.communicators["tp"] = &tp;
  compiler::AdamWOptions adam;
  adam.max_norm = 1.0;
  co.adamw = adam;
  LOOM_ASSIGN_OR_RETURN(compiler::Compilation c, CompileParallel(forward, co, model, batch, l));
  const compiler::Graph& g = c.program->graph;
  int64_t bytes = c.program->plan.peak_bytes;
  for (const auto& in : g.inputs()) {
    if (in.name == "x" || in.name == "y" || in.name == "lr" || in.name == "step") continue;
    const auto& m = g.meta(in.value);
    int64_t n = 1;
    for (int64_t s : m.shape) n *= s;
    bytes += n * static_cast<int64_t>(DTypeSize(m.dtype));
  }
  return bytes;
}

v1::ModelSpec Model(const std::string& family, int n_layer, int d_model, int seq_len) {
  v1::ModelSpec m;
  m.set_family(family);
  m.set_n_layer(n_layer);
  m.set_n_head(4);
  m.set_n_kv_head(4);
  m.set_d_model(d_model);
  m.set_seq_len(seq_len);
  m.set_vocab(256);
  m.set_norm_eps(1e-5f);
  m.set_rope_theta(10000.f);
  m.set_ffn_hidden(family == "llama" ? (8 * d_model / 3 + 63) / 64 * 64 : 4 * d_model);
  return m;
}

TEST(PlannerLayoutMemory, EveryAcceptanceLayoutWithin15Percent) {
  const bool full = std::getenv("LOOM_FULL") != nullptr;
  std::vector<v1::ModelSpec> models = {Model("gpt", 2, 128, 32), Model("llama", 2, 128, 32)};
  if (full) {
    models.push_back(Model("gpt", 4, 64, 64));
    models.push_back(Model("llama", 4, 64, 64));
  }
  std::vector<int64_t> batches = {8};
  if (full) batches.push_back(32);
  // The arenas do not depend on the order the layouts compile in
  // (memory_test.cc, CompileOrder).
  const std::vector<Layout> layouts = {{1, 1, 0, false}, {4, 1, 0, false}, {1, 4, 0, false},
                                       {2, 2, 0, false}, {1, 2, 0, true},  {4, 1, 1, false},
                                       {4, 1, 2, false}, {4, 1, 3, false}, {2, 2, 3, false}};
  for (const auto& m : models)
    for (int64_t b : batches)
      for (const Layout& l : layouts) {
        auto planned = Planned(m, b, l);
        ASSERT_TRUE(planned.ok()) << LayoutName(l) << ": " << planned.status();
        Hardware hw;
        hw.world = l.dp * l.tp;
        auto est = Estimate(m, b, hw, l);
        ASSERT_TRUE(est.ok()) << est.status();
        const double e = static_cast<double>(est->memory.total() - est->memory.workspace);
        const double err = (e - *planned) / *planned;
        EXPECT_LT(std::abs(err), 0.15) << m.family() << " L=" << m.n_layer() << " C=" << m.d_model() << " B=" << b
                                       << " " << LayoutName(l) << ": estimate " << e << " planned " << *planned;
        std::printf("%-5s L=%d C=%d B=%-3lld %-18s estimate %10.0f planned %10lld (%+.1f%%)\n", m.family().c_str(),
                    m.n_layer(), m.d_model(), static_cast<long long>(b), LayoutName(l).c_str(), e,
                    static_cast<long long>(*planned), 100 * err);
      }
}

}  // namespace
}  // namespace loom::parallel
