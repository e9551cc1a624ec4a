// parallel.tp_plan on imported graphs (tp_plan.h): what each style shards in
// the three layouts torch.onnx.export gives a Linear, first-match rules, every
// refusal naming the parameter, propagation refusing a plan it cannot keep
// (through CompileParallel), and tp: auto's proposal on a small transformer
// block (embedding, norm, MLP, residual, tied head, loss).
#include "parallel/tp_plan.h"

#include "absl/strings/match.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"
#include "parallel/styles.h"

namespace loom::parallel {
namespace {

using dtensor::Placement;

compiler::ir::Graph Parse(const std::string& text) {
  auto g = compiler::ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : compiler::ir::Graph();
}

// A block with a tied head: wte [16, 8] is looked up and, transposed, the
// head; up/down are Linear weights stored [out, in] and read through a
// Transpose (the exporter's form without constant folding); pos [4, 8] is
// added as it is.
constexpr char kBlock[] = R"(graph @lm(%wte: f32[16, 8] param, %pos: f32[4, 8] param, %ln.w: f32[8] param, %ln.b: f32[8] param, %up.w: f32[32, 8] param, %up.b: f32[32] param, %down.w: f32[8, 32] param, %down.b: f32[8] param, %x: i32[2, 4], %y: i32[2, 4]) {
  %0 = embedding(%wte, %x) : f32[2, 4, 8]
  %1 = add(%0, %pos) : f32[2, 4, 8]
  %2, %3, %4 = layernorm(%1, %ln.w, %ln.b) {eps=1e-05} : f32[2, 4, 8], f32[2, 4], f32[2, 4]
  %5 = permute(%up.w) {dims=[1, 0]} : f32[8, 32]
  %6 = matmul(%2, %5) : f32[2, 4, 32]
  %7 = add(%up.b, %6) : f32[2, 4, 32]
  %8 = gelu(%7) : f32[2, 4, 32]
  %9 = permute(%down.w) {dims=[1, 0]} : f32[32, 8]
  %10 = matmul(%8, %9) : f32[2, 4, 8]
  %11 = add(%10, %down.b) : f32[2, 4, 8]
  %12 = add(%1, %11) : f32[2, 4, 8]
  %13 = permute(%wte) {dims=[1, 0]} : f32[8, 16]
  %14 = matmul(%12, %13) : f32[2, 4, 16]
  %15 = reshape(%14) {shape=[8, 16]} : f32[8, 16]
  %16 = reshape(%y) {shape=[8]} : i32[8]
  %17, %18 = cross_entropy(%15, %16) : f32[], f32[8]
  return %17
})";

std::map<std::string, Placement> Placements(const std::vector<TpAssignment>& a) {
  std::map<std::string, Placement> out;
  for (const TpAssignment& x : a) out[x.param] = x.placement;
  return out;
}

absl::StatusOr<std::map<std::string, Placement>> Resolve(const std::string& graph, const std::vector<TpRule>& plan,
                                                        int tp = 2) {
  auto a = ResolveTpPlan(Parse(graph), plan, tp);
  if (!a.ok()) return a.status();
  return Placements(*a);
}

// One Linear y = x W^T + b with in = 4, out = 6, in each exported form.
std::string Linear(const std::string& body, const std::string& w_shape) {
  return absl::StrCat("graph @l(%w: f32", w_shape, " param, %b: f32[6] param, %x: f32[3, 2, 4]) {\n", body,
                      "  return %2\n}");
}

