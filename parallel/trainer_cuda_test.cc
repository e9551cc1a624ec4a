// The parallel trainer on device: cuda, without a GPU: the CUDA executor is
// replaced by parallel/testing/host_cuda_executor.h (the same interface over
// host memory, a stand-in step, no collective runs), so what is checked is
// what the Trainer hands the executor and moves between host and device on
// one rank of a layout:
//   - dp=2, tp=2 (with loss-parallel cross-entropy, and with SP) and ZeRO-3
//     dp=2: the executor gets the localized "fused"
//     graph with the layout's collective ops (group "dp" / "tp"), this
//     rank's block of every parameter, the communicators by group name and
//     TrainerOptions::cuda_device; PlanCudaStep compiles the same program;
//   - State() is this rank's blocks as the executor holds them after steps,
//     and restores into a fresh trainer of the same rank bitwise
//     (StateChanged uploads them);
//   - Evaluate, Forward and LocalParameters run on the host copy of the
//     parameters the executor's steps left (two ranks, processes over Gloo):
//     they match a CPU trainer of the same layout holding those parameters.
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/rng.h"
#include "base/status.h"
#include "base/tensor.h"
#include "collectives/process_group.h"
#include "collectives/testing/multiprocess.h"
#include "compiler/comm/communicator.h"
#include "compiler/ir/text.h"
#include "dtensor/spec.h"
#include "gtest/gtest.h"
#include "parallel/testing/cpu_rank_group.h"
#include "parallel/testing/host_cuda_executor.h"
#include "parallel/testing/small_spec.h"
#include "parallel/trainer.h"

