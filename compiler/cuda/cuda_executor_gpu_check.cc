// GPU check and benchmark of CudaExecutor (run on the GPU machine; "manual").
//
// Check mode (default): builds a small GPT training graph (the gpt-small model
// of examples/gpt-small.yaml at batch 8), runs 20 AdamW steps on the CPU
// Executor and on CudaExecutor from identical weights and batches, and prints
// a table:
//   f32 graph replay vs CPU: losses within 1e-4 relative, final params
//                            ||d||/||ref|| < 1e-3
//   f32 eager vs graph replay: losses identical (reported; tolerance 1e-6
//                            because embedding_backward uses f32 atomics)
//   bf16 graph replay vs CPU: losses within 2e-2 relative
//   bf16 lean (CudaOptions::memory kLean) vs CPU: the same bound, gpt and
//                            llama; every parameter read back bitwise after
//                            SetInput, whatever its layout; with the
//                            optimizer state offloaded to host memory,
//                            bitwise the deterministic lean run
//   bf16 grads16 (CudaOptions::bf16_grads) vs CPU: the same bound, gpt
//                            (tied embedding: an f32 sum) and llama; the
//                            parameters' distance to the f32-gradient run
//                            is printed
//   bf16 with the f32 residual stream (CudaOptions::f32_residual) vs CPU: the
//                            same bound, gpt and llama (with block
//                            checkpointing too); the parameters' distance
//                            to the CPU's is printed beside the bf16 run's
//   deterministic (CudaOptions::deterministic): f32 graph replay vs CPU as
//                            above; f32 eager vs graph replay and two bf16
//                            graph-replay runs: losses and final params
//                            bitwise equal
// Exit code 0 when everything passes.
//
// Bench mode: --bench [--family=gpt|llama --n_layer=12 --d_model=768 --heads=12 --vocab=50304
//   --batch=16 --seq=1024 --steps=20 --f32 --eager --describe --attention=flash|dispatch
//   --no-fusions --profile]
// prints ms/step and tokens/s of the whole training step (fwd+bwd+AdamW).
// --attention, --no-fusions (CudaOptions::extra_fusions = false) and
// --profile (CudaOptions::profile: eager steps, per-launch times on stderr)
// set the executor's options of the same names.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/compile.h"
#include "compiler/cuda/cuda_executor.h"
#include "compiler/executor.h"
#include "compiler/models/models.h"

