// storage_dtypes: the mixed-precision policy on the gpt-small joint graph.
#include "compiler/cuda/plan_dtypes.h"

#include <map>
#include <string>
#include <vector>

#include "compiler/cuda/plan_test_util.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

TEST(StorageDTypes, F32KeepsGraphDTypes) {
  ir::Graph g = GptJoint();
  std::vector<DType> st = StorageDTypes(g, false);
  for (size_t v = 0; v < st.size(); ++v) EXPECT_EQ(st[v], g.meta(v).dtype);
}

TEST(StorageDTypes, Bf16Policy) {
  ir::Graph g = GptJoint();
  std::vector<DType> st = StorageDTypes(g, true);
  for (const ir::GraphInput& in : g.inputs()) EXPECT_EQ(st[in.value], g.meta(in.value).dtype) << in.name;
  std::map<std::string, int> seen;
  for (const ir::Node& n : g.nodes()) {
    ++seen[n.op];
    auto dt = [&](int k) { return st[n.outputs[k]]; };
    if (n.op == "embedding" || n.op == "gelu" || n.op == "sdpa_backward" || n.op == "cross_entropy_backward" ||
        n.op == "permute" || n.op == "slice" || n.op == "slice_backward") {
      EXPECT_EQ(dt(0), DType::kBF16) << n.op;
    } else if (n.op == "layernorm" || n.op == "layernorm_backward") {
      EXPECT_EQ(dt(0), DType::kBF16);
      EXPECT_EQ(dt(1), DType::kF32);
      EXPECT_EQ(dt(2), DType::kF32);
    } else if (n.op == "sdpa") {
      EXPECT_EQ(dt(0), DType::kBF16);
      EXPECT_EQ(dt(1), DType::kF32);
    } else if (n.op == "cross_entropy" || n.op == "grad_norm" || n.op == "embedding_backward") {
      for (size_t k = 0; k < n.outputs.size(); ++k) EXPECT_EQ(dt(k), DType::kF32) << n.op;
    } else if (n.op == "adamw") {
      EXPECT_EQ(st[n.inputs[1]], DType::kF32) << "parameter gradients stay f32";
      for (size_t k = 0; k < 3; ++k) EXPECT_EQ(dt(k), DType::kF32);
    } else if (n.op == "fill") {
      EXPECT_EQ(dt(0), DType::kF32) << "scalars stay f32";
    } else if (n.op == "reshape") {
      EXPECT_EQ(dt(0), st[n.inputs[0]]) << "a reshape keeps its input's dtype";
    }
  }
  EXPECT_GT(seen["adamw"], 10);
  EXPECT_EQ(seen["sdpa"], 2);
}

// The pass fills the plan's metas from the policy (the graph's shapes, the
// storage dtypes) and reports a change only when bf16 changed anything.
TEST(StorageDTypesPass, FillsThePlanMetas) {
  ir::Graph g = GptJoint(1);
  for (bool bf16 : {false, true}) {
    PlanOptions o;
    plan_internal::PlanState s(g, bf16, o);
    plan_internal::StorageDTypesPass pass;
    auto changed = pass.Run(s);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_EQ(*changed, bf16);
    const std::vector<DType> st = StorageDTypes(g, bf16);
    ASSERT_EQ(s.p.metas.size(), g.values().size());
    for (size_t v = 0; v < st.size(); ++v) {
      EXPECT_EQ(s.p.metas[v].dtype, st[v]);
      EXPECT_EQ(s.p.metas[v].shape, g.meta(v).shape);
    }
    EXPECT_EQ(s.attn_views, bf16) << "strided attention operands are a bf16 (flash) matter";
  }
}

