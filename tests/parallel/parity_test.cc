// Multi-process parity: N ranks (processes, Gloo over loopback) train a small
// model for 20 steps with a parallel layout (in three cases with dropout, and
// activation checkpointing on the parallel side); at every step the loss must be
// within 1e-5 (relative) of a one-rank Trainer on the same seed and
// data, and after the last step every parameter block within 1e-5
// (||delta|| / ||ref||); then the evaluation step's loss and logits on a
// fresh batch within 1e-5 too, and the sampling program's (one row per dp
// block) logits of that batch's row 0. Each rank runs the single-process reference
// itself (the models are tiny; a Trainer of its own, compiled for one rank,
// never the parallel object) and checks its own blocks.
//
// Default: a fast subset; LOOM_FULL=1 runs every layout for both families.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/rng.h"
#include "base/testing/full_sweep.h"
#include "collectives/process_group.h"
#include "collectives/testing/multiprocess.h"
#include "gtest/gtest.h"
#include "parallel/trainer.h"

namespace loom::tests::parallel {
namespace {

using collectives::testing::WorkerContext;

constexpr int kSteps = 20;

v1::JobSpec Spec(const std::string& family, int tp) {
  v1::JobSpec s;
  auto* m = s.mutable_model();
  m->set_family(family);
  m->set_n_layer(2);
  m->set_n_head(4);
  m->set_d_model(16);
  m->set_seq_len(8);
  m->set_vocab(64);
  if (family == "llama") {
    m->set_n_kv_head(tp == 4 ? 4 : 2);
    m->set_ffn_hidden(24);
  }
  auto* t = s.mutable_train();
  t->set_batch_size(4);
  t->set_lr(3e-3);
  t->set_warmup_steps(3);
  t->set_weight_decay(0.1);
  t->set_grad_clip(1.0);
  t->set_beta1(0.9);
  t->set_beta2(0.95);
  // The gradient of the key bias (part of gpt's c_attn.bias) is exactly zero
  // in exact arithmetic (softmax ignores a per-query constant), so in floats
  // it is rounding noise, which differs with any change of summation order;
  // AdamW with eps 1e-8 turns noise of ~1e-10 into lr-sized steps. eps 1e-6
  // keeps such noise from moving a parameter while barely changing real ones.
  t->set_eps(1e-6);
  t->set_seed(7);
  return s;
}

Tensor Batch(const v1::JobSpec& s, int step, int which) {
  const int64_t b = s.train().batch_size(), t = s.model().seq_len();
  Tensor x = Tensor::MustEmpty({b, t}, DType::kI32);
  Philox rng(1234 + step, which);
  for (int64_t i = 0; i < b * t; ++i)
    x.data<int32_t>()[i] = static_cast<int32_t>(rng.Uniform(i) * s.model().vocab()) % s.model().vocab();
  return x;
}

// arg: "family dp tp zero sp"
int ParityWorker(WorkerContext& ctx) {
  std::vector<std::string> a = absl::StrSplit(ctx.arg, ' ');
  loom::parallel::Layout l;
  const std::string family = a[0];
  l.dp = std::stoi(a[1]);
  l.tp = std::stoi(a[2]);
  l.zero_stage = std::stoi(a[3]);
  l.sequence_parallel = a[4] == "1";
  v1::JobSpec spec = Spec(family, l.tp);
  // The recipe: model.dropout in both runs; activation checkpointing in the
  // parallel run only (its parameters are bitwise those of a run without it).
  if (a.size() > 6) spec.mutable_model()->set_dropout(std::stof(a[6]));
  v1::JobSpec par_spec = spec;
  if (a.size() > 7) par_spec.mutable_train()->set_activation_checkpointing(a[7]);
  auto fail = [&](const absl::Status& s) {
    fprintf(stderr, "[rank %d] %s\n", ctx.rank, std::string(s.message()).c_str());
    return 1;
  };
  collectives::ProcessGroupOptions po;
  po.backend = "cpu:gloo";
  auto pg = collectives::ProcessGroup::Create(ctx.store, ctx.rank, ctx.world, po);
  if (!pg.ok()) return fail(pg.status());
  const dtensor::MeshShape mesh = loom::parallel::MeshOf(l);
  const auto coords = mesh.Coordinates(ctx.rank);
  // One subgroup per mesh dim of size > 1: the ranks differing only there.
  std::vector<std::unique_ptr<collectives::ProcessGroup>> groups;
  std::vector<std::unique_ptr<compiler::comm::Communicator>> comms;
  compiler::comm::CommunicatorMap cmap;
  for (int k = 0; k < mesh.ndim(); ++k) {
    if (mesh.sizes[k] == 1) continue;
    const int other = 1 - k;
    for (int64_t o = 0; o < mesh.sizes[other]; ++o) {
      std::vector<int> ranks;
      for (int64_t i = 0; i < mesh.sizes[k]; ++i) {
        std::vector<int64_t> c(2);
        c[k] = i;
        c[other] = o;
        ranks.push_back(static_cast<int>(mesh.RankAt(c)));
      }
      auto g = (*pg)->NewGroup(ranks);
      if (!g.ok()) return fail(g.status());
      if (*g) {
        comms.push_back(compiler::comm::MakeProcessGroupCommunicator(g->get(), 60000));
        cmap[mesh.names[k]] = comms.back().get();
        groups.push_back(std::move(*g));
      }
    }
  }
  (void)coords;
  auto ref = loom::parallel::Trainer::Create(spec);  // one rank: the single-process compile
  if (!ref.ok()) return fail(ref.status());
  loom::parallel::TrainerOptions popts;
  popts.layout = l;
  popts.rank = ctx.rank;
  popts.comms = cmap;
  popts.bucket_bytes = a.size() > 5 ? std::stoll(a[5]) : 0;
  auto par = loom::parallel::Trainer::Create(par_spec, popts);
  if (!par.ok()) return fail(par.status());
  double worst_loss = 0;
  for (int step = 0; step < kSteps; ++step) {
    Tensor x = Batch(spec, step, 0), y = Batch(spec, step, 1);
    auto lr = (*ref)->Step(x, y);
    if (!lr.ok()) return fail(lr.status());
    // Odd steps give the trainer only this rank's rows (StepRows), as the
    // data loader of `loom worker` does; even steps the global batch.
    const auto [first, rows] = (*par)->BatchRows();
    auto lp = step % 2 == 0 ? (*par)->Step(x, y)
                            : (*par)->StepRows(x.Narrow(0, first, rows).Clone(), y.Narrow(0, first, rows).Clone());
    if (!lp.ok()) return fail(lp.status());
    const double rel = std::abs(*lp - *lr) / std::max(1e-12, static_cast<double>(std::abs(*lr)));
    worst_loss = std::max(worst_loss, rel);
    WORKER_EXPECT(ctx, rel <= 1e-5, "step ", step + 1, ": loss ", *lp, " vs single-process ", *lr, " (rel ", rel, ")");
  }
  // Norm-wise error of each FULL parameter: every rank adds its block's
  // ||delta||^2 and ||ref||^2; replicated blocks count once per replica in
  // both sums, which leaves the ratio unchanged (replicas are identical).
  const auto local = (*par)->LocalParameters();
  const auto full = (*ref)->Parameters();
  std::vector<std::string> names;
  Tensor sums = Tensor::Zeros({static_cast<int64_t>(2 * full.size())}, DType::kF64);
  for (const auto& [name, ref_t] : full) {
    auto block = (*par)->Block(ref_t, (*par)->specs().at(name));
    if (!block.ok()) return fail(block.status());
    Tensor mine = local.at(name).To(DType::kF64), want = block->To(DType::kF64);
    double dd = 0, rr = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double d = mine.data<double>()[i] - want.data<double>()[i];
      dd += d * d;
      rr += want.data<double>()[i] * want.data<double>()[i];
    }
    sums.data<double>()[2 * names.size()] = dd;
    sums.data<double>()[2 * names.size() + 1] = rr;
    names.push_back(name);
  }
  auto work = (*pg)->AllReduce(sums, {});
  if (!work.ok()) return fail(work.status());
  if (auto st = (*work)->WaitFor(absl::Seconds(60)); !st.ok()) return fail(st);
  double worst_param = 0;
  std::string worst_name;
  for (size_t i = 0; i < names.size(); ++i) {
    const double dd = sums.data<double>()[2 * i], rr = sums.data<double>()[2 * i + 1];
    const double rel = rr > 0 ? std::sqrt(dd / rr) : std::sqrt(dd);
    if (rel > worst_param) worst_param = rel, worst_name = names[i];
    if (ctx.rank == 0)
      WORKER_EXPECT(ctx, rel <= 1e-5, "parameter ", names[i], " ", (*par)->specs().at(names[i]).ToString(),
                    ": rel error ", rel);
  }
  // The evaluation step under the layout: the same loss and the whole logits
  // on every rank.
  const Tensor vx = Batch(spec, kSteps, 0), vy = Batch(spec, kSteps, 1);
  auto eref = (*ref)->Forward(vx, vy);
  if (!eref.ok()) return fail(eref.status());
  auto epar = (*par)->Forward(vx, vy);
  if (!epar.ok()) return fail(epar.status());
  const double eval_rel = std::abs(epar->first - eref->first) / std::abs(eref->first);
  WORKER_EXPECT(ctx, eval_rel <= 1e-5, "evaluation loss ", epar->first, " vs single-process ", eref->first);
  WORKER_EXPECT(ctx, epar->second.shape() == eref->second.shape(), "logits ", ShapeToString(epar->second.shape()),
                " vs single-process ", ShapeToString(eref->second.shape()));
  double ld = 0, lr = 0;
  if (epar->second.shape() == eref->second.shape()) {
    Tensor got = epar->second.To(DType::kF64), want = eref->second.To(DType::kF64);
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double d = got.data<double>()[i] - want.data<double>()[i];
      ld += d * d;
      lr += want.data<double>()[i] * want.data<double>()[i];
    }
  }
  const double logits_rel = std::sqrt(ld / std::max(lr, 1e-30));
  WORKER_EXPECT(ctx, logits_rel <= 1e-5, "evaluation logits: rel error ", logits_rel);
  // Sampling under the layout: a batch of one row per dp block, row 0 the
  // evaluation batch's row 0, gives that row's single-process logits.
  const int64_t T = spec.model().seq_len(), V = spec.model().vocab();
  WORKER_EXPECT(ctx, (*par)->SampleRows() == l.dp, "sample rows ", (*par)->SampleRows(), " for dp ", l.dp);
  Tensor sx = Tensor::Zeros({(*par)->SampleRows(), T}, DType::kI32);
  std::memcpy(sx.data<int32_t>(), vx.data<int32_t>(), sizeof(int32_t) * T);
  auto sampled = (*par)->SampleLogits(sx);
  if (!sampled.ok()) return fail(sampled.status());
  double sd = 0, sr = 0;
  const Tensor srow = sampled->To(DType::kF64), wrow = eref->second.To(DType::kF64);
  for (int64_t i = 0; i < T * V; ++i) {
    const double d = srow.data<double>()[i] - wrow.data<double>()[i];
    sd += d * d;
    sr += wrow.data<double>()[i] * wrow.data<double>()[i];
  }
  const double sample_rel = std::sqrt(sd / std::max(sr, 1e-30));
  WORKER_EXPECT(ctx, sample_rel <= 1e-5, "sampling logits of row 0: rel error ", sample_rel);
  if (ctx.rank == 0)
    fprintf(stderr,
            "[%s] worst loss rel %.3g, worst param rel %.3g (%s), eval loss rel %.3g, logits rel %.3g, sampling "
            "row 0 rel %.3g\n",
            ctx.arg.c_str(), worst_loss, worst_param, worst_name.c_str(), eval_rel, logits_rel, sample_rel);
  return ctx.failures == 0 ? 0 : 1;
}

