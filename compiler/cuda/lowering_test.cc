// Host-side tests of the CUDA lowering (plan.h) on the gpt-small joint graph:
// storage dtypes, pattern fusions, the arena plan, and errors naming ops.
#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "compiler/compile.h"
#include "compiler/cuda/cuda_executor.h"
#include "compiler/cuda/plan.h"
#include "compiler/ir/text.h"
#include "compiler/models/models.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

Graph GptJoint(int n_layer = 2, int d_model = 128) {
  v1::ModelSpec spec;
  spec.set_family("gpt");
  spec.set_n_layer(n_layer);
  spec.set_n_head(4);
  spec.set_d_model(d_model);
  spec.set_seq_len(64);
  spec.set_vocab(256);
  models::BuildOptions bo;
  bo.batch = 8;
  auto fwd = models::BuildForward(spec, bo);
  EXPECT_TRUE(fwd.ok()) << fwd.status();
  CompileOptions co;
  AdamWOptions adam;
  adam.weight_decay = 0.1;
  adam.max_norm = 1.0;
  co.adamw = adam;
  co.lower = false;
  auto c = Compile(*fwd, co);
  EXPECT_TRUE(c.ok()) << c.status();
  return c->stages.at("fused");
}

TEST(StorageDTypes, F32KeepsGraphDTypes) {
  Graph g = GptJoint();
  std::vector<DType> st = StorageDTypes(g, false);
  for (size_t v = 0; v < st.size(); ++v) EXPECT_EQ(st[v], g.meta(v).dtype);
}

TEST(StorageDTypes, Bf16Policy) {
  Graph g = GptJoint();
  std::vector<DType> st = StorageDTypes(g, true);
  for (const GraphInput& in : g.inputs()) EXPECT_EQ(st[in.value], g.meta(in.value).dtype) << in.name;
  std::map<std::string, int> seen;
  for (const Node& n : g.nodes()) {
    ++seen[n.op];
    auto dt = [&](int k) { return st[n.outputs[k]]; };
    if (n.op == "embedding" || n.op == "gelu" || n.op == "sdpa_backward" || n.op == "cross_entropy_backward" ||
        n.op == "permute" || n.op == "slice" || n.op == "slice_backward") {
      EXPECT_EQ(dt(0), DType::kBF16) << n.op;
    } else if (n.op == "layernorm") {
      EXPECT_EQ(dt(0), DType::kBF16);
      EXPECT_EQ(dt(1), DType::kF32);
      EXPECT_EQ(dt(2), DType::kF32);
    } else if (n.op == "layernorm_backward") {
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
    }
  }
  EXPECT_GT(seen["adamw"], 10);
  EXPECT_EQ(seen["sdpa"], 2);
}

int CountOp(const CudaPlan& p, LaunchKind k, const std::string& op = "") {
  int c = 0;
  for (const Launch& l : p.launches) c += l.kind == k && (op.empty() || l.op == op);
  return c;
}

