"""torch.matmul GFLOP/s for the shapes given on the command line.

Each argument is name:batch:M:K:N:trans_b:b_batched (batch 0 = plain 2-D a;
b carries the batch too when b_batched is 1, else it is a shared 2-D weight).
Prints one line per shape: "<name> <GFLOP/s>", timed best-of-N after a
warm-up call (the statistic matmul_benchmark.cc uses for Loom). Runs with
torch.set_num_threads(2) to match the 2-core CI machine. Called by
matmul_benchmark.cc through popen; runs standalone too.
"""
import sys
import time

import torch


def bench(fn, min_time=0.3):
    fn()  # warm up
    iters, elapsed = 0, 0.0
    best = float("inf")
    while elapsed < min_time or iters < 3:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = min(best, dt)
        elapsed += dt
        iters += 1
    return best


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    for spec in sys.argv[1:]:
        name, batch, m, k, n, tb, b_batched = spec.split(":")
        batch, m, k, n, tb, b_batched = int(batch), int(m), int(k), int(n), int(tb), int(b_batched)
        a = torch.rand((batch, m, k) if batch else (m, k))
        bshape = (n, k) if tb else (k, n)
        b = torch.rand(((batch,) + bshape) if (batch and b_batched) else bshape)
        fn = (lambda: torch.matmul(a, b.transpose(-1, -2))) if tb else (lambda: torch.matmul(a, b))
        secs = bench(fn)
        flops = 2.0 * max(batch, 1) * m * n * k
        print(f"{name} {flops / secs / 1e9:.2f}", flush=True)


if __name__ == "__main__":
    main()
