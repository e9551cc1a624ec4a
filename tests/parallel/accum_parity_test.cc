// Gradient accumulation under a parallel layout (N processes, Gloo over
// loopback): train.grad_accum_steps = 4 at tp=2 x dp=2 (and with ZeRO) against
// two one-process Trainers on every rank, on identical weights and data:
//   - batch B in one step: the first update's accumulated gradient (reduced
//     over dp by the update program, whole on every rank) is within 1e-6 of
//     its gradient relative in norm, and the losses of the next 10 updates
//     within 1e-5 (relative);
//   - the one-process accumulated run (4 x B/4) fed the same micro-batches:
//     the same gradient and loss bounds, and the final parameters within 1e-5.
// Each dp rank splits its own rows of an update into the micro-batches
// (parallel/trainer.h), so the one-process accumulated run gets the batch's
// rows in that order. With model.dropout the masks follow the micro-batch
// positions, so a dropout case is compared with the accumulated run only.
//
// Default: a fast subset; LOOM_FULL=1 runs every case.
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/rng.h"
#include "base/testing/full_sweep.h"
#include "collectives/process_group.h"
#include "collectives/testing/multiprocess.h"
#include "dtensor/device_mesh.h"
#include "gtest/gtest.h"
#include "parallel/trainer.h"