TEST(PlanCuda, PatternsOnGpt) {
  for (bool bf16 : {false, true}) {
    Graph g = GptJoint(2);
    auto p = PlanCuda(g, bf16);
    ASSERT_TRUE(p.ok()) << p.status();
    std::printf("%s", p->Describe().c_str());
    // Per layer: qkv matmul+bias (slices consume it), fc matmul+bias+gelu,
    // dgelu in the backward; weight grads: 4 per layer + tied wte.
    EXPECT_EQ(CountOp(*p, LaunchKind::kGemm, "matmul+add"), 2);
    EXPECT_EQ(CountOp(*p, LaunchKind::kGemm, "matmul+add+gelu"), 2);
    EXPECT_EQ(CountOp(*p, LaunchKind::kGemm, "matmul+gelu_backward"), 2) << "dgelu in the GEMM epilogue";
    PlanOptions bgrad;
    bgrad.bias_grad_in_gemm = true;
    auto pb = PlanCuda(g, bf16, bgrad);
    ASSERT_TRUE(pb.ok()) << pb.status();
    EXPECT_EQ(CountOp(*pb, LaunchKind::kGemm, "matmul+gelu_backward+sum_to"), 2) << "fc bias grad in the dgelu GEMM";
    // (The simplify pass already turns matmul+sum_to into one 2-D GEMM.)
    int wgrad = 0;
    for (const Launch& l : p->launches)
      wgrad += l.kind == LaunchKind::kGemm && (l.gemm.weight_grad || (l.gemm.trans_a && l.gemm.k == 8 * 64));
    EXPECT_EQ(wgrad, 9);
    EXPECT_EQ(CountOp(*p, LaunchKind::kAdamW), 1);
    // Residual-gradient adds folded into layernorm_backward (dresidual): all
    // but the last layer norm's (ln_f's dx has no add after it).
    EXPECT_EQ(CountOp(*p, LaunchKind::kLayerNormBackward, "layernorm_backward+add"), 2 * 2);
    // With bias_grad_in_layernorm, the c_proj bias gradients (sum_to of the
    // residual-stream gradient) come from the layernorm backward that writes
    // that gradient: every layer norm's dx but the first (the embedding sum has no bias).
    PlanOptions ln_bgrad;
    ln_bgrad.bias_grad_in_layernorm = true;
    auto pl = PlanCuda(g, bf16, ln_bgrad);
    ASSERT_TRUE(pl.ok()) << pl.status();
    EXPECT_EQ(CountOp(*pl, LaunchKind::kLayerNormBackward, "layernorm_backward+add"), 1);
    EXPECT_EQ(CountOp(*pl, LaunchKind::kLayerNormBackward, "layernorm_backward+add+sum_to"), 2 * 2 - 1);
    EXPECT_EQ(CountOp(*pl, LaunchKind::kLayerNormBackward, "layernorm_backward+sum_to"), 1) << "ln_f";
    EXPECT_EQ(CountOp(*p, LaunchKind::kSumTo), CountOp(*pl, LaunchKind::kSumTo) + 2 * 2);
    EXPECT_EQ(CountOp(*p, LaunchKind::kPointwise, "add"), 2) << "left: x + wpe, and the tied wte gradient sum";
    EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "slice+reshape+permute"), 3 * 2) << "q, k, v: one copy each";
    EXPECT_EQ(CountOp(*p, LaunchKind::kConcat, "permute+reshape+concat"), 2) << "dq, dk, dv straight into dqkv";
    // Left: the attention output (permute for the c_proj matmul) and dout (for sdpa_backward).
    EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "permute"), 2 * 2);
    EXPECT_EQ(CountOp(*p, LaunchKind::kCopyBack), 0) << "every update is in place";
    for (const Launch& l : p->launches) {
      if (l.kind != LaunchKind::kGemm) continue;
      EXPECT_EQ(l.gemm.batch, 1) << l.op;
      EXPECT_EQ(l.gemm.ab_dtype, bf16 ? DType::kBF16 : DType::kF32);
      if (l.gemm.weight_grad || l.gemm.trans_a) {
        EXPECT_EQ(l.gemm.d_dtype, DType::kF32) << "parameter gradients are f32";
        EXPECT_EQ(l.gemm.k, 8 * 64);
      }
      if (l.op == "matmul+add+gelu") {
        EXPECT_EQ(l.gemm.epilogue, GemmEpilogue::kBiasGeluAux);
        EXPECT_EQ(l.outputs.size(), 2u);
      }
      for (int v : l.inputs) EXPECT_EQ(p->metas[v].dtype, l.gemm.ab_dtype) << l.op;
    }
    if (bf16) {
      int shadows = 0;
      for (int s : p->shadow) shadows += s >= 0;
      // wte (tied) + per layer: 4 GEMM weights, the c_attn and c_fc biases.
      EXPECT_EQ(shadows, 1 + 2 * 6);  // c_proj biases go through the fused residual add
      // No casts: bias gradients are f32 column sums (with bias_grad_in_gemm,
      // the dgelu GEMMs' bf16 bias gradients would be cast to f32).
      EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "cast"), 0);
    } else {
      EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "cast"), 0);
    }
  }
}

