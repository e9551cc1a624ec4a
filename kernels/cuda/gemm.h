// GEMM through cuBLASLt, row-major, with fused epilogues and a per-shape cache.
//
//   D[M,N] = alpha * op(A) op(B) (+ beta * D)   then the epilogue
//   op(A) is [M,K]: A stored [M,K] (trans_a false) or [K,M] (trans_a true);
//   op(B) is [K,N]: B stored [K,N] (trans_b false) or [N,K] (trans_b true).
// All matrices are dense row-major (leading dimension = stored column count).
// dtype kBF16: A, B, D, bias and aux are bf16, accumulation in f32.
// dtype kF32: everything f32, computed in true f32 (CUBLAS_COMPUTE_32F, no
// TF32), so results match an fp64 reference far under 1e-3.
//
// Epilogues (cuBLASLt's own, applied before the store):
//   kBias         D = acc + bias[N]
//   kGelu         D = gelu_tanh(acc)
//   kBiasGelu     D = gelu_tanh(acc + bias)
//   kGeluAux      kGelu, and aux[M,N] = the pre-activation (for the backward)
//   kBiasGeluAux  kBiasGelu, and aux = acc + bias
//   kDGelu        D = acc * gelu_tanh'(aux)          (aux: the saved pre-activation)
//   kDGeluBgrad   kDGelu, and bias_grad[N] = sum over rows of D
// GELU is the tanh approximation (cuBLASLt's). Aux epilogues need N % 8 == 0.
// The algorithm for each (dtype, shape, transposes, epilogue) is chosen once by
// cuBLASLt's heuristic (optionally timing the top candidates when autotune is
// on and D does not alias an input) and cached for the process. A timed choice
// is also kept in the TuningCache (tuning_cache.h) by device, cuBLASLt
// version and shape: another process with that file takes the same
// candidate of the heuristic's list without timing.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "base/dtype.h"
#include "kernels/cuda/caching_allocator.h"

namespace loom::kernels::cuda {

enum class Epilogue { kNone, kBias, kGelu, kBiasGelu, kGeluAux, kBiasGeluAux, kDGelu, kDGeluBgrad };
const char* EpilogueName(Epilogue e);

struct GemmArgs {
  DType dtype = DType::kBF16;  // kBF16 or kF32
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  float alpha = 1.0f, beta = 0.0f;
  Epilogue epilogue = Epilogue::kNone;
  const void* bias = nullptr;  // [N], dtype
  void* aux = nullptr;         // [M,N], dtype: written by *GeluAux, read by kDGelu*
  void* bias_grad = nullptr;   // [N], dtype: written by kDGeluBgrad
  StreamHandle stream = nullptr;
  // Mixed precision (additive): with dtype kBF16, D is f32 instead of bf16
  // (A and B bf16, f32 accumulate, f32 store). Epilogue kNone only.
  bool d_f32 = false;
};

// Runs the GEMM on args.stream (asynchronous). InvalidArgument names the bad
// argument; Unimplemented when cuBLASLt offers no algorithm for the epilogue.
absl::Status Gemm(const GemmArgs& args);

// Autotuning of new shapes (default on): times up to 8 heuristic candidates
// (TimeRuns, run_timing.h) and keeps the fastest, so the algorithm (and with it the
// last bits of D) may differ between processes. Off: the heuristic's first
// choice, the same for the same shape, GPU and cuBLASLt (what
// CudaOptions::deterministic runs); choices are cached per setting.
void SetGemmAutotune(bool on);
// "bf16 m=.. n=.. k=.. tA=0 tB=0 epi=bias algo=#i of n (tuned) ws=..B" for the
// cached choice of `args`'s key, or "" when not cached yet.
std::string GemmChoice(const GemmArgs& args);

}  // namespace loom::kernels::cuda
