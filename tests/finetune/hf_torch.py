#!/usr/bin/python3
"""Hugging Face-compatible GPT-2 and Llama in torch, for Loom's fine-tuning test.

Debian has no `transformers` package, so the two models are written out here
with Hugging Face's module and parameter names: their state_dict names are
those of transformers' GPT2LMHeadModel and LlamaForCausalLM, and
load_state_dict(strict=True) checks a file's names and shapes. Conventions as
Hugging Face's:
  GPT-2: Conv1D weights [in, out] (y = x @ W + b), learned positions, tanh GELU
         (gelu_new), a causal-mask buffer, lm_head tied to wte.
  Llama: nn.Linear weights [out, in], RMSNorm, RoPE with rotate_half (pairs
         (i, i + D/2) of a head), repeat_kv for grouped-query attention,
         SwiGLU MLP, an untied lm_head.

Commands (files are safetensors, through tools/safetensors_py.py):
  make  --config CFG --seed S --out FILE
        random weights saved as a Hugging Face checkpoint is on disk: GPT-2 as
        the hub's gpt2 file (names without `transformer.`, attn.bias buffers, no
        lm_head.weight), Llama as its state_dict plus rotary_emb.inv_freq buffers;
        and config.json (Hugging Face's keys) in the same folder. --batch FILE:
        then prints the loss of that batch on the file written, as `loss` does.
  loss  --config CFG --weights FILE --batch FILE [--strict]
        prints "loss L": the mean next-token cross-entropy of the batch (tensors
        x, y). --strict: the file must be exactly the model's state_dict
        (load_state_dict(strict=True)); otherwise it is read as `make` writes it.
  names --config CFG
        the on-disk names and shapes (as `make` writes them) of that
        configuration, as JSON [[name, shape], ...], built on the meta device
        (no memory; the real gpt2 configuration works).
CFG is JSON: family, n_layer, n_head, n_kv_head, d_model, seq_len, vocab,
ffn_hidden, norm_eps, rope_theta (Loom's model keys; seq_len is n_positions).
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import safetensors_py  # noqa: E402


# ---- GPT-2 (transformers' modeling_gpt2, eval mode, no dropout) ----

class Conv1D(nn.Module):
    def __init__(self, nf, nx, device):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf, device=device))
        self.bias = nn.Parameter(torch.zeros(nf, device=device))

    def forward(self, x):
        return x @ self.weight + self.bias


class GPT2Attention(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        n = c["seq_len"]
        self.register_buffer("bias", torch.tril(torch.ones(n, n, dtype=torch.bool, device=device)).view(1, 1, n, n),
                             persistent=False)
        self.register_buffer("masked_bias", torch.tensor(-1e4, device=device), persistent=False)
        self.n_head, self.d = c["n_head"], c["d_model"]
        self.c_attn = Conv1D(3 * self.d, self.d, device)
        self.c_proj = Conv1D(self.d, self.d, device)

    def forward(self, x):
        B, T, C = x.shape
        D = C // self.n_head
        q, k, v = (t.view(B, T, self.n_head, D).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        w = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        w = torch.where(self.bias[:, :, :T, :T], w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        y = (torch.softmax(w, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class GPT2MLP(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        self.c_fc = Conv1D(c["ffn_hidden"], c["d_model"], device)
        self.c_proj = Conv1D(c["d_model"], c["ffn_hidden"], device)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["d_model"], eps=c["norm_eps"], device=device)
        self.attn = GPT2Attention(c, device)
        self.ln_2 = nn.LayerNorm(c["d_model"], eps=c["norm_eps"], device=device)
        self.mlp = GPT2MLP(c, device)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        self.wte = nn.Embedding(c["vocab"], c["d_model"], device=device)
        self.wpe = nn.Embedding(c["seq_len"], c["d_model"], device=device)
        self.h = nn.ModuleList([GPT2Block(c, device) for _ in range(c["n_layer"])])
        self.ln_f = nn.LayerNorm(c["d_model"], eps=c["norm_eps"], device=device)

    def forward(self, x):
        h = self.wte(x) + self.wpe(torch.arange(x.shape[1]))
        for block in self.h:
            h = block(h)
        return self.ln_f(h)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, c, device=None):
        super().__init__()
        self.transformer = GPT2Model(c, device)
        self.lm_head = nn.Linear(c["d_model"], c["vocab"], bias=False, device=device)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, x):
        return self.lm_head(self.transformer(x))


# ---- Llama (transformers' modeling_llama, eval mode) ----

class LlamaRMSNorm(nn.Module):
    def __init__(self, n, eps, device):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, device=device))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, base, device):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, device=device).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, T):
        freqs = torch.outer(torch.arange(T).float(), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        C, self.H, self.Hkv = c["d_model"], c["n_head"], c["n_kv_head"]
        self.D = C // self.H
        self.q_proj = nn.Linear(C, self.H * self.D, bias=False, device=device)
        self.k_proj = nn.Linear(C, self.Hkv * self.D, bias=False, device=device)
        self.v_proj = nn.Linear(C, self.Hkv * self.D, bias=False, device=device)
        self.o_proj = nn.Linear(self.H * self.D, C, bias=False, device=device)
        self.rotary_emb = LlamaRotaryEmbedding(self.D, c["rope_theta"], device)

    def forward(self, x):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.D).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.Hkv, self.D).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.Hkv, self.D).transpose(1, 2)
        cos, sin = self.rotary_emb(T)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.H // self.Hkv  # repeat_kv
        k = k[:, :, None].expand(B, self.Hkv, rep, T, self.D).reshape(B, self.H, T, self.D)
        v = v[:, :, None].expand(B, self.Hkv, rep, T, self.D).reshape(B, self.H, T, self.D)
        w = (q @ k.transpose(2, 3)) / math.sqrt(self.D)
        mask = torch.full((T, T), torch.finfo(w.dtype).min).triu(1)
        y = torch.softmax(w + mask, dim=-1, dtype=torch.float32) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.H * self.D))


class LlamaMLP(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        C, Fh = c["d_model"], c["ffn_hidden"]
        self.gate_proj = nn.Linear(C, Fh, bias=False, device=device)
        self.up_proj = nn.Linear(C, Fh, bias=False, device=device)
        self.down_proj = nn.Linear(Fh, C, bias=False, device=device)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        self.self_attn = LlamaAttention(c, device)
        self.mlp = LlamaMLP(c, device)
        self.input_layernorm = LlamaRMSNorm(c["d_model"], c["norm_eps"], device)
        self.post_attention_layernorm = LlamaRMSNorm(c["d_model"], c["norm_eps"], device)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab"], c["d_model"], device=device)
        self.layers = nn.ModuleList([LlamaDecoderLayer(c, device) for _ in range(c["n_layer"])])
        self.norm = LlamaRMSNorm(c["d_model"], c["norm_eps"], device)

    def forward(self, x):
        h = self.embed_tokens(x)
        for layer in self.layers:
            h = layer(h)
        return self.norm(h)


class LlamaForCausalLM(nn.Module):
    def __init__(self, c, device=None):
        super().__init__()
        self.model = LlamaModel(c, device)
        self.lm_head = nn.Linear(c["d_model"], c["vocab"], bias=False, device=device)

    def forward(self, x):
        return self.lm_head(self.model(x))


# ---- files ----

def config(path_or_json):
    c = json.loads(path_or_json) if path_or_json.lstrip().startswith("{") else json.load(open(path_or_json))
    c.setdefault("n_kv_head", c["n_head"])
    c.setdefault("norm_eps", 1e-5)
    c.setdefault("rope_theta", 10000.0)
    c.setdefault("ffn_hidden", 4 * c["d_model"])
    return c


def build(c, device=None):
    return (GPT2LMHeadModel if c["family"] == "gpt" else LlamaForCausalLM)(c, device)


def on_disk(c, state):
    """A state_dict as a Hugging Face checkpoint of that family is stored."""
    out = {}
    if c["family"] == "gpt":
        for name, t in state.items():
            if name == "lm_head.weight":
                continue
            out[name[len("transformer."):]] = t
        n = c["seq_len"]
        for i in range(c["n_layer"]):
            out["h.%d.attn.bias" % i] = torch.tril(torch.ones(n, n, device=t.device)).view(1, 1, n, n)
        return out
    out.update(state)
    D = c["d_model"] // c["n_head"]
    for i in range(c["n_layer"]):
        out["model.layers.%d.self_attn.rotary_emb.inv_freq" % i] = \
            1.0 / (c["rope_theta"] ** (torch.arange(0, D, 2).float() / D))
    return out


def from_disk(c, tensors):
    """The inverse of on_disk: a state_dict for load_state_dict(strict=True)."""
    if c["family"] == "gpt":
        state = {"transformer." + k: v for k, v in tensors.items() if not k.endswith(".attn.bias")}
        state["lm_head.weight"] = state["transformer.wte.weight"]
        return state
    return {k: v for k, v in tensors.items() if not k.endswith("rotary_emb.inv_freq")}


def hf_config(c):
    """The config.json Hugging Face keeps beside the weights."""
    if c["family"] == "gpt":
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": c["n_layer"],
                "n_head": c["n_head"], "n_embd": c["d_model"], "n_positions": c["seq_len"], "vocab_size": c["vocab"],
                "n_inner": c["ffn_hidden"], "layer_norm_epsilon": c["norm_eps"], "activation_function": "gelu_new"}
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": c["n_layer"],
            "num_attention_heads": c["n_head"], "num_key_value_heads": c["n_kv_head"], "hidden_size": c["d_model"],
            "intermediate_size": c["ffn_hidden"], "vocab_size": c["vocab"], "rms_norm_eps": c["norm_eps"],
            "rope_theta": c["rope_theta"], "max_position_embeddings": c["seq_len"], "tie_word_embeddings": False,
            "hidden_act": "silu"}


def cmd_make(a):
    c = config(a.config)
    torch.manual_seed(a.seed)
    model = build(c)
    with torch.no_grad():
        for name, p in model.named_parameters():  # every tensor distinct, so a misplaced one shows
            if p.dim() >= 2:
                p.normal_(0.0, 0.02 if c["family"] == "gpt" else 0.08)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.05)
            else:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    safetensors_py.save(a.out, on_disk(c, model.state_dict()), {"format": "pt"})
    with open(os.path.join(os.path.dirname(os.path.abspath(a.out)), "config.json"), "w") as f:
        json.dump(hf_config(c), f, indent=2)
    if a.batch:
        print_loss(c, a.out, a.batch, strict=False)


def cmd_loss(a):
    print_loss(config(a.config), a.weights, a.batch, a.strict)


def print_loss(c, weights, batch_file, strict):
    torch.set_num_threads(1)
    tensors, _ = safetensors_py.load(weights)
    model = build(c)
    model.load_state_dict(tensors if strict else from_disk(c, tensors), strict=True)
    batch, _ = safetensors_py.load(batch_file)
    x, y = batch["x"].long(), batch["y"].long()
    with torch.no_grad():
        logits = model.eval()(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    print("loss %.9f" % loss.item())


def cmd_names(a):
    c = config(a.config)
    state = build(c, device="meta").state_dict()
    print(json.dumps([[k, list(v.shape)] for k, v in on_disk(c, state).items()]))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--config", required=True)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--out", required=True)
    m.add_argument("--batch", help="then print the loss of this batch, as `loss` does on the file written")
    lo = sub.add_parser("loss")
    lo.add_argument("--config", required=True)
    lo.add_argument("--weights", required=True)
    lo.add_argument("--batch", required=True)
    lo.add_argument("--strict", action="store_true")
    n = sub.add_parser("names")
    n.add_argument("--config", required=True)
    a = ap.parse_args()
    {"make": cmd_make, "loss": cmd_loss, "names": cmd_names}[a.cmd](a)


if __name__ == "__main__":
    main()
