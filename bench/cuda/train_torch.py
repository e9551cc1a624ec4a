"""PyTorch side of the training benchmark (bench/cuda/train_bench.cc): a GPT
or Llama model of Loom's families, trained on one GPU.

The model is tests/parity/gpt_torch.py's (imported: the same forward as the
parity tests, with F.scaled_dot_product_attention in place of the written-out
attention where torch has it), trained with bf16 autocast, fp32 master weights,
AdamW and gradient clipping at 1.0, on random token ids.

  train_torch.py --init DIR [--preset P] [--family F --n_layer N --n_head N --n_kv_head N
                 --d_model N --ffn N --seq_len N --vocab N --batch N] [--warmup N --steps N]
      writes DIR/weights, DIR/batches (tensor_dir format) and DIR/config.json
  train_torch.py --data DIR --mode eager|compile|compile-ro [--sdpa default|cudnn|flash]
                 [--gqa auto|repeat|native] [--device cuda|cpu]
                 [--activation-checkpointing none|blocks] [--residual f32|bf16] --out F.json
      trains the model of DIR/config.json from DIR's weights on DIR's batches
  train_torch.py --print-presets      # the presets as JSON (train_config.h has the same)

Presets and their shapes: bench/cuda/train_config.h (default gpt2-124m).

--activation-checkpointing blocks: each transformer block through torch.utils.checkpoint
(the recipe of the capacity comparison; run_model.sh passes it to both sides).

--residual bf16 (CUDA): the residual stream stored bf16 as Loom's bf16 policy
stores it (the embedding output and every residual add rounded to bf16, the
norms computed in f32 from it); the default f32 is what autocast does (the
stream stays f32 because the embedding's output is). A control for loss
comparisons, not a mode to time: gpt_torch.forward's `residual`.

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
Grouped-query attention (--gqa): native passes enable_gqa=True to SDPA (torch
2.5 and later), repeat repeats the kv heads first (as gpt_torch.attention);
auto is native except with --sdpa cudnn.
--device cpu (eager only, f32, no autocast) runs where there is no GPU, as the
CPU tests do (train_config_test) with torch versions that have neither
torch.compile nor scaled_dot_product_attention.

Each run prints and writes one JSON object: tokens/s over the timed steps, the
per-step losses (all steps, warm-up included), MFU (FLOPs per token as
train_config.h's TrainFlopsPerToken), the parameters' names and shapes, and
the SDPA backend used. Both sides train on the same weights and the same batch
sequence, so Loom's losses can be checked against these. Bad flags exit 2
naming the flag.
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
import gpt_torch  # noqa: E402
import tensor_dir  # noqa: E402

SHAPE_KEYS = ["n_layer", "n_head", "n_kv_head", "d_model", "ffn", "seq_len", "vocab", "batch"]
# name: (family, n_layer, n_head, n_kv_head, d_model, ffn, seq_len, vocab, batch); train_config.h's table.
PRESETS = {
    "gpt2-124m": ("gpt", 12, 12, 12, 768, 3072, 1024, 50304, 16),
    "gpt2-350m": ("gpt", 24, 16, 16, 1024, 4096, 1024, 50304, 16),
    "llama-124m": ("llama", 12, 12, 4, 768, 2048, 2048, 32000, 8),
    "llama-350m": ("llama", 24, 16, 4, 1024, 2816, 2048, 32000, 8),
    "llama-1b": ("llama", 22, 32, 4, 2048, 5632, 2048, 32000, 8),
}
TRAIN = dict(lr=3e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0)
LOOKUP_ONLY = ("wpe", "tok_embeddings")  # embedding tables no GEMM multiplies


def model_cfg(c):
    """gpt_torch's config keys from ours."""
    return {"family": c["family"], "n_layer": c["n_layer"], "n_head": c["n_head"], "n_kv_head": c["n_kv_head"],
            "d_model": c["d_model"], "ffn_hidden": c["ffn"], "seq_len": c["seq_len"], "vocab": c["vocab"]}


def flops_per_token(c, shapes):
    matmul = sum(s[0] * s[1] for n, s in shapes.items() if len(s) == 2 and n not in LOOKUP_ONLY)
    return 6 * matmul + 12 * c["n_layer"] * c["d_model"] * c["seq_len"]


