"""Where a Bazel build's time went, from its JSON trace profile (--profile).

  python3 scripts/build_profile.py PROFILE [--top N]

Prints the summed duration of the actions of each kind (the first word of
the action's description: Compiling, Linking, Executing, ...) with their
count, the N slowest actions, and the length of the critical path. Reads
gzip or plain JSON. Exit status 0; 2 when the file cannot be read as a
profile.
"""
import argparse
import collections
import gzip
import json
import sys


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    data = json.loads(raw)
    return data["traceEvents"] if isinstance(data, dict) else data


def summarize(events, top):
    actions = [e for e in events if e.get("cat") == "action processing" and "dur" in e]
    kinds = collections.defaultdict(lambda: [0, 0.0])
    for e in actions:
        k = kinds[e["name"].split(" ", 1)[0]]
        k[0] += 1
        k[1] += e["dur"] / 1e6
    lines = ["build actions by kind (summed seconds, count):"]
    for name, (n, s) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"  {s:9.1f}  {n:5d}  {name}")
    lines.append(f"slowest {top} actions (seconds):")
    for e in sorted(actions, key=lambda e: -e["dur"])[:top]:
        lines.append(f"  {e['dur'] / 1e6:9.1f}  {e['name']}")
    critical = sum(e.get("dur", 0) for e in events if e.get("cat") == "critical path component") / 1e6
    lines.append(f"critical path: {critical:.1f} s")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("profile")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    try:
        events = load(a.profile)
    except (OSError, ValueError, KeyError) as err:
        print(f"build_profile: cannot read {a.profile}: {err}", file=sys.stderr)
        return 2
    print("\n".join(summarize(events, a.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
