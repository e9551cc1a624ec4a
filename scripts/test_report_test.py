#!/usr/bin/python3
"""Tests of scripts/test_report.py on hand-written build event files and test.xml files
shaped like those of Bazel 4 and GoogleTest 1.12 (run by //scripts:test_report_test)."""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_report  # noqa: E402

GTEST_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="6" failures="1" disabled="1" errors="0" time="0" name="AllTests">
  <testsuite name="M" tests="6" failures="1" disabled="1" skipped="3" errors="0" time="0">
    <testcase name="Pass" file="m.cc" line="2" status="run" result="completed" time="0" classname="M" />
    <testcase name="Fail" file="m.cc" line="3" status="run" result="completed" time="0" classname="M">
      <failure message="m.cc:3&#x0A;Expected equality" type=""><![CDATA[m.cc:3
Expected equality]]></failure>
    </testcase>
    <testcase name="Gpu" file="m.cc" line="4" status="run" result="skipped" time="0" classname="M">
      <skipped message="m.cc:4&#x0A;needs a GPU: no driver"><![CDATA[m.cc:4
needs a GPU: no driver]]></skipped>
    </testcase>
    <testcase name="Full" file="m.cc" line="5" status="run" result="skipped" time="0" classname="M">
      <skipped message="m.cc:5&#x0A;runs with --full: big mesh"><![CDATA[m.cc:5
runs with --full: big mesh]]></skipped>
    </testcase>
    <testcase name="NoTool" file="m.cc" line="6" status="run" result="skipped" time="0" classname="M">
      <skipped message="m.cc:6&#x0A;kubectl not found"><![CDATA[m.cc:6
kubectl not found]]></skipped>
    </testcase>
    <testcase name="DISABLED_Off" file="m.cc" line="7" status="notrun" result="suppressed" time="0" classname="M" />
  </testsuite>
</testsuites>
"""

PASSING_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="P" tests="2">
  <testcase name="A" status="run" result="completed" classname="P" />
  <testcase name="B" status="run" result="completed" classname="P" />
</testsuite></testsuites>
"""

# What Bazel writes for a test that wrote no XML of its own (a shell test).
BAZEL_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites>
  <testsuite name="pkg/sh_test" tests="1" failures="0" errors="%d">
    <testcase name="pkg/sh_test" status="run" duration="1" time="1">%s</testcase>
  </testsuite>