// The lean memory policy: AdamW's m and v (inputs and updates) bf16, the
// parameter gradients bf16 where a GEMM or an add makes them, parameters f32.
TEST(StorageDTypes, LeanPolicyStoresStatesAndGradientsBf16) {
  ir::Graph g = LlamaJoint(64, 2);
  MemoryPolicy lean{true, true, true};
  std::vector<DType> st = StorageDTypes(g, true, lean);
  const std::vector<int> prod = plan_internal::Producers(g);
  int states = 0, bf16_grads = 0, f32_grads = 0;
  for (const ir::Node& n : g.nodes()) {
    if (n.op != "adamw") continue;
    EXPECT_EQ(st[n.inputs[0]], DType::kF32) << "parameters stay f32";
    for (int k : {2, 3}) {
      EXPECT_EQ(st[n.inputs[k]], DType::kBF16);
      EXPECT_EQ(st[n.outputs[k - 1]], DType::kBF16) << "an update keeps its input's dtype";
      ++states;
    }
    EXPECT_EQ(st[n.outputs[0]], DType::kF32);
    const ir::Node& gp = g.nodes()[prod[n.inputs[1]]];
    const bool f32_op = gp.op == "embedding_backward" || gp.op == "rmsnorm_backward" || gp.op == "sum";
    EXPECT_EQ(st[n.inputs[1]], f32_op ? DType::kF32 : DType::kBF16) << gp.op;
    (f32_op ? f32_grads : bf16_grads)++;
  }
  EXPECT_GT(states, 20);
  EXPECT_GE(bf16_grads, 15);  // 7 matrices a layer, and the output head
  EXPECT_GE(f32_grads, 2);    // the embedding's and the norms' weights
  for (const ir::GraphOutput& o : g.outputs())
    if (o.updates >= 0) EXPECT_EQ(st[o.value], st[g.inputs()[o.updates].value]) << g.inputs()[o.updates].name;
}

// Gradients stored bf16 under the standard policy (CudaOptions::bf16_grads):
// a weight-gradient GEMM's output is bf16, as autocast's bf16 GEMM rounds
// it; the embedding's, the norms' and the biases' gradients stay f32, and so
// does a sum with an f32 addend (GPT's tied embedding and output head);
// parameters, m and v stay f32.
void ExpectBf16Grads(const ir::Graph& g, const std::string& name) {
  const std::vector<int> prod = plan_internal::Producers(g);
  const std::vector<DType> plain = StorageDTypes(g, true);
  MemoryPolicy grads;
  grads.bf16_param_grads = true;
  const std::vector<DType> st = StorageDTypes(g, true, grads);
  int bf16 = 0, f32 = 0, tied = 0;
  for (const ir::Node& n : g.nodes()) {
    if (n.op != "adamw") continue;
    for (int k : {0, 2, 3}) EXPECT_EQ(st[n.inputs[k]], DType::kF32) << name << ": params, m and v stay f32";
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(st[n.outputs[k]], DType::kF32) << name;
    EXPECT_EQ(plain[n.inputs[1]], DType::kF32) << name << ": the default keeps every gradient f32";
    const ir::Node& gp = g.nodes()[prod[n.inputs[1]]];
    bool f32_op = gp.op == "embedding_backward" || gp.op == "rmsnorm_backward" || gp.op == "layernorm_backward" ||
                  gp.op == "sum";
    if (gp.op == "add") {
      bool f32_addend = false;
      for (int u : gp.inputs) f32_addend = f32_addend || g.nodes()[prod[u]].op == "embedding_backward";
      f32_op = f32_addend;
      tied += f32_addend;
    }
    EXPECT_EQ(st[n.inputs[1]], f32_op ? DType::kF32 : DType::kBF16) << name << ": " << gp.op;
    (f32_op ? f32 : bf16)++;
  }
  EXPECT_GE(bf16, 4) << name << ": the GEMM weights";
  EXPECT_GE(f32, 2) << name << ": the embedding's and the norms' weights";
  if (name == "gpt") EXPECT_EQ(tied, 1) << "GPT's tied embedding sums an f32 and a bf16 gradient";
  for (size_t v = 0; v < st.size(); ++v)
    if (st[v] != plain[v]) EXPECT_EQ(st[v], DType::kBF16) << name << ": only gradients change, to bf16";
}

TEST(StorageDTypes, Bf16GradsKeepParametersAndStatesF32) {
  ExpectBf16Grads(GptJoint(), "gpt");
  ExpectBf16Grads(LlamaJoint(64, 2), "llama");
}

