// The GPT parity procedure against PyTorch, shared by the CPU parity test
// (tests/parity/gpt_parity_test.cc, Debian's torch) and the GPU parity check
// (bench/cuda/gpt_cuda_parity.cc, the GPU machine's torch on CUDA):
//
//   1. Loom's Trainer initialises the weights; they and `steps` batches of
//      random token ids go to a temp folder (tensor_dir format).
//   2. tests/parity/gpt_torch.py trains the same model on them (f32, or bf16
//      autocast on CUDA) and writes loss, logits, gradients at step 0, the
//      loss curve and the final parameters.
//   3. Loom runs the same steps; every figure is returned as a relative error
//      for the caller to bound.
//   4. With f64_reference, gpt_torch.py also trains in f64 on the CPU. The
//      final parameters of Loom and of torch (f32, on torch_device) are both
//      measured against it, so Loom's gap can be bounded by torch's own
//      f32-against-f64 gap on the same run (FinalWithinNoise).
//
//   ParityCase c{"gpt", 2, 3, 3, 96, 37, 256, 384, 2};
//   ParityOptions o;  o.device = "cuda"; o.precision = "bf16"; o.torch_device = "cuda";
//   absl::StatusOr<ParityResult> r = RunGptParity(c, 50, o);
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::tests::parity {

struct ParityCase {
  std::string family;
  int n_layer, n_head, n_kv_head, d_model, seq_len, vocab, ffn, batch;
  // model.dropout of both runs: gpt_torch.py draws Loom's masks (its LoomDropout).
  float dropout = 0;
  std::string Name() const;  // "gpt L2 H3/3 C96 T37 V256 B2" (+ " dropout 0.2")
};

struct ParityOptions {
  std::string device = "cpu";        // Loom's JobSpec device: cpu or cuda
  std::string precision = "f32";     // f32 or bf16 (cuda only)
  std::string python = "/usr/bin/python3";
  std::string torch_device = "cpu";  // gpt_torch.py --device
  std::string script;                // gpt_torch.py; empty: found under tests/parity
  int threads = 2;                   // torch CPU threads
  bool compare_logits = true;        // the Trainer's eval forward (CPU) vs torch's logits
  // Non-empty: torch also runs on this device (e.g. "cpu"), and the gaps
  // between the two torch runs are returned as the noise floor.
  std::string control_device;
  // With f64_reference: further torch f32 runs on torch_device, each with
  // these gpt_torch.py flags (e.g. "--reverse-batch", "--loss-scale 3"):
  // the same training mathematically with its rounding redrawn. Their gaps
  // to the f64 run sample how far f32 rounding alone moves a run (the
  // largest per parameter: ParityResult::noise_*).
  std::vector<std::string> noise_runs;
  // With f64_reference: further Loom runs, one per value S, with
  // TrainerOptions::loss_seed S and train.eps and train.grad_clip times S:
  // the same training with Loom's rounding redrawn (ParityResult::
  // loom_noise_final_rel_f64; FinalWithinNoise takes Loom's median).
  std::vector<double> loom_seeds;
  // true: torch also trains in f64 on the CPU (the reference of step 4).
  bool f64_reference = false;
  // Loom's side, to bisect a gap on the GPU: train.deterministic (kernels
  // without atomics); cuda_fusions false: the CUDA plan's pattern fusions off
  // (CudaOptions::extra_fusions); cuda_epilogues false: its GEMM epilogues
  // off (CudaOptions::gemm_epilogues).
  bool deterministic = false;
  bool cuda_fusions = true;
  bool cuda_epilogues = true;
};

struct ParityResult {
  double loss0 = 0, torch_loss0 = 0;
  double loss0_rel = 0;                      // step-0 loss, relative
  double logits_rel = -1;                    // -1: not compared
  std::map<std::string, double> grad_rel;    // step-0 gradient per parameter
  std::vector<double> loss_rel;              // per step of the curve
  std::vector<double> losses, torch_losses;
  std::map<std::string, double> final_rel;   // final value per parameter (c_attn.bias: q and v parts, worst)
  // torch on control_device against torch on torch_device (empty without a control).
  std::map<std::string, double> control_grad_rel, control_final_rel;
  double control_loss_rel = -1;  // worst over the curve; -1: no control
  // With f64_reference, per parameter: Loom's final value against torch's f64
  // run, and torch's own f32 run against the same f64 run (empty without it).
  std::map<std::string, double> final_rel_f64, torch_final_rel_f64;
  // With f64_reference and a control device: torch's f32 run there against
  // the f64 run (PyTorch's second f32 implementation on the same batches).
  std::map<std::string, double> control_final_rel_f64;
  // With f64_reference, per parameter: the step-0 gradient of Loom and of
  // torch's f32 run against the f64 run's (one step's rounding, before any
  // training amplifies it).
  std::map<std::string, double> grad_rel_f64, torch_grad_rel_f64;
  // With noise_runs, per parameter: the largest final and step-0 gradient
  // gap to the f64 run over those runs.
  std::map<std::string, double> noise_final_rel_f64, noise_grad_rel_f64;
  // With loom_seeds, per parameter: each of those Loom runs' final gap to the
  // f64 run, in the order of loom_seeds.
  std::map<std::string, std::vector<double>> loom_noise_final_rel_f64;
  // Loom's final gap to the f64 run that FinalWithinNoise bounds: the median
  // over final_rel_f64 and loom_noise_final_rel_f64 (final_rel_f64 alone
  // without Loom noise runs).
  double LoomFinalGap(const std::string& name) const;
  double WorstGrad() const;
  double WorstLoss() const;
  double WorstFinal() const;
  // "name (value)" of the largest entry.
  static std::string Worst(const std::map<std::string, double>& m);
};

// The final-parameter verdict against the f64 reference, per parameter:
// Loom's gap (LoomFinalGap: the median over its runs when it ran several) is
// within `factor` times torch's own f32 gap, or below `floor` (for
// parameters where torch's gap is itself at the level of f32 rounding).
// Torch's own gap is the largest of its f32 runs' gaps: on torch_device,
// on control_device when a control ran, and the noise runs'. Both are PyTorch f32 training, and
// after 50 AdamW steps they drift from the f64 run by amounts that differ
// severalfold (bench/cuda/gpt_cuda_parity prints both).
struct NoiseVerdict {
  bool ok = true;
  std::string worst;     // "name (loom gap / torch gap)" of the largest ratio
  double worst_ratio = 0;
  std::vector<std::string> failures;  // "name: loom 3.1e-04 > 2 x torch 1.2e-04"
};
NoiseVerdict FinalWithinNoise(const ParityResult& r, double factor, double floor);

// The rounding redraws of the final-parameter rule, shared by
// gpt_parity_test and gpt_cuda_parity: torch's four further f32 runs (rows
// reversed; loss times 3, 0.37; rows reversed and loss times 7.1) and Loom's
// four further loss seeds (3, 0.37, 7.1, 0.6).
std::vector<std::string> StandardTorchNoiseRuns();
std::vector<double> StandardLoomSeeds();

// Errors: torch missing or failing (the command and its exit code), Loom's
// trainer failing (its status).
absl::StatusOr<ParityResult> RunGptParity(const ParityCase& c, int steps, const ParityOptions& o);

// "python -c 'import torch'" succeeds (and, for torch_device cuda, CUDA is available).
bool TorchAvailable(const ParityOptions& o);

}  // namespace loom::tests::parity
