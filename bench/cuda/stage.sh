#!/bin/bash
# Builds the GPU binaries here and stages them, with the shared libraries the
# GPU machine lacks (Abseil), into the git-ignored .device/ folder:
#   bash bench/cuda/stage.sh            # from the repository root
# then run on the GPU machine (device tool: carry [".device"]):
#   bash bench/cuda/run_all.sh
# CUDA libraries (cuBLAS/cuBLASLt) are not carried: run_all.sh takes them from
# the PyTorch environment there. The CUDA runtime is linked statically.
set -euo pipefail
cd "$(dirname "$0")/../.."
BAZEL_ARGS=${BAZEL_ARGS:-}
targets="//bench/cuda:gpu_check //bench/cuda:gemm_bench //bench/cuda:kernel_bench //kernels/cuda:caching_allocator_test //kernels/cuda:cuda_kernels_test"
targets="$targets //bench/cuda:attention_check //bench/cuda:sdpa_bench"  # flash attention (run_sdpa.sh)
bazel $BAZEL_ARGS build --jobs=2 $targets
bin=$(bazel $BAZEL_ARGS info bazel-bin 2>/dev/null)
rm -rf .device/bin .device/lib
mkdir -p .device/bin .device/lib
for t in bench/cuda/gpu_check bench/cuda/gemm_bench bench/cuda/kernel_bench kernels/cuda/caching_allocator_test kernels/cuda/cuda_kernels_test bench/cuda/attention_check bench/cuda/sdpa_bench; do
  cp "$bin/$t" .device/bin/
  # Every non-CUDA, non-libc shared library the binary needs.
  ldd "$bin/$t" | awk '$3 ~ /^\// {print $3}' |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' |
    grep -Ev 'libcublas|libcudart|libnccl|libcudnn|libnvrtc' |
    while read -r lib; do cp -L "$lib" .device/lib/; done
done
chmod -R u+w .device
du -sh .device/bin .device/lib
