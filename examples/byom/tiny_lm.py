"""A small causal language model written in PyTorch, for Loom's "bring your
own model" loop (docs/user-guide.md, "Bring your own model"):

  /usr/bin/python3 tools/loom_export.py examples/byom/tiny_lm.py:build --out tiny_lm.onnx
  loom run examples/byom/tiny-lm.yaml

Byte-level (vocab 256, so it reads any text such as the fortunes corpus),
learned positions, pre-LayerNorm blocks with hand-written causal attention
(torch 1.13 has no scaled_dot_product_attention), a GELU MLP and a head tied
to the token embedding. build() returns the model and an example batch, as
tools/loom_export.py expects.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, SEQ, WIDTH, HEADS, LAYERS = 256, 64, 128, 4, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)
        self.norm2 = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, 4 * WIDTH)
        self.down = nn.Linear(4 * WIDTH, WIDTH)
        self.register_buffer("causal", torch.tril(torch.ones(SEQ, SEQ, dtype=torch.bool)))

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(c // HEADS)
        scores = scores.masked_fill(~self.causal[:t, :t], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)
        self.positions = nn.Embedding(SEQ, WIDTH)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(WIDTH)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.tokens.weight.t()  # logits [batch, seq, vocab]


def build():
    torch.manual_seed(0)
    return TinyLM(), torch.randint(0, VOCAB, (2, SEQ))