LOOM_COLLECTIVES_WORKER(parity, ParityWorker);

struct Case {
  std::string family;
  int dp, tp, zero;
  bool sp;
  bool fast;
  int64_t bucket_bytes = 0;
  float dropout = 0;
  std::string checkpointing = "none";
};

std::string Arg(const Case& c) {
  return absl::StrCat(c.family, " ", c.dp, " ", c.tp, " ", c.zero, " ", c.sp ? 1 : 0, " ", c.bucket_bytes, " ",
                      c.dropout, " ", c.checkpointing);
}

void RunCase(const Case& c) {
  if (!c.fast && !loom::testing::FullSweep()) GTEST_SKIP() << "runs with --full: a layout outside the fast subset";
  collectives::testing::RunSpec rs;
  rs.worker = "parity";
  rs.world = c.dp * c.tp;
  rs.arg = Arg(c);
  rs.deadline = absl::Seconds(120);
  auto r = collectives::testing::RunRanks(rs);
  EXPECT_TRUE(r.ok()) << Arg(c) << ": " << r.Summary();
}

// fast: runs by default; the rest with LOOM_FULL=1.
TEST(Parity, Dp4Gpt) { RunCase({"gpt", 4, 1, 0, false, true}); }
TEST(Parity, Dp4Llama) { RunCase({"llama", 4, 1, 0, false, true}); }
TEST(Parity, Tp4Gpt) { RunCase({"gpt", 1, 4, 0, false, false}); }
TEST(Parity, Tp4Llama) { RunCase({"llama", 1, 4, 0, false, true}); }
TEST(Parity, Tp2Dp2Gpt) { RunCase({"gpt", 2, 2, 0, false, true}); }
TEST(Parity, Tp2Dp2Llama) { RunCase({"llama", 2, 2, 0, false, false}); }
TEST(Parity, Dp4Zero1Gpt) { RunCase({"gpt", 4, 1, 1, false, false}); }
TEST(Parity, Dp4Zero1Llama) { RunCase({"llama", 4, 1, 1, false, true}); }
TEST(Parity, Dp4Zero2Gpt) { RunCase({"gpt", 4, 1, 2, false, true}); }
TEST(Parity, Dp4Zero2Llama) { RunCase({"llama", 4, 1, 2, false, false}); }
TEST(Parity, Dp4Zero3Gpt) { RunCase({"gpt", 4, 1, 3, false, false}); }
TEST(Parity, Dp4Zero3Llama) { RunCase({"llama", 4, 1, 3, false, true}); }
TEST(Parity, Tp2Dp2Zero3Gpt) { RunCase({"gpt", 2, 2, 3, false, true}); }
// Gradient buckets of 4 KiB: several buckets per step.
TEST(Parity, Dp4BucketedGpt) { RunCase({"gpt", 4, 1, 0, false, true, 4096}); }
TEST(Parity, Tp2Dp2BucketedLlama) { RunCase({"llama", 2, 2, 0, false, false, 4096}); }
// Dropout masks (embeddings, residual branches, attention probabilities with
// the heads split over tp) are the one-process masks under any layout
// (compiler/models/models.h), and activation checkpointing recomputes the
// forward collectives too.
TEST(Parity, Tp2Dp2GptDropoutCheckpointed) { RunCase({"gpt", 2, 2, 0, false, true, 0, 0.2f, "blocks"}); }
TEST(Parity, Tp2SpLlamaDropoutCheckpointed) { RunCase({"llama", 1, 2, 0, true, true, 0, 0.2f, "blocks"}); }
TEST(Parity, Tp2Dp2LlamaGqaDropout) { RunCase({"llama", 2, 2, 0, false, true, 0, 0.2f}); }
TEST(Parity, Dp4Zero3LlamaDropoutCheckpointed) { RunCase({"llama", 4, 1, 3, false, false, 0, 0.2f, "blocks"}); }
TEST(Parity, Tp2SpGpt) { RunCase({"gpt", 1, 2, 0, true, true}); }
TEST(Parity, Tp2SpLlama) { RunCase({"llama", 1, 2, 0, true, false}); }
TEST(Parity, Tp2Dp2SpLlama) { RunCase({"llama", 2, 2, 0, true, false}); }
TEST(Parity, Tp2Dp2Zero3Llama) { RunCase({"llama", 2, 2, 3, false, false}); }

}  // namespace
}  // namespace loom::tests::parallel

int main(int argc, char** argv) {
  int rc;
  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
