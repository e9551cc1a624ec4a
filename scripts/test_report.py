#!/usr/bin/python3
"""Test-case accounting for scripts/test.sh (Debian's python3, standard library only).

    test_report.py group NAME BEP RC RESULTS TARGET...
        Reads one `bazel test` run of the group NAME: the build event file BEP
        (--build_event_json_file) and Bazel's exit status RC. For each TARGET it
        prints one line (status, its cases, time) and, when it failed, the failing
        cases and the end of its log; appends one JSON record per target to the
        file RESULTS. Last line: "counts P F S" for the group.
    test_report.py summary RESULTS
        Lists every skipped case with its reason, every skip counted as a failure,
        every failed target, and the slowest targets. Last line: "counts P F S".

Counting, per target and per shard:
  - the cases are the <testcase> elements of the shard's test.xml (gtest writes
    them; for a shell test Bazel writes one case named after the target);
  - a case with <failure> or <error> failed; a case with result="skipped", a
    <skipped> element or status="notrun" (DISABLED_) skipped; any other passed;
  - a skipped case counts as skipped only when its reason (the GTEST_SKIP
    message) starts with one of ALLOWED_SKIPS; otherwise it counts as failed;
  - a shard whose test.xml holds no case counts as one case, passed when Bazel
    says the shard passed;
  - a shard Bazel reports as not passed (failed, timed out, crashed, or not
    built) with no failing case in its XML counts one more failed case, so a
    failing target can never read as passed; a target with no result at all
    (it did not build, or Bazel stopped) counts as one failed case;
  - Bazel exiting non-zero with no failed target in the group counts one failed
    case for the group.
"""
import json
import os
import sys
import urllib.parse
import xml.etree.ElementTree as ET

ALLOWED_SKIPS = ("needs a GPU", "runs with --full")
LOG_TAIL = 30
DETAIL_LINES = 16  # of a failure's message, each cut to DETAIL_LINE_CHARS
DETAIL_LINE_CHARS = 600
SANDBOX_NOISE = "src/main/tools/linux-sandbox"  # Bazel's sandbox debug lines in test logs


def uri_path(uri):
    return urllib.parse.unquote(urllib.parse.urlparse(uri).path)