namespace loom::tests::parallel {
namespace {

using collectives::testing::WorkerContext;

constexpr int kAccum = 4;
constexpr int kUpdates = 11;  // the first, whose gradients are compared, then 10 more

v1::JobSpec Spec(const std::string& family, int accum, float dropout) {
  v1::JobSpec s;
  auto* m = s.mutable_model();
  m->set_family(family);
  m->set_n_layer(2);
  m->set_n_head(4);
  m->set_d_model(16);
  m->set_seq_len(8);
  m->set_vocab(64);
  m->set_dropout(dropout);
  if (family == "llama") {
    m->set_n_kv_head(2);
    m->set_ffn_hidden(24);
  }
  auto* t = s.mutable_train();
  t->set_batch_size(16);
  t->set_grad_accum_steps(accum);
  t->set_lr(3e-3);
  t->set_warmup_steps(3);
  t->set_weight_decay(0.1);
  t->set_grad_clip(1.0);  // clipping acts on the reduced mean gradient
  t->set_beta1(0.9);
  t->set_beta2(0.95);
  t->set_eps(1e-6);  // see tests/parallel/parity_test.cc: keeps rounding noise in a zero gradient still
  t->set_seed(7);
  return s;
}

Tensor Tokens(const v1::JobSpec& s, int step, int which) {
  const int64_t b = s.train().batch_size(), t = s.model().seq_len();
  Tensor x = Tensor::MustEmpty({b, t}, DType::kI32);
  Philox rng(4321 + step, which);
  for (int64_t i = 0; i < b * t; ++i)
    x.data<int32_t>()[i] = static_cast<int32_t>(rng.Uniform(i) * s.model().vocab()) % s.model().vocab();
  return x;
}

// The batch's rows in the order the parallel run's micro-batches take them:
// micro-batch i is chunk i of every dp block, dp block after dp block.
Tensor MicroOrder(const Tensor& x, int64_t dp) {
  const int64_t b = x.dim(0), block = b / dp, n = block / kAccum;
  Tensor out = Tensor::MustEmpty(x.shape(), x.dtype());
  int64_t row = 0;
  for (int64_t i = 0; i < kAccum; ++i)
    for (int64_t d = 0; d < dp; ++d, row += n)
      EXPECT_TRUE(out.Narrow(0, row, n).CopyFrom(x.Narrow(0, d * block + i * n, n)).ok());
  return out;
}

// ||a - b|| / ||b|| over every parameter's gradient (whole tensors).
double RelativeDistance(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  double diff = 0, norm = 0;
  for (const auto& [name, gb] : b) {
    auto it = a.find(name);
    if (it == a.end() || it->second.shape() != gb.shape()) return INFINITY;
    const Tensor ga = it->second.Contiguous(), gbc = gb.Contiguous();
    for (int64_t e = 0; e < gb.numel(); ++e) {
      const double d = double{ga.data<float>()[e]} - gbc.data<float>()[e];
      diff += d * d;
      norm += double{gbc.data<float>()[e]} * gbc.data<float>()[e];
    }
  }
  return std::sqrt(diff / norm);
}

double Rel(double a, double b) { return std::abs(a - b) / std::max(1e-12, std::abs(b)); }

// arg: "family dp tp zero sp dropout"
int AccumWorker(WorkerContext& ctx) {
  std::vector<std::string> a = absl::StrSplit(ctx.arg, ' ');
  loom::parallel::Layout l;
  const std::string family = a[0];
  l.dp = std::stoi(a[1]);
  l.tp = std::stoi(a[2]);
  l.zero_stage = std::stoi(a[3]);
  l.sequence_parallel = a[4] == "1";
  const float dropout = std::stof(a[5]);
  auto fail = [&](const absl::Status& s) {
    fprintf(stderr, "[rank %d] %s\n", ctx.rank, std::string(s.message()).c_str());
    return 1;
  };
  collectives::ProcessGroupOptions po;
  po.backend = "cpu:gloo";
  auto pg = collectives::ProcessGroup::Create(ctx.store, ctx.rank, ctx.world, po);
  if (!pg.ok()) return fail(pg.status());
  std::shared_ptr<collectives::ProcessGroup> world(std::move(*pg));
  auto mesh = dtensor::DeviceMesh::Create(world, loom::parallel::MeshOf(l));
  if (!mesh.ok()) return fail(mesh.status());
  std::vector<std::unique_ptr<compiler::comm::Communicator>> owned;
  compiler::comm::CommunicatorMap comms;
  for (int d = 0; d < (*mesh)->ndim(); ++d) {
    if ((*mesh)->shape().sizes[d] == 1) continue;
    owned.push_back(compiler::comm::MakeProcessGroupCommunicator((*mesh)->group(d), 60000));
    comms[(*mesh)->shape().names[d]] = owned.back().get();
  }
  const v1::JobSpec accum_spec = Spec(family, kAccum, dropout), full_spec = Spec(family, 1, dropout);
  loom::parallel::TrainerOptions one;
  one.keep_gradients = true;
  auto full = loom::parallel::Trainer::Create(full_spec, one);
  if (!full.ok()) return fail(full.status());
  auto accum = loom::parallel::Trainer::Create(accum_spec, one);
  if (!accum.ok()) return fail(accum.status());
  loom::parallel::TrainerOptions popts;
  popts.layout = l;
  popts.rank = ctx.rank;
  popts.comms = comms;
  popts.keep_gradients = true;  // the update program also outputs the reduced mean gradients
  auto par = loom::parallel::Trainer::Create(accum_spec, popts);
  if (!par.ok()) return fail(par.status());
  // The micro-step reduces no gradient over dp: its dp collectives carry
  // scalars only (the loss); the update program reduces the gradients.
  auto DpTensors = [](const compiler::ir::Graph& g) {
    int64_t big = 0;
    for (const auto& n : g.nodes()) {
      int64_t elements = 1;
      for (int64_t d : g.meta(n.outputs[0]).shape) elements *= d;
      if ((n.op == "all_reduce" || n.op == "reduce_scatter") && n.attrs.GetString("group", "") == "dp" &&
          elements > 1)
        ++big;
    }
    return big;
  };
  const int64_t micro_dp = DpTensors((*par)->compilation().stages.at("parallel"));
  WORKER_EXPECT(ctx, micro_dp == 0, "the micro-step reduces ", micro_dp, " tensors over dp");
  const bool vs_full = dropout == 0;  // dropout masks follow the micro-batches
  double worst_full = 0, worst_accum = 0;
  for (int step = 0; step < kUpdates; ++step) {
    const Tensor x = Tokens(accum_spec, step, 0), y = Tokens(accum_spec, step, 1);
    auto lf = (*full)->Step(x, y);
    if (!lf.ok()) return fail(lf.status());
    auto la = (*accum)->Step(MicroOrder(x, l.dp), MicroOrder(y, l.dp));
    if (!la.ok()) return fail(la.status());
    // Odd updates give the trainer only this rank's rows, as `loom worker`'s
    // data loader does; even updates the global batch.
    const auto [first, rows] = (*par)->BatchRows();
    auto lp = step % 2 == 0 ? (*par)->Step(x, y)
                            : (*par)->StepRows(x.Narrow(0, first, rows).Clone(), y.Narrow(0, first, rows).Clone());
    if (!lp.ok()) return fail(lp.status());
    if (step == 0) {
      const auto gp = (*par)->LastGradients();
      const double rf = RelativeDistance(gp, (*full)->LastGradients());
      const double ra = RelativeDistance(gp, (*accum)->LastGradients());
      if (ctx.rank == 0)
        fprintf(stderr, "[%s] first update: gradient rel %.3g vs batch B, %.3g vs one-process accumulation\n",
                ctx.arg.c_str(), rf, ra);
      WORKER_EXPECT(ctx, gp.size() == (*par)->param_info().size(), "gradients of ", gp.size(), " parameters");
      if (vs_full) WORKER_EXPECT(ctx, rf < 1e-6, "accumulated gradient vs batch B: rel ", rf);
      WORKER_EXPECT(ctx, ra < 1e-6, "accumulated gradient vs one-process accumulation: rel ", ra);
      continue;
    }
    if (vs_full) {
      worst_full = std::max(worst_full, Rel(*lp, *lf));
      WORKER_EXPECT(ctx, Rel(*lp, *lf) <= 1e-5, "update ", step + 1, ": loss ", *lp, " vs batch B ", *lf);
    }
    worst_accum = std::max(worst_accum, Rel(*lp, *la));
    WORKER_EXPECT(ctx, Rel(*lp, *la) <= 1e-5, "update ", step + 1, ": loss ", *lp, " vs one-process ", *la);
  }
  WORKER_EXPECT(ctx, (*par)->step() == kUpdates, "step ", (*par)->step());
  // This rank's parameter blocks against the one-process accumulated run's.
  double worst_param = 0;
  const auto local = (*par)->LocalParameters();
  for (const auto& [name, ref] : (*accum)->Parameters()) {
    auto block = (*par)->Block(ref, (*par)->specs().at(name));
    if (!block.ok()) return fail(block.status());
    const double rel = RelativeDistance({{name, local.at(name)}}, {{name, *block}});
    worst_param = std::max(worst_param, rel);
    WORKER_EXPECT(ctx, rel <= 1e-5, "parameter ", name, " ", (*par)->specs().at(name).ToString(), ": rel ", rel);
  }
  if (ctx.rank == 0)
    fprintf(stderr, "[%s] updates 2-%d: worst loss rel %.3g vs batch B, %.3g vs one-process; worst param rel %.3g\n",
            ctx.arg.c_str(), kUpdates, worst_full, worst_accum, worst_param);
  return ctx.failures == 0 ? 0 : 1;
}

LOOM_COLLECTIVES_WORKER(accum, AccumWorker);

struct Case {
  std::string family;
  int dp, tp, zero;
  bool sp;
  float dropout;
  bool fast;
};

void RunCase(const Case& c) {
  if (!c.fast && !loom::testing::FullSweep()) GTEST_SKIP() << "runs with --full: a layout outside the fast subset";
  collectives::testing::RunSpec rs;
  rs.worker = "accum";
  rs.world = c.dp * c.tp;
  rs.arg = absl::StrCat(c.family, " ", c.dp, " ", c.tp, " ", c.zero, " ", c.sp ? 1 : 0, " ", c.dropout);
  rs.deadline = absl::Seconds(120);
  auto r = collectives::testing::RunRanks(rs);
  EXPECT_TRUE(r.ok()) << rs.arg << ": " << r.Summary();
}

TEST(AccumParity, Tp2Dp2Gpt) { RunCase({"gpt", 2, 2, 0, false, 0, true}); }
TEST(AccumParity, Tp2Dp2Zero1Gpt) { RunCase({"gpt", 2, 2, 1, false, 0, false}); }
TEST(AccumParity, Tp2Dp2Zero2Llama) { RunCase({"llama", 2, 2, 2, false, 0, true}); }
TEST(AccumParity, Tp2Dp2Zero3Gpt) { RunCase({"gpt", 2, 2, 3, false, 0, true}); }
TEST(AccumParity, Tp2Dp2SpLlama) { RunCase({"llama", 2, 2, 0, true, 0, false}); }
TEST(AccumParity, Dp4Gpt) { RunCase({"gpt", 4, 1, 0, false, 0, false}); }
TEST(AccumParity, Tp2Dp2GptDropout) { RunCase({"gpt", 2, 2, 0, false, 0.2f, true}); }

}  // namespace
}  // namespace loom::tests::parallel

int main(int argc, char** argv) {
  int rc;
  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
