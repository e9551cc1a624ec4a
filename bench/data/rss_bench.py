#!/usr/bin/python3
"""Memory and start time of `loom train` against the size of its dataset.

Writes a token dataset of llm.c shards (256 int32 header: magic 20240520,
version 1, token count; then u16 ids drawn uniformly below the model's vocab)
for each size asked, runs `loom train` on it with a tiny GPT for 200 steps,
and samples the trainer process's /proc/<pid>/status every 20 ms. Reports, per
dataset: RssAnon when step 200 is logged and its peak over the run, RssFile
at step 200, the time from launch to the data line and to step 1, and the
difference in RssAnon against the smallest dataset.

  /usr/bin/python3 bench/data/rss_bench.py --loom bazel-bin/runtime/loom \
      --sizes-mib 10,2048 --dir /tmp/loom-data-bench

The shards are removed afterwards unless --keep.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import numpy as np

MAGIC, VERSION = 20240520, 1
SHARD_TOKENS = 128 << 20  # 256 MiB of u16 ids per shard


def write_shards(folder, total_bytes, vocab, seed):
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    tokens_left = total_bytes // 2
    k = 0
    while tokens_left > 0:
        n = min(tokens_left, SHARD_TOKENS)
        header = np.zeros(256, dtype="<i4")
        header[0], header[1], header[2] = MAGIC, VERSION, n
        with open(os.path.join(folder, "train_%03d.bin" % k), "wb") as f:
            f.write(header.tobytes())
            done = 0
            while done < n:
                m = min(n - done, 16 << 20)
                f.write(rng.integers(0, vocab, size=m, dtype=np.uint16).astype("<u2").tobytes())
                done += m
        tokens_left -= n
        k += 1
    return k


def status_kib(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def run(loom, job, steps):
    t0 = time.monotonic()
    p = subprocess.Popen([loom, "train", job], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                         bufsize=1)
    peak = [0]
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            v = status_kib(p.pid, "RssAnon")
            if v is not None:
                peak[0] = max(peak[0], v)
            time.sleep(0.02)

    threading.Thread(target=poll, daemon=True).start()
    out = {"data_s": None, "first_step_s": None, "anon_at_last": None, "file_at_last": None}
    log = []
    for line in p.stdout:
        log.append(line)
        now = time.monotonic() - t0
        if line.startswith("data:") and out["data_s"] is None:
            out["data_s"] = now
        if re.match(r"step 1/", line) and out["first_step_s"] is None:
            out["first_step_s"] = now
        if line.startswith("step %d/%d" % (steps, steps)):
            out["anon_at_last"] = status_kib(p.pid, "RssAnon")
            out["file_at_last"] = status_kib(p.pid, "RssFile")
    code = p.wait()
    stop.set()
    if code != 0:
        sys.stderr.write("".join(log))
        raise SystemExit("loom train exited %d" % code)
    out["peak_anon"] = peak[0]
    out["data_line"] = next((l.strip() for l in log if l.startswith("data:")), "")
    out["bigram_line"] = next((l.strip() for l in log if l.startswith("bigram")), "")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", default="bazel-bin/runtime/loom")
    ap.add_argument("--sizes-mib", default="10,2048")
    ap.add_argument("--dir", default="/tmp/loom-data-bench")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    rows = []
    for mib in [int(s) for s in a.sizes_mib.split(",")]:
        folder = os.path.join(a.dir, "%dmib" % mib)
        if not os.path.isdir(folder):
            t = time.monotonic()
            shards = write_shards(folder, mib << 20, a.vocab, seed=mib)
            print("wrote %d MiB in %d llm.c shards (%.1f s)" % (mib, shards, time.monotonic() - t), flush=True)
        job = os.path.join(a.dir, "job_%dmib.yaml" % mib)
        with open(job, "w") as f:
            f.write("name: data-bench-%d\n" % mib)
            f.write("model: {family: gpt, n_layer: 1, n_head: 2, d_model: 64, seq_len: 64, vocab: %d}\n" % a.vocab)
            f.write("data: {path: '%s/train_*.bin', format: llmc, val_fraction: 0.01}\n" % folder)
            f.write("train: {steps: %d, batch_size: 8, eval_every: 100, eval_batches: 4, log_every: 1, "
                    "sample_tokens: 8}\n" % a.steps)
            f.write("run_dir: %s/run_%dmib\n" % (a.dir, mib))
        r = run(a.loom, job, a.steps)
        r["mib"] = mib
        rows.append(r)
        print("%6d MiB: RssAnon %.1f MiB at step %d (peak %.1f), RssFile %.1f MiB; data line after %.2f s, "
              "step 1 after %.2f s" % (mib, r["anon_at_last"] / 1024, a.steps, r["peak_anon"] / 1024,
                                       r["file_at_last"] / 1024, r["data_s"], r["first_step_s"]), flush=True)
        print("        " + r["data_line"])
        print("        " + r["bigram_line"], flush=True)
    base = rows[0]
    for r in rows[1:]:
        print("RssAnon at step %d: %d MiB dataset minus %d MiB dataset = %+.1f MiB (peak %+.1f MiB)" %
              (a.steps, r["mib"], base["mib"], (r["anon_at_last"] - base["anon_at_last"]) / 1024,
               (r["peak_anon"] - base["peak_anon"]) / 1024))
    if not a.keep:
        shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
