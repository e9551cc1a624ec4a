#!/usr/bin/python3
"""Tests of scripts/build_profile.py on a hand-written trace profile shaped
like Bazel's (run by //scripts:build_profile_test)."""
import gzip
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_profile  # noqa: E402

EVENTS = [
    {"cat": "action processing", "name": "Compiling a/x.cc", "ph": "X", "ts": 0, "dur": 4_000_000},
    {"cat": "action processing", "name": "Compiling a/y.cc", "ph": "X", "ts": 0, "dur": 1_500_000},
    {"cat": "action processing", "name": "Linking a/t", "ph": "X", "ts": 0, "dur": 2_000_000},
    {"cat": "action processing", "name": "Executing genrule //k:nvcc", "ph": "X", "ts": 0, "dur": 9_000_000},
    {"cat": "critical path component", "name": "action 'Compiling a/x.cc'", "ph": "X", "ts": 0, "dur": 4_000_000},
    {"cat": "critical path component", "name": "action 'Linking a/t'", "ph": "X", "ts": 0, "dur": 2_000_000},
    {"cat": "general information", "name": "NoOp", "ph": "i", "ts": 0},
]


class BuildProfileTest(unittest.TestCase):
    def test_kinds_slowest_and_critical_path(self):
        lines = build_profile.summarize(EVENTS, 2)
        self.assertEqual(lines[1].split(), ["9.0", "1", "Executing"])
        self.assertEqual(lines[2].split(), ["5.5", "2", "Compiling"])
        self.assertEqual(lines[3].split(), ["2.0", "1", "Linking"])
        self.assertEqual(lines[4], "slowest 2 actions (seconds):")
        self.assertIn("Executing genrule //k:nvcc", lines[5])
        self.assertIn("Compiling a/x.cc", lines[6])
        self.assertEqual(lines[7], "critical path: 6.0 s")

    def test_reads_gzip_and_refuses_garbage(self):
        with tempfile.TemporaryDirectory() as d:
            good, bad = os.path.join(d, "p.gz"), os.path.join(d, "bad")
            with open(good, "wb") as f:
                f.write(gzip.compress(json.dumps({"traceEvents": EVENTS}).encode()))
            with open(bad, "w") as f:
                f.write("not json")
            out = io.StringIO()
            sys.argv = ["build_profile.py", good, "--top", "1"]
            with redirect_stdout(out):
                self.assertEqual(build_profile.main(), 0)
            self.assertIn("critical path: 6.0 s", out.getvalue())
            err = io.StringIO()
            sys.argv = ["build_profile.py", bad]
            with redirect_stderr(err):
                self.assertEqual(build_profile.main(), 2)
            self.assertIn("cannot read", err.getvalue())


if __name__ == "__main__":
    unittest.main()