def read_bep(path):
    """{label: {"shards": {(run, shard): result}, "summary": status}}."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # a line cut short when Bazel stopped
            ident = ev.get("id", {})
            if "testResult" in ident and "testResult" in ev:
                i = ident["testResult"]
                t = out.setdefault(i["label"], {"shards": {}, "summary": None})
                key = (i.get("run", 1), i.get("shard", 1))
                attempt = i.get("attempt", 1)
                prev = t["shards"].get(key)
                if prev is None or prev["attempt"] <= attempt:
                    r = ev["testResult"]
                    files = {o["name"]: uri_path(o["uri"]) for o in r.get("testActionOutput", []) if "uri" in o}
                    t["shards"][key] = {
                        "attempt": attempt,
                        "status": r.get("status", "NO_STATUS"),
                        "cached": bool(r.get("cachedLocally") or r.get("executionInfo", {}).get("cachedRemotely")
                                       or "cache" in r.get("executionInfo", {}).get("strategy", "")),
                        "ms": int(r.get("testAttemptDurationMillis", 0)),
                        "xml": files.get("test.xml"),
                        "log": files.get("test.log"),
                    }
            elif "testSummary" in ident and "testSummary" in ev:
                t = out.setdefault(ident["testSummary"]["label"], {"shards": {}, "summary": None})
                t["summary"] = ev["testSummary"].get("overallStatus")
            elif "targetCompleted" in ident and ev.get("aborted"):
                t = out.setdefault(ident["targetCompleted"]["label"], {"shards": {}, "summary": None})
                t["summary"] = t["summary"] or "ABORTED: " + ev["aborted"].get("description", "").strip()
            elif "targetCompleted" in ident and "completed" in ev and not ev["completed"].get("success", False):
                # proto3 JSON leaves out success=false
                t = out.setdefault(ident["targetCompleted"]["label"], {"shards": {}, "summary": None})
                detail = ev["completed"].get("failureDetail", {}).get("message", "").strip().split("\n")[0]
                t["summary"] = t["summary"] or "FAILED_TO_BUILD: " + detail
    return out


def skip_reason(case):
    """The GTEST_SKIP message: gtest writes "file:line\\nmessage"."""
    el = case.find("skipped")
    text = ""
    if el is not None:
        text = el.get("message") or el.text or ""
    lines = text.split("\n", 1)
    if len(lines) == 2 and ":" in lines[0] and " " not in lines[0]:
        text = lines[1]
    text = text.strip()
    if not text and case.get("status") == "notrun":
        text = "disabled (DISABLED_ prefix)"
    return text or "(no reason given)"


def failure_text(case):
    for tag in ("failure", "error"):
        el = case.find(tag)
        if el is not None:
            return (el.get("message") or el.text or tag).strip()
    return ""


def read_cases(xml_path):
    """[(name, outcome, detail)]; raises on a missing or unreadable file."""
    root = ET.parse(xml_path).getroot()
    cases = []
    for c in root.iter("testcase"):
        cls, name = c.get("classname"), c.get("name", "?")
        full = "%s.%s" % (cls, name) if cls else name
        if c.find("failure") is not None or c.find("error") is not None:
            cases.append((full, "failed", failure_text(c)))
        elif c.get("result") == "skipped" or c.find("skipped") is not None or c.get("status") == "notrun":
            cases.append((full, "skipped", skip_reason(c)))
        else:
            cases.append((full, "passed", ""))
    return cases


def shard_cases(label, key, shard, nshards):
    """Cases of one shard under the rules in the module docstring."""
    where = label if nshards == 1 else "%s (shard %d)" % (label, key[1])
    passed = shard["status"] == "PASSED"
    try:
        cases = read_cases(shard["xml"]) if shard["xml"] else []
    except (OSError, ET.ParseError) as e:
        cases = []
        if passed:
            cases.append((where, "failed", "test.xml unreadable: %s" % e))
    if not cases:
        cases.append((where, "passed" if passed else "failed", "" if passed else "Bazel: " + shard["status"]))
    elif not passed and not any(o == "failed" for _, o, _ in cases):
        cases.append((where, "failed", "Bazel: %s after its cases ran" % shard["status"]))
    return cases


def target_record(group, label, info):
    rec = {"group": group, "target": label, "passed": 0, "failed": 0, "skipped": 0, "seconds": 0.0,
           "cached": False, "status": "PASSED", "skips": [], "bad_skips": [], "failures": [], "logs": []}
    shards = info["shards"] if info else {}
    if not shards:
        why = (info or {}).get("summary") or "NO_STATUS: no test result (not built, or Bazel stopped first)"
        rec["status"] = why.split(":")[0]
        rec["failed"] = 1
        rec["failures"].append([label, "Bazel: " + why])
        return rec
    rec["cached"] = all(s["cached"] for s in shards.values())
    for key in sorted(shards):
        s = shards[key]
        rec["seconds"] += s["ms"] / 1000.0
        if s["status"] != "PASSED":
            rec["status"] = s["status"]
        for name, outcome, detail in shard_cases(label, key, s, len(shards)):
            if outcome == "skipped" and not detail.startswith(ALLOWED_SKIPS):
                rec["bad_skips"].append([name, detail])
                outcome = "failed"
                detail = "skipped without an allowed reason (%s): %s" % (" / ".join(ALLOWED_SKIPS), detail)
            elif outcome == "skipped":
                rec["skips"].append([name, detail])
            if outcome == "failed":
                rec["failures"].append([name, detail])
                if s["log"]:
                    rec["logs"].append(s["log"])
            rec[outcome] += 1
    if rec["failed"] and rec["status"] == "PASSED":
        rec["status"] = "FAILED"
    rec["logs"] = sorted(set(rec["logs"]))
    return rec


def print_target(rec):
    print("%-15s %-60s %3d passed, %d failed, %d skipped  %6.1fs%s" % (
        rec["status"], rec["target"], rec["passed"], rec["failed"], rec["skipped"], rec["seconds"],
        " (cached)" if rec["cached"] else ""))
    for name, detail in rec["failures"]:
        lines = [x.strip()[:DETAIL_LINE_CHARS] for x in detail.strip().split("\n") if x.strip()]
        print("    FAILED %s: %s" % (name, " | ".join(lines[:DETAIL_LINES])))
    for log in rec["logs"]:
        print("    ---- last %d lines of %s" % (LOG_TAIL, log))
        try:
            with open(log, errors="replace") as f:
                kept = [line for line in f.readlines() if SANDBOX_NOISE not in line]
                for line in kept[-LOG_TAIL:]:
                    print("    " + line.rstrip("\n"))
        except OSError as e:
            print("    (cannot read: %s)" % e)


def cmd_group(name, bep, rc, results, targets):
    info = read_bep(bep)
    recs = [target_record(name, t, info.get(t)) for t in targets]
    if rc != 0 and not any(r["failed"] for r in recs):
        recs.append({"group": name, "target": "bazel test (%s)" % name, "passed": 0, "failed": 1, "skipped": 0,
                     "seconds": 0.0, "cached": False, "status": "BAZEL EXIT %d" % rc, "skips": [], "bad_skips": [],
                     "failures": [["bazel test", "exited %d with no failing target" % rc]], "logs": []})
    with open(results, "a") as f:
        for r in recs:
            print_target(r)
            f.write(json.dumps(r) + "\n")
    print("counts %d %d %d" % tuple(sum(r[k] for r in recs) for k in ("passed", "failed", "skipped")))


def cmd_summary(results):
    recs = []
    if os.path.exists(results):
        with open(results) as f:
            recs = [json.loads(line) for line in f if line.strip()]
    skips = [(r["target"], n, d) for r in recs for n, d in r["skips"]]
    print("Skipped cases: %d" % len(skips))
    for t, n, d in skips:
        print("  SKIPPED %s %s: %s" % (t, n, d))
    bad = [(r["target"], n, d) for r in recs for n, d in r["bad_skips"]]
    if bad:
        print("Skips counted as failures (the reason must start with %s): %d" %
              (" or ".join('"%s"' % a for a in ALLOWED_SKIPS), len(bad)))
        for t, n, d in bad:
            print("  FAILED %s %s: %s" % (t, n, d))
    failed = [r for r in recs if r["failed"]]
    if failed:
        print("Failed targets: %d" % len(failed))
        for r in failed:
            print("  FAILED %s (%s): %d case(s)" % (r["target"], r["status"], r["failed"]))
    ran = sorted((r for r in recs if not r["cached"]), key=lambda r: -r["seconds"])[:12]
    if ran:
        print("Slowest targets this run (seconds; shards summed):")
        for r in ran:
            print("  %7.1f  %s" % (r["seconds"], r["target"]))
    print("counts %d %d %d" % tuple(sum(r[k] for r in recs) for k in ("passed", "failed", "skipped")))


def main(argv):
    if len(argv) >= 6 and argv[1] == "group":
        try:
            rc = int(argv[4])
        except ValueError:
            rc = 1
        cmd_group(argv[2], argv[3], rc, argv[5], argv[6:])
        return 0
    if len(argv) == 3 and argv[1] == "summary":
        cmd_summary(argv[2])
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
