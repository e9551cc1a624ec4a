"""torch.distributed Gloo baseline for collectives_bench (same sizes, same columns).

Run by collectives_bench with Debian's /usr/bin/python3 (torch 1.13 CPU).
Torch 1.13's ProcessGroupGloo has no reduce_scatter: that row says so.
all_gather uses the list form (1.13 Gloo lacks all_gather_into_tensor).
"""
import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def iters_for(nbytes):
    return int(min(max((128 << 20) // max(nbytes, 1), 3), 200))


def sizes(lo, hi):
    s = lo
    while s <= hi:
        yield s
        s *= 4


def worker(rank, n, port, lo, hi):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    for op in ("all_reduce", "all_gather"):
        for nbytes in sizes(lo, hi):
            count = nbytes // 4
            if op == "all_gather":
                count = count // n * n
            if count == 0:
                continue
            if op == "all_reduce":
                t = torch.full((count,), float(rank + 1))
                run = lambda: dist.all_reduce(t)
            else:
                inp = torch.full((count // n,), float(rank + 1))
                outs = [torch.empty(count // n) for _ in range(n)]
                run = lambda: dist.all_gather(outs, inp)
            run()
            if op == "all_reduce":
                ok = float(t[0]) == n * (n + 1) / 2
            else:
                ok = all(float(outs[i][0]) == i + 1 for i in range(n))
            it = iters_for(nbytes)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(it):
                run()
            us = (time.perf_counter() - t0) / it * 1e6
            if rank == 0:
                size = count * 4.0
                algbw = size / us / 1e3
                factor = 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
                print("%-6s %5d  %-14s %12.0f %12.1f %9.3f %9.3f  %s" % (
                    "torch", n, op, size, us, algbw, algbw * factor, "ok" if ok else "WRONG"), flush=True)
    if rank == 0:
        print("torch  %5d  reduce_scatter  (not supported by torch 1.13's Gloo backend)" % n, flush=True)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--min_bytes", type=int, default=1024)
    p.add_argument("--max_bytes", type=int, default=1 << 20)
    a = p.parse_args()
    mp.spawn(worker, args=(a.ranks, free_port(), a.min_bytes, a.max_bytes), nprocs=a.ranks)
