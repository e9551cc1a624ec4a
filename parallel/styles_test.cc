// Parallel styles: the annotations each layout gives a model's joint graph,
// the compiled "parallel" stage, and early refusal of impossible layouts.
#include "parallel/styles.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/text.h"
#include "compiler/models/models.h"
#include "gtest/gtest.h"

namespace loom::parallel {
namespace {

v1::ModelSpec Model(const std::string& family) {
  v1::ModelSpec m;
  m.set_family(family);
  m.set_n_layer(1);
  m.set_n_head(4);
  m.set_d_model(16);
  m.set_seq_len(8);
  m.set_vocab(64);
  return m;
}

absl::StatusOr<compiler::Compilation> Compile(const v1::ModelSpec& m, const Layout& l) {
  compiler::models::BuildOptions bo;
  bo.batch = 4;
  auto fwd = compiler::models::BuildForward(m, bo);
  if (!fwd.ok()) return fwd.status();
  compiler::CompileOptions co;
  co.adamw = compiler::AdamWOptions{};
  co.lower = false;
  return CompileParallel(*fwd, co, m, bo.batch, l);
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(Styles, DataParallelAllReducesEveryGradientOverDp) {
  Layout l;
  l.dp = 4;
  auto c = Compile(Model("gpt"), l);
  ASSERT_TRUE(c.ok()) << c.status();
  auto text = c->Dump("parallel");
  ASSERT_TRUE(text.ok());
  auto params = compiler::models::Parameters(Model("gpt"));
  // One all_reduce(sum) per gradient and one for the loss's count of counted
  // targets (shared by its forward and backward); one all_reduce(avg) for the loss.
  EXPECT_EQ(Count(*text, "reduce=\"sum\", world=4"), static_cast<int>(params->size()) + 1) << *text;
  EXPECT_EQ(Count(*text, "reduce=\"avg\", world=4"), 1) << *text;
  EXPECT_TRUE(absl::StrContains(*text, "%x: i32[1, 8] @\"[dp=S(0), tp=R]\"")) << *text;
}

TEST(Styles, BucketingMergesTheGradientAllReduces) {
  Layout l;
  l.dp = 4;
  compiler::models::BuildOptions bo;
  bo.batch = 4;
  auto fwd = compiler::models::BuildForward(Model("gpt"), bo);
  ASSERT_TRUE(fwd.ok());
  compiler::CompileOptions co;
  co.adamw = compiler::AdamWOptions{};
  co.lower = false;
  auto c = CompileParallel(*fwd, co, Model("gpt"), 4, l, kGradientBucketBytes);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string text = *c->Dump("parallel");
  // Far below one bucket: every gradient in one concat, one all_reduce; the
  // loss's count of counted targets is not a gradient and keeps its own.
  EXPECT_EQ(Count(text, "reduce=\"sum\", world=4"), 2) << text;
  EXPECT_EQ(Count(text, "= concat("), 1) << text;
}

TEST(Styles, TensorParallelKeepsLogitsVocabSharded) {
  for (const char* family : {"gpt", "llama"}) {
    Layout l;
    l.tp = 2;
    auto c = Compile(Model(family), l);
    ASSERT_TRUE(c.ok()) << family << ": " << c.status();
    const std::string text = *c->Dump("parallel");
    EXPECT_TRUE(absl::StrContains(text, "vocab_onehot")) << family;
    EXPECT_TRUE(absl::StrContains(text, "reduce=\"max\"")) << family;
    // No value of the full [batch * seq, vocab] logits shape exists on a rank.
    EXPECT_FALSE(absl::StrContains(text, ": f32[32, 64]")) << family << "\n" << text;
    // The dump is valid IR text (placements included).
    auto parsed = compiler::ir::ParseGraph(text);
    ASSERT_TRUE(parsed.ok()) << family << ": " << parsed.status();
    EXPECT_EQ(compiler::ir::PrintGraph(*parsed), text);
  }
}

TEST(Styles, ZeroStagesShardState) {
  Layout l;
  l.dp = 2;
  l.zero_stage = 2;
  auto c = Compile(Model("llama"), l);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string text = *c->Dump("parallel");
  EXPECT_TRUE(absl::StrContains(text, "%output.m: f32[8, 64] @\"[dp=S(0), tp=R]\" state")) << text;
  EXPECT_GT(Count(text, "reduce_scatter("), 0);
  l.zero_stage = 3;
  c = Compile(Model("llama"), l);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(absl::StrContains(*c->Dump("parallel"), "%output: f32[8, 64] @\"[dp=S(0), tp=R]\" param"));
}

TEST(Styles, ImpossibleLayoutsFailBeforeCompiling) {
  Layout l;
  l.tp = 3;  // does not divide n_head = 4
  auto c = Compile(Model("gpt"), l);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StrContains(c.status().message(), "parallel.tp")) << c.status();
  l.tp = 1;
  l.dp = 3;  // does not divide the batch of 4
  c = Compile(Model("gpt"), l);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StrContains(c.status().message(), "batch")) << c.status();
}

// The evaluation step (forward only, loss and logits) localizes under every
// layout: its parameters take the training step's specs (the trainer shares
// the tensors), and both outputs come out replicated in their global shapes.
TEST(Styles, EvaluationCompilesUnderEveryLayoutWithReplicatedOutputs) {
  struct Case {
    int dp, tp, zero;
    bool sp;
  };
  for (const char* family : {"gpt", "llama"}) {
    for (const Case& k : {Case{4, 1, 0, false}, Case{1, 2, 0, false}, Case{2, 2, 3, false}, Case{1, 2, 0, true}}) {
      Layout l;
      l.dp = k.dp;
      l.tp = k.tp;
      l.zero_stage = k.zero;
      l.sequence_parallel = k.sp;
      const std::string name = absl::StrCat(family, " dp=", k.dp, " tp=", k.tp, " zero=", k.zero, " sp=", k.sp);
      compiler::models::BuildOptions bo;
      bo.batch = 4;
      bo.return_logits = true;
      auto fwd = compiler::models::BuildForward(Model(family), bo);
      ASSERT_TRUE(fwd.ok()) << name << ": " << fwd.status();
      compiler::CompileOptions eo;
      eo.differentiate = false;
      eo.lower = false;
      auto eval = CompileParallel(*fwd, eo, Model(family), bo.batch, l);
      ASSERT_TRUE(eval.ok()) << name << ": " << eval.status();
      auto train = Compile(Model(family), l);
      ASSERT_TRUE(train.ok()) << name << ": " << train.status();
      const compiler::ir::Graph& le = eval->stages.at("parallel");
      const compiler::ir::Graph& lt = train->stages.at("parallel");
      for (const auto& in : le.inputs()) {
        const int k2 = lt.FindInput(in.name);
        ASSERT_GE(k2, 0) << name << ": " << in.name;
        EXPECT_EQ(le.value(in.value).placement, lt.value(lt.inputs()[k2].value).placement) << name << ": " << in.name;
      }
      ASSERT_EQ(le.outputs().size(), 2u) << name;
      for (size_t o = 0; o < 2; ++o) {
        const int v = le.outputs()[o].value;
        EXPECT_EQ(le.value(v).placement, "[dp=R, tp=R]") << name << ": output " << o;
        EXPECT_EQ(le.meta(v).shape, fwd->meta(fwd->outputs()[o].value).shape) << name << ": output " << o;
      }
    }
  }
}

// adamw needs differentiate; differentiate alone is gradient accumulation's
// micro-step, whose gradients stay Partial over dp (no reduction) while the
// loss is replicated.
TEST(Styles, MicroStepLeavesGradientsUnreduced) {
  compiler::models::BuildOptions bo;
  bo.batch = 4;
  auto fwd = compiler::models::BuildForward(Model("gpt"), bo);
  ASSERT_TRUE(fwd.ok());
  Layout l;
  l.dp = 2;
  compiler::CompileOptions co;
  co.differentiate = false;
  co.adamw = compiler::AdamWOptions{};
  auto refused = CompileParallel(*fwd, co, Model("gpt"), 4, l);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  co.differentiate = true;
  co.adamw.reset();
  co.lower = false;  // no communicators here: the localized graph is what is checked
  auto c = CompileParallel(*fwd, co, Model("gpt"), 4, l);
  ASSERT_TRUE(c.ok()) << c.status();
  const compiler::ir::Graph& local = c->stages.at("parallel");
  ASSERT_GT(local.outputs().size(), 1u);
  EXPECT_EQ(local.value(local.outputs()[0].value).placement, "[dp=R, tp=R]");
  for (size_t i = 1; i < local.outputs().size(); ++i)
    EXPECT_EQ(local.value(local.outputs()[i].value).placement, "[dp=P(sum), tp=R]") << "gradient output " << i;
  for (const auto& n : local.nodes())
    if (n.op == "all_reduce")
      EXPECT_EQ(local.meta(n.outputs[0]).shape.size(), 0u) << "only the loss is reduced";
}

}  // namespace
}  // namespace loom::parallel
