// Every hand-written CUDA kernel of this folder (gemm.h with every epilogue
// and accumulating into D, layernorm.h, and the
// raw-pointer kernels: reductions.h (column sums, grad norm, row sums and
// maxima), cross_entropy.h, embedding.h's backward in both modes and its
// vocabulary one-hot, rmsnorm.h with and without the residual gradient,
// rope.h's table and rotation)
// against its fp64 CPU reference (reference.h, or the sums written out in
// checks.cc).
//
// Each check draws fresh random inputs (Philox, seeded), rounds them to the
// kernel's dtype, uploads them, poisons every output with 0xFF bytes (NaN in
// f32 and bf16), runs the kernel and compares each output by
// ||out - ref|| / ||ref||. A check passes when every output is finite and its
// error is under the tolerance: 1e-4 for f32 (true f32, no TF32), 1e-2 for
// bf16 (column sums and the grad norm: 1e-5; the embedding gradient, an f32
// sum of dy rows: 1e-4). The reductions, the cross-entropy and the sorted
// embedding backward also run twice and must give the same bits ("rerun" 0 or
// inf); the sorted embedding backward must also equal the host's f32 sum of
// each id's rows in row order bit for bit ("row order").
// Used by cuda_kernels_test (skips without a GPU) and bench/cuda/gpu_check.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::kernels::cuda {

struct CheckResult {
  std::string name;    // "gemm bias_gelu_aux tA=0 tB=1"
  std::string dtype;   // "f32", "bf16"
  std::string shape;   // "m=256 n=384 k=512"
  double rel_err = 0;  // the worst output's error (inf when an output is not finite)
  double tol = 0;
  bool pass = false;
  std::string detail;  // per-output errors, or the error status
};

struct CheckOptions {
  uint64_t seed = 1234;
  bool full = false;  // larger shapes (LOOM_FULL=1)
  // Prints each check to stderr as it starts, with the seconds since the
  // first began (which one a slow or stuck run is in).
  bool progress = false;
};

// Unavailable when there is no device; otherwise one row per check.
absl::StatusOr<std::vector<CheckResult>> RunKernelChecks(const CheckOptions& opts);
// A fixed-width table, one line per check, and a summary line "N passed, M failed".
std::string FormatCheckTable(const std::vector<CheckResult>& rows);
// sha256 prefix of kernels/cuda's sources (the code the checks ran).
const char* KernelSourceHash();

}  // namespace loom::kernels::cuda