// Flash-eligible attention (bf16, D 64): no copies around sdpa; q/k/v are
// windows of the qkv GEMM output, o is written [B, T, H, D], dout is a view of
// the upstream gradient and dq/dk/dv land in their windows of dqkv.
TEST(PlanCuda, AttentionReadsAndWritesStridedViews) {
  constexpr int kLayers = 2;
  constexpr int64_t B = 8, T = 64, C = 256, H = 4, D = 64;
  Graph g = GptJoint(kLayers, C);
  PlanOptions copies;
  copies.attn_views = false;
  auto old = PlanCuda(g, true, copies);
  ASSERT_TRUE(old.ok()) << old.status();
  auto p = PlanCuda(g, true);
  ASSERT_TRUE(p.ok()) << p.status();
  std::printf("%s", p->Describe().c_str());
  EXPECT_EQ(CountOp(*old, LaunchKind::kCopy, "slice+reshape+permute"), 3 * kLayers);
  EXPECT_EQ(CountOp(*old, LaunchKind::kCopy, "permute"), 2 * kLayers);
  EXPECT_EQ(CountOp(*old, LaunchKind::kConcat), kLayers);
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "slice+reshape+permute"), 0);
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "permute"), 0);
  EXPECT_EQ(CountOp(*p, LaunchKind::kConcat), 0);
  EXPECT_EQ(CountOp(*p, LaunchKind::kSdpa, "sdpa(views)+permute"), kLayers);
  EXPECT_EQ(CountOp(*p, LaunchKind::kSdpaBackward, "sdpa_backward(views)+concat"), kLayers);
  EXPECT_EQ(old->launches.size() - p->launches.size(), 6u * kLayers) << "3 q/k/v copies, 2 permutes, 1 concat";
  EXPECT_LE(p->arena_bytes, old->arena_bytes);
  const std::vector<int64_t> qkv_st = {T * 3 * C, D, 3 * C, 1}, bthd = {T * C, D, C, 1};
  for (const Launch& l : p->launches) {
    if (l.kind == LaunchKind::kSdpa) {
      ASSERT_EQ(l.attn.size(), 4u);
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(l.attn[k].value, l.attn[0].value) << "q, k, v share the qkv GEMM output";
        EXPECT_EQ(l.attn[k].offset, k * C);
        EXPECT_EQ(l.attn[k].strides, qkv_st);
        EXPECT_EQ(l.attn[k].shape, (Shape{B, H, T, D}));
      }
      EXPECT_EQ(p->metas[l.attn[0].value].shape, (Shape{B, T, 3 * C}));
      EXPECT_EQ(l.attn[3].value, l.outputs[0]);
      EXPECT_EQ(l.attn[3].strides, bthd) << "o in [B, T, H, D] order";
      // The permute after it is an alias of o.
      bool alias = false;
      for (int v = 0; v < static_cast<int>(g.values().size()); ++v)
        alias |= v != l.outputs[0] && p->root[v] == l.outputs[0] && g.meta(v).shape == (Shape{B, T, H, D});
      EXPECT_TRUE(alias);
    }
    if (l.kind == LaunchKind::kSdpaBackward) {
      ASSERT_EQ(l.attn.size(), 8u);
      EXPECT_EQ(l.attn[0].strides, bthd) << "dout: a view of the projection's input gradient";
      EXPECT_EQ(l.attn[0].offset, 0);
      EXPECT_EQ(l.attn[4].strides, bthd) << "o as the forward wrote it";
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(l.attn[1 + k].strides, qkv_st);
        EXPECT_EQ(l.attn[1 + k].offset, k * C);
        EXPECT_EQ(l.attn[5 + k].value, l.outputs[0]) << "dq, dk, dv in one dqkv buffer";
        EXPECT_EQ(l.attn[5 + k].offset, k * C);
        EXPECT_EQ(l.attn[5 + k].strides, qkv_st);
      }
      EXPECT_EQ(p->metas[l.outputs[0]].shape, (Shape{B, T, 3 * C}));
    }
  }
  // f32 keeps the copies (the simple attention kernel takes contiguous tensors).
  auto f = PlanCuda(g, false);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(CountOp(*f, LaunchKind::kCopy, "slice+reshape+permute"), 3 * kLayers);
  for (const Launch& l : f->launches) EXPECT_TRUE(l.attn.empty());
  // The env switch back to the copies, and a dry Create of the views plan.
  setenv("LOOM_CUDA_ATTN_COPIES", "1", 1);
  EXPECT_FALSE(PlanOptionsFor(CudaOptions{}).attn_views);
  unsetenv("LOOM_CUDA_ATTN_COPIES");
  EXPECT_TRUE(PlanOptionsFor(CudaOptions{}).attn_views);
  if (const char* tmp = std::getenv("TEST_TMPDIR")) setenv("LOOM_KERNEL_CACHE", tmp, 1);
  CudaOptions o;
  o.bf16 = true;
  auto e = CudaExecutor::Create(GptJoint(1, C), o);
  if (!e.ok()) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kUnavailable) << e.status();
  }
}

