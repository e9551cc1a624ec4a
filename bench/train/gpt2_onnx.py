"""Loom's built-in gpt family (compiler/models: GPT-2) written as a PyTorch
module and exported by torch 1.13's ONNX exporter: the imported side of
bench/train:import_benchmark.

The structure is the built-in family's: learned token and position embeddings
(positions from torch.arange), pre-LayerNorm blocks (eps 1e-5), causal
self-attention written out (q k^T scaled by 1/sqrt(D), masked_fill(-inf) over a
tril mask, softmax, @ v), a tanh-GELU MLP of width 4 C, a final LayerNorm and
the tied head (logits = h @ wte^T); no dropout. Linear layers are nn.Linear, as
PyTorch code writes them ([out, in] weights: Loom's are [in, out]).

Usage: gpt2_onnx.py --cfg CFG.json --out MODEL.onnx [--opset N] [--weights DIR]
CFG.json: n_layer, n_head, d_model, seq_len, vocab, batch.
The model is exported in training mode with do_constant_folding=False (as a
user would export it to train) and without its weights (export_params=False:
the parameters become graph inputs named as in the state_dict); the benchmark
writes Loom's initial parameters in as initializers, so both sides start from
the same weights and a GPT-2 124M graph is a file of a few hundred KiB.
--weights DIR (tests/parity tensor_dir, Loom's names) instead exports with
those weights inside and prints the first batch's loss on them.
Run it with Debian's /usr/bin/python3 (torch 1.13, CPU); exits 3 when torch
cannot be imported.
"""
import argparse
import json
import math
import os
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    raise SystemExit(3)


class Block(nn.Module):
    def __init__(self, c, n_head, t):
        super().__init__()
        self.n_head, self.t = n_head, t
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(c, 3 * c)
        self.attn.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(c, 4 * c)
        self.mlp.c_proj = nn.Linear(4 * c, c)

    def attention(self, x):
        b, t, c = x.shape
        h, d = self.n_head, c // self.n_head
        q, k, v = self.attn.c_attn(x).split(c, dim=2)
        q = q.view(b, t, h, d).transpose(1, 2)
        k = k.view(b, t, h, d).transpose(1, 2)
        v = v.view(b, t, h, d).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        causal = torch.tril(torch.ones(self.t, self.t)).view(1, 1, self.t, self.t)
        att = att.masked_fill(causal == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.attn.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c, t = cfg["d_model"], cfg["seq_len"]
        self.t = t
        self.wte = nn.Embedding(cfg["vocab"], c)
        self.wpe = nn.Embedding(t, c)
        self.h = nn.ModuleList([Block(c, cfg["n_head"], t) for _ in range(cfg["n_layer"])])
        self.ln_f = nn.LayerNorm(c, eps=1e-5)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(0, self.t, dtype=torch.long))
        for blk in self.h:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.t()


def load_loom_weights(model, path):
    """Loom's gpt parameters (names of compiler/models, [in, out] matrices)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "parity"))
    import tensor_dir  # noqa: E402
    w = tensor_dir.load(path)
    sd = {}
    for name, t in w.items():
        if name in ("wte", "wpe"):
            sd[name + ".weight"] = t
        elif name.endswith(".weight") and t.dim() == 2:  # Loom's [in, out] -> nn.Linear's [out, in]
            sd[name] = t.t().contiguous()
        else:
            sd[name] = t
    model.load_state_dict(sd, strict=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cfg", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--opset", type=int, default=14)
    ap.add_argument("--weights", default="")
    a = ap.parse_args()
    cfg = json.load(open(a.cfg))
    torch.manual_seed(0)
    model = GPT(cfg)
    if a.weights:
        load_loom_weights(model, a.weights)
    idx = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq_len"]), generator=torch.Generator().manual_seed(1))
    # The trace needs no autograd record: without it each block's activations
    # are freed as the trace moves on (GPT-2 124M at B16 T1024 traces in a few
    # GiB instead of holding every layer's T x T attention).
    with torch.no_grad():
        torch.onnx.export(model, (idx,), a.out, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          opset_version=a.opset, input_names=["input_ids"], output_names=["logits"],
                          export_params=bool(a.weights))
    n = sum(p.numel() for p in model.parameters())
    print(json.dumps({"onnx": a.out, "bytes": os.path.getsize(a.out), "parameters": n}))


if __name__ == "__main__":
    main()
