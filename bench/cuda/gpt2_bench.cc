// GPT-2 124M training on one GPU: Loom's compiled training step on the CUDA
// executor, side by side with PyTorch (bench/cuda/gpt2_torch.py, run first in
// the same call by run_gpt2.sh).
//
//   gpt2_bench --data=DIR [--torch=eager.json,compile.json] [--warmup=5] [--steps=20]
//              [--f32] [--no-graph] [--small] [--attention=dispatch|flash] [--no-fusions] [--profile]
//              [--activation-checkpointing=none|blocks] [--deterministic]
//
// DIR is what `gpt2_torch.py --init DIR` wrote: weights/ and batches/ in the
// tensor_dir format, so both sides start from identical weights and train on the
// same batch sequence. Prints one RESULT line (tokens/s, ms/step, MFU with
// 6N + 12 L C T FLOPs per token against 989 TFLOP/s), then for each PyTorch
// result the ratio, and the loss check: Loom's per-step losses must stay within
// --loss-tol (relative, default 2e-2) of PyTorch's at every step, or the line
// says CHECK_FAILED and the exit code is 1 (tokens/s only count when it tracks).
// --attention, --no-fusions and --profile set CudaOptions::attention,
// extra_fusions (false) and profile (eager steps with per-launch times: the
// tables go to stderr when the executor is destroyed; tokens/s is then not
// the replayed step's). --activation-checkpointing=blocks compiles with
// CompileOptions::checkpoint_blocks (RESULT impl gets "_ckpt"). device_mib is
// all device memory the executor holds; arena_mib its activation arena.
// --deterministic sets CudaOptions::deterministic (train.deterministic: the
// sorted embedding backward, flash attention's default variants, untimed
// cuBLASLt heuristics; RESULT impl gets "_det"): the same run with and
// without it measures what deterministic costs.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "compiler/compile.h"
#include "compiler/cuda/cuda_executor.h"
#include "compiler/models/models.h"
#include <nlohmann/json.hpp>
#include "tests/parity/tensor_dir.h"

namespace loom::bench::cuda {
namespace {

struct Flags {
  std::string data;
  std::vector<std::string> torch;
  int warmup = 5, steps = 20;
  bool f32 = false, graph = true, small = false, flash = false, fusions = true, profile = false, checkpoint = false;
  bool deterministic = false;
  double loss_tol = 2e-2;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](const char* name) -> const char* {
      std::string p = std::string("--") + name + "=";
      return a.rfind(p, 0) == 0 ? argv[i] + p.size() : nullptr;
    };
    if (const char* v = val("data")) f->data = v;
    else if (const char* v = val("torch")) f->torch = absl::StrSplit(v, ',', absl::SkipEmpty());
    else if (const char* v = val("warmup")) { if (!absl::SimpleAtoi(v, &f->warmup)) return false; }
    else if (const char* v = val("steps")) { if (!absl::SimpleAtoi(v, &f->steps)) return false; }
    else if (const char* v = val("loss-tol")) { if (!absl::SimpleAtod(v, &f->loss_tol)) return false; }
    else if (a == "--f32") f->f32 = true;
    else if (a == "--no-graph") f->graph = false;
    else if (a == "--small") f->small = true;
    else if (a == "--attention=flash") f->flash = true;
    else if (a == "--attention=dispatch") f->flash = false;
    else if (a == "--no-fusions") f->fusions = false;
    else if (a == "--profile") f->profile = true;
    else if (a == "--deterministic") f->deterministic = true;
    else if (a == "--activation-checkpointing=blocks") f->checkpoint = true;
    else if (a == "--activation-checkpointing=none") f->checkpoint = false;
    else {
      std::fprintf(stderr, "gpt2_bench: unknown flag '%s'\n", argv[i]);
      return false;
    }
  }
  if (f->data.empty()) std::fprintf(stderr, "gpt2_bench: --data=DIR is required\n");
  return !f->data.empty() && f->steps > 0 && f->warmup >= 0;
}

