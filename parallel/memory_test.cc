// Memory of the parallel layouts, and determinism of their compilation.
//
// 1. CompileOrder: compiling layout A, then B, then A again (and every
//    acceptance layout forwards, then backwards) gives identical memory plans
//    and identical IR text: no process-wide state leaks between compilations.
//
// 2. The memory acceptance: per-rank parameter + gradient + AdamW
//    memory of a layout, over the single-process figure:
//      tp=2             in [0.45, 0.60]
//      dp=4 ZeRO-3      in [0.20, 0.35]
//    Measured on real ranks (processes, Gloo over loopback). Each rank installs
//    a CountingAllocator as the process's default allocator, creates its
//    Trainer, resets the high-water mark and runs 2 steps. Then
//      state     = the bytes of the rank's parameter, AdamW m and v blocks: the
//                  trainer's State() (program inputs, each its own contiguous
//                  allocation from that allocator);
//      gradients = the arena bytes of the gradient values AdamW consumes
//                  (the plan's buffers of each adamw node's grad input,
//                  rounded to the plan's alignment);
//      figure    = state + gradients, per rank (the largest over the ranks).
//    The single-process figure is the same measurement on a world of 1 (the
//    one-rank Trainer: the single-process compile, whose joint graph is
//    already local).
//    Everything else the allocator holds is activations / workspace and is
//    printed beside the figure: the executor's arena (activations, the
//    transient full gradients before a reduce_scatter, ZeRO-3's gathered
//    parameters), the fused kernels' scratch and the communicators' staging
//    buffers; so is the allocator's peak over the 2 steps.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/allocator.h"
#include "base/status.h"
#include "collectives/process_group.h"
#include "collectives/testing/multiprocess.h"
#include "compiler/comm/communicator.h"
#include "compiler/ir/text.h"
#include "compiler/models/models.h"
#include "gtest/gtest.h"
#include "parallel/styles.h"
#include "parallel/trainer.h"

namespace loom::parallel {
namespace {

using collectives::testing::WorkerContext;

// ---------------------------------------------------------------- 1. order

class NullComm final : public compiler::comm::Communicator {
 public:
  explicit NullComm(int n) : n_(n) {}
  int rank() const override { return 0; }
  int size() const override { return n_; }
  absl::Status AllReduce(const Tensor&, Tensor&, compiler::comm::ReduceKind) override { return absl::OkStatus(); }
  absl::Status AllGather(const Tensor&, Tensor&, int) override { return absl::OkStatus(); }
  absl::Status ReduceScatter(const Tensor&, Tensor&, int, compiler::comm::ReduceKind) override {
    return absl::OkStatus();
  }

