"""PyTorch side of the GPT-2 124M training benchmark on one GPU.

Runs on the GPU machine (torch 2.x with CUDA). The model is Loom's GPT
(tests/parity/gpt_torch.py conventions: weights stored [in, out], pre-LayerNorm,
tanh GELU, tied embeddings), trained with bf16 autocast, fp32 master weights,
AdamW and gradient clipping at 1.0, on random token ids.

  gpt2_torch.py --init DIR        # writes weights + batches (tensor_dir format) for Loom
  gpt2_torch.py --data DIR --mode eager|compile|compile-ro [--sdpa default|cudnn|flash] --out F.json

Modes:
  eager       the model and a fused AdamW, eagerly.
  compile     torch.compile(model) (default mode); clipping and the fused
              AdamW step eagerly.
  compile-ro  the whole step compiled with CUDA graphs: torch.compile(model,
              mode="reduce-overhead") for the forward and backward, and the
              update (gradient clipping + AdamW, foreach with capturable=True so
              its state lives on the GPU) as one function compiled with
              mode="reduce-overhead" too. Gradients are zeroed, not freed,
              between steps (zero_grad(set_to_none=False)) so that their
              addresses stay fixed for the captured update.
If a compile-ro configuration raises during the warm-up steps (a part that does
not compile, or a CUDA-graph replay that fails), training starts again from the
initial weights under the next one (RO_CONFIGS: cudagraph trees off; the update
in the default compile mode; the model too; the model in the default mode with
the eager fused AdamW). Each reason is printed to stderr ("FALLBACK ..."), listed
in the JSON's "fallback", and the "impl" gets a "_fallback" suffix.

Each run prints and writes one JSON object: tokens/s over the timed steps, the
per-step losses (all steps, warm-up included), MFU, and the SDPA backend used.
Both sides train on the same weights and the same batch sequence, so Loom's
losses can be checked against these.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "parity"))
import tensor_dir  # noqa: E402

CFG = dict(n_layer=12, n_head=12, d_model=768, seq_len=1024, vocab=50304, batch=16,
           lr=3e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0)


def param_shapes(c):
    C, L = c["d_model"], c["n_layer"]
    shapes = {"wte": (c["vocab"], C), "wpe": (c["seq_len"], C)}
    for i in range(L):
        p = f"h.{i}."
        shapes.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
                       p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
                       p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                       p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                       p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
                       p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
    shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    return shapes


def init(c, out, steps):
    g = torch.Generator().manual_seed(1234)
    W = {}
    for n, s in param_shapes(c).items():
        if n.endswith(".weight") and len(s) == 1:
            W[n] = torch.ones(s)
        elif n.endswith(".bias"):
            W[n] = torch.zeros(s)
        else:
            std = 0.02 / math.sqrt(2 * c["n_layer"]) if n.endswith("c_proj.weight") else 0.02
            W[n] = torch.randn(s, generator=g) * std
    tensor_dir.save(os.path.join(out, "weights"), W)
    B = {}
    for i in range(steps):
        B[f"x{i}"] = torch.randint(0, c["vocab"], (c["batch"], c["seq_len"]), generator=g, dtype=torch.int32)
        B[f"y{i}"] = torch.randint(0, c["vocab"], (c["batch"], c["seq_len"]), generator=g, dtype=torch.int32)
    tensor_dir.save(os.path.join(out, "batches"), B)


class GPT(torch.nn.Module):
    def __init__(self, c, W):
        super().__init__()
        self.c = c
        self.p = torch.nn.ParameterDict({n.replace(".", "_"): torch.nn.Parameter(t.clone()) for n, t in W.items()})

    def forward(self, x, y):
        c, P = self.c, self.p
        B, T = x.shape
        C, H = c["d_model"], c["n_head"]
        h = P["wte"][x] + P["wpe"][:T]
        for i in range(c["n_layer"]):
            p = f"h_{i}_"
            a = F.layer_norm(h, (C,), P[p + "ln_1_weight"], P[p + "ln_1_bias"], 1e-5)
            # F.linear on the transposed [in, out] weight: one cuBLAS GEMM with the
            # bias in its epilogue (addmm), as nn.Linear does.
            qkv = F.linear(a, P[p + "attn_c_attn_weight"].t(), P[p + "attn_c_attn_bias"])
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=-1))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
            h = h + F.linear(o, P[p + "attn_c_proj_weight"].t(), P[p + "attn_c_proj_bias"])
            m = F.layer_norm(h, (C,), P[p + "ln_2_weight"], P[p + "ln_2_bias"], 1e-5)
            m = F.gelu(F.linear(m, P[p + "mlp_c_fc_weight"].t(), P[p + "mlp_c_fc_bias"]), approximate="tanh")
            h = h + F.linear(m, P[p + "mlp_c_proj_weight"].t(), P[p + "mlp_c_proj_bias"])
        h = F.layer_norm(h, (C,), P["ln_f_weight"], P["ln_f_bias"], 1e-5)
        logits = F.linear(h, P["wte"])
        # autocast runs cross_entropy in f32 (its fp32 op list), as nanoGPT relies on.
        return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))


def sdpa_context(name):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if name == "cudnn":
        return sdpa_kernel([SDPBackend.CUDNN_ATTENTION])
    if name == "flash":
        return sdpa_kernel([SDPBackend.FLASH_ATTENTION])
    import contextlib
    return contextlib.nullcontext()


def param_groups(model, c):
    decay = [p for n, p in model.p.items() if p.dim() >= 2]
    no_decay = [p for n, p in model.p.items() if p.dim() < 2]
    return [{"params": decay, "weight_decay": c["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]


# compile-ro's configurations, best first: (name, whole-step CUDA graphs,
# cudagraph trees, model compile mode, update compile mode or None for the
# eager fused AdamW).
RO_CONFIGS = [
    ("model and update with mode=reduce-overhead", True, "reduce-overhead", "reduce-overhead"),
    ("model and update with mode=reduce-overhead, cudagraph trees off", False, "reduce-overhead", "reduce-overhead"),
    ("model with mode=reduce-overhead, update with the default mode", True, "reduce-overhead", "default"),
    ("model and update with the default mode", True, "default", "default"),
    ("model with the default mode, eager fused AdamW update", True, "default", None),
]


class CompiledStep:
    """compile-ro's training step under configuration RO_CONFIGS[index]: the
    model compiled with its mode (CUDA graphs with reduce-overhead), and
    clipping plus a capturable foreach AdamW compiled as one function."""

    def __init__(self, c, model, eager_fused_update, index):
        name, trees, model_mode, update_mode = RO_CONFIGS[index]
        torch._dynamo.reset()
        torch._inductor.config.triton.cudagraph_trees = trees
        self.name = name
        self.params = list(model.parameters())
        opt = torch.optim.AdamW(param_groups(model, c), lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"],
                                foreach=True, capturable=True)

        def update():
            torch.nn.utils.clip_grad_norm_(self.params, c["grad_clip"], foreach=True)
            opt.step()

        self.fwd = torch.compile(model, mode=model_mode)
        self.update = torch.compile(update, mode=update_mode) if update_mode else eager_fused_update

    def __call__(self, x, y):
        torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = self.fwd(x, y)
        loss.backward()
        self.update()
        torch._foreach_zero_([p.grad for p in self.params if p.grad is not None])  # fixed grad addresses
        return loss.detach().clone()  # a CUDA-graph output is overwritten by the next replay


def make_step(c, model, mode, ro_index=0):
    """The training step (forward, backward, clipping, AdamW) of `mode` (for
    compile-ro, under RO_CONFIGS[ro_index]): a function of (x, y) returning
    the loss."""
    params = list(model.parameters())
    fused = []

    def eager_fused_update():
        if not fused:
            fused.append(torch.optim.AdamW(param_groups(model, c), lr=c["lr"], betas=(c["beta1"], c["beta2"]),
                                           eps=c["eps"], fused=True))
        torch.nn.utils.clip_grad_norm_(params, c["grad_clip"])
        fused[0].step()

    if mode == "compile-ro":
        return CompiledStep(c, model, eager_fused_update, ro_index)
    fwd = torch.compile(model) if mode == "compile" else model

    def step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        eager_fused_update()
        for p in params:
            p.grad = None  # zero_grad(set_to_none=True)
        return loss.detach()

    return step


def train(c, W, xs, ys, mode, sdpa, warmup, steps, ro_index=0):
    """Trains a fresh model from W for warmup + steps steps; returns the
    losses, the timed seconds and the parameter count."""
    model = GPT(c, W).to(torch.device("cuda"))
    step = make_step(c, model, mode, ro_index)
    losses, t0, nb = [], None, len(xs)
    with sdpa_context(sdpa):
        for s in range(warmup + steps):
            if s == warmup:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            losses.append(step(xs[s % nb], ys[s % nb]))
        torch.cuda.synchronize()
    return losses, time.perf_counter() - t0, sum(p.numel() for p in model.parameters())


def train_ro(c, W, xs, ys, sdpa, warmup, steps, fallbacks):
    """compile-ro: RO_CONFIGS in order. A configuration that raises during
    its warm-up steps (a part that does not compile or replay) is reported on
    stderr and in `fallbacks`, and the run starts again from W under the next
    one; a failure after the warm-up propagates."""
    for i, (name, *_rest) in enumerate(RO_CONFIGS):
        try:
            return train(c, W, xs, ys, "compile-ro", sdpa, warmup, steps, i)
        except Exception as e:
            first = str(e).splitlines()[0] if str(e) else ""
            if i + 1 == len(RO_CONFIGS):
                raise
            msg = f"{name} failed ({type(e).__name__}: {first[:200]}); next: {RO_CONFIGS[i + 1][0]}"
            print(f"gpt2_torch: FALLBACK {msg}", file=sys.stderr, flush=True)
            fallbacks.append(msg)


def run(c, data, mode, sdpa, warmup, steps):
    dev = torch.device("cuda")
    W = tensor_dir.load(os.path.join(data, "weights"))
    Bt = tensor_dir.load(os.path.join(data, "batches"))
    nb = len(Bt) // 2
    xs = [Bt[f"x{i}"].long().to(dev) for i in range(nb)]
    ys = [Bt[f"y{i}"].long().to(dev) for i in range(nb)]
    fallbacks = []
    if mode == "compile-ro":
        losses, dt, n_params = train_ro(c, W, xs, ys, sdpa, warmup, steps, fallbacks)
    else:
        losses, dt, n_params = train(c, W, xs, ys, mode, sdpa, warmup, steps)
    tok = steps * c["batch"] * c["seq_len"]
    flops_tok = 6 * n_params + 12 * c["n_layer"] * c["d_model"] * c["seq_len"]
    tps = tok / dt
    impl = f"torch_{mode.replace('-ro', '_reduce_overhead')}" + ("" if sdpa == "default" else f"_{sdpa}")
    if fallbacks:
        impl += "_fallback"
    return {"impl": impl, "tokens_per_s": tps, "ms_per_step": 1e3 * dt / steps, "mfu": tps * flops_tok / 989e12,
            "params": n_params, "warmup": warmup, "steps": steps, "losses": [float(l) for l in losses],
            "fallback": fallbacks, "torch": torch.__version__, "device": torch.cuda.get_device_name()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init")
    ap.add_argument("--data")
    ap.add_argument("--mode", default="eager", choices=["eager", "compile", "compile-ro"])
    ap.add_argument("--sdpa", default="default", choices=["default", "cudnn", "flash"])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out")
    ap.add_argument("--small", action="store_true", help="a tiny config for a smoke test")
    a = ap.parse_args()
    c = dict(CFG)
    if a.small:
        c.update(n_layer=2, n_head=4, d_model=128, seq_len=64, vocab=256, batch=4)
    if a.init:
        init(c, a.init, a.warmup + a.steps)
        return
    torch.backends.cuda.matmul.allow_tf32 = True
    r = run(c, a.data, a.mode, a.sdpa, a.warmup, a.steps)
    line = json.dumps(r)
    print(line, flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
