#include "tests/parallel/memory_probe.h"

#include "absl/strings/str_cat.h"
#include "base/allocator.h"
#include "base/rng.h"
#include "base/status.h"
#include "compiler/compile.h"
#include "compiler/models/models.h"
#include "parallel/styles.h"
#include "parallel/testing/small_spec.h"
#include "parallel/trainer.h"

namespace loom::tests::parallel::testing {
namespace {

using loom::parallel::testing::RandomTokens;

}  // namespace

v1::ModelSpec ModelOf(const std::string& family, int n_layer, int n_head, int n_kv_head, int d_model, int seq_len,
                      int vocab, int ffn) {
  v1::ModelSpec m;
  m.set_family(family);
  m.set_n_layer(n_layer);
  m.set_n_head(n_head);
  m.set_n_kv_head(n_kv_head);
  m.set_d_model(d_model);
  m.set_seq_len(seq_len);
  m.set_vocab(vocab);
  m.set_norm_eps(1e-5f);
  m.set_rope_theta(10000.f);
  if (ffn == 0) ffn = family == "llama" ? (8 * d_model / 3 + 63) / 64 * 64 : 4 * d_model;
  m.set_ffn_hidden(ffn);
  return m;
}

v1::JobSpec TrainSpec(const v1::ModelSpec& model, int64_t batch) {
  v1::JobSpec spec;
  *spec.mutable_model() = model;
  auto* t = spec.mutable_train();
  t->set_batch_size(static_cast<int>(batch));
  t->set_lr(1e-3f);
  t->set_beta1(0.9f);
  t->set_beta2(0.95f);
  t->set_eps(1e-8f);
  t->set_grad_clip(1.0f);
  t->set_weight_decay(0.1f);
  return spec;
}

std::string Describe(const v1::ModelSpec& m, int64_t batch) {
  return absl::StrCat(m.family(), " L", m.n_layer(), " H", m.n_head(), "/", m.n_kv_head(), " C", m.d_model(), " F", m.ffn_hidden(), " T",
                      m.seq_len(), " V", m.vocab(), " B", batch);
}

absl::StatusOr<LocalProgram> LocalProgramBytes(const v1::ModelSpec& model, int64_t batch,
                                               const loom::parallel::Layout& l) {
  compiler::models::BuildOptions bo;
  bo.batch = batch;
  LOOM_ASSIGN_OR_RETURN(compiler::ir::Graph forward, compiler::models::BuildForward(model, bo));
  NullCommunicator dp(l.dp), tp(l.tp);
  compiler::CompileOptions co;
  co.lowering.in_place_updates = true;
  if (l.dp > 1) co.lowering.communicators["dp"] = &dp;
  if (l.tp > 1) co.lowering.communicators["tp"] = &tp;
  compiler::AdamWOptions adam;
  adam.max_norm = 1.0;
  co.adamw = adam;
  LOOM_ASSIGN_OR_RETURN(compiler::Compilation c, loom::parallel::CompileParallel(forward, co, model, batch, l));
  const compiler::ir::Graph& g = c.program->graph;
  LocalProgram p;
  p.arena_bytes = c.program->plan.peak_bytes;
  for (const auto& in : g.inputs()) {
    if (in.name == "x" || in.name == "y" || in.name == "lr" || in.name == "step") continue;
    const auto& m = g.meta(in.value);
    int64_t n = 1;
    for (int64_t s : m.shape) n *= s;
    p.state_bytes += n * static_cast<int64_t>(DTypeSize(m.dtype));
  }
  return p;
}

absl::StatusOr<int64_t> EvalArenaBytes(const v1::ModelSpec& model, int64_t batch) {
  compiler::models::BuildOptions bo;
  bo.batch = batch;
  bo.return_logits = true;
  LOOM_ASSIGN_OR_RETURN(compiler::ir::Graph forward, compiler::models::BuildForward(model, bo));
  compiler::CompileOptions eo;
  eo.differentiate = false;
  LOOM_ASSIGN_OR_RETURN(compiler::Compilation c, compiler::Compile(forward, eo));
  return c.program->plan.peak_bytes;
}

absl::StatusOr<int64_t> TrainerPeakBytes(const v1::JobSpec& spec, int steps) {
  const auto& m = spec.model();
  const int64_t B = spec.train().batch_size();
  CountingAllocator counting(CpuAllocator::Get());
  ScopedDefaultAllocator use(&counting);
  Tensor x = RandomTokens(B, m.seq_len(), m.vocab(), 1), y = RandomTokens(B, m.seq_len(), m.vocab(), 2);
  LOOM_ASSIGN_OR_RETURN(auto trainer, loom::parallel::Trainer::Create(spec));
  for (int s = 0; s < steps; ++s) {
    LOOM_ASSIGN_OR_RETURN(float loss, trainer->Step(x, y));
    (void)loss;
  }
  return counting.stats().peak_bytes;
}

}  // namespace loom::tests::parallel::testing
