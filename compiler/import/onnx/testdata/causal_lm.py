"""A small causal language model exported by torch 1.13's ONNX exporter, and
PyTorch's own training of it: the reference for Loom's ONNX training test.

Two architectures, both written the way such models usually are:
  gpt:    learned token and position embeddings (positions from torch.arange),
          pre-LayerNorm blocks, a causal mask kept as a float buffer and
          applied with masked_fill, tanh-GELU MLP, dropout (p = 0: the exported
          graph keeps the Dropout node in training mode), tied embeddings
          (logits = h @ wte^T);
  rotary: GPT-J-style rotary position embeddings from an inverse-frequency
          buffer (einsum, sin, cos, tile, stepped slices, neg), erf-GELU,
          untied head; the same LayerNorm blocks otherwise.
The exported graph outputs the logits; the loss is Loom's (job spec
loss: cross_entropy against the shifted inputs) and F.cross_entropy here.

Usage: causal_lm.py --out DIR [--arch gpt|rotary] [--opset 14..17] [--steps N]
                    [--dims L,H,C,T]  (layers, heads, d_model, seq_len; default 2,4,32,8)
Writes DIR/model.onnx, DIR/x{i}.i32 and DIR/y{i}.i32 (raw int32 [B, T]) for
each step, DIR/params.txt (the parameters' names, one a line) and
DIR/losses.txt: PyTorch's loss at each of N AdamW steps (lr 1e-3, betas
(0.9, 0.95), eps 1e-8, weight decay 0.1 on matrices).
Run it with Debian's /usr/bin/python3 (torch 1.13, CPU); exits 3 when torch
cannot be imported.
"""
import argparse
import math
import os

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # the caller skips with this exit code
    raise SystemExit(3)

V, T, B, C, H, L = 64, 8, 2, 32, 4, 2


class Block(nn.Module):
    def __init__(self, arch):
        super().__init__()
        self.arch = arch
        self.ln_1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fc_out = nn.Linear(4 * C, C)
        self.drop = nn.Dropout(0.0)
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))
        if arch == "rotary":
            self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, C // H, 2).float() / (C // H))))

    def rotate(self, x):
        # GPT-J style: interleaved pairs (x[2i], x[2i+1]) rotated by t * inv_freq[i].
        t = x.shape[2]
        pos = torch.arange(t, dtype=self.inv_freq.dtype)
        freqs = torch.einsum("i,j->ij", pos, self.inv_freq)
        sin = freqs.sin().view(-1, 1).repeat(1, 2).view(t, -1)[None, None]
        cos = freqs.cos().view(-1, 1).repeat(1, 2).view(t, -1)[None, None]
        x1, x2 = x[..., ::2], x[..., 1::2]
        rot = torch.stack((-x2, x1), dim=-1).flatten(-2)
        return x * cos + rot * sin

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q = q.view(b, t, H, C // H).transpose(1, 2)
        k = k.view(b, t, H, C // H).transpose(1, 2)
        v = v.view(b, t, H, C // H).transpose(1, 2)
        if self.arch == "rotary":
            q, k = self.rotate(q), self.rotate(k)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = self.drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        approx = "tanh" if self.arch == "gpt" else "none"
        return x + self.drop(self.fc_out(F.gelu(self.fc(self.ln_2(x)), approximate=approx)))


class CausalLM(nn.Module):
    def __init__(self, arch):
        super().__init__()
        self.arch = arch
        self.wte = nn.Embedding(V, C)
        if arch == "gpt":
            self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(arch) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        if arch == "rotary":
            self.head = nn.Linear(C, V, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx)
        if self.arch == "gpt":
            x = x + self.wpe(torch.arange(0, t, dtype=torch.long))
        for blk in self.h:
            x = blk(x)
        x = self.ln_f(x)
        return x @ self.wte.weight.t() if self.arch == "gpt" else self.head(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", default="gpt", choices=["gpt", "rotary"])
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--dims", default="")
    a = ap.parse_args()
    if a.dims:
        global L, H, C, T
        L, H, C, T = (int(v) for v in a.dims.split(","))
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = CausalLM(a.arch)
    for p in model.parameters():  # GPT-2's scale: weights N(0, 0.02), LayerNorm 1 and 0 as built
        if p.dim() >= 2:
            nn.init.normal_(p, std=0.02)
    os.makedirs(a.out, exist_ok=True)
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, V, (B, T + 1), generator=g) for _ in range(a.steps)]
    torch.onnx.export(model, (seqs[0][:, :T],), os.path.join(a.out, "model.onnx"),
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      opset_version=a.opset, input_names=["input_ids"], output_names=["logits"],
                      dynamic_axes={"input_ids": {0: "batch"}, "logits": {0: "batch"}})
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for i, s in enumerate(seqs):
        x, y = s[:, :T].contiguous(), s[:, 1:].contiguous()
        x.to(torch.int32).numpy().tofile(os.path.join(a.out, f"x{i}.i32"))
        y.to(torch.int32).numpy().tofile(os.path.join(a.out, f"y{i}.i32"))
        loss = F.cross_entropy(model(x).view(-1, V), y.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with open(os.path.join(a.out, "params.txt"), "w") as f:
        f.write("\n".join(name for name, _ in model.named_parameters()) + "\n")
    with open(os.path.join(a.out, "losses.txt"), "w") as f:
        f.write("\n".join(repr(v) for v in losses) + "\n")


if __name__ == "__main__":
    main()
