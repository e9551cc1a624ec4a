// gpu_check: runs every CUDA kernel check (kernels/cuda/checks.h) and prints
// the table of relative errors against the fp64 CPU references, the device and
// the hash of the kernel sources. Exit status 0 only when every check passed.
//
//   gpu_check [--full] [--progress] [--seed=N]
#include "bench/cuda/check_main.h"

int main(int argc, char** argv) {
  return loom::bench::cuda::CheckMain(argc, argv, "gpu_check", "kernel", loom::kernels::cuda::KernelSourceHash(),
                                      loom::kernels::cuda::RunKernelChecks);
}
