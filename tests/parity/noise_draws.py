"""How far f32 rounding alone moves torch's final parameters, and where Loom's
runs fall among them: the evidence behind gpt_parity_test's final-gap rule.

Run a parity case with a kept temp folder, then point this at it:
  TEST_TMPDIR=/tmp/pd bazel-bin/tests/parity/gpt_parity_test --gtest_filter=*DropoutGpt
  /usr/bin/python3 tests/parity/noise_draws.py /tmp/pd/parity_gpt_* --steps 20 --draws 24

It trains torch in f32 `--draws` more times (loss scales drawn from
[0.25, 12], every second run with rows reversed), measures each run's
per-parameter gap to the case's f64 run, and prints, per parameter, Loom's
gap (loom_final/), its rank among torch's, and torch's median and largest.
Then it checks the rules on torch alone: one run against the largest of five
others, and the median of five against the largest of five others.
"""
import argparse
import os
import random
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensor_dir  # noqa: E402


def gap(v, ref):
    return ((v.double() - ref).norm() / ref.norm()).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--draws", type=int, default=24)
    ap.add_argument("--trials", type=int, default=300)
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    f64 = tensor_dir.load(os.path.join(a.dir, "f64"))
    names = sorted(k[len("final."):] for k in f64 if k.startswith("final.") and "c_attn.bias" not in k)
    rng = random.Random(1)
    runs = []
    for i in range(a.draws):
        out = os.path.join(a.dir, f"draw{i}")
        scale = round(rng.uniform(0.25, 12), 3)
        if not os.path.exists(os.path.join(out, "index.json")):
            cmd = [sys.executable, os.path.join(here, "gpt_torch.py"), "--config", os.path.join(a.dir, "cfg.json"),
                   "--weights", os.path.join(a.dir, "w"), "--batches", os.path.join(a.dir, "b"), "--out", out,
                   "--steps", str(a.steps), "--dtype", "f32", "--loss-scale", str(scale)]
            subprocess.run(cmd + (["--reverse-batch"] if i % 2 else []), check=True, capture_output=True)
        t = tensor_dir.load(out)
        runs.append({n: gap(t["final." + n], f64["final." + n]) for n in names})
    loom = tensor_dir.load(os.path.join(a.dir, "loom_final"))
    print(f"{'parameter':28s} {'loom':>10s} {'rank':>6s} {'torch med':>10s} {'torch max':>10s}")
    for n in names:
        lg, tv = gap(loom[n], f64["final." + n]), sorted(r[n] for r in runs)
        print(f"{n:28s} {lg:10.3e} {sum(v < lg for v in tv):3d}/{len(tv):<2d} {statistics.median(tv):10.3e} {tv[-1]:10.3e}")
    for label, k in (("one run", 1), ("median of five", 5)):
        over = 0
        for _ in range(a.trials):
            pick = rng.sample(range(len(runs)), k + 5)
            cand, pool = pick[:k], pick[k:]
            worst = max(statistics.median(runs[c][n] for c in cand) / max(runs[p][n] for p in pool) for n in names)
            over += worst > 2
        print(f"torch alone, {label} against the largest of five others: over 2x in {over} of {a.trials} picks")


if __name__ == "__main__":
    main()
