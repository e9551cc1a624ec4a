"""Four models written in PyTorch the way their authors write them, for the
bring-your-own-model parity suite (tests/byom). Each FACTORY returns
(module, example batch) for tools/loom_export.py:

  tools/loom_export.py tests/byom/models.py:gpt --out gpt.onnx

  gpt      nanoGPT: learned token and position embeddings, pre-LayerNorm
           blocks, causal self-attention from one fused qkv projection with a
           causal-mask buffer, tanh-GELU MLP, tied token embedding and head.
           nanoGPT's `bias=False` configuration (no biases in Linear and
           LayerNorm).
  gpt_d64  the same nanoGPT with 64-dim heads (the CUDA flash kernels' size).
  gptj     GPT-J: attention and MLP read the same LayerNorm output and are
           added in parallel; rotary embeddings on the first half of each
           head's dims (interleaved pairs, from an inverse-frequency buffer);
           no biases in q/k/v/out, an untied head with a bias.
  bert     a BERT encoder with an MLM head: token and position embeddings,
           post-LayerNorm blocks, erf-GELU, padding masks computed from the
           ids (PAD) and added to the attention scores, the decoder tied to
           the token embeddings; trained on masked windows (data.kind mlm).
  mlp      a classifier over float features (data.kind pairs).

All of them output logits; Loom's loss (model.loss, cross_entropy) and
F.cross_entropy in the reference agree. Dropout modules are there with p = 0,
as the parity runs need; their nodes stay in the exported training graph.

The key projections carry no bias in any model: a key bias adds the same
q . b_k to every score of a query row, which softmax ignores, so its true
gradient is 0 and every implementation trains it on rounding noise alone
(Adam scales that noise up to full-size steps), which no parity bound could
hold.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# Sizes small enough for a CI run of 50 steps, odd enough to catch layout bugs.
VOCAB, SEQ, BATCH = 67, 12, 4
N_EMBD, N_HEAD, N_LAYER = 48, 4, 2
BERT_PAD, BERT_MASK = 0, 1          # special ids of the bert model
MLP_FEATURES, MLP_CLASSES = 20, 7


def _init(module, std=0.02):
    for name, p in module.named_parameters():
        if p.dim() >= 2:
            nn.init.normal_(p, mean=0.0, std=std)
        elif name.endswith("bias"):
            nn.init.normal_(p, mean=0.0, std=std)  # non-zero biases: their gradients get checked too


# ---------------------------------------------------------------- nanoGPT --

class LayerNorm(nn.Module):
    """nanoGPT's LayerNorm with an optional bias."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, bias):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.attn_dropout = nn.Dropout(0.0)
        self.resid_dropout = nn.Dropout(0.0)
        self.n_head, self.n_embd = n_head, n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd, bias):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, bias):
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, bias)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, bias)
        self.ln_2 = LayerNorm(n_embd, bias)
        self.mlp = MLP(n_embd, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size=VOCAB, block_size=SEQ, n_layer=N_LAYER, n_head=N_HEAD, n_embd=N_EMBD, bias=False):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(0.0),
            h=nn.ModuleList([Block(n_embd, n_head, block_size, bias) for _ in range(n_layer)]),
            ln_f=LayerNorm(n_embd, bias),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        _init(self)
        for pn, p in self.named_parameters():  # nanoGPT's scaled init of the residual projections
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


# ------------------------------------------------------------------ GPT-J --

