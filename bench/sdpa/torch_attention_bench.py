"""PyTorch 1.13 written-out attention baseline for bench/sdpa (run by run.sh).

out = softmax(q @ k^T * scale) @ v, f32, B=1, H=4, D=64, T=S, no mask, not
causal, dropout 0, torch.set_num_threads(2); forward under no_grad, and
forward + autograd backward (out.backward(dout)).

Each case runs in a fresh child interpreter (python3 this.py --case T mode) so
that ru_maxrss is per case: rss_delta = ru_maxrss after the timed runs minus
ru_maxrss after the inputs were created. Prints/writes lines
"T mode best_ms median_ms cpu_ms rss_delta_bytes" (wall ms per step: best and
median of the repetitions; cpu_ms: process CPU time per step).

  /usr/bin/python3 torch_attention_bench.py --out results.tsv [--T 256,1024,4096]
"""
import argparse
import resource
import subprocess
import sys
import time

B, H, D = 1, 4, 64


def reps_for(T):
    return 2 if T >= 4096 else 15 if T >= 1024 else 40


def run_case(T, mode, threads):
    import torch
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    q = torch.rand(B, H, T, D, generator=g) * 2 - 1
    k = torch.rand(B, H, T, D, generator=g) * 2 - 1
    v = torch.rand(B, H, T, D, generator=g) * 2 - 1
    dout = torch.rand(B, H, T, D, generator=g) * 2 - 1
    scale = D ** -0.5
    bwd = mode == "fwdbwd"
    if bwd:
        q.requires_grad_(True)
        k.requires_grad_(True)
        v.requires_grad_(True)

    def step():
        if bwd:
            q.grad = k.grad = v.grad = None
            out = torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1) @ v
            out.backward(dout)
        else:
            with torch.no_grad():
                torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1) @ v

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    step()  # warm-up
    reps = reps_for(T)
    c0 = time.process_time()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    c1 = time.process_time()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times.sort()
    print(f"{T} {mode} {times[0]:.3f} {times[len(times) // 2]:.3f} {(c1 - c0) / reps * 1e3:.3f} {(rss1 - rss0) * 1024}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", nargs=2)
    ap.add_argument("--T", default="256,1024,4096")
    ap.add_argument("--modes", default="fwd,fwdbwd")
    ap.add_argument("--out")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.case:
        run_case(int(a.case[0]), a.case[1], a.threads)
        return
    lines = []
    for T in [int(t) for t in a.T.split(",")]:
        for mode in a.modes.split(","):
            r = subprocess.run([sys.executable, __file__, "--case", str(T), mode, "--threads", str(a.threads)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.stderr.write(r.stderr)
                continue
            line = r.stdout.strip().splitlines()[-1]
            print("torch", line, flush=True)
            lines.append(line)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