class LlamaPlans : public ::testing::TestWithParam<int> {};

// d_model 128 (D 32: the simple attention kernel) and 256 (D 64: flash with
// strided operands, GQA).
TEST_P(LlamaPlans, PlansAndBuilds) {
  if (const char* tmp = std::getenv("TEST_TMPDIR")) setenv("LOOM_KERNEL_CACHE", tmp, 1);
  v1::ModelSpec spec;
  spec.set_family("llama");
  spec.set_n_layer(1);
  spec.set_n_head(4);
  spec.set_n_kv_head(2);
  spec.set_d_model(GetParam());
  spec.set_seq_len(64);
  spec.set_vocab(256);
  models::BuildOptions bo;
  bo.batch = 4;
  auto fwd = models::BuildForward(spec, bo);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  CompileOptions co;
  co.adamw = AdamWOptions{};
  co.lower = false;
  auto c = Compile(*fwd, co);
  ASSERT_TRUE(c.ok()) << c.status();
  const Graph& g = c->stages.at("fused");
  for (bool bf16 : {false, true}) {
    auto p = PlanCuda(g, bf16);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_GT(CountOp(*p, LaunchKind::kRmsNorm), 0);
    EXPECT_GT(CountOp(*p, LaunchKind::kRmsNormBackward), 0);
    EXPECT_GT(CountOp(*p, LaunchKind::kRope), 0);
    CudaOptions o;
    o.bf16 = bf16;
    if (bf16 && GetParam() == 256) {
      std::printf("%s", p->Describe().c_str());
      EXPECT_EQ(CountOp(*p, LaunchKind::kSdpa) + CountOp(*p, LaunchKind::kSdpaBackward), 2);
      for (const Launch& l : p->launches)
        if (l.kind == LaunchKind::kSdpa || l.kind == LaunchKind::kSdpaBackward)
          EXPECT_EQ(l.attn.size(), l.kind == LaunchKind::kSdpa ? 4u : 8u) << l.op;
    }
    auto e = CudaExecutor::Create(g, o);
    if (!e.ok()) {
      EXPECT_EQ(e.status().code(), absl::StatusCode::kUnavailable) << e.status();
    }
  }
}
INSTANTIATE_TEST_SUITE_P(DModel, LlamaPlans, ::testing::Values(128, 256));

TEST(PlanCuda, BasicFusionsSwitch) {
  Graph g = GptJoint(1);
  PlanOptions basic;
  basic.compose_copies = basic.fold_residual_grad = basic.bias_grad_in_gemm = false;
  auto p = PlanCuda(g, true, basic);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "slice+reshape+permute"), 0);
  EXPECT_EQ(CountOp(*p, LaunchKind::kLayerNormBackward, "layernorm_backward+add"), 0);
  EXPECT_EQ(CountOp(*p, LaunchKind::kGemm, "matmul+gelu_backward"), 1);
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "cast"), 0);
  setenv("LOOM_CUDA_BASIC_FUSIONS", "1", 1);
  PlanOptions o = PlanOptionsFor(CudaOptions{});
  unsetenv("LOOM_CUDA_BASIC_FUSIONS");
  EXPECT_FALSE(o.compose_copies || o.fold_residual_grad || o.bias_grad_in_gemm);
  EXPECT_TRUE(PlanOptionsFor(CudaOptions{}).compose_copies);
}

