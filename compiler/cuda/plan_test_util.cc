#include "compiler/cuda/plan_test_util.h"

#include "compiler/compile.h"
#include "compiler/models/models.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {

namespace {

ir::Graph Joint(const v1::ModelSpec& spec, int64_t batch) {
  models::BuildOptions bo;
  bo.batch = batch;
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

}  // namespace

ir::Graph GptJoint(int n_layer, int d_model) {
  v1::ModelSpec spec;
  spec.set_family("gpt");
  spec.set_n_layer(n_layer);
  spec.set_n_head(4);
  spec.set_d_model(d_model);
  spec.set_seq_len(64);
  spec.set_vocab(256);
  return Joint(spec, 8);
}

ir::Graph LlamaJoint(int d_model, int n_layer) {
  v1::ModelSpec spec;
  spec.set_family("llama");
  spec.set_n_layer(n_layer);
  spec.set_n_head(4);
  spec.set_n_kv_head(2);
  spec.set_d_model(d_model);
  spec.set_seq_len(64);
  spec.set_vocab(256);
  return Joint(spec, 4);
}

int CountOp(const CudaPlan& p, LaunchKind k, const std::string& op) {
  int c = 0;
  for (const Launch& l : p.launches) c += l.kind == k && (op.empty() || l.op == op);
  return c;
}

PlanOptions NoFusions() {
  PlanOptions o;
  o.compose_copies = o.fold_residual_grad = o.add_layernorm = o.attn_views = o.fuse_cross_entropy = false;
  return o;
}

}  // namespace loom::compiler::cuda