absl::Status Run(const Flags& f) {
  v1::ModelSpec spec;
  spec.set_family("gpt");
  int64_t batch = 16;
  if (f.small) {
    spec.set_n_layer(2); spec.set_n_head(4); spec.set_d_model(128); spec.set_seq_len(64); spec.set_vocab(256);
    batch = 4;
  } else {
    spec.set_n_layer(12); spec.set_n_head(12); spec.set_d_model(768); spec.set_seq_len(1024); spec.set_vocab(50304);
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<compiler::models::ParamInfo> params, compiler::models::Parameters(spec));
  compiler::models::BuildOptions bo;
  bo.batch = batch;
  LOOM_ASSIGN_OR_RETURN(compiler::ir::Graph forward, compiler::models::BuildForward(spec, bo));
  std::map<std::string, bool> decays;
  for (const auto& p : params) decays[p.name] = p.weight_decay;
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
  LOOM_ASSIGN_OR_RETURN(auto exec, compiler::cuda::CudaExecutor::Create(g, opt));
  double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  LOOM_ASSIGN_OR_RETURN(auto weights, tests::parity::LoadTensorDir(f.data + "/weights"));
  LOOM_ASSIGN_OR_RETURN(auto batches, tests::parity::LoadTensorDir(f.data + "/batches"));
  int nb = static_cast<int>(batches.size() / 2);
  if (nb == 0) return absl::InvalidArgumentError("--data: no batches in " + f.data + "/batches");
  int x_in = -1, y_in = -1, lr_in = -1, step_in = -1;
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const auto& in = g.inputs()[k];
    const auto& m = g.meta(in.value);
    if (in.name == "x") { x_in = static_cast<int>(k); continue; }
    if (in.name == "y") { y_in = static_cast<int>(k); continue; }
    if (in.name == "lr") { lr_in = static_cast<int>(k); continue; }
    if (in.name == "step") { step_in = static_cast<int>(k); continue; }
    auto it = weights.find(in.name);
    if (it != weights.end()) {
      LOOM_RETURN_IF_ERROR(exec->SetInput(static_cast<int>(k), it->second));
    } else {
      LOOM_RETURN_IF_ERROR(exec->SetInput(static_cast<int>(k), Tensor::Zeros(m.shape, m.dtype)));
    }
  }
  if (x_in < 0 || y_in < 0 || lr_in < 0 || step_in < 0) return absl::InternalError("graph lacks x, y, lr or step");

  std::vector<double> losses;
  Tensor lr = Tensor::Zeros({}, DType::kF32), step = Tensor::Zeros({}, DType::kF32);
  lr.data<float>()[0] = 3e-4f;
  std::chrono::steady_clock::time_point start;
  for (int s = 0; s < f.warmup + f.steps; ++s) {
    if (s == f.warmup) {
      LOOM_RETURN_IF_ERROR(exec->Synchronize());
      start = std::chrono::steady_clock::now();
    }
    step.data<float>()[0] = static_cast<float>(s + 1);
    std::vector<std::pair<int, Tensor>> in = {{x_in, batches.at("x" + std::to_string(s % nb))},
                                              {y_in, batches.at("y" + std::to_string(s % nb))},
                                              {lr_in, lr},
                                              {step_in, step}};
    LOOM_RETURN_IF_ERROR(exec->Step(in));
    LOOM_ASSIGN_OR_RETURN(Tensor loss, exec->Output(0));
    losses.push_back(loss.data<float>()[0]);
    if (!std::isfinite(losses.back())) return absl::AbortedError("loss is not finite at step " + std::to_string(s + 1));
  }
  LOOM_RETURN_IF_ERROR(exec->Synchronize());
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t T = spec.seq_len();
  double tokens = static_cast<double>(f.steps) * batch * T;
  double tps = tokens / dt;
  double n = static_cast<double>(compiler::models::NumParameters(params));
  double flops_tok = 6 * n + 12.0 * spec.n_layer() * spec.d_model() * T;
  std::printf("RESULT impl=loom_%s%s%s%s tokens_per_s=%.0f ms_per_step=%.2f mfu=%.3f params=%.0f compile_s=%.1f device_mib=%.0f arena_mib=%.0f\n",
              f.f32 ? "f32" : "bf16", f.graph ? "_graph" : "", f.checkpoint ? "_ckpt" : "",
              f.deterministic ? "_det" : "", tps, 1e3 * dt / f.steps, tps * flops_tok / 989e12, n,
              compile_s, exec->device_bytes() / 1048576.0,
              exec->plan().arena_bytes / 1048576.0);
  // What attention ran (the SDPA dispatcher's pick per shape, when it ran).
  for (absl::string_view line : absl::StrSplit(exec->Describe(), '\n'))
    if (absl::StartsWith(line, "sdpa ")) std::printf("%s\n", std::string(line).c_str());
  std::printf("losses:");
  for (double l : losses) std::printf(" %.4f", l);
  std::printf("\n");

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
  if (!ok) return absl::InternalError("the loss check failed (see CHECK_FAILED above)");
  return absl::OkStatus();
}

}  // namespace
}  // namespace loom::bench::cuda

int main(int argc, char** argv) {
  loom::bench::cuda::Flags f;
  if (!loom::bench::cuda::ParseFlags(argc, argv, &f)) return 2;
  absl::Status s = loom::bench::cuda::Run(f);
  if (!s.ok()) {
    std::fprintf(stderr, "gpt2_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
