// Training throughput of one GPT or Llama model on one GPU: Loom's compiled
// training step on the CUDA executor, side by side with PyTorch
// (bench/cuda/train_torch.py on the same weights and batches; run_model.sh
// alternates the two in one device call).
//
//   train_bench --data=DIR [--preset=gpt2-124m|gpt2-350m|llama-124m|llama-350m|llama-1b]
//               [--family=gpt|llama --n_layer=N --n_head=N --n_kv_head=N --d_model=N --ffn=N
//                --seq_len=N --vocab=N --batch=N]
//               [--torch=A.json,B.json] [--warmup=5] [--steps=20] [--loss-tol=2e-2]
//               [--f32] [--no-graph] [--attention=dispatch|flash] [--no-fusions] [--profile]
//               [--activation-checkpointing=none|blocks] [--deterministic]
//               [--memory=standard|lean] [--offload-optimizer-state] [--arena-offset-gib=N]
//               [--poison-arena] [--arena-guard-bytes=N] [--residual=bf16|f32] [--grads=f32|bf16]
//               [--embedding-backward=atomic|sorted]
//
// The presets, their shapes and parameter counts: train_config.h (default
// gpt2-124m). DIR is what `train_torch.py --init DIR` wrote for the same
// preset and flags: weights/ and batches/ in the tensor_dir format and
// config.json, which must match this run's model and batch. Prints one RESULT
// line (tokens/s, ms/step, MFU against 989 TFLOP/s with TrainFlopsPerToken,
// parameters, compile seconds, device and arena MiB), then for each PyTorch
// result the ratio, and the loss check: Loom's per-step losses must stay
// within --loss-tol (relative) of PyTorch's at every step, or the line says
// CHECK_FAILED and the exit code is 1 (tokens/s only count when it tracks).
// --attention, --no-fusions and --profile set CudaOptions::attention,
// extra_fusions (false) and profile (eager steps with per-launch times: the
// tables go to stderr when the executor is destroyed; tokens/s is then not
// the replayed step's). --activation-checkpointing=blocks compiles with
// CompileOptions::checkpoint_blocks (RESULT impl gets "_ckpt"). device_mib is
// all device memory the executor holds; arena_mib its activation arena.
// --deterministic sets CudaOptions::deterministic (train.deterministic: the
// sorted embedding backward, flash attention's default variants, untimed
// cuBLASLt heuristics; RESULT impl gets "_det"): the same run with and
// without it measures what deterministic costs. --memory, --offload-optimizer-state
// and --arena-offset-gib set CudaOptions::memory, offload_optimizer_state and
// arena_offset_bytes (N GiB left unused before the arena: the same run must
// give the same losses wherever its buffers sit). --poison-arena sets
// CudaOptions::poison_arena (a read of what the step did not write shows as NaN),
// and with --arena-guard-bytes=N every arena buffer is followed by N free bytes
// (NaN when poisoned; one written fails the step naming the buffer).
// --residual=f32 sets CudaOptions::f32_residual (train.residual_precision: the residual
// stream and its gradient stored f32, as autocast keeps them; RESULT impl
// gets "_f32res"); the default bf16 stores them bf16. --grads=bf16 sets
// CudaOptions::bf16_grads (train.grad_precision: the GEMM weights' gradients
// stored bf16, as autocast's GEMMs round them; RESULT impl gets "_bf16grad").
// --embedding-backward=sorted sets CudaOptions::sorted_embedding_backward (the
// embedding gradient without atomics, the rest as without --deterministic;
// RESULT impl gets "_sortemb"): two runs of it against two runs without it
// show what the atomics add to a run's variation.
// Exit codes: 0 done, 1 a failure while running (or the loss check), 2 a bad
// flag (the message names it).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "bench/cuda/train_config.h"
#include "compiler/compile.h"
#include "compiler/cuda/cuda_executor.h"
#include "compiler/models/models.h"
#include <nlohmann/json.hpp>
#include "tests/parity/tensor_dir.h"

