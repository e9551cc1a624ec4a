// The flags of the compile-time benchmark (bench/cuda/compile_bench.cc).
// Plain C++ (no CUDA), so they are tested on the CPU (compile_bench_test.cc).
//
// Model flags are train_bench's (train_config.h): --preset=NAME and the shape
// flags, --f32, --attention=dispatch|flash, --no-fusions, --deterministic,
// --activation-checkpointing=none|blocks, --residual=bf16|f32,
// --grads=f32|bf16, --embedding-backward=atomic|sorted. train_bench's run
// flags (--data, --torch, --warmup, --steps, --loss-tol, --no-graph,
// --profile) are refused by name. Its own:
//   --kernel-cache=DIR    the generated kernels' CUBIN cache the runs use
//                         (CudaOptions::kernel_cache). Default: a fresh
//                         folder under /tmp, removed at the end. For the
//                         cold run DIR must be empty or absent.
//   --compile-threads=N   CudaOptions::compile_threads (0: the hardware
//                         concurrency, 1: serial). Default 0.
//   --warm=N              warm runs after the cold one (default 1).
//   --no-cold             no cold run: only warm runs, over what DIR holds.
//   --dry                 build without touching a GPU even where there is one
//                         (cuda_executor.h DryBuild): the plan, the kernels and
//                         the device memory by kind; no uploads, no steps.
// Every error is INVALID_ARGUMENT and names the flag.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "bench/cuda/train_config.h"

namespace loom::bench::cuda {

struct CompileBenchFlags {
  TrainFlags model;          // the model flags (train_config.h)
  std::string kernel_cache;  // "" = a fresh folder under /tmp
  int compile_threads = 0;
  int warm = 1;
  bool cold = true;
  bool dry = false;  // --dry
};

// Parses argv[1..argc).
absl::StatusOr<CompileBenchFlags> ParseCompileBenchFlags(int argc, const char* const* argv);

}  // namespace loom::bench::cuda
