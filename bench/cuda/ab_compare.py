# Compares two trees' benchmark logs (bench/cuda/ab.sh): each figure's best
# over the rounds in A's log and in B's, and B / A.
#   python3 ab_compare.py sdpa A_LOG B_LOG   # sdpa_bench RESULT lines (TFLOP/s)
#   python3 ab_compare.py gpt2 A_LOG B_LOG   # train_bench RESULT lines (tokens/s)
import re
import sys


def best(path, kind):
    out = {}
    for line in open(path, errors="replace"):
        if kind == "sdpa":
            m = re.search(r"impl=(loom_\w+) B=(\d+) H=(\d+) T=(\d+) D=(\d+) causal=(\d).*fwd_tflops=([\d.]+).*"
                          r"fwdbwd_tflops=([\d.]+)", line)
            if m:
                key = f"{m.group(1)} B{m.group(2)} H{m.group(3)} T{m.group(4)} D{m.group(5)} c{m.group(6)}"
                for name, v in (("fwd", m.group(7)), ("fwd+bwd", m.group(8))):
                    out[f"{key} {name}"] = max(out.get(f"{key} {name}", 0.0), float(v))
        else:
            m = re.search(r"RESULT impl=(loom_\S+) tokens_per_s=([\d.]+)", line)
            if m:
                out[m.group(1)] = max(out.get(m.group(1), 0.0), float(m.group(2)))
    return out


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("sdpa", "gpt2"):
        sys.exit("usage: ab_compare.py sdpa|gpt2 A_LOG B_LOG")
    kind, a, b = sys.argv[1], best(sys.argv[2], sys.argv[1]), best(sys.argv[3], sys.argv[1])
    unit = "TFLOP/s" if kind == "sdpa" else "tokens/s"
    ratios = []
    for key in a:
        if key in b and a[key] > 0:
            ratios.append(b[key] / a[key])
            print(f"{kind} {key:<48} A {a[key]:>10.1f}  B {b[key]:>10.1f} {unit}  B/A {b[key] / a[key]:.3f}")
        else:
            print(f"{kind} {key:<48} A {a[key]:>10.1f}  B missing")
    for key in b:
        if key not in a:
            print(f"{kind} {key:<48} A missing  B {b[key]:>10.1f}")
    if ratios:
        print(f"{kind}: worst B/A {min(ratios):.3f}, best {max(ratios):.3f} over {len(ratios)} figures")


if __name__ == "__main__":
    main()
