// Calibration tool (not a test): for the single process and each acceptance
// layout (dp=4; tp=4; tp=2 x dp=2; tp=2 with and without SP; dp=4 with
// ZeRO-1/2/3; tp=2 x dp=2 with ZeRO-3), compiles the local training step
// exactly like ParallelTrainer does (styles.h: CompileParallel) and lowers it
// with do-nothing communicators, so the program's real arena is known without
// starting processes; prints the local state bytes (parameters + AdamW m, v
// blocks), the arena and the planner's estimate for the same layout.
//
//   bazel run //parallel:planner_layouts
#include <cstdio>

#include "compiler/comm/communicator.h"
#include "compiler/models/models.h"
#include "parallel/planner.h"
#include "parallel/styles.h"

namespace {

class NullCommunicator final : public loom::compiler::Communicator {
 public:
  explicit NullCommunicator(int n) : n_(n) {}
  int rank() const override { return 0; }
  int size() const override { return n_; }
  absl::Status AllReduce(const loom::Tensor&, loom::Tensor&, loom::compiler::ReduceKind) override { return {}; }
  absl::Status AllGather(const loom::Tensor&, loom::Tensor&, int) override { return {}; }
  absl::Status ReduceScatter(const loom::Tensor&, loom::Tensor&, int, loom::compiler::ReduceKind) override {
    return {};
  }

 private:
  int n_;
};

void Run(const loom::v1::ModelSpec& model, int64_t batch, const loom::parallel::Layout& l) {
  using namespace loom;
  models::BuildOptions bo;
  bo.batch = batch;
  auto forward = models::BuildForward(model, bo);
  if (!forward.ok()) return;
  NullCommunicator dp(l.dp), tp(l.tp);
  compiler::CompileOptions co;
  co.lowering.in_place_updates = true;
  if (l.dp > 1) co.lowering.communicators["dp"] = &dp;
  if (l.tp > 1) co.lowering.communicators["tp"] = &tp;
  compiler::AdamWOptions adam;
  adam.max_norm = 1.0;
  co.adamw = adam;
  auto c = parallel::CompileParallel(*forward, co, model, batch, l);
  if (!c.ok()) {
    std::printf("%s %s: %s\n", model.family().c_str(), parallel::LayoutName(l).c_str(),
                std::string(c.status().message()).c_str());
    return;
  }
  const compiler::Graph& g = c->program->graph;
  int64_t state = 0;
  for (const auto& in : g.inputs()) {
    if (in.name == "x" || in.name == "y" || in.name == "lr" || in.name == "step") continue;
    const auto& m = g.meta(in.value);
    int64_t n = 1;
    for (int64_t s : m.shape) n *= s;
    state += n * 4;
  }
  const int64_t arena = c->program->plan.peak_bytes;
  parallel::Hardware hw;
  hw.world = l.dp * l.tp;
  auto est = parallel::Estimate(model, batch, hw, l);
  const auto& e = est->memory;
  parallel::Layout plain = l;
  plain.zero_stage = 0;
  auto full = parallel::Estimate(model, batch, hw, plain);  // full local gradients
  // The evaluation program of the single-process Trainer (forward, logits out).
  int64_t eval_arena = 0;
  if (l.dp == 1 && l.tp == 1) {
    bo.return_logits = true;
    auto ef = models::BuildForward(model, bo);
    compiler::CompileOptions eo;
    eo.differentiate = false;
    auto ec = compiler::Compile(*ef, eo);
    if (ec.ok()) eval_arena = ec->program->plan.peak_bytes;
  }
  std::printf("ROW %s L=%d H=%d C=%d F=%d T=%d V=%d B=%lld dp=%d tp=%d zero=%d sp=%d state=%lld arena=%lld "
              "grads=%lld eval=%lld est_act=%lld est_ws=%lld est_total=%lld\n",
              model.family().c_str(), model.n_layer(), model.n_head(), model.d_model(), model.ffn_hidden(),
              model.seq_len(), model.vocab(), (long long)batch, l.dp, l.tp, l.zero_stage, l.sequence_parallel ? 1 : 0,
              (long long)state, (long long)arena, (long long)full->memory.gradients, (long long)eval_arena,
              (long long)e.activations, (long long)e.workspace, (long long)e.total());
}

}  // namespace

int main() {
  using loom::parallel::Layout;
  struct M {
    const char* fam;
    int L, H, C, T;
  };
  for (M mm : {M{"gpt", 2, 4, 128, 32}, M{"llama", 2, 4, 128, 32}, M{"gpt", 4, 4, 64, 64}, M{"llama", 4, 4, 64, 64}}) {
    loom::v1::ModelSpec m;
    const bool llama = std::string(mm.fam) == "llama";
    m.set_family(mm.fam);
    m.set_n_layer(mm.L);
    m.set_n_head(mm.H);
    m.set_n_kv_head(mm.H);
    m.set_d_model(mm.C);
    m.set_seq_len(mm.T);
    m.set_vocab(256);
    m.set_norm_eps(1e-5f);
    m.set_rope_theta(10000.f);
    m.set_ffn_hidden(llama ? (8 * mm.C / 3 + 63) / 64 * 64 : 4 * mm.C);
    for (Layout l : {Layout{1, 1, 0, false}, Layout{4, 1, 0, false}, Layout{1, 4, 0, false}, Layout{2, 2, 0, false},
                     Layout{1, 2, 0, false}, Layout{1, 2, 0, true}, Layout{4, 1, 1, false}, Layout{4, 1, 2, false},
                     Layout{4, 1, 3, false}, Layout{2, 2, 3, false}})
      for (int64_t b : {8, 32}) Run(m, b, l);
  }
  return 0;
}
