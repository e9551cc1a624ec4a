#include "compiler/cuda/plan_test_util.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "compiler/compile.h"
#include "compiler/models/models.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {

ir::Graph ModelJoint(const v1::ModelSpec& spec, int64_t batch, bool checkpoint_blocks) {
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
  if (checkpoint_blocks) co.checkpoint_blocks = models::BlockOfParameter;
  auto c = Compile(*fwd, co);
  EXPECT_TRUE(c.ok()) << c.status();
  return c->stages.at("fused");
}

ir::Graph ModelForwardOnly(const v1::ModelSpec& spec, int64_t batch) {
  models::BuildOptions bo;
  bo.batch = batch;
  auto fwd = models::BuildForward(spec, bo);
  EXPECT_TRUE(fwd.ok()) << fwd.status();
  CompileOptions co;
  co.differentiate = false;
  co.lower = false;
  auto c = Compile(*fwd, co);
  EXPECT_TRUE(c.ok()) << c.status();
  return c->stages.at("fused");
}

ir::Graph GptJoint(int n_layer, int d_model) {
  v1::ModelSpec spec;
  spec.set_family("gpt");
  spec.set_n_layer(n_layer);
  spec.set_n_head(4);
  spec.set_d_model(d_model);
  spec.set_seq_len(64);
  spec.set_vocab(256);
  return ModelJoint(spec, 8);
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
  return ModelJoint(spec, 4);
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

std::vector<std::string> ArenaProblems(const ir::Graph& g, const CudaPlan& p) {
  std::vector<std::string> out;
  const int nv = static_cast<int>(p.metas.size());
  std::vector<int> first(nv, -1), last(nv, -1);
  const int npos = static_cast<int>(p.launches.size());
  for (int pos = 0; pos < npos; ++pos) {
    for (int v : p.launches[pos].outputs) {
      const int r = p.root[v];
      if (r < 0 || p.offset[r] < 0) continue;
      if (first[r] < 0) first[r] = pos;
      last[r] = std::max(last[r], pos);
    }
    for (int v : p.launches[pos].inputs) {
      const int r = p.root[v];
      if (r < 0) {
        out.push_back(absl::StrCat("launch ", pos, " reads %", v, ", which has no root"));
        continue;
      }
      if (p.offset[r] >= 0) last[r] = std::max(last[r], pos);
    }
  }
  for (const ir::GraphOutput& o : g.outputs()) {
    const int r = p.root[o.value];
    if (r >= 0 && p.offset[r] >= 0) last[r] = npos;
  }
  for (int a = 0; a < nv; ++a) {
    if (first[a] < 0) continue;
    if (p.offset[a] % 256 != 0) out.push_back(absl::StrCat("%", a, " at offset ", p.offset[a], " is not 256-aligned"));
    if (p.offset[a] + p.Bytes(a) > p.arena_bytes) out.push_back(absl::StrCat("%", a, " ends past the arena"));
    for (int b = a + 1; b < nv; ++b) {
      if (first[b] < 0 || first[a] > last[b] || first[b] > last[a]) continue;
      if (p.offset[a] + p.Bytes(a) > p.offset[b] && p.offset[b] + p.Bytes(b) > p.offset[a])
        out.push_back(absl::StrCat("%", a, " and %", b, " overlap while both are live"));
    }
  }
  return out;
}

}  // namespace loom::compiler::cuda
