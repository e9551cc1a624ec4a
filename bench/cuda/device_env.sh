# Sourced by the bench/cuda/run_*.sh scripts on the GPU machine: sets D (the
# staged folder, with bin/ unpacked from bin.tar.xz), O (where logs go), PY, and LD_LIBRARY_PATH = the staged
# non-CUDA shared libraries (lib/ or lib.tar.xz, unpacked once) + the CUDA
# libraries of the PyTorch environment there (cuBLAS/cuBLASLt, NVRTC, NCCL).
# Each archive is unpacked once per machine, into a folder named by its
# checksum (/tmp/loom_staged.<sum>, /tmp/loom_staged_libs.<sum>): a later call
# with the same staging reuses it, one with another staging gets its own, and
# a running binary's libraries are never replaced.
D=${LOOM_DEVICE_DIR:-.device/gpu}
O=${OUT:-/tmp/loom_cuda_out}
mkdir -p "$O"
PY=${PYTHON:-python3}
# bin.tar.xz (stage.sh packs the binaries): unpacked once into a copy of $D.
_sum() { cksum "$1" | cut -d' ' -f1; }
if [ -f "$D/bin.tar.xz" ] && [ ! -d "$D/bin" ]; then
  _st=/tmp/loom_staged.$(_sum "$D/bin.tar.xz")
  if [ ! -f "$_st/.unpacked" ]; then
    rm -rf "$_st" && mkdir -p "$_st" && cp -r "$D"/. "$_st"/ && tar -C "$_st" -xJf "$_st/bin.tar.xz" &&
      touch "$_st/.unpacked"
  fi
  D=$_st
fi
_libs="$D/lib"
if [ -f "$D/lib.tar.xz" ]; then
  _libs=/tmp/loom_staged_libs.$(_sum "$D/lib.tar.xz")
  if [ ! -f "$_libs/.unpacked" ]; then
    mkdir -p "$_libs" && tar -C "$_libs" -xJf "$D/lib.tar.xz" --strip-components=1 && touch "$_libs/.unpacked"
  fi
fi
_nv=$($PY -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]) + "/nvidia")' 2>/dev/null)
_nvlibs=$(find "$_nv" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH="$_libs:${_nvlibs}${LD_LIBRARY_PATH:-}"
export LOOM_KERNEL_CACHE=${LOOM_KERNEL_CACHE:-/tmp/loom_kernel_cache}
mkdir -p "$LOOM_KERNEL_CACHE"
[ -d "$D/kernel_cache" ] && cp -r "$D/kernel_cache/." "$LOOM_KERNEL_CACHE/" 2>/dev/null
true