// f32_residual: the values a norm reads (the embedding output and the adds
// that build the stream) and the stream's gradient (the adds that sum it, the
// norm backwards' dx, what embedding_backward reads) are f32; the norms'
// outputs, the GEMMs' outputs and the rest of the activations stay bf16.
// Without it every one of them is bf16.
void ExpectF32Residual(const ir::Graph& g, int n_layer, const std::string& name) {
  const std::vector<int> prod = plan_internal::Producers(g);
  for (bool on : {false, true}) {
    const std::vector<DType> st = StorageDTypes(g, true, {}, on);
    const DType want = on ? DType::kF32 : DType::kBF16;
    int norm_inputs = 0, stream_grads = 0, f32_activations = 0;
    for (const ir::Node& n : g.nodes()) {
      if (n.op == "layernorm" || n.op == "rmsnorm") {
        EXPECT_EQ(st[n.inputs[0]], want) << name << ": a norm's x";
        EXPECT_EQ(st[n.outputs[0]], DType::kBF16) << name << ": a norm's y (a GEMM's operand)";
        ++norm_inputs;
      } else if (n.op == "layernorm_backward" || n.op == "rmsnorm_backward") {
        EXPECT_EQ(st[n.outputs[0]], want) << name << ": a norm backward's dx";
        ++stream_grads;
      } else if (n.op == "embedding_backward") {
        EXPECT_EQ(st[n.inputs[0]], want) << name << ": the stream's gradient at the bottom";
      } else if (n.op == "embedding" && g.meta(n.outputs[0]).shape.size() == 3) {
        EXPECT_EQ(st[n.outputs[0]], want) << name << ": the token embedding";
      } else if (n.op == "matmul" || n.op == "sdpa" || n.op == "rope") {
        if (n.op != "matmul" || st[n.outputs[0]] == DType::kBF16)  // a weight gradient may be f32
          EXPECT_EQ(st[n.outputs[0]], DType::kBF16) << name << ": " << n.op;
      }
      for (int v : n.outputs)
        f32_activations += st[v] == DType::kF32 && g.meta(v).shape.size() == 3 && n.op != "matmul" && n.op != "adamw";
    }
    EXPECT_EQ(norm_inputs, 2 * n_layer + 1) << name;
    EXPECT_EQ(stream_grads, 2 * n_layer + 1) << name;
    // Per layer: 2 adds and 2 norm dx forward and backward, +1 each for the final norm.
    if (on) EXPECT_GE(f32_activations, 4 * n_layer + 2) << name;
  }
}

TEST(StorageDTypes, F32ResidualKeepsTheStreamAndItsGradientF32) {
  ExpectF32Residual(LlamaJoint(64, 3), 3, "llama");
  ExpectF32Residual(GptJoint(3), 3, "gpt");
  v1::ModelSpec spec;
  spec.set_family("llama");
  spec.set_n_layer(2);
  spec.set_n_head(4);
  spec.set_n_kv_head(2);
  spec.set_d_model(64);
  spec.set_seq_len(32);
  spec.set_vocab(128);
  // Block checkpointing: the recomputed forward's norms read f32 too.
  const ir::Graph ck = ModelJoint(spec, 2, /*checkpoint_blocks=*/true);
  int norms = 0;
  for (const ir::Node& n : ck.nodes()) norms += n.op == "rmsnorm";
  EXPECT_GT(norms, 2 * 2 + 1) << "the blocks' norms are recomputed";
  const std::vector<DType> st = StorageDTypes(ck, true, {}, true);
  for (const ir::Node& n : ck.nodes())
    if (n.op == "rmsnorm") EXPECT_EQ(st[n.inputs[0]], DType::kF32) << "checkpointed llama";
}