TEST(PlanCuda, CrossEntropyFusion) {
  for (bool bf16 : {false, true}) {
    Graph g = GptJoint(2);
    PlanOptions off;
    off.fuse_cross_entropy = false;
    auto pu = PlanCuda(g, bf16, off);
    ASSERT_TRUE(pu.ok()) << pu.status();
    ASSERT_EQ(CountOp(*pu, LaunchKind::kCrossEntropy), 1);
    ASSERT_EQ(CountOp(*pu, LaunchKind::kCrossEntropyBackward), 1);
    const Launch* fw = nullptr;
    const Launch* bw = nullptr;
    size_t bpos = 0;
    for (size_t i = 0; i < pu->launches.size(); ++i) {
      if (pu->launches[i].kind == LaunchKind::kCrossEntropy) fw = &pu->launches[i];
      if (pu->launches[i].kind == LaunchKind::kCrossEntropyBackward) bw = &pu->launches[i], bpos = i;
    }
    auto p = PlanCuda(g, bf16);  // on by default
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(CountOp(*p, LaunchKind::kCrossEntropy), 0);
    EXPECT_EQ(CountOp(*p, LaunchKind::kCrossEntropyBackward), 0);
    ASSERT_EQ(CountOp(*p, LaunchKind::kCrossEntropyFused), 1);
    EXPECT_EQ(p->launches.size(), pu->launches.size() - 1);
    for (size_t i = 0; i < p->launches.size(); ++i) {
      const Launch& l = p->launches[i];
      if (l.kind != LaunchKind::kCrossEntropyFused) continue;
      // At the backward's place (one launch earlier: the forward is gone),
      // reading dloss, logits, targets and writing loss, lse, dlogits.
      EXPECT_EQ(i, bpos - 1);
      EXPECT_EQ(l.inputs, (std::vector<int>{bw->inputs[0], fw->inputs[0], fw->inputs[1]}));
      EXPECT_EQ(l.outputs, (std::vector<int>{fw->outputs[0], fw->outputs[1], bw->outputs[0]}));
      EXPECT_EQ(l.nodes.size(), fw->nodes.size() + bw->nodes.size());
    }
  }
  // Not fused when a launch in between reads the forward's loss.
  Graph g = GptJoint(1);
  PlanOptions off;
  off.fuse_cross_entropy = false;
  auto p = PlanCuda(g, true, off);
  ASSERT_TRUE(p.ok()) << p.status();
  size_t f = 0, b = 0;
  for (size_t i = 0; i < p->launches.size(); ++i) {
    if (p->launches[i].kind == LaunchKind::kCrossEntropy) f = i;
    if (p->launches[i].kind == LaunchKind::kCrossEntropyBackward) b = i;
  }
  ASSERT_LT(f + 1, b);
  CudaPlan reads = *p;
  reads.launches[f + 1].inputs.push_back(reads.launches[f].outputs[0]);
  EXPECT_EQ(FuseCrossEntropy(reads), 0);
  CudaPlan writes = *p;
  writes.launches[f + 1].outputs.push_back(writes.launches[f].inputs[0]);
  EXPECT_EQ(FuseCrossEntropy(writes), 0);
  CudaPlan plain = *p;
  EXPECT_EQ(FuseCrossEntropy(plain), 1);
}