namespace loom::parallel {
namespace {

using collectives::testing::WorkerContext;
using testing::HostCudaExecutor;

// A communicator for a rank whose peers are elsewhere: creating a trainer
// and stepping the stand-in executor call none of them.
class NoPeers final : public compiler::comm::Communicator {
 public:
  NoPeers(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduce(const Tensor&, Tensor&, compiler::comm::ReduceKind) override { return Called(); }
  absl::Status AllGather(const Tensor&, Tensor&, int) override { return Called(); }
  absl::Status ReduceScatter(const Tensor&, Tensor&, int, compiler::comm::ReduceKind) override { return Called(); }

 private:
  static absl::Status Called() { return absl::FailedPreconditionError("NoPeers: a collective was called"); }
  int rank_, size_;
};

v1::JobSpec Spec(const std::string& family, const Layout& l) {
  testing::SmallModel sm;
  sm.family = family;
  sm.n_head = 4;
  sm.n_kv_head = family == "llama" ? 2 : 4;
  v1::JobSpec s = testing::SmallSpec(sm, 4, 1e-2f, "cuda");
  if (family == "llama") s.mutable_model()->set_ffn_hidden(24);
  s.mutable_train()->set_seed(3);
  auto* p = s.mutable_parallel();
  p->set_dp(l.dp);
  p->set_tp(l.tp);
  p->set_zero_stage(l.zero_stage);
  p->set_sequence_parallel(l.sequence_parallel);
  return s;
}

// Top-level ops of `g` by "op/group" (collectives) or "op".
std::map<std::string, int> Ops(const compiler::ir::Graph& g) {
  std::map<std::string, int> n;
  for (const compiler::ir::Node& node : g.nodes()) {
    const std::string group = node.attrs.GetString("group");
    ++n[group.empty() ? node.op : absl::StrCat(node.op, "/", group)];
  }
  return n;
}

struct Made {
  std::unique_ptr<Trainer> trainer;
  HostCudaExecutor* dev = nullptr;
  std::unique_ptr<NoPeers> comm;
};

Made Make(const v1::JobSpec& spec, const Layout& l, int rank, int cuda_device = 0) {
  Made r;
  TrainerOptions o;
  o.layout = l;
  o.rank = rank;
  o.cuda_device = cuda_device;
  const dtensor::MeshShape mesh = MeshOf(l);
  const std::vector<int64_t> coords = mesh.Coordinates(rank);
  for (int d = 0; d < mesh.ndim(); ++d) {
    if (mesh.sizes[d] == 1) continue;
    r.comm = std::make_unique<NoPeers>(static_cast<int>(coords[d]), static_cast<int>(mesh.sizes[d]));
    o.comms[mesh.names[d]] = r.comm.get();
  }
  o.make_cuda_executor = HostCudaExecutor::Factory(&r.dev);
  auto t = Trainer::Create(spec, std::move(o));
  EXPECT_TRUE(t.ok()) << t.status();
  if (t.ok()) r.trainer = std::move(*t);
  return r;
}

// The one-rank model's initial parameters (the global tensors).
std::map<std::string, Tensor> GlobalInitial(v1::JobSpec spec) {
  spec.set_device("cpu");
  spec.clear_parallel();
  auto t = Trainer::Create(spec);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  std::map<std::string, Tensor> out;
  for (const auto& [name, p] : (*t)->Parameters()) out[name] = p.Clone();
  return out;
}

bool BitwiseEqual(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.shape() != b.shape() || a.dtype() != DType::kF32 ||
      b.dtype() != DType::kF32)
    return false;
  const Tensor ac = a.Contiguous(), bc = b.Contiguous();
  for (int64_t e = 0; e < ac.numel(); ++e)
    if (ac.data<float>()[e] != bc.data<float>()[e]) return false;
  return true;
}

struct LayoutCase {
  std::string family;
  Layout layout;
  std::string group;            // the mesh dim of size 2
  std::vector<std::string> ops;  // collective ops the step must hold, as "op/group"
};

std::vector<LayoutCase> Cases() {
  Layout dp2{2, 1, 0, false}, tp2{1, 2, 0, false}, sp2{1, 2, 0, true}, zero3{2, 1, 3, false};
  // tp: Megatron's all-reduces and the loss computed on the vocabulary
  // shards (vocab_onehot); SP: the sequence gathered and scattered.
  return {{"gpt", dp2, "dp", {"all_reduce/dp"}},
          {"llama", tp2, "tp", {"all_reduce/tp", "vocab_onehot/tp"}},
          {"gpt", tp2, "tp", {"all_reduce/tp", "vocab_onehot/tp"}},
          {"gpt", sp2, "tp", {"all_gather/tp", "reduce_scatter/tp", "vocab_onehot/tp"}},
          {"gpt", zero3, "dp", {"all_gather/dp", "reduce_scatter/dp"}}};
}

std::string Name(const LayoutCase& c) {
  return absl::StrCat(c.family, " dp", c.layout.dp, " tp", c.layout.tp, " zero", c.layout.zero_stage,
                      c.layout.sequence_parallel ? " sp" : "");
}

// What Create hands the executor on each rank of a dp=2 / tp=2 layout.
TEST(TrainerCuda, ParallelStepGoesToTheExecutorWithItsCommunicatorsAndDevice) {
  for (const LayoutCase& c : Cases()) {
    SCOPED_TRACE(Name(c));
    const v1::JobSpec spec = Spec(c.family, c.layout);
    const std::map<std::string, Tensor> global = GlobalInitial(spec);
    ASSERT_FALSE(global.empty());
    for (int rank = 0; rank < 2; ++rank) {
      SCOPED_TRACE(absl::StrCat("rank ", rank));
      Made m = Make(spec, c.layout, rank, /*cuda_device=*/rank + 1);
      ASSERT_NE(m.trainer, nullptr);
      ASSERT_NE(m.dev, nullptr);
      const Trainer& t = *m.trainer;
      // The localized program, not the one-rank step.
      ASSERT_TRUE(t.compilation().stages.count("parallel"));
      const std::map<std::string, int> ops = Ops(m.dev->graph());
      for (const std::string& op : c.ops) EXPECT_GT(ops.count(op) ? ops.at(op) : 0, 0) << op;
      for (const auto& [op, n] : ops)
        EXPECT_TRUE(op.find('/') == std::string::npos || op.substr(op.find('/') + 1) == c.group) << op;
      EXPECT_EQ(compiler::ir::PrintGraph(m.dev->graph()), compiler::ir::PrintGraph(t.compilation().stages.at("fused")));
      // Options: the communicators by group name, the device, the precision.
      const compiler::cuda::CudaOptions& o = m.dev->options();
      ASSERT_EQ(o.communicators.size(), 1u);
      ASSERT_TRUE(o.communicators.count(c.group));
      EXPECT_EQ(o.communicators.at(c.group), m.comm.get());
      EXPECT_EQ(o.communicators.at(c.group)->rank(), rank);
      EXPECT_EQ(o.device, rank + 1);
      EXPECT_FALSE(o.bf16);
      // This rank's block of every parameter is on the "device"; under tp
      // or ZeRO-3 some are smaller than the global tensor.
      int smaller = 0;
      for (const compiler::models::ParamInfo& p : t.param_info()) {
        const Tensor held = m.dev->Value(p.name);
        auto want = t.Block(global.at(p.name), t.specs().at(p.name));
        ASSERT_TRUE(want.ok()) << want.status();
        EXPECT_TRUE(BitwiseEqual(held, *want)) << p.name;
        smaller += held.numel() < global.at(p.name).numel();
      }
      EXPECT_EQ(smaller > 0, c.layout.tp > 1 || c.layout.zero_stage == 3);
      // dp splits the batch's rows.
      EXPECT_EQ(t.BatchRows(), (c.layout.dp > 1 ? std::make_pair<int64_t, int64_t>(2 * rank, 2)
                                                : std::make_pair<int64_t, int64_t>(0, 4)));
    }
  }
}

// PlanCudaStep's program (the check before launch) is the trainer's parallel
// step: the same collectives, planned for rank 0 as collective launches.
// Fresh optimizer state is zero-filled by the executor (ZeroInput), not
// copied from host zeros; parameters and buffers are uploaded; the stored
// state reads back as zeros of its meta.
TEST(TrainerCuda, FreshOptimizerStateIsFilledOnTheDevice) {
  const Layout one{1, 1, 0, false};
  Made m = Make(Spec("gpt", one), one, 0);
  ASSERT_NE(m.dev, nullptr);
  const compiler::ir::Graph& g = m.dev->graph();
  int states = 0, uploaded = 0;
  for (const auto& in : g.inputs()) {
    states += in.kind == compiler::ir::InputKind::kState;
    uploaded += in.kind == compiler::ir::InputKind::kParam || in.kind == compiler::ir::InputKind::kConst;
  }
  ASSERT_GT(states, 0);
  EXPECT_EQ(m.dev->zero_fills(), states);
  EXPECT_EQ(m.dev->uploads(), uploaded) << "only parameters and buffers travel from the host";
  for (const auto& in : g.inputs()) {
    if (in.kind != compiler::ir::InputKind::kState) continue;
    const Tensor v = m.dev->Value(in.name);
    ASSERT_TRUE(v.defined()) << in.name;
    EXPECT_EQ(kernels::MetaOf(v), g.meta(in.value)) << in.name;
    for (int64_t e = 0; e < v.numel(); ++e) ASSERT_EQ(v.GetDouble(e), 0.0) << in.name;
  }
}

TEST(TrainerCuda, PlanCudaStepCompilesTheParallelProgram) {
  for (const LayoutCase& c : Cases()) {
    SCOPED_TRACE(Name(c));
    const v1::JobSpec spec = Spec(c.family, c.layout);
    auto model = FamilyModel(spec);
    ASSERT_TRUE(model.ok()) << model.status();
    auto step = CompileCudaStep(spec, *model);
    ASSERT_TRUE(step.ok()) << step.status();
    Made m = Make(spec, c.layout, 0);
    ASSERT_NE(m.dev, nullptr);
    EXPECT_EQ(compiler::ir::PrintGraph(*step), compiler::ir::PrintGraph(m.dev->graph()));
    auto planned = PlanCudaStep(spec, *model);
    ASSERT_TRUE(planned.ok()) << planned.status();
    EXPECT_EQ(compiler::ir::PrintGraph(planned->step), compiler::ir::PrintGraph(*step));
    int collectives = 0;
    for (const compiler::cuda::Launch& l : planned->plan.launches)
      collectives += l.kind == compiler::cuda::LaunchKind::kCollective;
    EXPECT_GT(collectives, 0) << planned->plan.Describe();
    v1::JobSpec one = spec;
    one.clear_parallel();
    auto single = CompileCudaStep(one, *model);
    ASSERT_TRUE(single.ok()) << single.status();
    for (const auto& [op, n] : Ops(*single)) EXPECT_EQ(op.find('/'), std::string::npos) << op;
  }
}

absl::Status Steps(Trainer& t, int n) {
  const auto [first, rows] = t.BatchRows();
  for (int i = 0; i < n; ++i) {
    const uint64_t s = static_cast<uint64_t>(t.step());
    Tensor x = testing::RandomTokens(4, 8, 32, 10 + s).Narrow(0, first, rows).Clone();
    Tensor y = testing::RandomTokens(4, 8, 32, 50 + s).Narrow(0, first, rows).Clone();
    auto loss = t.StepRows(x, y);
    if (!loss.ok()) return loss.status();
  }
  return absl::OkStatus();
}

// Each rank's checkpoint state: its blocks as the executor holds them after
// steps; restored into a fresh trainer of the same rank, bitwise, and the
// two continue alike.
TEST(TrainerCuda, StateRoundTripsPerRank) {
  for (const LayoutCase& c : Cases()) {
    SCOPED_TRACE(Name(c));
    const v1::JobSpec spec = Spec(c.family, c.layout);
    for (int rank = 0; rank < 2; ++rank) {
      SCOPED_TRACE(absl::StrCat("rank ", rank));
      Made a = Make(spec, c.layout, rank);
      ASSERT_NE(a.dev, nullptr);
      ASSERT_TRUE(Steps(*a.trainer, 3).ok());
      auto state = a.trainer->State();
      ASSERT_TRUE(state.ok()) << state.status();
      ASSERT_GT(state->size(), a.trainer->param_info().size());  // parameters and moments
      for (const Trainer::StateTensor& st : *state) {
        EXPECT_TRUE(BitwiseEqual(st.local, a.dev->Value(st.name))) << st.name << " is not what the steps left";
        auto ranges = dtensor::LocalBlock(st.global_shape, st.spec, MeshOf(c.layout).Coordinates(rank));
        ASSERT_TRUE(ranges.ok()) << ranges.status();
        for (size_t d = 0; d < ranges->size(); ++d) EXPECT_EQ(st.local.shape()[d], (*ranges)[d].length) << st.name;
      }
      const std::map<std::string, Tensor> params = a.trainer->LocalParameters();
      for (const auto& [name, p] : params) EXPECT_TRUE(BitwiseEqual(p, a.dev->Value(name))) << name;

      Made b = Make(spec, c.layout, rank);
      ASSERT_NE(b.dev, nullptr);
      auto into = b.trainer->State();
      ASSERT_TRUE(into.ok()) << into.status();
      ASSERT_EQ(into->size(), state->size());
      for (size_t i = 0; i < state->size(); ++i) {
        ASSERT_EQ((*into)[i].name, (*state)[i].name);
        ASSERT_TRUE((*into)[i].local.CopyFrom((*state)[i].local).ok());
      }
      ASSERT_TRUE(b.trainer->StateChanged().ok());
      b.trainer->set_step(a.trainer->step());
      for (const Trainer::StateTensor& st : *state)
        EXPECT_TRUE(BitwiseEqual(b.dev->Value(st.name), a.dev->Value(st.name))) << st.name << " after restore";
      ASSERT_TRUE(Steps(*a.trainer, 1).ok());
      ASSERT_TRUE(Steps(*b.trainer, 1).ok());
      for (const Trainer::StateTensor& st : *state)
        EXPECT_TRUE(BitwiseEqual(b.dev->Value(st.name), a.dev->Value(st.name))) << st.name << " one step later";
    }
  }
}

// ---- Evaluate / Forward on the host copy (two ranks, processes, Gloo) ----

// Sets a CPU trainer's state to what the executor holds.
absl::Status TakeState(Trainer& cpu, const HostCudaExecutor& dev) {
  LOOM_ASSIGN_OR_RETURN(std::vector<Trainer::StateTensor> into, cpu.State());
  for (Trainer::StateTensor& st : into) LOOM_RETURN_IF_ERROR(st.local.CopyFrom(dev.Value(st.name)));
  return cpu.StateChanged();
}

// arg: "family dp tp zero". Each rank: a cuda trainer (stand-in executor)
// steps twice, so its parameters on the "device" move away from the initial
// ones; a CPU trainer of the same layout and rank gets that state. Their
// Evaluate, Forward and LocalParameters must agree bitwise, and differ from
// a CPU trainer still at the initial parameters.
int HostCopyWorker(WorkerContext& ctx) {
  std::vector<std::string> a = absl::StrSplit(ctx.arg, ' ');
  Layout l;
  l.dp = std::stoi(a[1]);
  l.tp = std::stoi(a[2]);
  l.zero_stage = std::stoi(a[3]);
  const v1::JobSpec spec = Spec(a[0], l);
  v1::JobSpec cpu_spec = spec;
  cpu_spec.set_device("cpu");
  auto fail = [&](const absl::Status& s) {
    std::fprintf(stderr, "[rank %d] %s\n", ctx.rank, std::string(s.message()).c_str());
    return 1;
  };
  auto ranks = parallel::testing::MakeCpuRankGroup(ctx);
  if (!ranks.ok()) return fail(ranks.status());
  const auto& comm = ranks->comm;
  const std::string group = l.dp > 1 ? "dp" : "tp";
  auto make = [&](const v1::JobSpec& s, HostCudaExecutor** dev) -> absl::StatusOr<std::unique_ptr<Trainer>> {
    TrainerOptions o;
    o.layout = l;
    o.rank = ctx.rank;
    o.comms[group] = comm.get();
    if (dev != nullptr) o.make_cuda_executor = HostCudaExecutor::Factory(dev);
    return Trainer::Create(s, std::move(o));
  };
  HostCudaExecutor* dev = nullptr;
  auto cuda = make(spec, &dev);
  if (!cuda.ok()) return fail(cuda.status());
  auto cpu = make(cpu_spec, nullptr);
  if (!cpu.ok()) return fail(cpu.status());
  auto initial = make(cpu_spec, nullptr);
  if (!initial.ok()) return fail(initial.status());
  if (absl::Status s = Steps(**cuda, 2); !s.ok()) return fail(s);
  // The state the steps left, taken from the executor directly (not through
  // the cuda trainer, whose host copy stays as the steps left it).
  if (absl::Status s = TakeState(**cpu, *dev); !s.ok()) return fail(s);
  const Tensor x = testing::RandomTokens(4, 8, 32, 900), y = testing::RandomTokens(4, 8, 32, 901);
  // Evaluate right after the steps: the first call after a step that reads
  // the host copy, so it must fetch the executor's parameters itself.
  auto ev = (*cuda)->Evaluate(x, y);
  auto ev_cpu = (*cpu)->Evaluate(x, y);
  auto ev_init = (*initial)->Evaluate(x, y);
  if (!ev.ok() || !ev_cpu.ok() || !ev_init.ok())
    return fail(!ev.ok() ? ev.status() : !ev_cpu.ok() ? ev_cpu.status() : ev_init.status());
  WORKER_EXPECT(ctx, *ev == *ev_cpu, "Evaluate: cuda trainer ", *ev, " vs cpu trainer with its state ", *ev_cpu);
  WORKER_EXPECT(ctx, *ev != *ev_init, "Evaluate: the cuda trainer evaluated the initial parameters ", *ev_init);
  // Another step, then Forward (logits whole on every rank) and the rows form.
  if (absl::Status s = Steps(**cuda, 1); !s.ok()) return fail(s);
  if (absl::Status s = TakeState(**cpu, *dev); !s.ok()) return fail(s);
  auto fw = (*cuda)->Forward(x, y);
  auto fw_cpu = (*cpu)->Forward(x, y);
  if (!fw.ok() || !fw_cpu.ok()) return fail(!fw.ok() ? fw.status() : fw_cpu.status());
  WORKER_EXPECT(ctx, fw->first == fw_cpu->first, "Forward loss ", fw->first, " vs ", fw_cpu->first);
  WORKER_EXPECT(ctx, BitwiseEqual(fw->second, fw_cpu->second), "Forward logits differ");
  for (const auto& [name, p] : (*cuda)->LocalParameters())
    WORKER_EXPECT(ctx, BitwiseEqual(p, dev->Value(name)), "LocalParameters: ", name);
  return ctx.failures == 0 ? 0 : 1;
}
LOOM_COLLECTIVES_WORKER(host_copy, HostCopyWorker);

TEST(TrainerCuda, EvaluateAndForwardReadTheStepsParameters) {
  for (const char* arg : {"gpt 2 1 3", "gpt 1 2 0"}) {
    SCOPED_TRACE(arg);
    collectives::testing::RunSpec rs;
    rs.worker = "host_copy";
    rs.world = 2;
    rs.arg = arg;
    rs.deadline = absl::Seconds(120);
    auto r = collectives::testing::RunRanks(rs);
    EXPECT_TRUE(r.ok()) << r.Summary();
  }
}

}  // namespace
}  // namespace loom::parallel

int main(int argc, char** argv) {
  int rc = 0;
  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