// The f32_residual plan keeps every fusion of the default one: each add and
// its norm are one generated launch that stores the f32 sum and writes the
// bf16 GEMM operand directly (so no cast rounds the stream before a norm reads
// it), and each norm backward still folds the stream gradient's add, reads
// the GEMMs' bf16 gradient and writes the bf16 copy of the stream gradient
// that the GEMMs read: no launch more than the bf16 stream's plan.
TEST(StorageDTypes, F32ResidualPlanKeepsTheNormFusions) {
  for (bool ckpt : {false, true}) {
    v1::ModelSpec spec;
    spec.set_family("llama");
    spec.set_n_layer(3);
    spec.set_n_head(4);
    spec.set_n_kv_head(2);
    spec.set_d_model(64);
    spec.set_seq_len(32);
    spec.set_vocab(128);
    const ir::Graph g = ModelJoint(spec, 2, ckpt);
    PlanOptions on;
    on.f32_residual = true;
    auto base = PlanCuda(g, true);
    auto p = PlanCuda(g, true, on);
    ASSERT_TRUE(base.ok() && p.ok()) << base.status() << p.status();
    EXPECT_EQ(ArenaProblems(g, *p), std::vector<std::string>{});
    const int fused = CountOp(*base, LaunchKind::kLayerNorm, "add+rmsnorm");
    EXPECT_GE(fused, 2 * 3) << "ckpt " << ckpt;
    EXPECT_EQ(CountOp(*p, LaunchKind::kLayerNorm, "add+rmsnorm"), fused);
    EXPECT_EQ(CountOp(*p, LaunchKind::kRmsNormBackward, "rmsnorm_backward+add"),
              CountOp(*base, LaunchKind::kRmsNormBackward, "rmsnorm_backward+add"));
    std::vector<int> writer(p->metas.size(), -1);
    for (size_t i = 0; i < p->launches.size(); ++i)
      for (int v : p->launches[i].outputs) writer[v] = static_cast<int>(i);
    int norms = 0, copies = 0;
    for (const Launch& l : p->launches) {
      if (l.kind == LaunchKind::kLayerNorm) {
        const bool add = l.op == "add+rmsnorm";
        const int x = add ? l.outputs[0] : l.inputs[0];
        EXPECT_EQ(p->metas[x].dtype, DType::kF32) << l.op << ": the stream, f32";
        EXPECT_EQ(p->metas[l.outputs[add ? 1 : 0]].dtype, DType::kBF16) << l.op << ": the GEMM operand";
        if (!add) EXPECT_NE(p->launches[writer[x]].op, "cast") << "the stream is not rounded before its norm";
        ++norms;
      }
      if (l.kind == LaunchKind::kRmsNormBackward) {
        EXPECT_EQ(p->metas[l.outputs[0]].dtype, DType::kF32) << l.op;
        // dy as the GEMM wrote it (no cast); the copy of dx for the GEMMs.
        EXPECT_EQ(p->metas[l.inputs[0]].dtype, DType::kBF16) << l.op;
        EXPECT_NE(p->launches[writer[l.inputs[0]]].kind, LaunchKind::kCopy) << l.op;
        if (l.outputs.size() > 2) {
          EXPECT_EQ(p->metas[l.outputs[2]].dtype, DType::kBF16) << l.op;
          ++copies;
        }
      }
      if (l.kind == LaunchKind::kRmsNorm) ADD_FAILURE() << "an f32 stream normalised into bf16 is the generated norm";
    }
    EXPECT_EQ(norms, CountOp(*base, LaunchKind::kLayerNorm) + CountOp(*base, LaunchKind::kRmsNorm));
    // Every norm backward but the first one's writes the bf16 copy (the
    // first's dx only reaches the embedding's backward), and the f32 stream
    // adds no cast launch.
    EXPECT_EQ(copies, CountOp(*p, LaunchKind::kRmsNormBackward) - 1) << "ckpt " << ckpt;
    EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "cast"), CountOp(*base, LaunchKind::kCopy, "cast"));
    EXPECT_EQ(p->launches.size(), base->launches.size());
  }
}

TEST(StorageDTypesPass, TheMemoryPolicyNeedsABf16Plan) {
  ir::Graph g = LlamaJoint(64);
  PlanOptions o;
  o.memory.bf16_adam_states = true;
  auto p = PlanCuda(g, false, o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(p.status().message()).find("bf16 plan"), std::string::npos) << p.status();
}

}  // namespace
}  // namespace loom::compiler::cuda
