#!/usr/bin/env python3
"""Soak test of the Loom service: small jobs under random kill -9 of the
coordinator, the agents and the workers, run by hand (not in CI).

    bazel build --jobs=2 //runtime:loom
    python3 bench/service/soak.py --minutes 30 --jobs 100          # the full soak
    python3 bench/service/soak.py --minutes 4 --jobs 24 --agents 2 # a short one

It starts `loom coordinator` and N `loom agent` processes on loopback, submits
the jobs spread over the first 80% of the run (tiny GPTs, dp 1 or 2, half of
them checkpointing), and until the time is up kills, at random moments
(exponential gaps, mean --kill-every-s), one of: the coordinator (restarted on
the same port and data folder after 0.5-3 s), an agent (restarted under the
same data folder; it registers as a new agent), or one worker process. Then it
stops the chaos, waits for every job to end, and checks:
  - every submission is exactly one job (by idempotency key and by name):
    none lost, none duplicated, job ids distinct;
  - every job ended SUCCEEDED (the jobs have a restart budget of 1000), and
    its run folder's metrics.jsonl reaches the job's last step;
  - no worker process is left, and no checkpoint folder holds a .tmp leftover.
It prints a summary (also written to <root>/summary.json) and exits 0 when
every check holds, 1 otherwise. Uses only the Python standard library.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


class Cluster:
    def __init__(self, loom, root, agents, slots):
        self.loom, self.root, self.n_agents, self.slots = loom, root, agents, slots
        self.data = os.path.join(root, "coord")
        self.port = 0
        self.coord = None
        self.agents = [None] * agents
        self.kills = {"coordinator": 0, "agent": 0, "worker": 0}

    def spawn(self, argv, logname):
        out = open(os.path.join(self.root, logname), "ab")
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def start_coordinator(self):
        port_file = os.path.join(self.root, "port")
        if os.path.exists(port_file):
            os.remove(port_file)
        listen = "127.0.0.1:%d" % self.port
        self.coord = self.spawn([self.loom, "coordinator", "--data-dir", self.data, "--listen", listen,
                                 "--metrics-listen", "off", "--port-file", port_file, "--heartbeat-ms", "500",
                                 "--reclaim-grace-ms", "15000", "--data-roots", self.root], "coord.log")
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with open(port_file) as f:
                    self.port = int(f.read().split()[0])
                    return
            except (OSError, ValueError, IndexError):
                time.sleep(0.05)
        raise RuntimeError("the coordinator did not start; see coord.log")

    def start_agent(self, i):
        self.agents[i] = self.spawn([self.loom, "agent", "--coordinator", "127.0.0.1:%d" % self.port,
                                     "--token-dir", self.data, "--data-dir", os.path.join(self.root, "agent%d" % i),
                                     "--cpu-slots", str(self.slots), "--hostname", "agent%d" % i], "agent%d.log" % i)

    def cli(self, args, timeout=120):
        cmd = [self.loom] + args + ["--coordinator", "127.0.0.1:%d" % self.port, "--data-dir", self.data]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            return r.returncode, r.stdout + r.stderr
        except subprocess.TimeoutExpired:
            return 124, "timeout"

    def workers(self):
        pids = []
        for a in self.agents:
            if a is None or a.poll() is not None:
                continue
            try:
                for task in os.listdir("/proc/%d/task" % a.pid):
                    with open("/proc/%d/task/%s/children" % (a.pid, task)) as f:
                        pids += [int(p) for p in f.read().split()]
            except OSError:
                pass
        return pids

    def kill_one(self, rng):
        what = rng.choices(["coordinator", "agent", "worker"], weights=[1, 1, 2])[0]
        if what == "worker":
            pids = self.workers()
            if not pids:
                return
            pid = rng.choice(pids)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                return
            log("kill -9 worker %d" % pid)
        elif what == "coordinator":
            self.coord.kill()
            self.coord.wait()
            log("kill -9 coordinator")
            time.sleep(rng.uniform(0.5, 3))
            self.start_coordinator()
            log("coordinator restarted on port %d" % self.port)
        else:
            i = rng.randrange(self.n_agents)
            self.agents[i].kill()
            self.agents[i].wait()
            log("kill -9 agent%d" % i)
            time.sleep(rng.uniform(1, 3))
            self.start_agent(i)
        self.kills[what] += 1

    def stop(self):
        for p in self.agents + [self.coord]:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.agents + [self.coord]:
            if p is not None:
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()


def job_yaml(root, i, rng, steps):
    name = "soak-%d" % i
    dp = rng.choice([1, 2])
    lines = ["name: %s" % name,
             "model: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}",
             "train: {steps: %d, batch_size: 4, log_every: 25, eval_every: 100000}" % steps,
             "parallel: {dp: %d, backend: 'cpu:gloo'}" % dp,
             "max_restarts: 1000",
             "run_dir: %s" % os.path.join(root, "runs", name)]
    if i % 2 == 0:
        lines.append("checkpoint: {every: 50, keep: 2, dir: %s}" % os.path.join(root, "ck", name))
    path = os.path.join(root, "jobs", name + ".yaml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return name, path


def last_step(run_dir):
    last = -1
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            for line in f:
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                if "loss" in j:
                    last = max(last, j["step"])
    except OSError:
        pass
    return last


def check(cluster, submitted, steps):
    rc, out = cluster.cli(["jobs", "--json"], timeout=60)
    jobs = [json.loads(l) for l in out.splitlines() if l.startswith("{")] if rc == 0 else []
    by_name = {}
    for j in jobs:
        by_name.setdefault(j.get("name"), []).append(j)
    ids = [j["job_id"] for j in jobs]
    states = {}
    for j in jobs:
        states[j.get("state")] = states.get(j.get("state"), 0) + 1
    problems = []
    if rc != 0:
        problems.append("loom jobs failed: " + out[-500:])
    if len(set(ids)) != len(ids):
        problems.append("repeated job ids")
    lost = [n for n in submitted if n not in by_name]
    dup = [n for n, js in by_name.items() if len(js) > 1]
    extra = [n for n in by_name if n not in submitted]
    if lost:
        problems.append("lost: %s" % lost)
    if dup:
        problems.append("duplicated: %s" % dup)
    if extra:
        problems.append("unknown jobs: %s" % extra)
    restarts, restarted = 0, 0
    for name, js in by_name.items():
        j = js[0]
        restarts += int(j.get("restart_count", 0))
        restarted += int(j.get("restart_count", 0)) > 0
        if j.get("state") != "SUCCEEDED":
            problems.append("%s %s: %s" % (name, j.get("state"), j.get("root_cause", "")[:200]))
        elif last_step(os.path.join(cluster.root, "runs", name)) != steps:
            problems.append("%s SUCCEEDED but its metrics.jsonl ends at step %d" %
                            (name, last_step(os.path.join(cluster.root, "runs", name))))
    if cluster.workers():
        problems.append("worker processes left: %s" % cluster.workers())
    leftovers = []
    for dirpath, dirnames, _ in os.walk(os.path.join(cluster.root, "ck")):
        leftovers += [os.path.join(dirpath, d) for d in dirnames if d.startswith(".tmp")]
    if leftovers:
        problems.append("checkpoint .tmp leftovers: %s" % leftovers)
    return {"jobs": len(jobs), "submitted": len(submitted), "states": states, "group_restarts": restarts,
            "jobs_restarted": restarted, "problems": problems}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loom", default="bazel-bin/runtime/loom")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--agents", type=int, default=3)
    ap.add_argument("--slots", type=int, default=2, help="CPU slots per agent")
    ap.add_argument("--steps", type=int, default=600, help="training steps per job (a few seconds each)")
    ap.add_argument("--kill-every-s", type=float, default=8, help="mean seconds between kills")
    ap.add_argument("--drain-minutes", type=float, default=15, help="how long jobs may take to end after the chaos")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--root", default="")
    a = ap.parse_args()
    loom = os.path.abspath(a.loom)
    if not os.access(loom, os.X_OK):
        sys.exit("soak: %s is not an executable; bazel build //runtime:loom first" % loom)
    root = os.path.abspath(a.root or "/tmp/loom-soak-%d" % os.getpid())
    for d in ("jobs", "runs", "ck"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    rng = random.Random(a.seed)
    cluster = Cluster(loom, root, a.agents, a.slots)
    log("root %s" % root)
    cluster.start_coordinator()
    for i in range(a.agents):
        cluster.start_agent(i)
    specs = [job_yaml(root, i, rng, a.steps) for i in range(a.jobs)]
    start = time.time()
    end = start + a.minutes * 60
    gap = a.minutes * 60 * 0.8 / max(1, a.jobs)
    submitted, pending = [], list(specs)
    next_kill = start + rng.expovariate(1 / a.kill_every_s)
    try:
        while time.time() < end:
            if pending and time.time() >= start + len(submitted) * gap:
                name, path = pending[0]
                rc, out = cluster.cli(["submit", path, "--key", name, "--wait-for-capacity"])
                if rc == 0:
                    submitted.append(name)
                    pending.pop(0)
                else:
                    log("submit %s: exit %d, retried: %s" % (name, rc, out.strip()[-200:]))
            if time.time() >= next_kill:
                cluster.kill_one(rng)
                next_kill = time.time() + rng.expovariate(1 / a.kill_every_s)
            time.sleep(0.2)
        while pending:  # whatever the chaos kept from being submitted in time
            name, path = pending.pop(0)
            rc, out = cluster.cli(["submit", path, "--key", name, "--wait-for-capacity"])
            if rc == 0:
                submitted.append(name)
        log("chaos over after %.1f min: %s; waiting for the jobs to end" % ((time.time() - start) / 60, cluster.kills))
        drain_end = time.time() + a.drain_minutes * 60
        while time.time() < drain_end:
            rc, out = cluster.cli(["jobs", "--json"], timeout=60)
            live = [l for l in out.splitlines() if l.startswith("{") and
                    json.loads(l).get("state") not in ("SUCCEEDED", "FAILED", "CANCELLED")]
            if rc == 0 and not live:
                break
            time.sleep(2)
        time.sleep(2)  # agents reap the last workers
        summary = check(cluster, submitted, a.steps)
    finally:
        cluster.stop()
    summary.update({"minutes": a.minutes, "kills": cluster.kills, "agents": a.agents, "slots": a.slots,
                    "steps": a.steps, "seed": a.seed, "wall_minutes": round((time.time() - start) / 60, 1)})
    with open(os.path.join(root, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))
    sys.exit(0 if not summary["problems"] else 1)


if __name__ == "__main__":
    main()