def rotate_every_two(x):
    x1, x2 = x[:, :, :, ::2], x[:, :, :, 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def duplicate_interleave(m):
    # torch.repeat_interleave(m, 2, -1), as GPT-J writes it, exports from torch
    # 1.13 as a Loop over a sequence; Loom imports static dataflow only, so the
    # same duplication is written as stack + flatten.
    return torch.stack((m, m), dim=-1).flatten(-2)


def apply_rotary_pos_emb(x, sin, cos):
    sin = duplicate_interleave(sin)[None, :, None, :]
    cos = duplicate_interleave(cos)[None, :, None, :]
    return (x * cos) + (rotate_every_two(x) * sin)


class GPTJAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, rotary_dim):
        super().__init__()
        self.n_head, self.head_dim, self.rotary_dim = n_head, n_embd // n_head, rotary_dim
        self.q_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.k_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.v_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.out_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.attn_dropout = nn.Dropout(0.0)
        self.resid_dropout = nn.Dropout(0.0)
        self.register_buffer("causal_mask", torch.tril(torch.ones(block_size, block_size, dtype=torch.bool)))
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim)))

    def forward(self, x):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim)
        k = self.k_proj(x).view(B, T, self.n_head, self.head_dim)
        v = self.v_proj(x).view(B, T, self.n_head, self.head_dim)
        pos = torch.arange(T, dtype=self.inv_freq.dtype)
        sinusoid = torch.einsum("i,j->ij", pos, self.inv_freq)
        sin, cos = torch.sin(sinusoid), torch.cos(sinusoid)
        r = self.rotary_dim
        k = torch.cat([apply_rotary_pos_emb(k[:, :, :, :r], sin, cos), k[:, :, :, r:]], dim=-1)
        q = torch.cat([apply_rotary_pos_emb(q[:, :, :, :r], sin, cos), q[:, :, :, r:]], dim=-1)
        q, k, v = q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        w = torch.where(self.causal_mask[:T, :T], w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        w = self.attn_dropout(F.softmax(w, dim=-1))
        y = torch.matmul(w, v).permute(0, 2, 1, 3).reshape(B, T, C)
        return self.resid_dropout(self.out_proj(y))


class GPTJBlock(nn.Module):
    def __init__(self, n_embd, n_head, block_size, rotary_dim):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = GPTJAttention(n_embd, n_head, block_size, rotary_dim)
        self.mlp = nn.ModuleDict(dict(fc_in=nn.Linear(n_embd, 4 * n_embd), fc_out=nn.Linear(4 * n_embd, n_embd)))
        self.drop = nn.Dropout(0.0)

    def forward(self, x):
        h = self.ln_1(x)
        mlp = self.drop(self.mlp.fc_out(F.gelu(self.mlp.fc_in(h), approximate="tanh")))
        return x + self.attn(h) + mlp


class GPTJ(nn.Module):
    def __init__(self, vocab_size=VOCAB, block_size=SEQ, n_layer=N_LAYER, n_head=N_HEAD, n_embd=N_EMBD):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.drop = nn.Dropout(0.0)
        self.h = nn.ModuleList([GPTJBlock(n_embd, n_head, block_size, (n_embd // n_head) // 2) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        self.lm_head = nn.Linear(n_embd, vocab_size)
        _init(self)

    def forward(self, input_ids):
        x = self.drop(self.wte(input_ids))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


# ------------------------------------------------------------------- BERT --

class BertSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head, self.head_dim = n_head, n_embd // n_head
        self.query = nn.Linear(n_embd, n_embd)
        self.key = nn.Linear(n_embd, n_embd, bias=False)
        self.value = nn.Linear(n_embd, n_embd)
        self.dropout = nn.Dropout(0.0)

    def split(self, x):
        B, T, _ = x.shape
        return x.view(B, T, self.n_head, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, additive_mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + additive_mask
        probs = self.dropout(F.softmax(scores, dim=-1))
        y = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return y.view(y.shape[0], y.shape[1], -1)


class BertLayer(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.attention = BertSelfAttention(n_embd, n_head)
        self.attn_out = nn.Linear(n_embd, n_embd)
        self.attn_norm = nn.LayerNorm(n_embd, eps=1e-12)
        self.intermediate = nn.Linear(n_embd, 4 * n_embd)
        self.output = nn.Linear(4 * n_embd, n_embd)
        self.out_norm = nn.LayerNorm(n_embd, eps=1e-12)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x, additive_mask):
        x = self.attn_norm(x + self.dropout(self.attn_out(self.attention(x, additive_mask))))
        return self.out_norm(x + self.dropout(self.output(F.gelu(self.intermediate(x)))))


class BertForMaskedLM(nn.Module):
    def __init__(self, vocab_size=VOCAB, max_positions=SEQ, n_layer=N_LAYER, n_head=N_HEAD, n_embd=N_EMBD,
                 pad_token=BERT_PAD):
        super().__init__()
        self.pad_token = pad_token
        self.word_embeddings = nn.Embedding(vocab_size, n_embd)
        self.position_embeddings = nn.Embedding(max_positions, n_embd)
        self.emb_norm = nn.LayerNorm(n_embd, eps=1e-12)
        self.emb_dropout = nn.Dropout(0.0)
        self.layers = nn.ModuleList([BertLayer(n_embd, n_head) for _ in range(n_layer)])
        self.head_transform = nn.Linear(n_embd, n_embd)
        self.head_norm = nn.LayerNorm(n_embd, eps=1e-12)
        self.decoder_bias = nn.Parameter(torch.zeros(vocab_size))
        self.register_buffer("position_ids", torch.arange(max_positions).view(1, -1))
        _init(self)

    def forward(self, input_ids):
        T = input_ids.shape[1]
        # Padding mask: keys holding PAD get the most negative f32 added to their scores.
        keep = (input_ids != self.pad_token).to(torch.float32)
        additive_mask = (1.0 - keep)[:, None, None, :] * torch.finfo(torch.float32).min
        x = self.word_embeddings(input_ids) + self.position_embeddings(self.position_ids[:, :T])
        x = self.emb_dropout(self.emb_norm(x))
        for layer in self.layers:
            x = layer(x, additive_mask)
        h = self.head_norm(F.gelu(self.head_transform(x)))
        return torch.matmul(h, self.word_embeddings.weight.t()) + self.decoder_bias


# -------------------------------------------------------------------- MLP --

class MLPClassifier(nn.Module):
    def __init__(self, features=MLP_FEATURES, hidden=64, classes=MLP_CLASSES):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Dropout(0.0),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes))
        _init(self, std=0.2)

    def forward(self, x):
        return self.net(x)


# -------------------------------------------------------------- factories --

def _tokens(low=0):
    g = torch.Generator().manual_seed(5)
    return torch.randint(low, VOCAB, (BATCH, SEQ), generator=g)


def gpt():
    torch.manual_seed(1)
    return GPT(), _tokens()


def gpt_d64():
    """The nanoGPT with 64-dim heads (C128, 2 heads): the head size the CUDA
    flash-attention kernels take, for tests/byom/byom_cuda_test."""
    torch.manual_seed(1)
    return GPT(n_embd=128, n_head=2), _tokens()


def gptj():
    torch.manual_seed(2)
    return GPTJ(), _tokens()


def bert():
    torch.manual_seed(3)
    return BertForMaskedLM(), _tokens(low=2)


def mlp():
    torch.manual_seed(4)
    return MLPClassifier(), torch.randn(BATCH, MLP_FEATURES, generator=torch.Generator().manual_seed(6))


FACTORIES = {"gpt": gpt, "gpt_d64": gpt_d64, "gptj": gptj, "bert": bert, "mlp": mlp}
