"""Summarises a job's metric points from the coordinator's dashboard API.

    api_points.py URL TOKEN_FILE

GETs URL (a /api/v1/jobs/<id>/metrics address) with the token in
TOKEN_FILE as a bearer header and prints one line per rank:
"rank R: N points, steps A..B, loss L, val_loss V, step_time_ms S" where L,
V and S count the points that carry those fields.
"""
import json
import sys
import urllib.request


def main(url, token_file):
    with open(token_file) as f:
        token = f.read().strip()
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, timeout=10) as r:
        points = json.load(r)["points"]
    by_rank = {}
    for p in points:
        by_rank.setdefault(p["rank"], []).append(p)
    for rank in sorted(by_rank):
        pts = by_rank[rank]
        steps = [p["step"] for p in pts]
        loss = sum(1 for p in pts if p["loss"] is not None)
        val = sum(1 for p in pts if p["val_loss"] is not None)
        step_time = sum(1 for p in pts if p["step_time_ms"] is not None and p["step_time_ms"] > 0)
        print("rank %d: %d points, steps %d..%d, loss %d, val_loss %d, step_time_ms %d"
              % (rank, len(pts), min(steps), max(steps), loss, val, step_time))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