TEST(PlanCuda, AddLayerNormFusion) {
  for (bool bf16 : {false, true}) {
    Graph g = GptJoint(2);
    PlanOptions o;
    o.add_layernorm = true;
    auto p = PlanCuda(g, bf16, o);
    ASSERT_TRUE(p.ok()) << p.status();
    // x + wpe -> ln_1 of layer 0; the fused (c_proj bias + residual) adds ->
    // ln_2, the next layer's ln_1, and ln_f.
    EXPECT_EQ(CountOp(*p, LaunchKind::kLayerNorm, "add+layernorm"), 1);
    EXPECT_EQ(CountOp(*p, LaunchKind::kLayerNorm, "fused+layernorm"), 2 * 2);
    EXPECT_EQ(CountOp(*p, LaunchKind::kLayerNorm, "layernorm"), 0);
    EXPECT_EQ(CountOp(*p, LaunchKind::kPointwise, "add"), 1) << "left: the tied wte gradient sum";
    EXPECT_EQ(CountOp(*p, LaunchKind::kPointwise, "fused"), 0);
    for (const Launch& l : p->launches) {
      if (l.kind != LaunchKind::kLayerNorm) continue;
      ASSERT_EQ(l.outputs.size(), 4u) << "sum, y, mean, rstd";
      ASSERT_EQ(l.nodes.size(), 2u);
      EXPECT_EQ(g.nodes()[l.nodes[1]].op, "layernorm");
      EXPECT_EQ(l.node, l.nodes[1]) << "attrs (eps) come from the layernorm";
      const size_t na = l.inputs.size() - 2;
      EXPECT_EQ(na, l.op == "add+layernorm" ? 2u : 3u);
      EXPECT_EQ(l.outputs[0], g.nodes()[l.nodes[0]].outputs[0]) << "the sum is stored (the next residual)";
      EXPECT_EQ(p->metas[l.outputs[0]].dtype, bf16 ? DType::kBF16 : DType::kF32);
      EXPECT_EQ(p->metas[l.inputs[na]].dtype, DType::kF32) << "weight: the f32 master";
      EXPECT_EQ(p->metas[l.outputs[2]].dtype, DType::kF32);
      // Every addend is [.., C] broadcast only over leading dims (bias [C], wpe [T, C]).
      for (size_t q = 0; q < na; ++q) EXPECT_EQ(p->metas[l.inputs[q]].shape.back(), 128);
    }
    // Off (the default), the plan keeps one launch per node.
    auto plain = PlanCuda(g, bf16);
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(CountOp(*plain, LaunchKind::kLayerNorm, "layernorm"), 5);
    EXPECT_EQ(plain->launches.size(), p->launches.size() + 5);
  }
  setenv("LOOM_CUDA_ROWGEN", "ln,adamw", 1);
  RowgenChoice c = RowgenFor(CudaOptions{});
  EXPECT_TRUE(PlanOptionsFor(CudaOptions{}).add_layernorm);
  setenv("LOOM_CUDA_BASIC_FUSIONS", "1", 1);
  EXPECT_FALSE(PlanOptionsFor(CudaOptions{}).add_layernorm);
  unsetenv("LOOM_CUDA_BASIC_FUSIONS");
  unsetenv("LOOM_CUDA_ROWGEN");
  EXPECT_TRUE(c.layernorm && c.adamw && !c.cross_entropy);
}

TEST(CudaExecutor, CreateBuildsGeneratedRowKernelsWithoutADevice) {
  if (const char* tmp = std::getenv("TEST_TMPDIR")) setenv("LOOM_KERNEL_CACHE", tmp, 1);
  Graph g = GptJoint(1);
  for (bool bf16 : {false, true}) {
    CudaOptions o;
    o.bf16 = bf16;
    o.rowgen_layernorm = o.rowgen_cross_entropy = o.rowgen_adamw = true;
    auto e = CudaExecutor::Create(g, o);
    if (e.ok()) {
      std::printf("a GPU is present: %s", (*e)->Describe().c_str());
      continue;
    }
    // Unavailable: every launch (NVRTC for the generated kernels included) was built.
    EXPECT_EQ(e.status().code(), absl::StatusCode::kUnavailable) << e.status();
  }
}

class ArenaIsConsistent : public ::testing::TestWithParam<int> {};

