#!/usr/bin/python3
"""Tests of bench/cuda/model_summary.py on hand-written train_bench logs and
train_torch.py results (run by //bench/cuda:model_summary_test)."""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_summary  # noqa: E402


def loom_log(path, tps, losses, failed=False):
    with open(path, "w") as f:
        f.write(f"RESULT impl=loom_bf16_graph tokens_per_s={tps} ms_per_step=10 mfu=0.3\n")
        f.write("losses: " + " ".join(str(v) for v in losses) + "\n")
        if failed:
            f.write("vs torch_compile  loss max rel diff 3e-2 CHECK_FAILED\n")


def torch_json(path, tps, losses):
    with open(path, "w") as f:
        json.dump({"impl": "torch_compile", "tokens_per_s": tps, "ms_per_step": 12, "mfu": 0.25,
                   "losses": losses}, f)


class ModelSummaryTest(unittest.TestCase):
    def run_main(self, loom, torch):
        out = io.StringIO()
        sys.argv = ["model_summary.py", "--loom", ",".join(loom), "--torch", ",".join(torch)]
        with redirect_stdout(out):
            with self.assertRaises(SystemExit) as e:
                model_summary.main()
        return e.exception.code, out.getvalue()

    def test_spread_is_the_worst_pair_and_step(self):
        self.assertIsNone(model_summary.spread([[1.0, 2.0]]))
        self.assertAlmostEqual(model_summary.spread([[10.0, 10.0], [10.0, 11.0], [10.5, 10.0]]),
                               1.0 / 10.0)

    def test_two_rounds_print_ratio_and_spreads(self):
        with tempfile.TemporaryDirectory() as d:
            l1, l2 = os.path.join(d, "l1.txt"), os.path.join(d, "l2.txt")
            t1, t2 = os.path.join(d, "t1.json"), os.path.join(d, "t2.json")
            loom_log(l1, 1200, [11.0, 10.0])
            loom_log(l2, 1300, [11.0, 10.1])
            torch_json(t1, 1000, [11.0, 10.0])
            torch_json(t2, 900, [11.0, 10.02])
            code, out = self.run_main([l1, l2], [t1, t2])
        self.assertEqual(code, 0, out)
        self.assertIn("fastest torch mode (torch_compile): 1.300x", out)
        self.assertIn("loss spread between runs of loom_bf16_graph: 9.90e-03 (2 runs)", out)
        self.assertIn("loss spread between runs of torch_compile: 2.00e-03 (2 runs)", out)
        self.assertIn("loss check: OK", out)

    def test_a_failed_check_fails_and_one_round_has_no_spread(self):
        with tempfile.TemporaryDirectory() as d:
            l1, t1 = os.path.join(d, "l1.txt"), os.path.join(d, "t1.json")
            loom_log(l1, 1200, [11.0, 10.0], failed=True)
            torch_json(t1, 1000, [11.0, 10.0])
            code, out = self.run_main([l1], [t1])
        self.assertEqual(code, 1)
        self.assertIn("loss check: FAILED", out)
        self.assertNotIn("loss spread", out)


if __name__ == "__main__":
    unittest.main()
