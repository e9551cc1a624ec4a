// The planner for imported graphs (parallel/graph_planner.h): each layout's
// memory is read off the program the rank would run, so it must equal what
// lowering that program allocates (lowered here with do-nothing
// communicators): parameters + optimizer = the rank's parameter, buffer and
// AdamW blocks; gradients + activations = the arena. And the plan over a
// world of 4 ranks ranks every legal layout, with ZeRO and tp shrinking the
// state as they should.
#include "parallel/graph_planner.h"

#include "compiler/ir/text.h"
#include "gtest/gtest.h"
#include "parallel/styles.h"
#include "tests/parallel/memory_probe.h"

namespace loom::tests::parallel {
namespace {

// Embedding, norm, MLP, residual and a tied head over a const buffer (the
// shape of an imported causal LM, in small).
constexpr char kBlock[] = R"(graph @lm(%wte: f32[64, 16] param, %pos: f32[8, 16] const, %ln.w: f32[16] param, %ln.b: f32[16] param, %up.w: f32[64, 16] param, %up.b: f32[64] param, %down.w: f32[16, 64] param, %down.b: f32[16] param, %x: i32[8, 8], %y: i32[8, 8]) {
  %0 = embedding(%wte, %x) : f32[8, 8, 16]
  %1 = add(%0, %pos) : f32[8, 8, 16]
  %2, %3, %4 = layernorm(%1, %ln.w, %ln.b) {eps=1e-05} : f32[8, 8, 16], f32[8, 8], f32[8, 8]
  %5 = permute(%up.w) {dims=[1, 0]} : f32[16, 64]
  %6 = matmul(%2, %5) : f32[8, 8, 64]
  %7 = add(%up.b, %6) : f32[8, 8, 64]
  %8 = gelu(%7) : f32[8, 8, 64]
  %9 = permute(%down.w) {dims=[1, 0]} : f32[64, 16]
  %10 = matmul(%8, %9) : f32[8, 8, 16]
  %11 = add(%10, %down.b) : f32[8, 8, 16]
  %12 = add(%1, %11) : f32[8, 8, 16]
  %13 = permute(%wte) {dims=[1, 0]} : f32[16, 64]
  %14 = matmul(%12, %13) : f32[8, 8, 64]
  %15 = reshape(%14) {shape=[64, 64]} : f32[64, 64]
  %16 = reshape(%y) {shape=[64]} : i32[64]
  %17, %18 = cross_entropy(%15, %16) : f32[], f32[64]
  return %17
})";

loom::parallel::GraphModel Model() {
  loom::parallel::GraphModel m;
  auto g = compiler::ir::ParseGraph(kBlock);
  EXPECT_TRUE(g.ok()) << g.status();
  m.forward = *g;
  m.model.set_family("onnx");
  m.model.set_seq_len(8);
  m.model.set_vocab(64);
  m.train.set_beta1(0.9f);
  m.train.set_beta2(0.95f);
  m.train.set_eps(1e-8f);
  m.train.set_grad_clip(1.0f);
  m.summary = "the test block";
  return m;
}

int64_t Bytes(const compiler::ir::Graph& g, int value) {
  return NumElements(g.meta(value).shape) * static_cast<int64_t>(DTypeSize(g.meta(value).dtype));
}