def text_windows(path, c, steps, g):
    """Batches of byte windows of a text file: x a window, y the same window
    one byte on, so that the batches carry signal a model can learn."""
    def bad(why):
        print(f"train_torch.py: --text {path}: {why}", file=sys.stderr)
        sys.exit(2)

    if not os.path.isfile(path):
        bad("no such file")
    with open(path, "rb") as f:
        data = f.read()
    t = c["seq_len"]
    if len(data) < t + 2:
        bad(f"{len(data)} bytes, fewer than seq_len + 2 = {t + 2}")
    if c["vocab"] < 256:
        bad(f"byte tokens need --vocab >= 256, got {c['vocab']}")
    corpus = torch.tensor(list(data), dtype=torch.int32)
    B = {}
    for i in range(steps):
        starts = torch.randint(0, len(data) - t - 1, (c["batch"],), generator=g)
        B[f"x{i}"] = torch.stack([corpus[s:s + t] for s in starts.tolist()])
        B[f"y{i}"] = torch.stack([corpus[s + 1:s + t + 1] for s in starts.tolist()])
    return B


def init(c, out, steps, text=None):
    """GPT-2 style: matrices normal(0, 0.02), residual projections scaled by
    1/sqrt(2 L), norm weights 1, biases 0. Batches: uniform random tokens, or
    byte windows of `text`."""
    g = torch.Generator().manual_seed(1234)
    W = {}
    residual = ("c_proj.weight", "attention.wo", "feed_forward.w2")
    for n, s in gpt_torch.param_shapes(model_cfg(c)).items():
        if n.endswith(".weight") and len(s) == 1:
            W[n] = torch.ones(s)
        elif n.endswith(".bias"):
            W[n] = torch.zeros(s)
        else:
            std = 0.02 / math.sqrt(2 * c["n_layer"]) if n.endswith(residual) else 0.02
            W[n] = torch.randn(s, generator=g) * std
    tensor_dir.save(os.path.join(out, "weights"), W)
    if text:
        B = text_windows(text, c, steps, g)
    else:
        B = {}
        for i in range(steps):
            B[f"x{i}"] = torch.randint(0, c["vocab"], (c["batch"], c["seq_len"]), generator=g, dtype=torch.int32)
            B[f"y{i}"] = torch.randint(0, c["vocab"], (c["batch"], c["seq_len"]), generator=g, dtype=torch.int32)
    tensor_dir.save(os.path.join(out, "batches"), B)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=1, sort_keys=True)


def make_attention(sdpa, gqa):
    """gpt_torch.attention's signature over F.scaled_dot_product_attention
    (causal, no dropout), or gpt_torch.attention itself where torch has no SDPA."""
    if not hasattr(F, "scaled_dot_product_attention"):
        return gpt_torch.attention
    major_minor = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    native = gqa == "native" or (gqa == "auto" and sdpa != "cudnn" and major_minor >= (2, 5))

    def attn(q, k, v, n_head, n_kv_head, drop, site):
        if n_head != n_kv_head and native:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        if n_head != n_kv_head:
            k = k.repeat_interleave(n_head // n_kv_head, dim=1)
            v = v.repeat_interleave(n_head // n_kv_head, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    attn.native_gqa = native
    return attn


class Model(torch.nn.Module):
    """gpt_torch's model over trainable parameters (names with '.' as '_',
    ParameterDict's rule); forward returns the mean cross-entropy loss."""

    def __init__(self, c, W, attn, checkpoint_blocks=False, residual=None):
        super().__init__()
        self.cfg, self.attn, self.residual = model_cfg(c), attn, residual
        self.names = gpt_torch.param_names(self.cfg)
        self.p = torch.nn.ParameterDict({n.replace(".", "_"): torch.nn.Parameter(W[n].clone()) for n in self.names})
        # Activation checkpointing: each block keeps only its input and
        # recomputes its forward in the backward (torch.utils.checkpoint).
        self.wrap = None
        if checkpoint_blocks:
            import torch.utils.checkpoint as ckpt
            self.wrap = lambda f, h: ckpt.checkpoint(f, h, use_reentrant=False)

    def forward(self, x, y):
        P = {n: self.p[n.replace(".", "_")] for n in self.names}
        return gpt_torch.loss_fn(self.cfg, P, x, y, attn=self.attn, wrap=self.wrap, residual=self.residual)[1]


def sdpa_context(name):
    import contextlib
    if name == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.CUDNN_ATTENTION if name == "cudnn" else SDPBackend.FLASH_ATTENTION])