</testsuites>
"""

EMPTY_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="0" failures="0" disabled="0" errors="0" time="0" name="AllTests"></testsuites>
"""


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.events = []
        self.results = os.path.join(self.dir, "results.jsonl")

    def file(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def result(self, label, status, xml=None, shard=1, attempt=1, ms=1000, cached=False):
        outputs = [{"name": "test.log", "uri": "file://" + self.file(label.replace("/", "_") + "%d.log" % shard,
                                                                     "log of %s\n" % label)}]
        if xml is not None:
            outputs.append({"name": "test.xml", "uri": "file://" + xml})
        ev = {"id": {"testResult": {"label": label, "run": 1, "shard": shard, "attempt": attempt}},
              "testResult": {"testActionOutput": outputs, "testAttemptDurationMillis": str(ms), "status": status,
                             "executionInfo": {"strategy": "linux-sandbox"}}}
        if cached:
            ev["testResult"]["cachedLocally"] = True
        self.events.append(ev)

    def run_group(self, targets, rc=0):
        bep = self.file("bep.json", "\n".join(json.dumps(e) for e in self.events) + "\n")
        out = io.StringIO()
        with redirect_stdout(out):
            test_report.cmd_group("g", bep, rc, self.results, targets)
        text = out.getvalue()
        last = text.strip().split("\n")[-1].split()
        self.assertEqual(last[0], "counts", text)
        return tuple(int(x) for x in last[1:]), text

    def summary(self):
        out = io.StringIO()
        with redirect_stdout(out):
            test_report.cmd_summary(self.results)
        return out.getvalue()

    def test_cases_are_counted_and_only_allowed_skips_are_skips(self):
        self.result("//a:m_test", "FAILED", self.file("m.xml", GTEST_XML))
        counts, text = self.run_group(["//a:m_test"], rc=3)
        # Pass; Fail, NoTool and DISABLED_Off failed; Gpu and Full skipped.
        self.assertEqual(counts, (1, 3, 2))
        self.assertIn("M.NoTool: skipped without an allowed reason", text)
        self.assertIn("log of //a:m_test", text)
        s = self.summary()
        self.assertIn("SKIPPED //a:m_test M.Gpu: needs a GPU: no driver", s)
        self.assertIn("SKIPPED //a:m_test M.Full: runs with --full: big mesh", s)
        self.assertIn("FAILED //a:m_test M.NoTool: kubectl not found", s)
        self.assertIn("FAILED //a:m_test M.DISABLED_Off: disabled", s)
        self.assertTrue(s.strip().endswith("counts 1 3 2"), s)

    def test_shell_test_is_one_case_by_its_exit_status(self):
        self.result("//a:ok_test", "PASSED", self.file("ok.xml", BAZEL_XML % (0, "")))
        self.result("//a:bad_test", "FAILED",
                    self.file("bad.xml", BAZEL_XML % (1, '<error message="exited with error code 1"></error>')))
        counts, _ = self.run_group(["//a:ok_test", "//a:bad_test"], rc=3)
        self.assertEqual(counts, (1, 1, 0))

    def test_a_failed_target_counts_as_failed_whatever_its_xml_says(self):
        # Exit status non-zero after every case passed (e.g. a crash at exit).
        self.result("//a:exit_test", "FAILED", self.file("p.xml", PASSING_XML))
        # Timed out: no XML at all.
        self.result("//a:slow_test", "TIMEOUT", None)
        # Passed, but an XML with no case: one case by its status.
        self.result("//a:empty_test", "PASSED", self.file("e.xml", EMPTY_XML))
        counts, text = self.run_group(["//a:exit_test", "//a:slow_test", "//a:empty_test"], rc=3)
        self.assertEqual(counts, (2 + 1, 1 + 1, 0))
        self.assertIn("TIMEOUT", text)

    def test_a_target_without_result_or_one_that_did_not_build_fails(self):
        self.events.append({"id": {"targetCompleted": {"label": "//a:broken_test"}},
                            "completed": {"failureDetail": {"message": "Compiling a/broken_test.cc failed"}}})
        counts, text = self.run_group(["//a:broken_test", "//a:never_test"], rc=1)
        self.assertEqual(counts, (0, 2, 0))
        self.assertIn("FAILED_TO_BUILD", text)
        self.assertIn("NO_STATUS", text)

    def test_shards_add_up_and_the_last_attempt_counts(self):
        self.result("//a:sh_test", "PASSED", self.file("s1.xml", PASSING_XML), shard=1)
        self.result("//a:sh_test", "FAILED", self.file("s2a.xml", GTEST_XML), shard=2, attempt=1)
        self.result("//a:sh_test", "PASSED", self.file("s2b.xml", PASSING_XML), shard=2, attempt=2)
        counts, _ = self.run_group(["//a:sh_test"])
        self.assertEqual(counts, (4, 0, 0))

    def test_bazel_error_without_a_failing_target_is_a_failure(self):
        self.result("//a:ok_test", "PASSED", self.file("ok.xml", PASSING_XML), cached=True)
        self.assertEqual(self.run_group(["//a:ok_test"], rc=0)[0], (2, 0, 0))
        counts, text = self.run_group(["//a:ok_test"], rc=37)
        self.assertEqual(counts, (2, 1, 0))
        self.assertIn("exited 37", text)
        self.assertIn("(cached)", text)

    def test_unreadable_xml_of_a_passed_target_fails(self):
        self.result("//a:cut_test", "PASSED", self.file("cut.xml", GTEST_XML[:300]))
        self.assertEqual(self.run_group(["//a:cut_test"])[0], (0, 1, 0))


if __name__ == "__main__":
    unittest.main()