namespace loom::bench::cuda {
namespace {

struct Setup {
  std::unique_ptr<compiler::cuda::CudaExecutor> exec;
  std::vector<compiler::models::ParamInfo> params;
  compiler::ir::Graph graph;  // the fused training step
  double compile_s = 0, init_s = 0;
  int x_in = -1, y_in = -1, lr_in = -1, step_in = -1;
};

// Compiles the training step (AdamW with clipping, as train_torch.py) and
// creates the executor.
absl::StatusOr<Setup> Compile(const TrainFlags& f) {
  Setup s;
  LOOM_ASSIGN_OR_RETURN(s.params, compiler::models::Parameters(f.spec));
  compiler::models::BuildOptions bo;
  bo.batch = f.batch;
  LOOM_ASSIGN_OR_RETURN(compiler::ir::Graph forward, compiler::models::BuildForward(f.spec, bo));
  std::map<std::string, bool> decays;
  for (const auto& p : s.params) decays[p.name] = p.weight_decay;
  compiler::CompileOptions co;
  co.lower = false;  // the CUDA executor lowers the fused graph itself
  compiler::AdamWOptions adam;
  adam.beta1 = 0.9; adam.beta2 = 0.95; adam.eps = 1e-8; adam.weight_decay = 0.1; adam.max_norm = 1.0;
  adam.decays = [decays](const std::string& n) { auto it = decays.find(n); return it != decays.end() && it->second; };
  co.adamw = adam;
  if (f.checkpoint) co.checkpoint_blocks = compiler::models::BlockOfParameter;  // compiler/passes/checkpointing.h
  auto t0 = std::chrono::steady_clock::now();
  LOOM_ASSIGN_OR_RETURN(compiler::Compilation c, compiler::Compile(forward, co));
  const compiler::ir::Graph& g = c.stages.at("fused");
  compiler::cuda::CudaOptions opt;
  opt.bf16 = !f.f32;
  opt.cuda_graph = f.graph;
  opt.attention = f.flash ? compiler::cuda::AttnRoute::kFlash : compiler::cuda::AttnRoute::kDispatch;
  opt.extra_fusions = f.fusions;
  opt.profile = f.profile;
  opt.deterministic = f.deterministic;
  opt.f32_residual = f.f32_residual;
  opt.bf16_grads = f.bf16_grads;
  opt.sorted_embedding_backward = f.sorted_embedding;
  if (f.lean) opt.memory = compiler::cuda::CudaOptions::Memory::kLean;
  opt.offload_optimizer_state = f.offload;
  opt.arena_offset_bytes = f.arena_offset_gib << 30;
  opt.poison_arena = f.poison_arena;
  opt.arena_guard_bytes = f.arena_guard_bytes;
  LOOM_ASSIGN_OR_RETURN(s.exec, compiler::cuda::CudaExecutor::Create(g, opt));
  s.compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.graph = g;
  return s;
}

// Uploads every parameter (from --data's weights, or Loom's initialisation
// one parameter at a time for --text); the optimizer state is zero-filled on
// the device.
absl::Status Upload(const TrainFlags& f, Setup& s) {
  const auto t0 = std::chrono::steady_clock::now();
  const compiler::ir::Graph& g = s.graph;
  std::map<std::string, Tensor> weights;
  std::map<std::string, size_t> index;
  if (f.text.empty()) {
    LOOM_ASSIGN_OR_RETURN(weights, tests::parity::LoadTensorDir(f.data + "/weights"));
    for (const auto& p : s.params)  // the optimizer's state starts at zero; every parameter comes from DIR
      if (!weights.count(p.name)) return absl::FailedPreconditionError("--data: no weight '" + p.name + "' in " + f.data);
  }
  for (size_t i = 0; i < s.params.size(); ++i) index[s.params[i].name] = i;
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const auto& in = g.inputs()[k];
    int* slot = in.name == "x" ? &s.x_in : in.name == "y" ? &s.y_in : in.name == "lr" ? &s.lr_in
              : in.name == "step" ? &s.step_in : nullptr;
    if (slot != nullptr) { *slot = static_cast<int>(k); continue; }
    auto it = weights.find(in.name);
    auto pi = index.find(in.name);
    if (it == weights.end() && (f.text.empty() || pi == index.end())) {  // optimizer state: zeros, filled there
      LOOM_RETURN_IF_ERROR(s.exec->ZeroInput(static_cast<int>(k)));
      continue;
    }
    Tensor value = it != weights.end() ? it->second
                                       : compiler::models::InitParameter(s.params, pi->second, /*seed=*/1, threads);
    LOOM_RETURN_IF_ERROR(s.exec->SetInput(static_cast<int>(k), value));
  }
  if (s.x_in < 0 || s.y_in < 0 || s.lr_in < 0 || s.step_in < 0) return absl::InternalError("graph lacks x, y, lr or step");
  s.init_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return absl::OkStatus();
}

// Step i's batch (0-based): --data's batches in turn, or for --text windows
// of the file's bytes at offsets drawn per (step, row): x the window, y the
// next byte of each position.
using BatchFn = std::function<std::pair<Tensor, Tensor>(int)>;
absl::StatusOr<BatchFn> Batches(const TrainFlags& f, const Setup& s) {
  if (f.text.empty()) {
    LOOM_ASSIGN_OR_RETURN(auto batches, tests::parity::LoadTensorDir(f.data + "/batches"));
    const int nb = static_cast<int>(batches.size() / 2);
    if (nb == 0) return absl::InvalidArgumentError("--data: no batches in " + f.data + "/batches");
    return BatchFn([batches, nb](int i) {
      return std::make_pair(batches.at("x" + std::to_string(i % nb)), batches.at("y" + std::to_string(i % nb)));
    });
  }
  LOOM_ASSIGN_OR_RETURN(TextBatches text, TextBatches::Open(f.text, f.spec.seq_len(), f.batch, f.spec.vocab()));
  const DType xdt = s.graph.meta(s.graph.inputs()[s.x_in].value).dtype;
  const DType ydt = s.graph.meta(s.graph.inputs()[s.y_in].value).dtype;
  return BatchFn([text, xdt, ydt](int i) { return text.Batch(i, xdt, ydt); });
}

// Trains warmup + steps steps; returns the per-step losses and the timed seconds.
absl::StatusOr<std::pair<std::vector<double>, double>> Train(const TrainFlags& f, Setup& s) {
  LOOM_ASSIGN_OR_RETURN(BatchFn batch, Batches(f, s));
  std::vector<double> losses;
  Tensor lr = Tensor::Zeros({}, DType::kF32), step = Tensor::Zeros({}, DType::kF32);
  lr.data<float>()[0] = 3e-4f;
  std::chrono::steady_clock::time_point start;
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    if (i == f.warmup) {
      LOOM_RETURN_IF_ERROR(s.exec->Synchronize());
      start = std::chrono::steady_clock::now();
    }
    step.data<float>()[0] = static_cast<float>(i + 1);
    auto [x, y] = batch(i);
    std::vector<std::pair<int, Tensor>> in = {{s.x_in, x}, {s.y_in, y}, {s.lr_in, lr}, {s.step_in, step}};
    LOOM_RETURN_IF_ERROR(s.exec->Step(in));
    LOOM_ASSIGN_OR_RETURN(Tensor loss, s.exec->Output(0));
    losses.push_back(loss.data<float>()[0]);
    if (!std::isfinite(losses.back())) return absl::AbortedError("loss is not finite at step " + std::to_string(i + 1));
  }
  LOOM_RETURN_IF_ERROR(s.exec->Synchronize());
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::make_pair(losses, dt);
}

