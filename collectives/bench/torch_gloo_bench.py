"""torch.distributed Gloo peer of `loom bench collectives`.

Run by the command with Debian's /usr/bin/python3 (torch 1.13, CPU): N ranks
via torch.multiprocessing, the same sizes, iterations, warmup, input patterns
and checks as Loom's workers. Prints, on rank 0, one line per result:

  TORCH <version>
  RESULT <op> <bytes> <us per op, slowest rank> <ok|WRONG>
  UNSUPPORTED <op> <bytes> <reason>
  NOTORCH <reason>        (torch does not import; exit code 0)

all_gather uses the list form (1.13's Gloo has no all_gather_into_tensor);
torch 1.13's Gloo has no reduce_scatter, which is reported as UNSUPPORTED.
"""
import argparse
import os
import socket
import sys
import time


def elements_for(op, nbytes, n):
    count = nbytes // 4
    if op != "all_reduce":
        count = count // n * n
    return count


def worker(rank, a, port):
    import torch
    import torch.distributed as dist

    n = a.ranks
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    sizes = [int(s) for s in a.sizes.split(",")]
    iters = [int(s) for s in a.iters.split(",")]
    ops = a.ops.split(",")
    if "reduce_scatter" in ops:
        # Probe first, so the "unsupported" rows come even if a later run is cut short.
        try:
            dist.reduce_scatter(torch.zeros(1), [torch.zeros(1) for _ in range(n)])
        except RuntimeError as e:
            ops.remove("reduce_scatter")
            if rank == 0:
                msg = str(e).splitlines()[0] if str(e) else "unsupported"
                for nbytes in sizes:
                    count = elements_for("reduce_scatter", nbytes, n)
                    if count:
                        print("UNSUPPORTED reduce_scatter %d %s" % (count * 4, msg), flush=True)
    for op in ops:
        for nbytes, it in zip(sizes, iters):
            count = elements_for(op, nbytes, n)
            if count == 0:
                continue
            m = count // n
            idx = torch.arange(count, dtype=torch.int64)
            red_in = ((rank + 1) + (idx % 13)).to(torch.float32)
            red_want = (n * (n + 1) // 2 + n * (idx % 13)).to(torch.float32)
            if op == "all_reduce":
                t = torch.empty(count)

                def fill():
                    t.copy_(red_in)

                def run():
                    dist.all_reduce(t)

                def wrong():
                    return int((t != red_want).sum())
            elif op == "all_gather":
                j = torch.arange(m, dtype=torch.int64)
                inp = (rank * 16 + (j % 16)).to(torch.float32)
                outs = [torch.empty(m) for _ in range(n)]

                def fill():
                    pass

                def run():
                    dist.all_gather(outs, inp)

                def wrong():
                    return sum(int((outs[b] != (b * 16 + (j % 16)).to(torch.float32)).sum())
                               for b in range(n))
            else:
                ins = [torch.empty(m) for _ in range(n)]
                out = torch.empty(m)
                want = red_want[rank * m:(rank + 1) * m]

                def fill():
                    for b in range(n):
                        ins[b].copy_(red_in[b * m:(b + 1) * m])

                def run():
                    dist.reduce_scatter(out, ins)

                def wrong():
                    return int((out != want).sum())
            fill()
            try:
                run()
            except RuntimeError as e:
                if rank == 0:
                    msg = str(e).splitlines()[0] if str(e) else "unsupported"
                    print("UNSUPPORTED %s %d %s" % (op, count * 4, msg), flush=True)
                continue
            bad = wrong()
            for _ in range(1, a.warmup):
                run()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(it):
                run()
            us = (time.perf_counter() - t0) / it * 1e6
            fill()
            run()
            bad += wrong()
            stats = torch.tensor([us, float(bad)], dtype=torch.float64)
            dist.all_reduce(stats[0:1], op=dist.ReduceOp.MAX)
            dist.all_reduce(stats[1:2], op=dist.ReduceOp.SUM)
            if rank == 0:
                print("RESULT %s %d %.3f %s" % (op, count * 4, float(stats[0]),
                                                "ok" if float(stats[1]) == 0 else "WRONG"), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--ops", required=True)
    p.add_argument("--sizes", required=True)
    p.add_argument("--iters", required=True)
    p.add_argument("--warmup", type=int, default=2)
    a = p.parse_args()
    try:
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
        if not dist.is_available() or not dist.is_gloo_available():
            raise ImportError("torch.distributed Gloo is not available")
    except Exception as e:  # any import problem: say so, Loom's figures still stand
        print("NOTORCH %s: %s" % (type(e).__name__, e), flush=True)
        return 0
    print("TORCH %s" % torch.__version__, flush=True)
    mp.spawn(worker, args=(a, free_port()), nprocs=a.ranks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