// d_model 128 (D 32) and 256 (D 64: strided flash operands, o aliased by its permute).
TEST_P(ArenaIsConsistent, NoLiveOverlap) {
  Graph g = GptJoint(2, GetParam());
  int64_t bytes[2];
  for (bool bf16 : {false, true}) {
    auto p = PlanCuda(g, bf16);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_GE(p->arena_bytes, p->live_bytes_bound);
    EXPECT_LE(p->arena_bytes, p->live_bytes_bound * 5 / 4);
    // Lifetimes: recompute and check no two live buffers overlap.
    const int nv = static_cast<int>(p->metas.size());
    std::vector<int> first(nv, -1), last(nv, -1);
    const int npos = static_cast<int>(p->launches.size());
    for (int pos = 0; pos < npos; ++pos) {
      for (int v : p->launches[pos].outputs) {
        int r = p->root[v];
        if (p->offset[r] < 0) continue;
        if (first[r] < 0) first[r] = pos;
        last[r] = std::max(last[r], pos);
      }
      for (int v : p->launches[pos].inputs) {
        int r = p->root[v];
        ASSERT_GE(r, 0);
        if (p->offset[r] >= 0) last[r] = std::max(last[r], pos);
      }
    }
    for (const GraphOutput& o : g.outputs())
      if (p->offset[p->root[o.value]] >= 0) last[p->root[o.value]] = npos;
    for (int a = 0; a < nv; ++a) {
      if (first[a] < 0) continue;
      EXPECT_EQ(p->offset[a] % 256, 0);
      EXPECT_LE(p->offset[a] + p->Bytes(a), p->arena_bytes);
      for (int b = a + 1; b < nv; ++b) {
        if (first[b] < 0 || first[a] > last[b] || first[b] > last[a]) continue;
        const bool disjoint = p->offset[a] + p->Bytes(a) <= p->offset[b] || p->offset[b] + p->Bytes(b) <= p->offset[a];
        EXPECT_TRUE(disjoint) << "%" << a << " and %" << b;
      }
    }
    bytes[bf16] = p->arena_bytes;
    std::printf("bf16=%d arena %lld bytes, live bound %lld\n", bf16, static_cast<long long>(p->arena_bytes),
                static_cast<long long>(p->live_bytes_bound));
  }
  EXPECT_LT(bytes[1], bytes[0] * 3 / 4) << "bf16 activations take less memory";
}
INSTANTIATE_TEST_SUITE_P(DModel, ArenaIsConsistent, ::testing::Values(128, 256));

TEST(PlanCuda, ReshapeIsAnAliasAndUpdatesAreInPlace) {
  Graph g = GptJoint(1);
  auto p = PlanCuda(g, true);
  ASSERT_TRUE(p.ok()) << p.status();
  int reshapes = 0;
  for (const Node& n : g.nodes()) {
    if (n.op == "reshape") {
      ++reshapes;
      EXPECT_EQ(p->root[n.outputs[0]], p->root[n.inputs[0]]);
    }
    if (n.op == "adamw") {
      EXPECT_EQ(p->root[n.outputs[0]], n.inputs[0]);
      EXPECT_EQ(p->root[n.outputs[1]], n.inputs[2]);
      EXPECT_EQ(p->root[n.outputs[2]], n.inputs[3]);
    }
  }
  EXPECT_GT(reshapes, 4);
  for (const Launch& l : p->launches) EXPECT_NE(l.op, "reshape");
}

TEST(PlanCuda, UnsupportedOpIsNamed) {
  auto g = ParseGraph(R"IR(graph @g(%x: f32[4, 8]) {
  %0 = softmax(%x) : f32[4, 8]
  return %0
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto p = PlanCuda(*g, false);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(p.status().message()).find("softmax"), std::string::npos) << p.status();
  auto e = CudaExecutor::Create(*g, CudaOptions{});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("softmax"), std::string::npos) << e.status();
}

TEST(PlanCuda, SteppedSlicesAreRefusedByName) {
  for (const char* body : {"%0 = slice(%x) {axis=1, start=0, length=4, step=2} : f32[4, 4]",
                           "%0 = slice_backward(%x) {axis=1, start=7, full_len=17, step=-1} : f32[4, 17]"}) {
    auto g = ParseGraph(absl::StrCat("graph @g(%x: f32[4, 8]) {\n  ", body, "\n  return %0\n}\n"));
    ASSERT_TRUE(g.ok()) << g.status();
    auto p = PlanCuda(*g, false);
    ASSERT_FALSE(p.ok()) << body;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_NE(std::string(p.status().message()).find("a step other than 1"), std::string::npos) << p.status();
  }
}

// Create on the full gpt graph: without a GPU every launch is still built
// (pointwise kernels generated and, where NVRTC exists, compiled), so the only
// error left is the missing device.
TEST(CudaExecutor, CreateBuildsEveryLaunchWithoutADevice) {
  if (const char* tmp = std::getenv("TEST_TMPDIR")) setenv("LOOM_KERNEL_CACHE", tmp, 1);
  Graph g = GptJoint(1);
  for (bool bf16 : {false, true}) {
    CudaOptions o;
    o.bf16 = bf16;
    auto e = CudaExecutor::Create(g, o);
    if (e.ok()) {
      std::printf("a GPU is present: %s", (*e)->Describe().c_str());
      continue;
    }
    EXPECT_EQ(e.status().code(), absl::StatusCode::kUnavailable) << e.status();
  }
}

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

