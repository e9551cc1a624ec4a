"""The best-of-N summary of bench/cuda/run_model.sh: Loom's RESULT lines
(train_bench logs, one per round) and PyTorch's JSON results (train_torch.py,
one per mode and round), each implementation's best tokens/s over the rounds,
and Loom's ratio to the faster PyTorch mode (eager is listed, never the one
compared against while a compiled mode has a result). With two rounds or
more it also prints each implementation's loss spread between its runs.

  python3 model_summary.py --loom R1.txt,R2.txt --torch a.json,b.json,...

Exit status 1 when a Loom log has no RESULT line or says CHECK_FAILED (its
losses did not track PyTorch's), or no Loom or no PyTorch result exists; 2 on
bad flags.
"""
import argparse
import json
import os
import re
import sys


def loom_results(paths):
    """(results, failures, curves): each RESULT line's fields, why a log
    failed, and {impl: [each log's 'losses:' line]}."""
    results, failures, curves = [], [], {}
    for p in paths:
        text = open(p, errors="replace").read() if os.path.isfile(p) else ""
        found = re.findall(r"^RESULT (.*)$", text, re.M)
        if not found:
            failures.append(f"{p}: no RESULT line")
        for line in found:
            results.append(dict(kv.split("=", 1) for kv in line.split() if "=" in kv))
        if "CHECK_FAILED" in text:
            failures.append(f"{p}: the loss check failed (CHECK_FAILED)")
        losses = re.search(r"^losses:(.*)$", text, re.M)
        if found and losses:
            impl = results[-1].get("impl", "loom")
            curves.setdefault(impl, []).append([float(v) for v in losses.group(1).split()])
    return results, failures, curves


def spread(curves):
    """The largest relative difference between two runs' losses at the same
    step, over every pair of runs and every step both have; None for fewer
    than two runs."""
    if len(curves) < 2:
        return None
    worst = 0.0
    for i in range(len(curves)):
        for j in range(i + 1, len(curves)):
            for a, b in zip(curves[i], curves[j]):
                worst = max(worst, abs(a - b) / max(abs(b), 1e-12))
    return worst


def print_spreads(loom_curves, torch_rows):
    """Each implementation's run-to-run loss spread (its own noise, the scale
    the loss check's tolerance is read against)."""
    curves = dict(loom_curves)
    for r in torch_rows:
        if r.get("losses"):
            curves.setdefault(r["impl"], []).append([float(v) for v in r["losses"]])
    for impl, c in sorted(curves.items()):
        s = spread(c)
        if s is not None:
            print(f"loss spread between runs of {impl}: {s:.2e} ({len(c)} runs)")


def best_by_impl(rows):
    best = {}
    for r in rows:
        if r["impl"] not in best or float(r["tokens_per_s"]) > float(best[r["impl"]]["tokens_per_s"]):
            best[r["impl"]] = r
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", required=True, help="train_bench logs, comma-separated")
    ap.add_argument("--torch", default="", help="train_torch.py --out files, comma-separated (missing ones are skipped)")
    a = ap.parse_args()
    loom, failures, loom_curves = loom_results([p for p in a.loom.split(",") if p])
    torch_rows = []
    for p in [p for p in a.torch.split(",") if p]:
        if os.path.isfile(p) and os.path.getsize(p) > 0:
            torch_rows.append(json.load(open(p)))
    if not loom:
        failures.append("no Loom result")
    lb, tb = best_by_impl(loom), best_by_impl(torch_rows)
    n_rounds = len([p for p in a.loom.split(",") if p])
    print(f"== best of {n_rounds} rounds (tokens/s, ms/step, MFU)")
    for impl, r in list(lb.items()) + list(tb.items()):
        runs = sum(1 for x in loom + torch_rows if x["impl"] == impl)
        print(f"{impl:<36} {float(r['tokens_per_s']):>12,.0f}  {float(r['ms_per_step']):>9.2f} ms  "
              f"mfu {float(r['mfu']):.3f}  ({runs} runs)")
    compiled = {k: v for k, v in tb.items() if not k.startswith("torch_eager")} or tb
    if not compiled:
        failures.append("no PyTorch result")
    if lb and compiled:
        li, lr = max(lb.items(), key=lambda kv: float(kv[1]["tokens_per_s"]))
        ti, tr = max(compiled.items(), key=lambda kv: float(kv[1]["tokens_per_s"]))
        print(f"{li} / fastest torch mode ({ti}): {float(lr['tokens_per_s']) / float(tr['tokens_per_s']):.3f}x")
    print_spreads(loom_curves, torch_rows)
    for f in failures:
        print(f"FAILED: {f}")
    print(f"loss check: {'FAILED' if any('CHECK_FAILED' in f for f in failures) else 'OK'} "
          f"({len(loom)} Loom runs against the PyTorch results of their round)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
