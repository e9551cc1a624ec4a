"""PyTorch reference for Loom's model families, for parity tests and benchmarks.

Written out by hand (torch 1.13 has no scaled_dot_product_attention) so every
convention is visible:
  gpt:   GPT-2: learned positions, pre-LayerNorm, tanh-GELU MLP, tied embeddings.
  llama: RMSNorm, RoPE on interleaved pairs (x[2i], x[2i+1]), SwiGLU MLP,
         grouped-query attention, untied output projection.
Linear weights are stored [in, out] (y = x @ W + b), as Loom stores them.

Usage:
  gpt_torch.py --config cfg.json --weights DIR --batches DIR --out DIR [--steps N]
               [--dtype f32|f64] [--device cpu|cuda] [--amp none|bf16] [--reverse-batch]
               [--loss-scale S]
--dtype f64 trains in double precision: the reference the parity checks measure
both Loom's and torch's own f32 final parameters against.
cfg.json: the model keys (family, n_layer, n_head, n_kv_head, d_model, seq_len,
vocab, ffn_hidden, norm_eps, rope_theta, dropout) and train keys (lr, beta1,
beta2, eps, weight_decay, grad_clip, warmup_steps, threads, seed).
With dropout > 0 the training steps draw Loom's masks (LoomDropout: the
embeddings, every residual branch and the attention probabilities, keyed by
the seed, the 1-based step and the element's row-major index); the logits
written are those of a forward without dropout (Loom's evaluation graph).
--reverse-batch trains on every batch with its rows in reverse order (and
each dropout mask's rows with them): the same training mathematically, the
sums over rows in another order; a second f32 run whose gap to the f64 run
shows how far f32 rounding alone moves the final parameters.
--loss-scale S backpropagates S x the loss and gives AdamW eps and the clip
norm S x theirs: the same updates mathematically (AdamW divides m by
sqrt(v), so only eps and the clip see the scale), with every gradient's
rounding redrawn. The gradients written are divided by S again.
Batches DIR holds x{i}, y{i} (i32 [B, T]) for i in 0..steps-1.
Writes to --out: logits and loss of batch 0 at the initial weights, grad.<name>
for every parameter, and losses (f64 [steps]) of training for --steps steps.
"""
import argparse
import json
import math
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, __import__("os").path.dirname(__file__))
import tensor_dir  # noqa: E402


def param_names(cfg):
    L = cfg["n_layer"]
    if cfg["family"] == "gpt":
        names = ["wte", "wpe"]
        for i in range(L):
            p = f"h.{i}."
            names += [p + n for n in ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                      "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"]]
        return names + ["ln_f.weight", "ln_f.bias"]
    names = ["tok_embeddings"]
    for i in range(L):
        p = f"layers.{i}."
        names += [p + n for n in ["attention_norm.weight", "attention.wq", "attention.wk", "attention.wv",
                                  "attention.wo", "ffn_norm.weight", "feed_forward.w1", "feed_forward.w3",
                                  "feed_forward.w2"]]
    return names + ["norm.weight", "output"]


def param_shapes(cfg):
    """Every parameter's shape, in param_names order (compiler/models
    Parameters): ffn_hidden 0 or absent means 4 * d_model."""
    C, V, T, H = cfg["d_model"], cfg["vocab"], cfg["seq_len"], cfg["n_head"]
    Hkv = cfg.get("n_kv_head") or H
    F_ = cfg.get("ffn_hidden") or 4 * C
    D = C // H
    by_suffix = {"wte": (V, C), "wpe": (T, C), "ln_1.weight": (C,), "ln_1.bias": (C,),
                 "attn.c_attn.weight": (C, 3 * C), "attn.c_attn.bias": (3 * C,), "attn.c_proj.weight": (C, C),
                 "attn.c_proj.bias": (C,), "ln_2.weight": (C,), "ln_2.bias": (C,), "mlp.c_fc.weight": (C, F_),
                 "mlp.c_fc.bias": (F_,), "mlp.c_proj.weight": (F_, C), "mlp.c_proj.bias": (C,),
                 "ln_f.weight": (C,), "ln_f.bias": (C,), "tok_embeddings": (V, C),
                 "attention_norm.weight": (C,), "attention.wq": (C, H * D), "attention.wk": (C, Hkv * D),
                 "attention.wv": (C, Hkv * D), "attention.wo": (H * D, C), "ffn_norm.weight": (C,),
                 "feed_forward.w1": (C, F_), "feed_forward.w3": (C, F_), "feed_forward.w2": (F_, C),
                 "norm.weight": (C,), "output": (C, V)}
    out = {}
    for n in param_names(cfg):
        parts = n.split(".")
        out[n] = by_suffix[".".join(parts[2:]) if parts[0] in ("h", "layers") else n]
    return out


