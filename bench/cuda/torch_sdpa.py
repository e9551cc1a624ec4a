# PyTorch's SDPA backends (flash, efficient, cudnn, math) at the shapes of
# sdpa_bench, bf16, causal and not, timed the same way (CUDA events around each
# iteration after warm-up, median): forward and forward+backward TFLOP/s with
# forward FLOPs 4 B H T^2 D (halved when causal) and forward+backward 3.5x.
# Forward+backward takes the gradients with torch.autograd.grad (no adding
# into .grad, which sdpa_bench does not do either), same iteration count.
# Two forwards: `fwd` under torch.no_grad() (inference: PyTorch computes no
# log-sum-exp), and `fwdlse` with grad mode on and inputs that require grad
# (the forward of a training step: PyTorch keeps the log-sum-exp for the
# backward). The table compares like with like: Loom's inference forward
# (sdpa_bench's fwdinf: lse not written) with the no-grad one, Loom's forward
# (lse written) with the training one.
# Each backend's output is checked against the math backend on a slice.
# With --loom=FILE (sdpa_bench's output) it prints Loom's figures beside the
# backends and the ratios to the fastest backend and to the flash backend.
#   python3 torch_sdpa.py [--iters=N] [--loom=FILE] [--prev=FILE] [--no-math] [--idle-ms=N]
#                         [--shape=B,H,T,D] [--only=flash,efficient,cudnn,math] [--table-only]
# --table-only: time nothing; print the table of --loom against --prev alone.
# --idle-ms (300): the card idles this long before every timed loop (as
# sdpa_bench --idle-ms).
# --prev=FILE: this script's output from earlier rounds; the table then uses
# each side's best figure per case over all rounds (Loom's FILE may hold
# several rounds too).
import re
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(4, 16, 4096, 128), (8, 12, 1024, 64), (2, 16, 8192, 128)]
BACKENDS = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
            ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)]


IDLE_S = 0.3  # --idle-ms: the card idles this long before each timed loop (as sdpa_bench)


def timed(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    time.sleep(IDLE_S)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    ev[0].record()
    for i in range(iters):
        fn()
        ev[i + 1].record()
    torch.cuda.synchronize()
    ms = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(iters))
    return ms[len(ms) // 2]


def read_results(path, impl_re):
    """RESULT lines of `path` whose impl matches impl_re: (impl, b, h, t, d, causal) -> (fwd, fwd+bwd,
    other fwd) TFLOP/s, the best of repeated lines. The other forward is PyTorch's training one
    (fwdlse) or Loom's inference one (fwdinf); 0 where the line has none."""
    out = {}
    for line in open(path):
        m = re.search(r"impl=" + impl_re + r" B=(\d+) H=(\d+) T=(\d+) D=(\d+) causal=(\d).*fwd_tflops=([\d.]+).*"
                      r"fwdbwd_tflops=([\d.]+)", line)
        if m:
            key = (m.group(1),) + tuple(int(x) for x in m.groups()[1:6])
            other = re.search(r"fwd(?:lse|inf)_tflops=([\d.]+)", line)
            val = (float(m.group(7)), float(m.group(8)), float(other.group(1)) if other else 0.0)
            old = out.get(key)
            out[key] = val if old is None else tuple(max(a, b) for a, b in zip(old, val))
    return out


def main():
    iters, loom_file, prev_file, math_ok, table_only = 20, None, None, True, False
    shapes, only = SHAPES, None
    for a in sys.argv[1:]:
        if a.startswith("--iters="): iters = int(a[8:])
        elif a.startswith("--loom="): loom_file = a[7:]
        elif a.startswith("--prev="): prev_file = a[7:]
        elif a == "--no-math": math_ok = False
        elif a == "--table-only": table_only = True
        elif a.startswith("--shape="):
            shapes = [tuple(int(x) for x in a[8:].split(","))]
            if len(shapes[0]) != 4:
                sys.exit(f"--shape wants B,H,T,D, got {a[8:]!r}")
        elif a.startswith("--only="):
            only = set(a[7:].split(","))
            unknown = only - {n for n, _ in BACKENDS}
            if unknown:
                sys.exit(f"--only: unknown backend(s) {sorted(unknown)}; known: {[n for n, _ in BACKENDS]}")
        elif a.startswith("--idle-ms="):
            global IDLE_S
            IDLE_S = int(a[10:]) / 1000
        else:
            sys.exit(f"unknown argument {a!r}")
    if table_only and not (loom_file and prev_file):
        sys.exit("--table-only needs --loom and --prev")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}; cudnn {torch.backends.cudnn.version()}")
    torch.manual_seed(0)
    results = {}
    for (b, h, t, d) in ([] if table_only else shapes):
        q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        dout = torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16)
        for causal in (False, True):
            flops = 4.0 * b * h * t * t * d / (2 if causal else 1)
            ref = None
            with torch.no_grad():
                qs, ks, vs = q[:1, :2].double(), k[:1, :2].double(), v[:1, :2].double()
                with sdpa_kernel(SDPBackend.MATH):
                    ref = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
            for name, be in BACKENDS:
                if name == "math" and (not math_ok or t > 4096) or (only and name not in only):
                    continue
                try:
                    with sdpa_kernel(be):
                        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        rel = ((out[:1, :2].double() - ref).norm() / ref.norm()).item()

                        def fwd():
                            with torch.no_grad():
                                F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                        def fwdlse():  # grad mode on: the log-sum-exp is kept for a backward
                            F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                        def fwdbwd():  # fresh gradients: no accumulation into .grad
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            torch.autograd.grad(o, (q, k, v), dout)

                        ms_f = timed(fwd, iters)
                        ms_fl = timed(fwdlse, iters)
                        ms_fb = timed(fwdbwd, iters)
                except Exception as e:  # a backend that does not take this shape
                    print(f"RESULT impl=torch_{name} B={b} H={h} T={t} D={d} causal={int(causal)} unavailable: "
                          f"{str(e).splitlines()[0][:100]}")
                    continue
                tf, tfb = flops / (ms_f * 1e-3) / 1e12, 3.5 * flops / (ms_fb * 1e-3) / 1e12
                tfl = flops / (ms_fl * 1e-3) / 1e12
                ok = rel < 1e-2
                results[(b, h, t, d, int(causal), name)] = (tf, tfb, tfl)
                print(f"RESULT impl=torch_{name} B={b} H={h} T={t} D={d} causal={int(causal)} fwd_ms={ms_f:.3f} "
                      f"fwd_tflops={tf:.1f} fwdbwd_ms={ms_fb:.3f} fwdbwd_tflops={tfb:.1f} fwdlse_ms={ms_fl:.3f} "
                      f"fwdlse_tflops={tfl:.1f} check_rel={rel:.2e} {'CHECK_OK' if ok else 'CHECK_FAILED'}", flush=True)
        del q, k, v, dout
        torch.cuda.empty_cache()
    if not loom_file:
        return
    # Several rounds (run_sdpa.sh alternates Loom and PyTorch): each side's
    # best figure per case over the rounds, the same rule for both.
    if prev_file:
        for key, val in read_results(prev_file, r"torch_(\w+)").items():
            key = key[1:] + (key[0],)
            old = results.get(key)
            results[key] = val if old is None else tuple(max(a, b) for a, b in zip(old, val))
    loom = read_results(loom_file, r"(loom_\w+)")
    for impl in dict.fromkeys(k[0] for k in loom):  # in the order sdpa_bench printed them
        print_table(impl, sorted((k[1:], v) for k, v in loom.items() if k[0] == impl), results)