TEST(GraphPlanner, TheEstimateIsWhatTheRanksProgramAllocates) {
  const loom::parallel::GraphModel m = Model();
  const std::vector<loom::parallel::TpRule> plan = {{"up.*", "colwise"}, {"down.w", "rowwise"}, {"wte", "vocab"}};
  loom::parallel::Hardware hw;
  for (const loom::parallel::Layout& l :
       {loom::parallel::Layout{4, 1, 0, false, {}}, loom::parallel::Layout{4, 1, 1, false, {}},
        loom::parallel::Layout{4, 1, 3, false, {}}, loom::parallel::Layout{1, 4, 0, false, plan},
        loom::parallel::Layout{2, 2, 2, false, plan}, loom::parallel::Layout{2, 2, 3, false, plan}}) {
    hw.world = l.dp * l.tp;
    auto est = loom::parallel::EstimateCompiled(m, 8, hw, l);
    ASSERT_TRUE(est.ok()) << loom::parallel::LayoutName(l) << ": " << est.status();
    testing::NullCommunicator dp(l.dp), tp(l.tp);
    compiler::CompileOptions co = loom::parallel::PlanningCompileOptions(m.forward, m.train);
    co.lower = true;
    if (l.dp > 1) co.lowering.communicators["dp"] = &dp;
    if (l.tp > 1) co.lowering.communicators["tp"] = &tp;
    auto c = loom::parallel::CompileParallel(m.forward, co, m.model, 8, l);
    ASSERT_TRUE(c.ok()) << c.status();
    const compiler::ir::Graph& g = c->program->graph;
    int64_t state = 0;
    for (const auto& in : g.inputs())
      if (in.kind != compiler::ir::InputKind::kInput) state += Bytes(g, in.value);
    EXPECT_EQ(est->memory.parameters + est->memory.optimizer, state) << loom::parallel::LayoutName(l);
    EXPECT_GT(est->memory.gradients, 0) << loom::parallel::LayoutName(l);
    EXPECT_EQ(est->memory.gradients + est->memory.activations, c->program->plan.peak_bytes)
        << loom::parallel::LayoutName(l);
    EXPECT_EQ(est->memory.workspace, 0);
    EXPECT_EQ(est->comm.tp_collectives > 0, l.tp > 1) << loom::parallel::LayoutName(l);
    EXPECT_EQ(est->comm.dp_collectives > 0, l.dp > 1) << loom::parallel::LayoutName(l);
    EXPECT_GT(est->compute_seconds, 0);
  }
}

TEST(GraphPlanner, RanksEveryLayoutOfTheWorldWithTheProposedPlan) {
  loom::parallel::Hardware hw;
  hw.world = 4;
  auto p = loom::parallel::MakeGraphPlan(Model(), 8, hw);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_GE(p->winner, 0);
  std::map<std::string, const loom::parallel::Candidate*> by;
  for (const loom::parallel::Candidate& c : p->ranked) by[loom::parallel::LayoutName(c.layout)] = &c;
  // dp=4 (ZeRO 0-3), dp=2 x tp=2 (ZeRO 0-3), tp=4; no sequence parallelism.
  EXPECT_EQ(p->ranked.size(), 9u);
  ASSERT_TRUE(by.count("dp=4 tp=1 zero=0") && by.count("dp=4 tp=1 zero=1") && by.count("dp=4 tp=1 zero=3") &&
              by.count("dp=1 tp=4 zero=0"));
  const loom::parallel::MemoryEstimate& z0 = by["dp=4 tp=1 zero=0"]->memory;
  // ZeRO-1 shards the AdamW state over dp (every 2-D matrix and 1-D vector here splits by 4).
  EXPECT_EQ(by["dp=4 tp=1 zero=1"]->memory.optimizer * 4, z0.optimizer);
  // ZeRO-3 shards the parameters too; the buffer stays whole.
  const int64_t buffer = 8 * 16 * 4;
  EXPECT_EQ((by["dp=4 tp=1 zero=3"]->memory.parameters - buffer) * 4, z0.parameters - buffer);
  // tp=4 with the proposal shards the matrices and up.b: wte, up.w, down.w, up.b.
  ASSERT_TRUE(p->tp_plans.count(4));
  EXPECT_TRUE(p->tp_plans.at(4).proposed);
  const int64_t sharded = (64 * 16 * 3 + 64) * 4, replicated = (16 * 3) * 4;
  EXPECT_EQ(by["dp=1 tp=4 zero=0"]->memory.parameters, sharded / 4 + replicated + buffer);
  const std::string table = loom::parallel::FormatPlanTable(*p);
  EXPECT_NE(table.find("model: the test block"), std::string::npos) << table;
  EXPECT_NE(table.find("tensor-parallel plan for tp=4 (proposed)"), std::string::npos) << table;
}

}  // namespace
}  // namespace loom::tests::parallel