namespace loom::compiler::cuda {
namespace {

struct Config {
  int64_t n_layer = 2, d_model = 128, heads = 4, vocab = 256, batch = 8, seq = 64, steps = 20;
  bool bench = false, f32 = false, eager = false, describe = false, flash = false, no_fusions = false,
       profile = false, checkpoint = false;
  std::string family = "gpt";  // llama: n_kv_head = heads / 2
};

struct Job {
  ir::Graph graph;
  std::unique_ptr<Program> program;
  std::vector<Tensor> inputs;  // initial values, graph-input order
  int x = -1, y = -1, lr = -1, step = -1;
};

absl::StatusOr<Job> Build(const Config& c, bool lower) {
  v1::ModelSpec spec;
  spec.set_family(c.family);
  if (c.family == "llama") spec.set_n_kv_head(std::max<int64_t>(1, c.heads / 2));
  spec.set_n_layer(c.n_layer);
  spec.set_n_head(c.heads);
  spec.set_d_model(c.d_model);
  spec.set_seq_len(c.seq);
  spec.set_vocab(c.vocab);
  models::BuildOptions bo;
  bo.batch = c.batch;
  LOOM_ASSIGN_OR_RETURN(ir::Graph fwd, models::BuildForward(spec, bo));
  LOOM_ASSIGN_OR_RETURN(std::vector<models::ParamInfo> params, models::Parameters(spec));
  CompileOptions co;
  AdamWOptions adam;
  adam.beta2 = 0.95;
  adam.weight_decay = 0.1;
  adam.max_norm = 1.0;
  std::map<std::string, bool> decays;
  for (const auto& p : params) decays[p.name] = p.weight_decay;
  adam.decays = [decays](const std::string& n) {
    auto it = decays.find(n);
    return it != decays.end() && it->second;
  };
  co.adamw = adam;
  co.lower = lower;
  if (c.checkpoint) co.checkpoint_blocks = models::BlockOfParameter;
  LOOM_ASSIGN_OR_RETURN(Compilation comp, Compile(fwd, co));
  Job j;
  j.graph = comp.stages.at("fused");
  j.program = std::move(comp.program);
  std::map<std::string, Tensor> init = models::InitParameters(params, 1234);
  const ir::Graph& g = j.graph;
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const ir::GraphInput& in = g.inputs()[k];
    const ir::TensorMeta& m = g.meta(in.value);
    if (in.kind == ir::InputKind::kParam) {
      j.inputs.push_back(init.at(in.name).To(m.dtype));
    } else {
      j.inputs.push_back(Tensor::Zeros(m.shape, m.dtype));
    }
  }
  j.x = g.FindInput("x");
  j.y = g.FindInput("y");
  j.lr = g.FindInput("lr");
  j.step = g.FindInput("step");
  if (j.x < 0 || j.y < 0 || j.lr < 0 || j.step < 0) return absl::InternalError("graph lacks x, y, lr or step");
  return j;
}

// Batch `s`: deterministic token ids.
std::pair<Tensor, Tensor> Batch(const Config& c, int s) {
  std::mt19937 rng(1000 + s);
  std::uniform_int_distribution<int> tok(0, static_cast<int>(c.vocab) - 1);
  std::vector<double> x(c.batch * c.seq), y(c.batch * c.seq);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = tok(rng);
    y[i] = tok(rng);
  }
  return {Tensor::FromVector({c.batch, c.seq}, x, DType::kI32), Tensor::FromVector({c.batch, c.seq}, y, DType::kI32)};
}

Tensor Scalar(double v, DType dt) { return Tensor::FromVector({}, {v}, dt); }

constexpr double kLr = 1e-3;

struct RunResult {
  std::vector<double> losses;
  std::vector<Tensor> params;  // final, graph-input order (params only; others undefined)
};

absl::StatusOr<RunResult> RunCpu(const Config& c) {
  LOOM_ASSIGN_OR_RETURN(Job j, Build(c, true));
  Executor exec(std::move(j.program));
  RunResult r;
  std::vector<Tensor> outs;
  for (int s = 1; s <= c.steps; ++s) {
    auto [x, y] = Batch(c, s);
    j.inputs[j.x] = x;
    j.inputs[j.y] = y;
    j.inputs[j.lr] = Scalar(kLr, j.graph.meta(j.graph.inputs()[j.lr].value).dtype);
    j.inputs[j.step] = Scalar(s, j.graph.meta(j.graph.inputs()[j.step].value).dtype);
    LOOM_RETURN_IF_ERROR(exec.Run(j.inputs, &outs));
    r.losses.push_back(outs[0].GetDouble(0));
    LOOM_RETURN_IF_ERROR(exec.ApplyUpdates(absl::MakeSpan(j.inputs), outs));
  }
  for (size_t k = 0; k < j.inputs.size(); ++k)
    r.params.push_back(j.graph.inputs()[k].kind == ir::InputKind::kParam ? j.inputs[k] : Tensor());
  return r;
}