TEST(TpPlan, ColwiseAndRowwiseMeanTheSameInEveryLinearForm) {
  const std::string transpose = Linear(
      "  %0 = permute(%w) {dims=[1, 0]} : f32[4, 6]\n  %1 = matmul(%x, %0) : f32[3, 2, 6]\n"
      "  %2 = add(%1, %b) : f32[3, 2, 6]\n",
      "[6, 4]");
  const std::string folded =
      Linear("  %1 = matmul(%x, %w) : f32[3, 2, 6]\n  %2 = add(%1, %b) : f32[3, 2, 6]\n", "[4, 6]");
  const std::string gemm = Linear(
      "  %1 = matmul(%x, %w) {trans_a=false, trans_b=true} : f32[3, 2, 6]\n  %2 = add(%1, %b) : f32[3, 2, 6]\n",
      "[6, 4]");
  // [out, in] (Transpose + MatMul, Gemm transB=1) or [in, out] (folded).
  for (const auto& [graph, out_dim] : std::vector<std::pair<std::string, int>>{{transpose, 0}, {folded, 1}, {gemm, 0}}) {
    auto col = Resolve(graph, {{"*", "colwise"}});
    ASSERT_TRUE(col.ok()) << col.status();
    EXPECT_EQ(col->at("w"), Placement::Shard(out_dim)) << graph;
    EXPECT_EQ(col->at("b"), Placement::Shard(0)) << graph;
    auto row = Resolve(graph, {{"*", "rowwise"}});
    ASSERT_TRUE(row.ok()) << row.status();
    EXPECT_EQ(row->at("w"), Placement::Shard(1 - out_dim)) << graph;
    EXPECT_EQ(row->at("b"), Placement::Replicate()) << graph;  // a bias has no input features
  }
}

TEST(TpPlan, TheFirstMatchingRuleWinsAndUnmatchedParametersAreReplicated) {
  auto p = Resolve(kBlock, {{"*.w", "replicate"}, {"up.*", "colwise"}, {"wte", "vocab"}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->at("up.w"), Placement::Replicate());  // "*.w" came first
  EXPECT_EQ(p->at("up.b"), Placement::Shard(0));
  EXPECT_EQ(p->at("wte"), Placement::Shard(0));
  EXPECT_EQ(p->at("down.w"), Placement::Replicate());
  EXPECT_EQ(p->at("pos"), Placement::Replicate());
  // With tp = 1 nothing is sharded, whatever the rules say.
  p = Resolve(kBlock, {{"up.*", "colwise"}}, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->at("up.w"), Placement::Replicate());
}

// Each bad plan is InvalidArgument naming parallel.tp_plan and what is wrong.
TEST(TpPlan, BadPlansAreRefusedNamingTheParameter) {
  struct Bad {
    std::vector<TpRule> plan;
    int tp;
    std::vector<std::string> says;
  };
  const std::vector<Bad> cases = {
      {{{"blocks.*", "colwise"}}, 2, {"pattern 'blocks.*' matches no parameter", "wte, pos, ln.w"}},
      {{{"up.*", "colwise"}, {"up.w", "rowwise"}}, 2, {"pattern 'up.w' never applies"}},
      {{{"up.w", "colwise"}}, 3, {"parameter 'up.w' [32, 8]", "dim 0 (32) does not split evenly over tp = 3"}},
      {{{"wte", "colwise"}}, 2, {"parameter 'wte'", "'embedding' (node 0) would shard dim 1", "'matmul' (node 12) dim 0",
                                 "takes vocab"}},
      {{{"up.w", "vocab"}}, 2, {"parameter 'up.w'", "no lookup reads this one"}},
      {{{"pos", "colwise"}}, 2, {"parameter 'pos'", "'add' (node 1) reads it"}},
      {{{"ln.b", "vocab"}}, 2, {"parameter 'ln.b'", "vocab shards a 2-D table"}},
  };
  for (const Bad& c : cases) {
    auto p = Resolve(kBlock, c.plan, c.tp);
    ASSERT_FALSE(p.ok()) << c.plan[0].pattern;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(p.status().message(), "parallel.tp_plan: ")) << p.status();
    for (const std::string& s : c.says) EXPECT_TRUE(absl::StrContains(p.status().message(), s)) << s << " in " << p.status();
  }
}

v1::ModelSpec Onnx() {
  v1::ModelSpec m;
  m.set_family("onnx");
  m.set_seq_len(4);
  m.set_vocab(16);
  return m;
}

absl::StatusOr<compiler::Compilation> CompileWith(const std::vector<TpRule>& plan, int dp = 1, int zero = 0) {
  compiler::CompileOptions co;
  co.adamw = compiler::AdamWOptions{};
  co.lower = false;
  Layout l{dp, 2, zero, false, plan};
  return CompileParallel(Parse(kBlock), co, Onnx(), 2, l);
}