M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


def dropout_seed(seed, site):
    # Site `site`'s seed: compiler/models DropoutSeed (a splitmix64 step).
    z = (seed + 0x9E3779B97F4A7C15 * (site + 1)) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def philox_bits(seed, offset, n):
    # Word i of the Philox-4x32-10 stream (seed, offset) for i < n: base/rng.h,
    # counter (block, offset), key (seed low, seed high), word i of block i / 4.
    import numpy as np  # only with dropout: the GPU parity check runs without it
    u = np.uint64
    blocks = np.arange((n + 3) // 4, dtype=np.uint64)
    c = [blocks & u(M32), blocks >> u(32), np.full_like(blocks, offset & M32), np.full_like(blocks, offset >> 32)]
    k0, k1 = seed & M32, seed >> 32
    for _ in range(10):
        p0 = u(0xD2511F53) * c[0]
        p1 = u(0xCD9E8D57) * c[2]
        c = [(p1 >> u(32)) ^ c[1] ^ u(k0), p1 & u(M32), (p0 >> u(32)) ^ c[3] ^ u(k1), p0 & u(M32)]
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return np.stack(c, axis=1).reshape(-1)[:n]


class LoomDropout:
    """Loom's dropout op (kernels/cpu/nn/dropout.cc) at Loom's model sites:
    element i of a site's tensor is kept iff Philox(DropoutSeed(seed, site),
    step).Uniform(i) >= float32(p), and kept elements are scaled by 1/(1-p).
    Sites: 0 the embeddings, 1 + 2i block i's attention output, 2 + 2i its MLP
    output, 1 + 2L + i its attention probabilities."""

    def __init__(self, p, seed, n_layer, reverse_batch=False):
        self.p, self.seed, self.n_layer, self.step = p, seed, n_layer, None
        self.reverse_batch = reverse_batch  # rows reversed: mask rows reversed with them

    def __call__(self, x, site):
        if self.step is None or self.p == 0:
            return x
        import numpy as np
        bits = philox_bits(dropout_seed(self.seed, site), self.step, x.numel())
        keep = (bits >> np.uint64(8)).astype(np.float32) * np.float32(1.0 / 16777216.0) >= np.float32(self.p)
        scale = float(np.float32(1.0 / (1.0 - self.p)))
        mask = torch.from_numpy(keep.reshape(tuple(x.shape))).to(device=x.device, dtype=x.dtype)
        if self.reverse_batch:
            mask = mask.flip(0)
        return x * (mask * scale)


def no_dropout(x, site):
    return x


def attention(q, k, v, n_head, n_kv_head, drop=no_dropout, site=0):
    # q [B, H, T, D], k/v [B, Hkv, T, D]; causal, scale 1/sqrt(D).
    rep = n_head // n_kv_head
    if rep > 1:
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    T, D = q.shape[2], q.shape[3]
    s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    s = s.masked_fill(~mask, float("-inf"))
    return drop(torch.softmax(s, dim=-1), site) @ v


def rope(x, theta):
    # x [B, T, H, D]; pairs (2i, 2i+1) rotated by t * theta^(-2i/D).
    B, T, H, D = x.shape
    inv = theta ** (-torch.arange(0, D, 2, dtype=torch.float64, device=x.device) / D)
    ang = torch.arange(T, dtype=torch.float64, device=x.device)[:, None] * inv[None, :]
    cos = ang.cos().to(x.dtype)[None, :, None, :]
    sin = ang.sin().to(x.dtype)[None, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
    return out.reshape(B, T, H, D)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def forward(cfg, P, x, drop=no_dropout, attn=attention, wrap=None, residual=None):
    """The logits of batch x; `attn` has attention's signature (a fused
    kernel in the benchmarks, bench/cuda/train_torch.py). `wrap(f, h)`, when
    given, runs each transformer block f on the residual stream h (activation
    checkpointing: torch.utils.checkpoint); None calls f(h). `residual`, when
    given (torch.bfloat16), is the residual stream's dtype: the embedding
    output and every residual add are rounded to it (so their gradients are
    stored in it too), and each norm computes in f32 from it and rounds its output
    to it (Loom's bf16 storage policy; None: the autocast rules, an f32
    stream)."""
    B, T = x.shape
    L = cfg["n_layer"]
    C, H = cfg["d_model"], cfg["n_head"]
    Hkv = cfg.get("n_kv_head") or H
    D = C // H
    eps = cfg.get("norm_eps") or 1e-5
    xl = x.long()
    run = wrap or (lambda f, h: f(h))
    stream = (lambda h: h.to(residual)) if residual is not None else (lambda h: h)
    if residual is not None:
        def norm_in_f32(f):
            return lambda h, *a: f(h.float(), *a).to(residual)
        layer_norm, rms = norm_in_f32(F.layer_norm), norm_in_f32(rmsnorm)
    else:
        layer_norm, rms = F.layer_norm, rmsnorm
    if cfg["family"] == "gpt":
        def gpt_block(i):
            p = f"h.{i}."

            def block(h):
                a = layer_norm(h, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
                qkv = a @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]
                q, k, v = qkv.split(C, dim=-1)
                q, k, v = (t.reshape(B, T, H, D).transpose(1, 2) for t in (q, k, v))
                y = attn(q, k, v, H, H, drop, 1 + 2 * L + i).transpose(1, 2).reshape(B, T, C)
                h = stream(h + drop(y @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"], 1 + 2 * i))
                m = layer_norm(h, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
                m = F.gelu(m @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"], approximate="tanh")
                return stream(h + drop(m @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"], 2 + 2 * i))
            return block

        h = stream(drop(P["wte"][xl] + P["wpe"][:T][None], 0))
        for i in range(cfg["n_layer"]):
            h = run(gpt_block(i), h)
        h = layer_norm(h, (C,), P["ln_f.weight"], P["ln_f.bias"], eps)
        return h @ P["wte"].t()
    theta = cfg.get("rope_theta") or 10000.0

    def llama_block(i):
        p = f"layers.{i}."

        def block(h):
            a = rms(h, P[p + "attention_norm.weight"], eps)
            q = rope((a @ P[p + "attention.wq"]).reshape(B, T, H, D), theta).transpose(1, 2)
            k = rope((a @ P[p + "attention.wk"]).reshape(B, T, Hkv, D), theta).transpose(1, 2)
            v = (a @ P[p + "attention.wv"]).reshape(B, T, Hkv, D).transpose(1, 2)
            y = attn(q, k, v, H, Hkv, drop, 1 + 2 * L + i).transpose(1, 2).reshape(B, T, C)
            h = stream(h + drop(y @ P[p + "attention.wo"], 1 + 2 * i))
            m = rms(h, P[p + "ffn_norm.weight"], eps)
            m = F.silu(m @ P[p + "feed_forward.w1"]) * (m @ P[p + "feed_forward.w3"])
            return stream(h + drop(m @ P[p + "feed_forward.w2"], 2 + 2 * i))
        return block

    h = stream(drop(P["tok_embeddings"][xl], 0))
    for i in range(cfg["n_layer"]):
        h = run(llama_block(i), h)
    h = rms(h, P["norm.weight"], eps)
    return h @ P["output"]


def loss_fn(cfg, P, x, y, drop=no_dropout, attn=attention, wrap=None, residual=None):
    logits = forward(cfg, P, x, drop, attn, wrap, residual)
    return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.long().reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--batches", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--loss-scale", type=float, default=1.0,
                    help="backpropagate S x the loss, with eps and the clip norm S x theirs: the same training")
    ap.add_argument("--reverse-batch", action="store_true",
                    help="rows of every batch (and dropout mask) in reverse order: the same training, other sums")
    ap.add_argument("--dtype", default="f32", choices=["f32", "f64"])
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the GPU parity check)")
    ap.add_argument("--amp", default="none", choices=["none", "bf16"],
                    help="bf16: autocast (fp32 master weights and AdamW state), as Loom's bf16 policy")
    a = ap.parse_args()
    if not a.loss_scale > 0:
        ap.error(f"--loss-scale: expected a positive factor, got {a.loss_scale}")
    dev = torch.device(a.device)
    if dev.type == "cuda":  # true fp32 GEMMs, as Loom's f32 path
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def run(cfg, P, x, y, drop=no_dropout):
        if a.amp == "none":
            return loss_fn(cfg, P, x, y, drop)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            logits, loss = loss_fn(cfg, P, x, y, drop)
        return logits, loss.float()
    cfg = json.load(open(a.config))
    torch.set_num_threads(int(cfg.get("threads", 1)))
    dt = torch.float32 if a.dtype == "f32" else torch.float64
    W = tensor_dir.load(a.weights)
    B = tensor_dir.load(a.batches)
    P = {n: W[n].to(device=dev, dtype=dt).clone().requires_grad_(True) for n in param_names(cfg)}
    B = {k: (v.flip(0).contiguous() if a.reverse_batch else v).to(dev) for k, v in B.items()}
    drop = LoomDropout(cfg.get("dropout", 0.0), cfg.get("seed", 0), cfg["n_layer"], a.reverse_batch)
    out = {}
    drop.step = 1
    logits, loss = run(cfg, P, B["x0"], B["y0"], drop)
    (loss * a.loss_scale).backward()
    if drop.p > 0:
        with torch.no_grad():
            logits, _ = run(cfg, P, B["x0"], B["y0"])
    out["logits"] = (logits.flip(0) if a.reverse_batch else logits).detach().float()
    out["loss"] = loss.detach().reshape(1).double()
    for n, p in P.items():
        out["grad." + n] = p.grad.detach().clone() / a.loss_scale
        p.grad = None
    if a.steps > 0:
        decay = [p for n, p in P.items() if p.dim() >= 2]
        no_decay = [p for n, p in P.items() if p.dim() < 2]
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.get("weight_decay", 0.0)},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg["lr"], betas=(cfg.get("beta1", 0.9), cfg.get("beta2", 0.95)), eps=cfg.get("eps", 1e-8) * a.loss_scale)
        warm = cfg.get("warmup_steps", 0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) if warm > 0 else 1.0)
        losses = []
        for s in range(a.steps):
            drop.step = s + 1
            _, loss = run(cfg, P, B[f"x{s}"], B[f"y{s}"], drop)
            opt.zero_grad()
            (loss * a.loss_scale).backward()
            if cfg.get("grad_clip", 0) > 0:
                torch.nn.utils.clip_grad_norm_(list(P.values()), cfg["grad_clip"] * a.loss_scale)
            opt.step()
            sched.step()
            losses.append(loss.item())
        out["losses"] = torch.tensor(losses, dtype=torch.float64)
        for n, p in P.items():
            out["final." + n] = p.detach()
    tensor_dir.save(a.out, {k: v.detach().cpu() for k, v in out.items()})


if __name__ == "__main__":
    main()