// `tweak`, when given, changes the executor's options last.
absl::StatusOr<RunResult> RunGpu(const Config& c, bool bf16, bool graph, bool deterministic = false,
                                 bool lean = false, bool offload = false,
                                 const std::function<void(CudaOptions*)>& tweak = {}) {
  LOOM_ASSIGN_OR_RETURN(Job j, Build(c, false));
  CudaOptions o;
  o.bf16 = bf16;
  o.cuda_graph = graph;
  o.deterministic = deterministic;
  if (lean) o.memory = CudaOptions::Memory::kLean;
  o.offload_optimizer_state = offload;
  if (tweak) tweak(&o);
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<CudaExecutor> e, CudaExecutor::Create(j.graph, o));
  int split = 0;
  for (size_t k = 0; k < j.inputs.size(); ++k) {
    const int ki = static_cast<int>(k);
    if (ki == j.x || ki == j.y || ki == j.lr || ki == j.step) continue;
    // Zero optimizer state goes through ZeroInput, as the Trainer's fresh
    // state does; it must read back as zeros, and the steps below then
    // check it against the CPU.
    const Tensor& host = j.inputs[k];
    bool zero = j.graph.inputs()[k].kind == ir::InputKind::kState;
    for (int64_t i = 0; zero && i < host.numel(); ++i) zero = host.GetDouble(i) == 0;
    LOOM_RETURN_IF_ERROR(zero ? e->ZeroInput(ki) : e->SetInput(ki, host));
    if (zero) {
      LOOM_ASSIGN_OR_RETURN(Tensor back, e->Input(ki));
      for (int64_t i = 0; i < back.numel(); ++i)
        if (back.GetDouble(i) != 0)
          return absl::InternalError(absl::StrCat("Input(", ki, ") after ZeroInput is ", back.GetDouble(i),
                                                  " at element ", i, " (", j.graph.inputs()[k].name, ")"));
    }
    split += e->plan().split[k];
    if (j.graph.inputs()[k].kind != ir::InputKind::kParam) continue;
    // Whatever the storage layout, Input gives back the parameter bit for bit.
    LOOM_ASSIGN_OR_RETURN(Tensor back, e->Input(ki));
    if (std::memcmp(back.raw_data(), j.inputs[k].raw_data(), back.nbytes()) != 0)
      return absl::InternalError(absl::StrCat("Input(", ki, ") differs from what SetInput stored (",
                                              j.graph.inputs()[k].name, e->plan().split[k] ? ", split)" : ")"));
  }
  if (lean && split == 0) return absl::InternalError("lean: no parameter is stored split");
  RunResult r;
  const DType lrdt = j.graph.meta(j.graph.inputs()[j.lr].value).dtype;
  const DType stdt = j.graph.meta(j.graph.inputs()[j.step].value).dtype;
  for (int s = 1; s <= c.steps; ++s) {
    auto [x, y] = Batch(c, s);
    std::vector<std::pair<int, Tensor>> in = {{j.x, x}, {j.y, y}, {j.lr, Scalar(kLr, lrdt)}, {j.step, Scalar(s, stdt)}};
    LOOM_RETURN_IF_ERROR(e->Step(in));
    LOOM_ASSIGN_OR_RETURN(Tensor loss, e->Output(0));
    r.losses.push_back(loss.GetDouble(0));
  }
  if (graph && !e->graph_replay()) return absl::InternalError("the CUDA graph was not captured (see stderr)");
  for (size_t k = 0; k < j.inputs.size(); ++k) {
    if (j.graph.inputs()[k].kind != ir::InputKind::kParam) {
      r.params.push_back(Tensor());
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(Tensor p, e->Input(static_cast<int>(k)));
    r.params.push_back(p);
  }
  return r;
}

