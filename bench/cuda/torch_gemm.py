# torch.matmul at the shape gemm_bench uses, timed the same way (CUDA events
# around each of `iters` products after `warmup`, median), on random data.
# Prints "RESULT torch_tflops=X". Run on the GPU machine's python3 (PyTorch 2.x).
import sys

import torch


def main():
    m = n = k = 8192
    iters, warmup = 100, 10
    dtype = torch.bfloat16
    for a in sys.argv[1:]:
        if a.startswith("--m="): m = int(a[4:])
        elif a.startswith("--n="): n = int(a[4:])
        elif a.startswith("--k="): k = int(a[4:])
        elif a == "--f32":
            dtype = torch.float32
            torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.rand(m, k, device="cuda", dtype=dtype) * 2 - 1
    b = torch.rand(k, n, device="cuda", dtype=dtype) * 2 - 1
    for _ in range(warmup):
        c = torch.matmul(a, b)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    ev[0].record()
    for i in range(iters):
        c = torch.matmul(a, b)
        ev[i + 1].record()
    torch.cuda.synchronize()
    ms = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(iters))
    med = ms[len(ms) // 2]
    tflops = 2.0 * m * n * k / (med * 1e-3) / 1e12
    ref = (a[:64].double() @ b.double())
    rel = ((c[:64].double() - ref).norm() / ref.norm()).item()
    print(f"torch {torch.__version__} matmul {dtype} m={m} n={n} k={k}: median {med:.3f} ms, min {ms[0]:.3f} ms "
          f"over {iters}, {tflops:.1f} TFLOP/s; rel err (64 rows) {rel:.2e}")
    print(f"RESULT torch_tflops={tflops:.1f}")


if __name__ == "__main__":
    main()