 private:
  int n_;
};

v1::ModelSpec OrderModel() {
  v1::ModelSpec m;
  m.set_family("gpt");
  m.set_n_layer(2);
  m.set_n_head(4);
  m.set_n_kv_head(4);
  m.set_d_model(128);
  m.set_seq_len(32);
  m.set_vocab(256);
  m.set_ffn_hidden(512);
  m.set_norm_eps(1e-5f);
  return m;
}

struct Compiled {
  int64_t program_peak = 0, fused_peak = 0;
  std::string text;
};

Compiled CompileLayout(const Layout& l) {
  Compiled r;
  compiler::models::BuildOptions bo;
  bo.batch = 8;
  auto fwd = compiler::models::BuildForward(OrderModel(), bo);
  EXPECT_TRUE(fwd.ok()) << fwd.status();
  if (!fwd.ok()) return r;
  NullComm dp(l.dp), tp(l.tp);
  compiler::CompileOptions co;
  co.lowering.in_place_updates = true;
  if (l.dp > 1) co.lowering.communicators["dp"] = &dp;
  if (l.tp > 1) co.lowering.communicators["tp"] = &tp;
  compiler::AdamWOptions adam;
  adam.max_norm = 1.0;
  co.adamw = adam;
  auto c = CompileParallel(*fwd, co, OrderModel(), bo.batch, l);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return r;
  r.program_peak = c->program->plan.peak_bytes;
  r.fused_peak = c->plan.peak_bytes;
  for (const char* s : {"joint", "parallel", "optimized", "fused"})
    absl::StrAppend(&r.text, "## ", s, "\n", compiler::ir::PrintGraph(c->stages.at(s)));
  absl::StrAppend(&r.text, c->program->ToString());
  return r;
}

const std::vector<Layout>& AcceptanceLayouts() {
  static const auto* v = new std::vector<Layout>{{1, 1, 0, false}, {4, 1, 0, false}, {1, 4, 0, false},
                                                 {2, 2, 0, false}, {1, 2, 0, true},  {4, 1, 1, false},
                                                 {4, 1, 2, false}, {4, 1, 3, false}, {2, 2, 3, false}};
  return *v;
}

TEST(CompileOrder, AThenBThenAGivesIdenticalPlans) {
  const Layout a{4, 1, 0, false}, b{1, 1, 0, false};
  const Compiled a1 = CompileLayout(a), b1 = CompileLayout(b), a2 = CompileLayout(a);
  EXPECT_GT(a1.program_peak, 0);
  EXPECT_EQ(a1.program_peak, a2.program_peak);
  EXPECT_EQ(a1.fused_peak, a2.fused_peak);
  EXPECT_EQ(a1.text, a2.text);
  EXPECT_NE(a1.text, b1.text);
}

TEST(CompileOrder, ForwardsThenBackwardsAgree) {
  const auto& ls = AcceptanceLayouts();
  std::vector<Compiled> fwd, bwd(ls.size());
  for (const Layout& l : ls) fwd.push_back(CompileLayout(l));
  for (int i = static_cast<int>(ls.size()) - 1; i >= 0; --i) bwd[i] = CompileLayout(ls[i]);
  for (size_t i = 0; i < ls.size(); ++i) {
    std::printf("layout dp=%d tp=%d zero=%d%s: arena %lld bytes\n", ls[i].dp,
                ls[i].tp, ls[i].zero_stage, ls[i].sequence_parallel ? " sp" : "",
                static_cast<long long>(fwd[i].program_peak));
    EXPECT_EQ(fwd[i].program_peak, bwd[i].program_peak) << "layout " << i;
    EXPECT_EQ(fwd[i].text, bwd[i].text) << "layout " << i;
  }
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// ZeRO-3 gathers a sharded parameter once per use (forward and backward
// separately) so the arena frees each gathered copy after its use; CSE must
// not merge those gathers back into one long-lived copy.
TEST(Zero3, PerUseGathersSurviveCse) {
  const Compiled c = CompileLayout({4, 1, 3, false});
  const size_t par = c.text.find("## parallel"), opt = c.text.find("## optimized"), fus = c.text.find("## fused");
  const int gathers_parallel = Count(c.text.substr(par, opt - par), "all_gather(");
  const int gathers_optimized = Count(c.text.substr(opt, fus - opt), "all_gather(");
  std::printf("zero3 all_gathers: parallel %d, optimized %d\n", gathers_parallel, gathers_optimized);
  EXPECT_GT(gathers_parallel, 0);
  EXPECT_EQ(gathers_optimized, gathers_parallel);
}

// ---------------------------------------------------------------- 2. memory

v1::JobSpec MemorySpec() {
  v1::JobSpec s;
  auto* m = s.mutable_model();
  m->set_family("gpt");
  m->set_n_layer(2);
  m->set_n_head(4);
  m->set_d_model(64);
  m->set_seq_len(16);
  m->set_vocab(256);
  auto* t = s.mutable_train();
  t->set_batch_size(8);
  t->set_lr(1e-3);
  t->set_weight_decay(0.1);
  t->set_grad_clip(1.0);
  t->set_beta1(0.9);
  t->set_beta2(0.95);
  t->set_eps(1e-8);
  t->set_seed(7);
  return s;
}

int64_t Bytes(const Tensor& t) { return t.numel() * static_cast<int64_t>(DTypeSize(t.dtype())); }

// Builds this rank's communicators over the mesh (dp, tp), like parity_test.
absl::Status MakeComms(WorkerContext& ctx, const Layout& l, std::unique_ptr<collectives::ProcessGroup>* pg,
                       std::vector<std::unique_ptr<collectives::ProcessGroup>>* groups,
                       std::vector<std::unique_ptr<compiler::comm::Communicator>>* comms,
                       compiler::comm::CommunicatorMap* cmap) {
  if (ctx.world == 1) return absl::OkStatus();
  collectives::ProcessGroupOptions po;
  po.backend = "cpu:gloo";
  LOOM_ASSIGN_OR_RETURN(*pg, collectives::ProcessGroup::Create(ctx.store, ctx.rank, ctx.world, po));
  const dtensor::MeshShape mesh = MeshOf(l);
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
      LOOM_ASSIGN_OR_RETURN(auto g, (*pg)->NewGroup(ranks));
      if (g) {
        comms->push_back(compiler::comm::MakeProcessGroupCommunicator(g.get(), 60000));
        (*cmap)[mesh.names[k]] = comms->back().get();
        groups->push_back(std::move(g));
      }
    }
  }
  return absl::OkStatus();
}

Tensor Tokens(const v1::JobSpec& s, int seed) {
  const int64_t b = s.train().batch_size(), t = s.model().seq_len();
  Tensor x = Tensor::MustEmpty({b, t}, DType::kI32);
  for (int64_t i = 0; i < b * t; ++i) x.data<int32_t>()[i] = static_cast<int32_t>((i * 131 + seed * 17) % 251);
  return x;
}

// arg: "dp tp zero outfile"; writes "state grads peak" of this rank to outfile.<rank>.
int MemoryWorker(WorkerContext& ctx) {
  std::vector<std::string> a = absl::StrSplit(ctx.arg, ' ');
  Layout l;
  l.dp = std::stoi(a[0]);
  l.tp = std::stoi(a[1]);
  l.zero_stage = std::stoi(a[2]);
  const v1::JobSpec spec = MemorySpec();
  auto fail = [&](const absl::Status& s) {
    fprintf(stderr, "[rank %d] %s\n", ctx.rank, std::string(s.message()).c_str());
    return 1;
  };
  std::unique_ptr<collectives::ProcessGroup> pg;
  std::vector<std::unique_ptr<collectives::ProcessGroup>> groups;
  std::vector<std::unique_ptr<compiler::comm::Communicator>> comms;
  compiler::comm::CommunicatorMap cmap;
  if (auto st = MakeComms(ctx, l, &pg, &groups, &comms, &cmap); !st.ok()) return fail(st);
  CountingAllocator counting(DefaultCpuAllocator());
  int64_t state = 0, grads = 0, peak = 0, workspace = 0, create_peak = 0;
  {
    ScopedDefaultAllocator use(&counting);
    TrainerOptions o;
    o.layout = l;
    o.rank = ctx.rank;
    o.comms = cmap;
    auto t = Trainer::Create(spec, o);
    if (!t.ok()) return fail(t.status());
    create_peak = counting.stats().peak_bytes;
    counting.ResetPeak();
    for (int step = 0; step < 2; ++step) {
      auto loss = (*t)->Step(Tokens(spec, step), Tokens(spec, step + 100));
      if (!loss.ok()) return fail(loss.status());
    }
    const compiler::passes::MemoryPlan& plan = (*t)->compilation().plan;
    const AllocatorStats st = counting.stats();
    peak = st.peak_bytes;
    auto held = (*t)->State();
    if (!held.ok()) return fail(held.status());
    for (const auto& s : *held) state += Bytes(s.local);
    workspace = st.bytes_in_use - state;
    // The gradients AdamW consumes, as the local (pre-fusion) graph has them.
    const auto& stages = (*t)->compilation().stages;
    const compiler::ir::Graph& local = stages.count("parallel") ? stages.at("parallel") : stages.at("joint");
    for (const auto& n : local.nodes()) {
      if (n.op != "adamw") continue;
      const auto& m = local.meta(n.inputs[1]);
      int64_t b = 1;
      for (int64_t s : m.shape) b *= s;
      b *= static_cast<int64_t>(DTypeSize(m.dtype));
      grads += (b + plan.alignment - 1) / plan.alignment * plan.alignment;
    }
  }
  std::ofstream(absl::StrCat(a[3], ".", ctx.rank)) << state << " " << grads << " " << peak << " " << workspace << " " << create_peak << "\n";
  return ctx.failures == 0 ? 0 : 1;
}

LOOM_COLLECTIVES_WORKER(memory, MemoryWorker);

struct Figure {
  int64_t state = 0, grads = 0, peak = 0, workspace = 0, create_peak = 0;
  int64_t total() const { return state + grads; }
};

// The largest per-rank figure of a layout.
Figure Measure(int dp, int tp, int zero) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string out = absl::StrCat(tmp ? tmp : "/tmp", "/loom_memory_", dp, "_", tp, "_", zero);
  collectives::testing::RunSpec rs;
  rs.worker = "memory";
  rs.world = dp * tp;
  rs.arg = absl::StrCat(dp, " ", tp, " ", zero, " ", out);
  rs.deadline = absl::Seconds(120);
  auto r = collectives::testing::RunRanks(rs);
  EXPECT_TRUE(r.ok()) << rs.arg << ": " << r.Summary();
  Figure worst;
  for (int k = 0; k < rs.world; ++k) {
    Figure f;
    std::ifstream in(absl::StrCat(out, ".", k));
    in >> f.state >> f.grads >> f.peak >> f.workspace >> f.create_peak;
    EXPECT_TRUE(static_cast<bool>(in)) << "rank " << k << " wrote no figures";
    if (f.total() > worst.total()) worst = f;
  }
  return worst;
}