double ParamError(const RunResult& a, const RunResult& ref) {
  double num = 0, den = 0;
  for (size_t k = 0; k < ref.params.size(); ++k) {
    if (!ref.params[k].defined()) continue;
    for (int64_t i = 0; i < ref.params[k].numel(); ++i) {
      const double r = ref.params[k].GetDouble(i), x = a.params[k].GetDouble(i);
      num += (x - r) * (x - r);
      den += r * r;
    }
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Whether two runs' losses and final parameters are equal bit for bit.
bool Bitwise(const RunResult& a, const RunResult& b) {
  if (a.losses != b.losses || a.params.size() != b.params.size()) return false;
  for (size_t k = 0; k < a.params.size(); ++k) {
    if (!a.params[k].defined()) continue;
    if (a.params[k].nbytes() != b.params[k].nbytes() ||
        std::memcmp(a.params[k].raw_data(), b.params[k].raw_data(), a.params[k].nbytes()) != 0)
      return false;
  }
  return true;
}

double MaxLossRel(const RunResult& a, const RunResult& ref) {
  double m = 0;
  for (size_t i = 0; i < ref.losses.size(); ++i)
    m = std::max(m, std::fabs(a.losses[i] - ref.losses[i]) / std::max(std::fabs(ref.losses[i]), 1e-12));
  return m;
}

// Neither where the step's buffers sit nor what they held before may change a
// run: deterministic bf16 runs (gpt; llama with block checkpointing, standard
// and lean memory) with the arena and scratch poisoned before every step
// (NaN wherever a launch reads what its step did not write), with the arena
// 1 GiB into its allocation, and with 4 KiB poisoned guards after every arena
// buffer (a launch reading past an operand reads NaN; one writing past its
// output fails the step), each bitwise the plain run. Returns the number of
// failures.
int CheckPlacement(const Config& c) {
  Config l = c;
  l.family = "llama";
  l.checkpoint = true;
  auto poison = [](CudaOptions* o) { o->poison_arena = true; };
  auto offset = [](CudaOptions* o) { o->arena_offset_bytes = int64_t{1} << 30; };
  auto guarded = [](CudaOptions* o) {
    o->poison_arena = true;
    o->arena_guard_bytes = 4096;
  };
  int failures = 0;
  auto same = [&](const char* name, const absl::StatusOr<RunResult>& a, const absl::StatusOr<RunResult>& b) {
    const bool ok = a.ok() && b.ok() && Bitwise(*a, *b);
    failures += !ok;
    std::printf("%-28s %-29s %-8s\n", name, ok ? "bitwise equal" : "differ (or failed)", ok ? "ok" : "FAIL");
    if (!a.ok()) std::printf("  %s\n", std::string(a.status().message()).c_str());
  };
  const auto gpt = RunGpu(c, true, true, true);
  same("bf16 det: poisoned arena", RunGpu(c, true, true, true, false, false, poison), gpt);
  same("bf16 det: arena at +1 GiB", RunGpu(c, true, true, true, false, false, offset), gpt);
  const auto llama = RunGpu(l, true, true, true);
  same("llama ckpt det: poisoned", RunGpu(l, true, true, true, false, false, poison), llama);
  same("llama ckpt det: +1 GiB", RunGpu(l, true, true, true, false, false, offset), llama);
  same("llama ckpt det: guarded", RunGpu(l, true, true, true, false, false, guarded), llama);
  same("llama ckpt lean: poisoned", RunGpu(l, true, true, true, true, false, poison), RunGpu(l, true, true, true, true));
  auto f32res = [](CudaOptions* o) { o->f32_residual = true; };
  auto f32res_guarded = [](CudaOptions* o) {
    o->f32_residual = o->poison_arena = true;
    o->arena_guard_bytes = 4096;
  };
  same("llama ckpt f32res: guarded", RunGpu(l, true, true, true, false, false, f32res_guarded),
       RunGpu(l, true, true, true, false, false, f32res));
  return failures;
}

// The f32 residual stream (CudaOptions::f32_residual) against the CPU's f32
// run: the bf16 loss bound, for gpt, llama and llama with block
// checkpointing; each run's parameter distance to the CPU's is printed beside
// the bf16-stream run's (not bounded). Returns the failures `row` did not
// count (a CPU run that failed).
template <typename Row>
int CheckF32Residual(const Config& c, Row& row) {
  auto f32res = [](CudaOptions* o) { o->f32_residual = true; };
  int failures = 0;
  for (int k = 0; k < 3; ++k) {
    Config m = c;
    m.family = k == 0 ? "gpt" : "llama";
    m.checkpoint = k == 2;
    const std::string name = k == 0 ? "gpt" : k == 1 ? "llama" : "llama ckpt";
    auto cpu = RunCpu(m);
    if (!cpu.ok()) {
      std::printf("%s CPU run failed: %s\n", name.c_str(), std::string(cpu.status().message()).c_str());
      ++failures;
      continue;
    }
    auto res = RunGpu(m, true, true, false, false, false, f32res), plain = RunGpu(m, true, true);
    row((name + " bf16 f32res vs cpu").c_str(), res, *cpu, 2e-2, 0);
    if (res.ok() && plain.ok())
      std::printf("%-28s param rel to cpu: f32 stream %.3e, bf16 stream %.3e\n", name.c_str(), ParamError(*res, *cpu),
                  ParamError(*plain, *cpu));
  }
  return failures;
}

int Check(const Config& c) {
  auto cpu = RunCpu(c);
  if (!cpu.ok()) {
    std::printf("CPU run failed: %s\n", std::string(cpu.status().message()).c_str());
    return 1;
  }
  int failures = 0;
  std::printf("%-28s %-14s %-14s %-8s\n", "run", "max loss rel", "param rel", "result");
  auto row = [&](const char* name, const absl::StatusOr<RunResult>& r, const RunResult& ref, double loss_tol,
                 double param_tol) {
    if (!r.ok()) {
      std::printf("%-28s FAILED: %s\n", name, std::string(r.status().message()).c_str());
      ++failures;
      return;
    }
    const double le = MaxLossRel(*r, ref), pe = ParamError(*r, ref);
    const bool ok = le <= loss_tol && (param_tol <= 0 || pe <= param_tol) && std::isfinite(le) && std::isfinite(pe);
    failures += !ok;
    std::printf("%-28s %-14.3e %-14.3e %-8s\n", name, le, pe, ok ? "ok" : "FAIL");
  };
  auto f32_graph = RunGpu(c, false, true);
  auto f32_eager = RunGpu(c, false, false);
  auto bf16_graph = RunGpu(c, true, true);
  row("f32 cuda-graph vs cpu", f32_graph, *cpu, 1e-4, 1e-3);
  row("f32 eager vs cpu", f32_eager, *cpu, 1e-4, 1e-3);
  if (f32_graph.ok()) row("f32 eager vs cuda-graph", f32_eager, *f32_graph, 1e-6, 0);
  row("bf16 cuda-graph vs cpu", bf16_graph, *cpu, 2e-2, 0);
  // The lean memory policy (bf16 gradients and AdamW states, split weights):
  // the bf16 loss bound; its parameters' distance to the standard bf16 run's
  // is printed, not bounded.
  auto lean = RunGpu(c, true, true, false, true);
  row("bf16 lean vs cpu", lean, *cpu, 2e-2, 0);
  if (lean.ok() && bf16_graph.ok())
    std::printf("%-28s param rel to bf16 standard %.3e\n", "bf16 lean", ParamError(*lean, *bf16_graph));
  // bf16 gradients under the standard policy (CudaOptions::bf16_grads): the
  // values autocast's GEMMs give, AdamW in f32; the same loss bound, and the
  // parameters' distance to the f32-gradient run printed.
  const auto grads16 = [](CudaOptions* o) { o->bf16_grads = true; };
  auto bf16_grads = RunGpu(c, true, true, false, false, false, grads16);
  row("bf16 grads16 vs cpu", bf16_grads, *cpu, 2e-2, 0);
  if (bf16_grads.ok() && bf16_graph.ok())
    std::printf("%-28s param rel to bf16 standard %.3e\n", "bf16 grads16", ParamError(*bf16_grads, *bf16_graph));
  {
    auto det_graph = RunGpu(c, false, true, true), det_eager = RunGpu(c, false, false, true);
    auto det_bf16 = RunGpu(c, true, true, true), det_bf16_again = RunGpu(c, true, true, true);
    row("f32 det cuda-graph vs cpu", det_graph, *cpu, 1e-4, 1e-3);
    auto same = [&](const char* name, const absl::StatusOr<RunResult>& a, const absl::StatusOr<RunResult>& b) {
      const bool ok = a.ok() && b.ok() && Bitwise(*a, *b);
      failures += !ok;
      std::printf("%-28s %-29s %-8s\n", name, ok ? "bitwise equal" : "differ (or failed)", ok ? "ok" : "FAIL");
    };
    same("f32 det eager vs graph", det_eager, det_graph);
    same("bf16 det graph vs rerun", det_bf16, det_bf16_again);
    // The optimizer state in mapped host memory runs the same kernels on
    // the same values: bitwise the run with it on the device.
    same("lean det: offloaded vs not", RunGpu(c, true, true, true, true, true), RunGpu(c, true, true, true, true));
  }
  {
    // The llama family (rmsnorm, rope, SwiGLU, grouped-query attention).
    Config l = c;
    l.family = "llama";
    auto lcpu = RunCpu(l);
    if (!lcpu.ok()) {
      std::printf("llama CPU run failed: %s\n", std::string(lcpu.status().message()).c_str());
      ++failures;
    } else {
      row("llama f32 cuda-graph vs cpu", RunGpu(l, false, true), *lcpu, 1e-4, 1e-3);
      row("llama bf16 cuda-graph vs cpu", RunGpu(l, true, true), *lcpu, 2e-2, 0);
      row("llama bf16 lean vs cpu", RunGpu(l, true, true, false, true), *lcpu, 2e-2, 0);
      row("llama bf16 grads16 vs cpu", RunGpu(l, true, true, false, false, false, grads16), *lcpu, 2e-2, 0);
    }
  }
  failures += CheckF32Residual(c, row);
  failures += CheckPlacement(c);
  if (f32_graph.ok() && f32_eager.ok()) {
    bool identical = f32_graph->losses == f32_eager->losses;
    std::printf("f32 eager and graph-replay losses bit-identical: %s\n", identical ? "yes" : "no");
  }
  std::printf("losses (cpu | f32 graph | bf16 graph):\n");
  for (size_t i = 0; i < cpu->losses.size(); ++i)
    std::printf("  step %2zu  %.6f  %.6f  %.6f\n", i + 1, cpu->losses[i],
                f32_graph.ok() ? f32_graph->losses[i] : NAN, bf16_graph.ok() ? bf16_graph->losses[i] : NAN);
  std::printf("%s\n", failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}

int Bench(const Config& c) {
  auto j = Build(c, false);
  if (!j.ok()) {
    std::printf("build failed: %s\n", std::string(j.status().message()).c_str());
    return 1;
  }
  CudaOptions o;
  o.bf16 = !c.f32;
  o.cuda_graph = !c.eager;
  o.attention = c.flash ? AttnRoute::kFlash : AttnRoute::kDispatch;
  o.extra_fusions = !c.no_fusions;
  o.profile = c.profile;
  if (auto p = PlanCuda(j->graph, o.bf16, PlanOptionsFor(o)); p.ok()) {
    int gemms = 0;
    for (const Launch& l : p->launches) gemms += l.kind == LaunchKind::kGemm;
    std::printf("plan: %zu launches (%d GEMMs), arena %.2f GiB (live bound %.2f GiB)\n", p->launches.size(), gemms,
                p->arena_bytes / double(1 << 30), p->live_bytes_bound / double(1 << 30));
  }
  auto t0 = std::chrono::steady_clock::now();
  auto e = CudaExecutor::Create(j->graph, o);
  if (!e.ok()) {
    std::printf("create failed: %s\n", std::string(e.status().message()).c_str());
    return 1;
  }
  const double create_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t k = 0; k < j->inputs.size(); ++k) {
    const int ki = static_cast<int>(k);
    if (ki == j->x || ki == j->y || ki == j->lr || ki == j->step) continue;
    auto s = (*e)->SetInput(ki, j->inputs[k]);
    if (!s.ok()) {
      std::printf("SetInput failed: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  if (c.describe) std::printf("%s", (*e)->Describe().c_str());
  const DType lrdt = j->graph.meta(j->graph.inputs()[j->lr].value).dtype;
  const DType stdt = j->graph.meta(j->graph.inputs()[j->step].value).dtype;
  auto [x, y] = Batch(c, 0);
  auto step = [&](int s) {
    std::vector<std::pair<int, Tensor>> in = {{j->x, x}, {j->y, y}, {j->lr, Scalar(1e-4, lrdt)}, {j->step, Scalar(s, stdt)}};
    return (*e)->Step(in);
  };
  const int warm = 3;
  for (int s = 1; s <= warm; ++s) {
    auto st = step(s);
    if (!st.ok()) {
      std::printf("step failed: %s\n", std::string(st.message()).c_str());
      return 1;
    }
  }
  auto first = (*e)->Output(0);
  if (!first.ok()) {
    std::printf("step failed: %s\n", std::string(first.status().message()).c_str());
    return 1;
  }
  t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < c.steps; ++s) {
    auto st = step(warm + 1 + s);
    if (!st.ok()) {
      std::printf("step failed: %s\n", std::string(st.message()).c_str());
      return 1;
    }
  }
  auto sync = (*e)->Synchronize();
  if (o.cuda_graph && !(*e)->graph_replay()) std::printf("WARNING: CUDA graph capture failed; the timing is eager\n");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto last = (*e)->Output(0);
  const double ms = 1e3 * secs / c.steps;
  std::printf("%s n_layer=%lld d_model=%lld heads=%lld vocab=%lld B=%lld T=%lld %s %s: %.2f ms/step, %.0f tokens/s "
              "(loss %.4f -> %.4f, create %.1f s, device %.2f GiB)%s\n",
              c.family.c_str(), (long long)c.n_layer, (long long)c.d_model, (long long)c.heads, (long long)c.vocab, (long long)c.batch,
              (long long)c.seq, o.bf16 ? "bf16" : "f32", o.cuda_graph ? "cuda-graph" : "eager", ms,
              c.batch * c.seq / (ms * 1e-3), first->GetDouble(0), last.ok() ? last->GetDouble(0) : NAN, create_s,
              (*e)->device_bytes() / double(1 << 30), sync.ok() ? "" : " SYNC FAILED");
  return sync.ok() ? 0 : 1;
}

}  // namespace
}  // namespace loom::compiler::cuda

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach a log even if a check aborts
  loom::compiler::cuda::Config c;
  bool any_shape = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](const char* key, int64_t* out) {
      const std::string k = std::string("--") + key + "=";
      if (a.rfind(k, 0) != 0) return false;
      if (!absl::SimpleAtoi(a.substr(k.size()), out)) {
        std::fprintf(stderr, "bad value in %s\n", a.c_str());
        std::exit(2);
      }
      if (std::string(key) != "steps") any_shape = true;
      return true;
    };
    if (a == "--bench") c.bench = true;
    else if (a == "--f32") c.f32 = true;
    else if (a == "--eager") c.eager = true;
    else if (a == "--describe") c.describe = true;
    else if (a == "--attention=flash") c.flash = true;
    else if (a == "--attention=dispatch") c.flash = false;
    else if (a == "--no-fusions") c.no_fusions = true;
    else if (a == "--profile") c.profile = true;
    else if (a.rfind("--family=", 0) == 0) c.family = a.substr(9);
    else if (val("n_layer", &c.n_layer) || val("d_model", &c.d_model) || val("heads", &c.heads) ||
             val("vocab", &c.vocab) || val("batch", &c.batch) || val("seq", &c.seq) || val("steps", &c.steps)) {
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (c.bench && !any_shape) {  // GPT-2 124M at B=16, T=1024
    c.n_layer = 12;
    c.d_model = 768;
    c.heads = 12;
    c.vocab = 50304;
    c.batch = 16;
    c.seq = 1024;
  }
  return c.bench ? loom::compiler::cuda::Bench(c) : loom::compiler::cuda::Check(c);
}