// Each PyTorch result against Loom's: the ratio and the loss check. False
// when a result is missing or its losses do not track.
bool CompareWithTorch(const TrainFlags& f, const std::vector<double>& losses, double tps) {
  bool ok = true;
  std::string best_impl;
  double best_tps = 0;
  for (const std::string& path : f.torch) {
    std::ifstream in(path);
    if (!in) { std::printf("torch result %s: missing\n", path.c_str()); ok = false; continue; }
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.contains("tokens_per_s")) { std::printf("torch result %s: unreadable\n", path.c_str()); ok = false; continue; }
    std::vector<double> tl = j["losses"].get<std::vector<double>>();
    double worst = 0;
    for (size_t s = 0; s < tl.size() && s < losses.size(); ++s)
      worst = std::max(worst, std::fabs(losses[s] - tl[s]) / std::max(1e-12, std::fabs(tl[s])));
    bool tracks = worst <= f.loss_tol && tl.size() >= losses.size();
    ok = ok && tracks;
    double ttps = j["tokens_per_s"].get<double>();
    const std::string impl = j["impl"].get<std::string>();
    std::printf("vs %-22s torch %.0f tok/s (mfu %.3f)  loom/torch = %.3fx  loss max rel diff %.2e %s\n",
                impl.c_str(), ttps, j["mfu"].get<double>(), tps / ttps, worst, tracks ? "CHECK_OK" : "CHECK_FAILED");
    if (j.contains("fallback") && j["fallback"].is_array())
      for (const auto& note : j["fallback"]) std::printf("   %s FALLBACK: %s\n", impl.c_str(), note.get<std::string>().c_str());
    if (impl.rfind("torch_eager", 0) != 0 && ttps > best_tps) best_tps = ttps, best_impl = impl;
  }
  // The ratio that matters: against the fastest compiled PyTorch mode of this call.
  if (best_tps > 0)
    std::printf("vs fastest torch.compile mode (%s, %.0f tok/s): loom/torch = %.3fx\n", best_impl.c_str(), best_tps,
                tps / best_tps);
  return ok;
}

