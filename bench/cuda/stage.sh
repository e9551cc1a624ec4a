#!/bin/bash
# Builds the GPU binaries here and stages them, with the shared libraries the
# GPU machine lacks (Abseil, protobuf, gRPC, OpenBLAS, ...: xz-compressed to
# keep the device tool's carry small), into a git-ignored folder:
#   bash bench/cuda/stage.sh            # from the repository root; LOOM_DEVICE_DIR=.device/gpu
# then run on the GPU machine (device tool, carry [".device/gpu"]):
#   bash bench/cuda/run_all.sh          # checks, GEMM, SDPA, GPT-2 124M, loom train
# CUDA libraries (cuBLAS/cuBLASLt, NVRTC, NCCL) are not carried: device_env.sh
# takes them from the PyTorch environment there. The CUDA runtime is static.
set -euo pipefail
cd "$(dirname "$0")/../.."
BAZEL_ARGS=${BAZEL_ARGS:-}
DEST=${LOOM_DEVICE_DIR:-.device/gpu}
# STAGE_BINS overrides the list (a subset for a quick run).
bins=${STAGE_BINS:-"bench/cuda/gpu_check bench/cuda/gemm_bench bench/cuda/kernel_bench kernels/cuda/caching_allocator_test
  kernels/cuda/cuda_kernels_test bench/cuda/attention_check bench/cuda/sdpa_bench bench/cuda/train_bench
  compiler/cuda/cuda_executor_gpu_check bench/cuda/gpt_cuda_parity kernels/cuda/codegen/pointwise_gpu_check kernels/cuda/codegen/rowwise_gpu_check
  kernels/cuda/attention/wgmma_check runtime/loom bench/train/import_benchmark tests/byom/byom_cuda_test
  tests/ckpt/cuda_resume_test collectives/staging/cuda_gloo_gpu_test tests/ckpt/fault_test tests/ckpt/resume_test
  tests/parallel/parallel_cuda_gpu_check bench/cuda/compile_bench"}
targets=$(for b in $bins; do echo "//${b%/*}:${b##*/}"; done)
bazel $BAZEL_ARGS build --jobs=2 $targets
bin=$(bazel $BAZEL_ARGS info bazel-bin 2>/dev/null)
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
for b in $bins; do
  cp "$bin/$b" "$DEST/bin/"
  # Every non-CUDA, non-libc shared library the binary needs.
  ldd "$bin/$b" | awk '$3 ~ /^\// {print $3}' |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' |
    grep -Ev 'libcublas|libcudart|libnccl|libcudnn|libnvrtc|libcuda\.' |
    while read -r lib; do cp -Ln "$lib" "$DEST/lib/" 2>/dev/null || true; done ||
    true  # a binary with no such library (grep finds nothing)
done
# UCX loads its transports as modules at run time.
[ -d /usr/lib/x86_64-linux-gnu/ucx ] && cp -rL /usr/lib/x86_64-linux-gnu/ucx "$DEST/lib/ucx"
tar -C "$DEST" -cf - lib | xz -T2 -9 > "$DEST/lib.tar.xz"
rm -rf "$DEST/lib"
chmod -R u+w "$DEST"
strip --strip-unneeded "$DEST"/bin/* 2>/dev/null || true  # the carry to the GPU machine is limited to 64 MiB
# The binaries too (device_env.sh unpacks both once there). -9's 64 MiB
# window spans several binaries, which share most of their code: the whole
# set packs to about 9 MiB instead of the 38 MiB of -6's 8 MiB window.
tar -C "$DEST" -cf - bin | xz -T2 -9 > "$DEST/bin.tar.xz"
rm -rf "$DEST/bin"
du -sh "$DEST/bin.tar.xz" "$DEST/lib.tar.xz"
# The corpus examples/gpt-cuda.yaml trains on (Debian's fortunes, not on the GPU machine).
mkdir -p "$DEST/data" && cp -rL /usr/share/games/fortunes "$DEST/data/" 2>/dev/null || true
# GPT-2 124M as a PyTorch module exported by this machine's torch 1.13 (the GPU
# machine's torch is another version), without weights: run_import.sh.
echo '{"n_layer": 12, "n_head": 12, "d_model": 768, "seq_len": 1024, "vocab": 50304, "batch": 16}' > "$DEST/data/gpt2_124m.json"
/usr/bin/python3 bench/train/gpt2_onnx.py --cfg "$DEST/data/gpt2_124m.json" --out "$DEST/data/gpt2_124m_graph.onnx" \
  > "$DEST/data/gpt2_124m_export.log" 2>&1 || echo "stage.sh: the GPT-2 export failed (see $DEST/data/gpt2_124m_export.log)"
# The nanoGPTs of tests/byom/models.py exported by the user's tool, for
# tests/byom/byom_cuda_test (run_checks.sh).
mkdir -p "$DEST/data/byom"
for m in gpt gpt_d64; do
  /usr/bin/python3 tools/loom_export.py "tests/byom/models.py:$m" --out "$DEST/data/byom/$m.onnx" \
    > "$DEST/data/byom/$m.log" 2>&1 || echo "stage.sh: the $m export failed (see $DEST/data/byom/$m.log)"
done