TEST(TpPlan, PropagationRefusesAPlanItCannotKeep) {
  // A layernorm needs its weight whole: sharding it would gather it over tp
  // every step.
  auto c = CompileWith({{"ln.w", "colwise"}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* s : {"parallel.tp_plan: parameter 'ln.w' [8] (colwise, rule 'ln.w')", "'layernorm' (node",
                        "--dump=joint", "needs it as R over tp, not S(0)"})
    EXPECT_TRUE(absl::StrContains(c.status().message(), s)) << s << " in " << c.status();
}

TEST(TpPlan, AMegatronPlanCompilesWithLocalBlocks) {
  const std::vector<TpRule> plan = {{"up.*", "colwise"}, {"down.w", "rowwise"}, {"wte", "vocab"}};
  for (int zero : {0, 3}) {
    auto c = CompileWith(plan, 2, zero);
    ASSERT_TRUE(c.ok()) << c.status();
    const compiler::ir::Graph& local = c->stages.at("parallel");
    auto shape = [&](const std::string& name) { return local.meta(local.inputs()[local.FindInput(name)].value).shape; };
    // tp halves the sharded dim; ZeRO-3 also halves another dim over dp.
    const int64_t z = zero == 3 ? 2 : 1;
    EXPECT_EQ(shape("up.w"), (Shape{16, 8 / z}));
    EXPECT_EQ(shape("up.b"), (Shape{16}));  // 1-D: no dim left for dp (ZeRO keeps it whole)
    EXPECT_EQ(shape("down.w"), (Shape{8 / z, 16}));
    EXPECT_EQ(shape("wte"), (Shape{8, 8 / z}));
    EXPECT_EQ(shape("ln.w"), (Shape{8 / z}));
  }
}

TEST(TpPlan, TpAutoProposesMegatronForATransformerBlock) {
  const compiler::ir::Graph g = Parse(kBlock);
  auto p = Placements(ProposeTpAssignments(g, 2));
  EXPECT_EQ(p.at("wte"), Placement::Shard(0));     // looked up and tied: vocab
  EXPECT_EQ(p.at("up.w"), Placement::Shard(0));    // after the norm: colwise ([out, in])
  EXPECT_EQ(p.at("up.b"), Placement::Shard(0));    // its bias
  EXPECT_EQ(p.at("down.w"), Placement::Shard(1));  // after up through gelu: rowwise
  for (const char* r : {"down.b", "ln.w", "ln.b", "pos"}) EXPECT_EQ(p.at(r), Placement::Replicate()) << r;
  // Propagation keeps all of it, and the rules give the same placements back.
  compiler::CompileOptions co;
  co.adamw = compiler::AdamWOptions{};
  co.lower = false;
  auto fit = FitTpPlan(g, co, Onnx(), 2, Layout{1, 2, 0, false, {}});
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_TRUE(fit->replicated.empty());
  EXPECT_EQ(Placements(fit->assignments), p);
  auto again = ResolveTpPlan(g, fit->rules, 2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Placements(*again), p);
  // Where tp does not divide a dim the proposal replicates it.
  auto p3 = Placements(ProposeTpAssignments(g, 3));
  for (const auto& [name, placement] : p3) EXPECT_EQ(placement, Placement::Replicate()) << name;
}

TEST(TpPlan, RulesCoverLayerFamiliesAndEscapeNames) {
  auto a = [](const std::string& name, const std::string& style) {
    TpAssignment x;
    x.param = name;
    x.style = style;
    return x;
  };
  const std::vector<TpAssignment> in = {a("h.0.a.w", "colwise"),  a("h.1.a.w", "colwise"),
                                        a("h.0.b.w", "colwise"),  a("h.1.b.w", "rowwise"),
                                        a("h.0.n.w", "replicate"), a("onnx::MatMul[1]*", "colwise")};
  const std::vector<TpRule> rules = RulesFor(in);
  ASSERT_EQ(rules.size(), 4u);
  EXPECT_EQ(rules[0].pattern, "h.*.a.w");
  EXPECT_EQ(rules[1].pattern, "h.0.b.w");  // the family disagrees: exact names
  EXPECT_EQ(rules[2].pattern, "h.1.b.w");
  EXPECT_EQ(rules[3].pattern, "onnx::MatMul\\[1\\]\\*");
  EXPECT_EQ(FormatTpRules({rules[0]}), "  'h.*.a.w': colwise\n");
}

}  // namespace
}  // namespace loom::parallel
