#include "compiler/models/models.h"

#include <cmath>
#include <set>

#include "compiler/autodiff.h"
#include "compiler/executor.h"
#include "compiler/ir/text.h"
#include "compiler/passes/recover.h"
#include "gtest/gtest.h"

namespace loom::compiler::models {
namespace {

v1::ModelSpec Spec(const std::string& family) {
  v1::ModelSpec s;
  s.set_family(family);
  s.set_n_layer(2);
  s.set_n_head(3);
  s.set_d_model(96);
  s.set_seq_len(37);
  s.set_vocab(256);
  if (family == "llama") {
    s.set_n_kv_head(1);
    s.set_ffn_hidden(160);
  }
  return s;
}

TEST(Models, GptParameterCountMatchesTheFormula) {
  auto p = Parameters(Spec("gpt"));
  ASSERT_TRUE(p.ok()) << p.status();
  const int64_t C = 96, V = 256, T = 37, L = 2;
  int64_t per_layer = 2 * C + C * 3 * C + 3 * C + C * C + C + 2 * C + C * 4 * C + 4 * C + 4 * C * C + C;
  EXPECT_EQ(NumParameters(*p), V * C + T * C + L * per_layer + 2 * C);
}

TEST(Models, BothFamiliesBuildWithOddSizes) {
  for (const char* fam : {"gpt", "llama"}) {
    auto g = BuildForward(Spec(fam), {.batch = 2, .return_logits = true});
    ASSERT_TRUE(g.ok()) << fam << ": " << g.status();
    ASSERT_EQ(g->outputs().size(), 2u);
    EXPECT_EQ(g->meta(g->outputs()[0].value).shape, Shape{});
    EXPECT_EQ(g->meta(g->outputs()[1].value).shape, (Shape{2 * 37, 256}));
  }
}

TEST(Models, BadSpecsNameTheKey) {
  v1::ModelSpec s = Spec("gpt");
  s.set_n_head(5);
  auto p = Parameters(s);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(std::string(p.status().message()).find("model.d_model"), std::string::npos);
  s = Spec("llama");
  s.set_n_kv_head(2);
  EXPECT_NE(std::string(Parameters(s).status().message()).find("model.n_kv_head"), std::string::npos);
  s = Spec("bert");
  EXPECT_NE(std::string(Parameters(s).status().message()).find("model.family"), std::string::npos);
}

TEST(Models, InitIsDeterministic) {
  auto p = Parameters(Spec("llama"));
  ASSERT_TRUE(p.ok());
  auto a = InitParameters(*p, 5), b = InitParameters(*p, 5), c = InitParameters(*p, 6);
  EXPECT_EQ(a.at("output").ToVector(), b.at("output").ToVector());
  EXPECT_NE(a.at("output").ToVector(), c.at("output").ToVector());
  EXPECT_EQ(a.at("norm.weight").GetDouble(0), 1.0);
}

// One parameter at a time, by any number of threads: the same values.
TEST(Models, InitParameterAloneAndThreadedMatchesInitParameters) {
  v1::ModelSpec s = Spec("llama");
  s.set_vocab(4096);  // a table of 4096 x C elements: several threads' ranges
  auto p = Parameters(s);
  ASSERT_TRUE(p.ok());
  auto all = InitParameters(*p, 7);
  for (size_t i = 0; i < p->size(); ++i)
    for (int threads : {1, 3, 8}) {
      Tensor one = InitParameter(*p, i, 7, threads);
      EXPECT_EQ(one.ToVector(), all.at((*p)[i].name).ToVector()) << (*p)[i].name << " threads " << threads;
    }
}


int CountOps(const ir::Graph& g, const std::string& op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += node.op == op;
  return n;
}

// Dropout (BuildOptions::dropout): p = 0 adds nothing and keeps the fused
// sdpa; p > 0 puts one dropout node per site, each with its own seed, reading
// the shared %step, and writes attention out with dropout on its
// probabilities [B, H, T, T].
TEST(ModelsDropout, ZeroBuildsTheSameGraphAndEachSiteHasItsOwnSeed) {
  for (const char* fam : {"gpt", "llama"}) {
    auto plain = BuildForward(Spec(fam), {.batch = 2});
    auto zero = BuildForward(Spec(fam), {.batch = 2, .dropout = 0, .dropout_seed = 9});
    ASSERT_TRUE(plain.ok() && zero.ok());
    EXPECT_EQ(ir::PrintGraph(*plain), ir::PrintGraph(*zero)) << fam;
    EXPECT_LT(plain->FindInput("step"), 0);
    EXPECT_EQ(CountOps(*zero, "sdpa"), 2) << fam;
    for (const char* op : {"softmax", "where", "dropout"}) EXPECT_EQ(CountOps(*zero, op), 0) << fam << " " << op;
    auto dropped = BuildForward(Spec(fam), {.batch = 2, .dropout = 0.1, .dropout_seed = 9});
    ASSERT_TRUE(dropped.ok()) << dropped.status();
    const int step = dropped->FindInput("step");
    ASSERT_GE(step, 0);
    std::set<int64_t> seeds;
    for (const ir::Node& n : dropped->nodes()) {
      if (n.op != "dropout") continue;
      EXPECT_DOUBLE_EQ(n.attrs.GetFloat("p", 0), 0.1);
      EXPECT_EQ(n.inputs.at(1), dropped->inputs()[step].value);
      seeds.insert(n.attrs.GetInt("seed", 0));
    }
    EXPECT_EQ(seeds.size(), 1u + 3 * 2) << fam << ": the embeddings and three sites per block";
    EXPECT_EQ(CountOps(*dropped, "sdpa"), 0) << fam;
    int on_probs = 0;
    for (const ir::Node& n : dropped->nodes()) {
      if (n.op != "dropout" || dropped->meta(n.inputs[0]).shape != Shape{2, 3, 37, 37}) continue;
      const ir::Node* sm = nullptr;
      for (const ir::Node& m : dropped->nodes())
        if (m.outputs.size() == 1 && m.outputs[0] == n.inputs[0]) sm = &m;
      ASSERT_NE(sm, nullptr);
      EXPECT_EQ(sm->op, "softmax");
      ++on_probs;
    }
    EXPECT_EQ(on_probs, 2) << fam << ": one attention-probability site per block";
    auto bad = BuildForward(Spec(fam), {.batch = 2, .dropout = 1.0});
    EXPECT_NE(std::string(bad.status().message()).find("model.dropout"), std::string::npos) << bad.status();
  }
}

v1::ModelSpec TinySpec(const std::string& family) {
  v1::ModelSpec s;
  s.set_family(family);
  s.set_n_layer(1);
  s.set_n_head(2);
  s.set_d_model(8);
  s.set_seq_len(4);
  s.set_vocab(16);
  s.set_ffn_hidden(16);
  return s;
}

// The graph's inputs in order: parameters from InitParameters(seed 1) in
// `dt`, fixed tokens, and the step.
std::vector<Tensor> TinyInputs(const ir::Graph& g, const v1::ModelSpec& spec, double step, DType dt) {
  auto init = InitParameters(*Parameters(spec), 1);
  std::vector<Tensor> in;
  for (const ir::GraphInput& i : g.inputs()) {
    const Shape& shape = g.meta(i.value).shape;
    if (i.name == "x" || i.name == "y") {
      std::vector<double> ids(static_cast<size_t>(NumElements(shape)));
      for (size_t e = 0; e < ids.size(); ++e) ids[e] = static_cast<double>((5 * e + (i.name == "y" ? 3 : 0)) % 16);
      in.push_back(Tensor::FromVector(shape, ids, DType::kI32));
    } else if (i.name == "step") {
      in.push_back(Tensor::FromVector({}, {step}, dt));
    } else {
      in.push_back(Tensor::FromVector(shape, init.at(i.name).ToVector(), dt));
    }
  }
  return in;
}

double LossOf(const ir::Graph& g, const std::vector<Tensor>& in) {
  auto exec = compiler::Executor::Create(g);
  EXPECT_TRUE(exec.ok()) << exec.status();
  auto out = exec->Run(in);
  EXPECT_TRUE(out.ok()) << out.status();
  return (*out)[0].GetDouble(0);
}

// A step's masks are a function of (seed, step): a fresh executor (a restarted
// process) at the same step computes the same loss bit for bit; another step
// or another seed draws other masks.
TEST(ModelsDropout, MasksFollowSeedAndStepOnly) {
  const v1::ModelSpec spec = TinySpec("gpt");
  auto g = BuildForward(spec, {.batch = 2, .dropout = 0.3, .dropout_seed = 4});
  auto other_seed = BuildForward(spec, {.batch = 2, .dropout = 0.3, .dropout_seed = 5});
  auto plain = BuildForward(spec, {.batch = 2});
  ASSERT_TRUE(g.ok() && other_seed.ok() && plain.ok());
  const double at3 = LossOf(*g, TinyInputs(*g, spec, 3, DType::kF32));
  EXPECT_EQ(at3, LossOf(*g, TinyInputs(*g, spec, 3, DType::kF32)));
  EXPECT_NE(at3, LossOf(*g, TinyInputs(*g, spec, 4, DType::kF32)));
  EXPECT_NE(at3, LossOf(*other_seed, TinyInputs(*other_seed, spec, 3, DType::kF32)));
  EXPECT_NE(at3, LossOf(*plain, TinyInputs(*plain, spec, 3, DType::kF32)));
}

// Attention written out (the dropout graph with every p set to 0) against
// the fused sdpa graph, in gpt and in llama with grouped-query attention
// (3 query heads per kv head): the causal mask, scale and kv-head expansion.
TEST(ModelsDropout, WrittenOutAttentionMatchesSdpaAtPZero) {
  for (const char* fam : {"gpt", "llama"}) {
    SCOPED_TRACE(fam);
    v1::ModelSpec spec = TinySpec(fam);
    spec.set_n_head(fam == std::string("llama") ? 6 : 2);
    spec.set_d_model(fam == std::string("llama") ? 24 : 8);
    spec.set_n_kv_head(fam == std::string("llama") ? 2 : 0);
    spec.set_seq_len(5);
    auto fused = BuildForward(spec, {.batch = 2});
    auto dropped = BuildForward(spec, {.batch = 2, .dropout = 0.5, .dropout_seed = 3});
    ASSERT_TRUE(fused.ok() && dropped.ok()) << dropped.status();
    std::string text = ir::PrintGraph(*dropped);
    int replaced = 0;
    for (size_t p; (p = text.find("{p=0.5,")) != std::string::npos; ++replaced) text.replace(p, 7, "{p=0,");
    EXPECT_EQ(replaced, 1 + 3 * 1);
    auto open = ir::ParseGraph(text);
    ASSERT_TRUE(open.ok()) << open.status();
    const double want = LossOf(*fused, TinyInputs(*fused, spec, 0, DType::kF32));
    const double got = LossOf(*open, TinyInputs(*open, spec, 2, DType::kF32));
    EXPECT_NEAR(got, want, 1e-5 * std::abs(want));
    const double dropped_loss = LossOf(*dropped, TinyInputs(*dropped, spec, 2, DType::kF32));
    EXPECT_GT(std::abs(dropped_loss - want), 1e-5 * std::abs(want)) << "p = 0.5 leaves the loss unchanged";
  }
}

// The recovery passes (run on imported graphs) applied to a built-in graph
// with dropout: no sdpa appears, every dropout node stays and the loss is
// unchanged. (recover_attention_test has the pattern with a constant fill,
// where only the dropout stops the match.)
TEST(ModelsDropout, RecoveryPassesKeepAttentionDropout) {
  for (const char* fam : {"gpt", "llama"}) {
    SCOPED_TRACE(fam);
    auto g = BuildForward(Spec(fam), {.batch = 2, .dropout = 0.2, .dropout_seed = 5});
    ASSERT_TRUE(g.ok()) << g.status();
    ir::Graph recovered = *g;
    passes::recover::ConstantTable consts;
    auto log = passes::RecoverFastOps(recovered, consts);
    ASSERT_TRUE(log.ok()) << log.status();
    EXPECT_EQ(CountOps(recovered, "sdpa"), 0);
    EXPECT_EQ(CountOps(recovered, "dropout"), CountOps(*g, "dropout"));
    EXPECT_EQ(CountOps(recovered, "dropout"), 1 + 3 * 2);
    EXPECT_EQ(LossOf(recovered, TinyInputs(recovered, Spec(fam), 3, DType::kF32)),
              LossOf(*g, TinyInputs(*g, Spec(fam), 3, DType::kF32)));
  }
}

// Gradients through the dropout sites (embeddings, residual branches and
// attention probabilities) against central finite differences, in f64 (the
// f32 graph retyped through its text form), at a fixed step; llama with
// grouped-query attention (2 query heads per kv head).
TEST(ModelsDropout, GradientsMatchFiniteDifferences) {
  for (const char* fam : {"gpt", "llama"}) {
    SCOPED_TRACE(fam);
    v1::ModelSpec spec = TinySpec(fam);
    if (fam == std::string("llama")) spec.set_n_kv_head(1);
    auto g32 = BuildForward(spec, {.batch = 2, .dropout = 0.3, .dropout_seed = 11});
    ASSERT_TRUE(g32.ok()) << g32.status();
    std::string text = ir::PrintGraph(*g32);
    for (size_t p; (p = text.find("f32")) != std::string::npos;) text.replace(p, 3, "f64");
    for (size_t p = 0; (p = text.find("= sdpa(", p)) != std::string::npos; ++p)  // its lse stays f32
      text.replace(text.rfind("f64", text.find('\n', p)), 3, "f32");
    auto g = ir::ParseGraph(text);
    ASSERT_TRUE(g.ok()) << g.status();
    auto j = compiler::BuildJointGraph(*g);
    ASSERT_TRUE(j.ok()) << j.status();
    std::vector<Tensor> in = TinyInputs(*g, spec, 7, DType::kF64);
    auto joint = compiler::Executor::Create(j->graph);
    ASSERT_TRUE(joint.ok()) << joint.status();
    auto outs = joint->Run(in);
    ASSERT_TRUE(outs.ok()) << outs.status();
    auto forward = compiler::Executor::Create(*g);
    ASSERT_TRUE(forward.ok());
    auto loss_at = [&] { return (*forward->Run(in))[0].GetDouble(0); };
    int checked = 0;
    for (size_t p = 0; p < j->wrt_inputs.size(); ++p) {
      const int k = j->wrt_inputs[p];
      const Tensor& grad = (*outs)[static_cast<size_t>(j->num_forward_outputs) + p];
      for (int64_t e = 0; e < in[k].numel(); e += 7, ++checked) {
        const double h = 1e-5, x0 = in[k].GetDouble(e);
        in[k].SetDouble(e, x0 + h);
        const double up = loss_at();
        in[k].SetDouble(e, x0 - h);
        const double down = loss_at();
        in[k].SetDouble(e, x0);
        const double fd = (up - down) / (2 * h), an = grad.GetDouble(e);
        EXPECT_NEAR(an, fd, 1e-8 + 1e-6 * std::abs(fd)) << g->inputs()[k].name << "[" << e << "]";
      }
    }
    EXPECT_GT(checked, 100);
  }
}

}  // namespace
}  // namespace loom::compiler::models