absl::Status Run(const TrainFlags& f) {
  if (f.text.empty()) LOOM_RETURN_IF_ERROR(CheckDataConfig(f));
  LOOM_ASSIGN_OR_RETURN(Setup s, Compile(f));
  LOOM_RETURN_IF_ERROR(Upload(f, s));
  LOOM_ASSIGN_OR_RETURN(auto trained, Train(f, s));
  const auto& [losses, dt] = trained;
  const v1::ModelSpec& spec = f.spec;
  double tokens = static_cast<double>(f.steps) * f.batch * spec.seq_len();
  double tps = tokens / dt;
  double n = static_cast<double>(compiler::models::NumParameters(s.params));
  double flops_tok = TrainFlopsPerToken(spec, s.params);
  std::printf("RESULT impl=loom_%s%s%s%s%s%s%s%s preset=%s family=%s tokens_per_s=%.0f ms_per_step=%.2f mfu=%.3f params=%.0f "
              "compile_s=%.1f init_s=%.1f device_mib=%.0f arena_mib=%.0f\n",
              f.f32 ? "f32" : "bf16", f.graph ? "_graph" : "", f.checkpoint ? "_ckpt" : "", f.deterministic ? "_det" : "",
              f.f32_residual ? "_f32res" : "", f.bf16_grads ? "_bf16grad" : "", f.sorted_embedding ? "_sortemb" : "",
              f.lean ? (f.offload ? "_lean_offload" : "_lean") : f.offload ? "_offload" : "", f.preset.c_str(), spec.family().c_str(), tps, 1e3 * dt / f.steps,
              tps * flops_tok / 989e12, n, s.compile_s, s.init_s, s.exec->device_bytes() / 1048576.0,
              s.exec->plan().arena_bytes / 1048576.0);
  std::printf("model: %s L%d H%d Hkv%d C%d ffn%d T%d V%d B%lld, %.0f training FLOPs per token\n",
              spec.family().c_str(), spec.n_layer(), spec.n_head(), spec.n_kv_head() > 0 ? spec.n_kv_head() : spec.n_head(),
              spec.d_model(), spec.ffn_hidden() > 0 ? spec.ffn_hidden() : 4 * spec.d_model(), spec.seq_len(),
              spec.vocab(), static_cast<long long>(f.batch), flops_tok);
  // What attention ran (the SDPA dispatcher's pick per shape, when it ran).
  for (absl::string_view line : absl::StrSplit(s.exec->Describe(), '\n'))
    if (absl::StartsWith(line, "sdpa ")) std::printf("%s\n", std::string(line).c_str());
  std::printf("losses:");
  for (double l : losses) std::printf(" %.4f", l);
  std::printf("\n");
  if (!f.text.empty()) {  // no PyTorch side: whether the loss fell (the first five steps' mean against the last five's)
    const size_t k = std::min<size_t>(5, losses.size() / 2);
    double first = 0, last = 0;
    for (size_t i = 0; i < k; ++i) first += losses[i] / k, last += losses[losses.size() - 1 - i] / k;
    std::printf("loss: first %zu steps %.4f, last %zu %.4f: %s\n", k, first, k, last, last < first ? "FELL" : "DID NOT FALL");
  }
  if (!CompareWithTorch(f, losses, tps)) return absl::InternalError("the loss check failed (see CHECK_FAILED above)");
  return absl::OkStatus();
}

}  // namespace
}  // namespace loom::bench::cuda

int main(int argc, char** argv) {
  absl::StatusOr<loom::bench::cuda::TrainFlags> f = loom::bench::cuda::ParseTrainFlags(argc, argv);
  if (!f.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", std::string(f.status().message()).c_str());
    return 2;
  }
  absl::Status s = loom::bench::cuda::Run(*f);
  if (!s.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