def param_groups(model, c):
    decay = [p for n, p in model.p.items() if p.dim() >= 2]
    no_decay = [p for n, p in model.p.items() if p.dim() < 2]
    return [{"params": decay, "weight_decay": TRAIN["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]


# compile-ro's configurations, best first: (name, cudagraph trees, model
# compile mode, update compile mode or None for the eager fused AdamW).
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
        opt = torch.optim.AdamW(param_groups(model, c), lr=TRAIN["lr"], betas=(TRAIN["beta1"], TRAIN["beta2"]),
                                eps=TRAIN["eps"], foreach=True, capturable=True)

        def update():
            torch.nn.utils.clip_grad_norm_(self.params, TRAIN["grad_clip"], foreach=True)
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


def make_step(c, model, mode, dev, ro_index=0):
    """The training step (forward, backward, clipping, AdamW) of `mode` (for
    compile-ro, under RO_CONFIGS[ro_index]): a function of (x, y) returning
    the loss. On the CPU: f32, no autocast, the plain AdamW."""
    params = list(model.parameters())
    opts = []

    def eager_fused_update():
        if not opts:
            extra = {"fused": True} if dev.type == "cuda" else {}
            opts.append(torch.optim.AdamW(param_groups(model, c), lr=TRAIN["lr"], betas=(TRAIN["beta1"], TRAIN["beta2"]),
                                          eps=TRAIN["eps"], **extra))
        torch.nn.utils.clip_grad_norm_(params, TRAIN["grad_clip"])
        opts[0].step()

    if mode == "compile-ro":
        return CompiledStep(c, model, eager_fused_update, ro_index)
    fwd = torch.compile(model) if mode == "compile" else model

    def step(x, y):
        if dev.type == "cuda":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = fwd(x, y)
        else:
            loss = fwd(x, y)
        loss.backward()
        eager_fused_update()
        for p in params:
            p.grad = None  # zero_grad(set_to_none=True)
        return loss.detach()

    return step


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def train(c, W, xs, ys, a, dev, ro_index=0):
    """Trains a fresh model from W for warmup + steps steps; returns the
    losses, the timed seconds and the model."""
    residual = torch.bfloat16 if a.residual == "bf16" else None
    model = Model(c, W, make_attention(a.sdpa, a.gqa), a.activation_checkpointing == "blocks", residual).to(dev)
    step = make_step(c, model, a.mode, dev, ro_index)
    losses, t0, nb = [], None, len(xs)
    with sdpa_context(a.sdpa):
        for s in range(a.warmup + a.steps):
            if s == a.warmup:
                sync(dev)
                t0 = time.perf_counter()
            losses.append(step(xs[s % nb], ys[s % nb]))
        sync(dev)
    return losses, time.perf_counter() - t0, model


def train_ro(c, W, xs, ys, a, dev, fallbacks):
    """compile-ro: RO_CONFIGS in order. A configuration that raises during
    its warm-up steps (a part that does not compile or replay) is reported on
    stderr and in `fallbacks`, and the run starts again from W under the next
    one; a failure after the warm-up propagates."""
    for i, (name, *_rest) in enumerate(RO_CONFIGS):
        try:
            return train(c, W, xs, ys, a, dev, i)
        except Exception as e:
            first = str(e).splitlines()[0] if str(e) else ""
            if i + 1 == len(RO_CONFIGS):
                raise
            msg = f"{name} failed ({type(e).__name__}: {first[:200]}); next: {RO_CONFIGS[i + 1][0]}"
            print(f"train_torch: FALLBACK {msg}", file=sys.stderr, flush=True)
            fallbacks.append(msg)


def run(a):
    dev = torch.device(a.device)
    with open(os.path.join(a.data, "config.json")) as f:
        c = json.load(f)
    W = tensor_dir.load(os.path.join(a.data, "weights"))
    Bt = tensor_dir.load(os.path.join(a.data, "batches"))
    nb = len(Bt) // 2
    xs = [Bt[f"x{i}"].long().to(dev) for i in range(nb)]
    ys = [Bt[f"y{i}"].long().to(dev) for i in range(nb)]
    fallbacks = []
    if a.mode == "compile-ro":
        losses, dt, model = train_ro(c, W, xs, ys, a, dev, fallbacks)
    else:
        losses, dt, model = train(c, W, xs, ys, a, dev)
    shapes = {n: list(model.p[n.replace(".", "_")].shape) for n in model.names}
    tok = a.steps * c["batch"] * c["seq_len"]
    tps = tok / dt
    flops = flops_per_token(c, shapes)
    impl = f"torch_{a.mode.replace('-ro', '_reduce_overhead')}" + ("" if a.sdpa == "default" else f"_{a.sdpa}")
    if a.activation_checkpointing == "blocks":
        impl += "_ckpt"
    if a.residual == "bf16":
        impl += "_bf16_residual"
    if fallbacks:
        impl += "_fallback"
    return {"impl": impl, "preset": c.get("preset", ""), "family": c["family"], "tokens_per_s": tps,
            "ms_per_step": 1e3 * dt / a.steps, "mfu": tps * flops / 989e12, "flops_per_token": flops,
            "params": sum(p.numel() for p in model.parameters()), "param_shapes": shapes,
            "gqa": "native" if getattr(model.attn, "native_gqa", False) else "repeat",
            "warmup": a.warmup, "steps": a.steps, "losses": [float(l) for l in losses], "fallback": fallbacks,
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch side of bench/cuda/train_bench")
    ap.add_argument("--init", help="write weights, batches and config.json into this folder")
    ap.add_argument("--data", help="train on what --init wrote in this folder")
    ap.add_argument("--text", help="with --init: batches of byte windows of this file, not random tokens")
    ap.add_argument("--print-presets", action="store_true")
    ap.add_argument("--preset", default="gpt2-124m", choices=sorted(PRESETS))
    ap.add_argument("--family", choices=["gpt", "llama"])
    for k in SHAPE_KEYS:
        ap.add_argument(f"--{k}", type=int)
    ap.add_argument("--mode", default="eager", choices=["eager", "compile", "compile-ro"])
    ap.add_argument("--sdpa", default="default", choices=["default", "cudnn", "flash"])
    ap.add_argument("--gqa", default="auto", choices=["auto", "repeat", "native"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--activation-checkpointing", default="none", choices=["none", "blocks"])
    ap.add_argument("--residual", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    if sum(x is not None and x is not False for x in (a.init, a.data, a.print_presets or None)) != 1:
        ap.error("--init, --data or --print-presets: give exactly one")
    if a.steps < 1 or a.warmup < 0:
        ap.error(f"--steps must be >= 1 and --warmup >= 0 (got {a.steps}, {a.warmup})")
    if a.data is not None:
        given = [f"--{k}" for k in SHAPE_KEYS + ["family"] if getattr(a, k) is not None]
        if given:
            ap.error(f"{given[0]}: shapes are --init's; a run takes its model from DIR/config.json")
        if not os.path.isfile(os.path.join(a.data, "config.json")):
            ap.error(f"--data: {a.data}/config.json is missing (write it with --init)")
        if a.device == "cpu" and a.mode != "eager":
            ap.error(f"--mode: {a.mode} needs --device cuda (the CPU runs eager only)")
        if a.device == "cpu" and a.residual != "f32":
            ap.error("--residual: bf16 needs --device cuda (the CPU runs f32 without autocast)")
        if a.mode != "eager" and not hasattr(torch, "compile"):
            ap.error(f"--mode: {a.mode} needs torch.compile (torch {torch.__version__} has none)")
    return ap, a


def config_of(ap, a):
    """The preset's shapes with the flags' overrides, checked as Loom's model
    builder checks them."""
    c = dict(zip(["family"] + SHAPE_KEYS, PRESETS[a.preset]), preset=a.preset)
    for k in ["family"] + SHAPE_KEYS:
        if getattr(a, k) is not None:
            c[k] = getattr(a, k)
            c["preset"] = "custom"  # as train_bench names a preset with flags over it
    if c["family"] == "gpt" and a.n_kv_head is None:
        c["n_kv_head"] = 0  # gpt's kv heads are its heads
    for k in ["n_layer", "n_head", "d_model", "seq_len", "vocab", "batch"]:
        if c[k] < 1:
            ap.error(f"--{k}: must be positive, got {c[k]}")
    for k in ["n_kv_head", "ffn"]:
        if c[k] < 0:
            ap.error(f"--{k}: must be >= 0, got {c[k]}")
    if c["d_model"] % c["n_head"]:
        ap.error(f"--d_model: {c['d_model']} is not divisible by --n_head = {c['n_head']}")
    if c["family"] == "gpt" and c["n_kv_head"] not in (0, c["n_head"]):
        ap.error("--n_kv_head: the gpt family has no grouped-query attention")
    c["n_kv_head"] = c["n_kv_head"] or c["n_head"]
    c["ffn"] = c["ffn"] or 4 * c["d_model"]
    if c["n_head"] % c["n_kv_head"]:
        ap.error(f"--n_kv_head: {c['n_kv_head']} does not divide --n_head = {c['n_head']}")
    if c["family"] == "llama" and (c["d_model"] // c["n_head"]) % 2:
        ap.error(f"--d_model: head dimension {c['d_model'] // c['n_head']} must be even for RoPE")
    return c


def main():
    ap, a = parse_args()
    if a.print_presets:
        print(json.dumps({n: dict(zip(["family"] + SHAPE_KEYS, p)) for n, p in PRESETS.items()}, sort_keys=True))
        return
    if a.init:
        init(config_of(ap, a), a.init, a.warmup + a.steps, a.text)
        return
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    r = run(a)
    line = json.dumps(r)
    print(line, flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
