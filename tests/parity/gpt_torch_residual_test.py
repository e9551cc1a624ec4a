#!/usr/bin/python3
"""gpt_torch.forward's `residual` (Loom's bf16 residual stream, a control for
GPU loss comparisons) under CPU autocast with Debian's torch: every block
sees and returns a bf16 stream, each residual add is the bf16 rounding of
the f32 sum, and the loss stays within bf16 distance of the f32 stream's."""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_torch  # noqa: E402


def params(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    P = {}
    for n, s in gpt_torch.param_shapes(cfg).items():
        if n.endswith(".weight") and len(s) == 1:
            P[n] = 1 + 0.1 * torch.randn(s, generator=g)
        else:
            P[n] = 0.05 * torch.randn(s, generator=g)
    return P


class ResidualTest(unittest.TestCase):
    def run_family(self, family):
        cfg = {"family": family, "n_layer": 3, "n_head": 4, "n_kv_head": 2 if family == "llama" else 4,
               "d_model": 32, "ffn_hidden": 64, "seq_len": 8, "vocab": 50}
        P = params(cfg, 7)
        g = torch.Generator().manual_seed(3)
        x = torch.randint(0, 50, (2, 8), generator=g)
        y = torch.randint(0, 50, (2, 8), generator=g)
        seen = []

        def wrap(f, h):
            out = f(h)
            seen.append((h.dtype, out.dtype))
            return out

        with torch.autocast("cpu", dtype=torch.bfloat16):
            _, ref = gpt_torch.loss_fn(cfg, P, x, y, wrap=wrap)
            ref_dtypes, seen[:] = list(seen), []
            _, low = gpt_torch.loss_fn(cfg, P, x, y, wrap=wrap, residual=torch.bfloat16)
        self.assertEqual(ref_dtypes, [(torch.float32, torch.float32)] * 3)
        self.assertEqual(seen, [(torch.bfloat16, torch.bfloat16)] * 3)
        rel = abs(low.item() - ref.item()) / abs(ref.item())
        self.assertLess(rel, 2e-2)
        self.assertGreater(rel, 0.0)  # the stream's rounding shows in the loss

    def test_gpt(self):
        self.run_family("gpt")

    def test_llama(self):
        self.run_family("llama")

    def test_an_add_is_rounded_once_to_bf16(self):
        cfg = {"family": "llama", "n_layer": 1, "n_head": 2, "n_kv_head": 2, "d_model": 8, "ffn_hidden": 16,
               "seq_len": 4, "vocab": 11}
        P = params(cfg, 1)
        x = torch.tensor([[1, 2, 3, 4]])
        got = {}

        def wrap(f, h):
            got["in"] = h
            got["out"] = f(h)
            return got["out"]

        with torch.autocast("cpu", dtype=torch.bfloat16):
            gpt_torch.forward(cfg, P, x, wrap=wrap, residual=torch.bfloat16)
        # The block's input is the bf16 rounding of the f32 embedding rows.
        self.assertTrue(torch.equal(got["in"], P["tok_embeddings"][x.long()].to(torch.bfloat16)))
        self.assertEqual(got["out"].dtype, torch.bfloat16)


if __name__ == "__main__":
    unittest.main()