void Report(const char* name, const Figure& f, const Figure& single) {
  std::printf(
      "%-12s state %9lld  grads %9lld  total %9lld  ratio %.3f  (allocator: peak over Create %lld, over 2 steps "
      "%lld, other bytes in use %lld)\n",
      name, static_cast<long long>(f.state), static_cast<long long>(f.grads), static_cast<long long>(f.total()),
      static_cast<double>(f.total()) / single.total(), static_cast<long long>(f.create_peak),
      static_cast<long long>(f.peak),
      static_cast<long long>(f.workspace));
}

TEST(Memory, Tp2AndZero3Dp4AgainstSingleProcess) {
  const Figure single = Measure(1, 1, 0);
  ASSERT_GT(single.total(), 0);
  Report("single", single, single);
  const Figure tp2 = Measure(1, 2, 0);
  Report("tp=2", tp2, single);
  const Figure z3 = Measure(4, 1, 3);
  Report("dp=4 zero3", z3, single);
  const double r_tp = static_cast<double>(tp2.total()) / single.total();
  const double r_z3 = static_cast<double>(z3.total()) / single.total();
  EXPECT_GE(r_tp, 0.45);
  EXPECT_LE(r_tp, 0.60);
  EXPECT_GE(r_z3, 0.20);
  EXPECT_LE(r_z3, 0.35);
}

}  // namespace
}  // namespace loom::parallel

int main(int argc, char** argv) {
  int rc;
  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