def ratio(a, b):
    return f"{a / b:.2f}" if a > 0 and b > 0 else "-"


def print_table(impl, rows, results):
    """Loom's `impl` beside PyTorch's best backend, like with like: Loom's inference forward (no lse)
    against PyTorch's no-grad forward, Loom's forward (lse written) against PyTorch's training
    forward, and forward+backward; then Loom against PyTorch's flash backend."""
    if not rows:
        return
    print(f"\nSDPA bf16 TFLOP/s: {impl} vs PyTorch's backends. inference: Loom without lse, PyTorch under "
          f"no_grad; training fwd: both keep the log-sum-exp")
    print(f"{'shape':<22}{'causal':<7}{'loom inf|train|fwd+bwd':>24}{'best torch no-grad':>21}"
          f"{'best torch train':>19}{'best torch fwd+bwd':>21}{'ratio inf|train|f+b':>22}{'loom/flash f|f+b':>19}")
    for key, (lf, lfb, linf) in rows:
        per = {n: results.get(key + (n,)) for n, _ in BACKENDS}
        per = {n: r for n, r in per.items() if r}
        if not per:
            continue
        bf = max(per.items(), key=lambda kv: kv[1][0])
        bfl = max(per.items(), key=lambda kv: kv[1][2])
        bfb = max(per.items(), key=lambda kv: kv[1][1])
        fl = per.get("flash", (0.0, 0.0, 0.0))
        shape = f"B{key[0]} H{key[1]} T{key[2]} D{key[3]}"
        loom_s = f"{linf:.0f}|{lf:.0f}|{lfb:.0f}" if linf > 0 else f"-|{lf:.0f}|{lfb:.0f}"
        print(f"{shape:<22}{key[4]:<7}{loom_s:>24}{bf[1][0]:>14.0f} {bf[0]:<6}{bfl[1][2]:>12.0f} {bfl[0]:<6}"
              f"{bfb[1][1]:>14.0f} {bfb[0]:<6}"
              f"{ratio(linf, bf[1][0]) + '|' + ratio(lf, bfl[1][2]) + '|' + ratio(lfb, bfb[1][1]):>22}"
              f"{ratio(lf, fl[0]) + '|' + ratio(lfb, fl[1]):>19}")


if __name__ == "__main__":
    main()