// Runs the plan's copy launches on the host (element-wise, f64) and compares
// with the registry ops: the composed view geometry must equal the op chain.
std::vector<double> HostCopy(const CudaPlan& p, const std::map<int, std::vector<double>>& vals, int out) {
  std::vector<double> dst(NumElements(p.metas[out].shape), 0.0);
  for (const Launch& l : p.launches) {
    if (l.outputs.empty() || l.outputs[0] != out) continue;
    for (size_t k = 0; k < l.copies.size(); ++k) {
      const CopyGeom& c = l.copies[k];
      const std::vector<double>& src = vals.at(l.inputs[k]);
      std::vector<int64_t> dst_st = c.dst_strides.empty() ? std::vector<int64_t>() : c.dst_strides;
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

TEST(PlanCuda, ComposedCopiesMatchTheOps) {
  auto g = ParseGraph(R"IR(graph @g(%x: f32[2, 3, 12], %a: f32[2, 2, 3, 2], %b: f32[2, 2, 3, 2]) {
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
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto p = PlanCuda(*g, false);
  ASSERT_TRUE(p.ok()) << p.status();
  std::printf("%s", p->Describe().c_str());
  EXPECT_EQ(p->launches.size(), 2u);
  std::map<int, std::vector<double>> vals;
  std::vector<Tensor> ins;
  for (int k = 0; k < 3; ++k) {
    const int v = g->inputs()[k].value;
    std::vector<double> d(NumElements(g->meta(v).shape));
    for (size_t i = 0; i < d.size(); ++i) d[i] = 100 * k + static_cast<double>(i);
    vals[v] = d;
    ins.push_back(Tensor::FromVector(g->meta(v).shape, d, DType::kF32));
  }
  auto s0 = ops::RunOp("slice", {ins[0]}, Attrs{{"axis", int64_t{2}}, {"start", int64_t{4}}, {"length", int64_t{4}}});
  ASSERT_TRUE(s0.ok()) << s0.status();
  auto r0 = ops::RunOp("reshape", {(*s0)[0]}, Attrs{{"shape", std::vector<int64_t>{2, 3, 2, 2}}});
  auto q = ops::RunOp("permute", {(*r0)[0]}, Attrs{{"dims", std::vector<int64_t>{0, 2, 1, 3}}});
  ASSERT_TRUE(q.ok()) << q.status();
  std::vector<double> got = HostCopy(*p, vals, g->outputs()[0].value);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], (*q)[0].GetDouble(i)) << i;
  std::vector<Tensor> parts;
  for (int k = 1; k < 3; ++k) {
    auto pm = ops::RunOp("permute", {ins[k]}, Attrs{{"dims", std::vector<int64_t>{0, 2, 1, 3}}});
    auto rs = ops::RunOp("reshape", {(*pm)[0]}, Attrs{{"shape", std::vector<int64_t>{2, 3, 4}}});
    parts.push_back((*rs)[0]);
  }
  auto cat = ops::RunOp("concat", parts, Attrs{{"axis", int64_t{2}}});
  ASSERT_TRUE(cat.ok()) << cat.status();
  got = HostCopy(*p, vals, g->outputs()[1].value);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], (*cat)[0].GetDouble(i)) << i;
}

TEST(PlanCuda, MixedDTypeOperandsGetCasts) {
  // An f32 graph input feeding a matmul under bf16 is cast (it is not a param).
  auto g = ParseGraph(R"IR(graph @g(%x: f32[4, 8], %w: f32[8, 16] param) {
  %0 = matmul(%x, %w) : f32[4, 16]
  return %0
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto p = PlanCuda(*g, true);
  ASSERT_TRUE(p.ok()) << p.status();
  std::printf("%s", p->Describe().c_str());
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "cast"), 1);
  EXPECT_GE(p->shadow[1], 0);
  EXPECT_EQ(p->launches.back().kind, LaunchKind::kGemm);
}

}  // namespace
}  // namespace loom::compiler::cuda
