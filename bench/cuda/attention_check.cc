// attention_check: runs the flash-attention checks (kernels/cuda/attention/
// attention_checks.h) on the GPU and prints the table of relative errors
// against the fp64 CPU reference, with the hash of the attention sources.
// Exit status 0 only when every check passed.
//
//   attention_check [--full] [--seed=N]
#include "bench/cuda/check_main.h"
#include "kernels/cuda/attention/attention_checks.h"

int main(int argc, char** argv) {
  return loom::bench::cuda::CheckMain(argc, argv, "attention_check", "attention",
                                      loom::kernels::cuda::attention::AttentionSourceHash(),
                                      loom::kernels::cuda::attention::RunAttentionChecks);
}
