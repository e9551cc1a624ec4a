"""Computes PyTorch 1.13 results for kernels/cpu/nn/torch_parity_test.cc (the NN
ops, and the tensor ops ONNX graphs need: see tensor_ops below).

Usage: /usr/bin/python3 torch_parity.py IN OUT   (exit code 3: torch missing)
IN and OUT hold named tensors as text, one per record:
    <name> <ndim> <dim_0> ... <dim_{ndim-1}>
    <values, row-major, space separated>
Everything runs in float64. Integer tensors (targets, ids) arrive as floats.
"""
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the test fails on exit code 3, naming the cause
    print("cannot import torch: %s" % e)
    sys.exit(3)


def read(path):
    out = {}
    with open(path) as f:
        lines = f.read().splitlines()
    for k in range(0, len(lines), 2):
        head = lines[k].split()
        name, ndim = head[0], int(head[1])
        shape = [int(d) for d in head[2:2 + ndim]]
        vals = [float(v) for v in lines[k + 1].split()]
        out[name] = torch.tensor(vals, dtype=torch.float64).reshape(shape)
    return out


def write(path, tensors):
    with open(path, "w") as f:
        for name, t in tensors.items():
            t = t.detach().to(torch.float64).reshape(-1) if t.dim() else t.detach().to(torch.float64).reshape(1)
            shape = list(tensors[name].shape)
            f.write("%s %d %s\n" % (name, len(shape), " ".join(str(d) for d in shape)))
            f.write(" ".join("%.17g" % v for v in t.tolist()) + "\n")


def leaf(t):
    return t.clone().requires_grad_(True)


def rope(x, theta, offset, inverse):
    b, t, h, d = x.shape
    i = torch.arange(d // 2, dtype=torch.float64)
    inv_freq = theta ** (-2.0 * i / d)
    pos = torch.arange(t, dtype=torch.float64) + offset
    ang = pos[:, None] * inv_freq[None, :]
    if inverse:
        ang = -ang
    c = torch.cos(ang)[None, :, None, :]
    s = torch.sin(ang)[None, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).reshape(b, t, h, d)


def tensor_ops(inp, out):
    """The tensor ops ONNX graphs need (kernels/cpu): forward and gradients."""
    # Unary math.
    for op, fn in (("erf", torch.erf), ("sin", torch.sin), ("cos", torch.cos), ("recip", torch.reciprocal)):
        x = leaf(inp["un_x"])
        y = fn(x)
        y.backward(inp["un_dy"])
        out[op + "_y"], out[op + "_dx"] = y, x.grad
    # pow and minimum, broadcasting.
    a, b = leaf(inp["pow_a"]), leaf(inp["pow_b"])
    y = torch.pow(a, b)
    y.backward(inp["pow_dy"])
    out.update(pow_y=y, pow_da=a.grad, pow_db=b.grad)
    a, b = leaf(inp["min_a"]), leaf(inp["min_b"])
    y = torch.minimum(a, b)
    y.backward(inp["min_dy"])
    out.update(min_y=y, min_da=a.grad, min_db=b.grad)
    # where over three broadcast operands.
    a, b = leaf(inp["wh_a"]), leaf(inp["wh_b"])
    y = torch.where(inp["wh_c"].bool(), a, b)
    y.backward(inp["wh_dy"])
    out.update(wh_y=y, wh_da=a.grad, wh_db=b.grad)
    # gather along axis 1 with 2-d, negative and repeated indices (ONNX
    # Gather is numpy indexing with one index tensor).
    x = leaf(inp["ga_x"])
    y = x[:, inp["ga_i"].long()]
    y.backward(inp["ga_dy"])
    out.update(ga_y=y, ga_dx=x.grad)
    # Stepped slices (negative step as explicit indices: torch slicing has none).
    for tag, start, length, step in (("sl_neg", 8, 4, -2), ("sl_3", 1, 3, 3)):
        x = leaf(inp["sl_x"])
        idx = torch.tensor([start + k * step for k in range(length)])
        y = x.index_select(1, idx)
        y.backward(inp[tag + "_dy"])
        out[tag + "_y"], out[tag + "_dx"] = y, x.grad
    # Reductions over axes (0, 2) with keepdim.
    for op, fn in (("rsum", torch.sum), ("rmean", torch.mean), ("rmax", torch.amax), ("rmin", torch.amin)):
        x = leaf(inp["red_x"])
        y = fn(x, dim=(0, 2), keepdim=True)
        y.backward(inp["red_dy"])
        out[op + "_y"], out[op + "_dx"] = y, x.grad
    # Comparisons (with ties), float -> int casts and integer division.
    u, v = inp["cmp_a"], inp["cmp_b"]
    out.update(lt=(u < v).double(), eq=(u == v).double(), ge=(u >= v).double())
    out["cast_i32"] = (inp["cast_x"].float()).to(torch.int32).double()
    out["idiv"] = torch.div(inp["idiv_a"].long(), inp["idiv_b"].long(), rounding_mode="trunc").double()


def main():
    inp = read(sys.argv[1])
    out = {}

    # layernorm
    x, w, b = leaf(inp["ln_x"]), leaf(inp["ln_w"]), leaf(inp["ln_b"])
    y = F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)
    y.backward(inp["ln_dy"])
    out.update(ln_y=y, ln_dx=x.grad, ln_dw=w.grad, ln_db=b.grad, ln_mean=x.detach().mean(-1),
               ln_rstd=1.0 / torch.sqrt(x.detach().var(-1, unbiased=False) + 1e-5))

    # rmsnorm, written out
    x, w = leaf(inp["rms_x"]), leaf(inp["rms_w"])
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    y.backward(inp["rms_dy"])
    out.update(rms_y=y, rms_dx=x.grad, rms_dw=w.grad)

    # cross_entropy, default ignore_index (-100) and ignore_index=3
    for tag, ignore in (("ce", -100), ("ce3", 3)):
        x = leaf(inp[tag + "_x"])
        loss = F.cross_entropy(x, inp[tag + "_t"].long(), ignore_index=ignore)
        loss.backward(inp[tag + "_dloss"])
        out[tag + "_loss"] = loss
        out[tag + "_dx"] = x.grad
        out[tag + "_lse"] = torch.logsumexp(x.detach(), dim=-1)

    # gelu (tanh and none), silu
    for tag, approx in (("gelu_tanh", "tanh"), ("gelu_none", "none")):
        x = leaf(inp["act_x"])
        y = F.gelu(x, approximate=approx)
        y.backward(inp["act_dy"])
        out[tag + "_y"], out[tag + "_dx"] = y, x.grad
    x = leaf(inp["act_x"])
    y = F.silu(x)
    y.backward(inp["act_dy"])
    out["silu_y"], out["silu_dx"] = y, x.grad

    # log_softmax / softmax over the last axis and over axis 1 of a 3-D tensor
    for tag, key, dim in (("lsm", "sm_x", -1), ("lsm1", "sm3_x", 1)):
        x = leaf(inp[key])
        y = F.log_softmax(x, dim=dim)
        y.backward(inp[key.replace("_x", "_dy")])
        out[tag + "_y"], out[tag + "_dx"] = y, x.grad
    x = leaf(inp["sm_x"])
    y = F.softmax(x, dim=-1)
    y.backward(inp["sm_dy"])
    out["sm_y"], out["sm_dx"] = y, x.grad
    x = leaf(inp["sm3_x"])
    y = F.softmax(x, dim=0)
    y.backward(inp["sm3_dy"])
    out["sm0_y"], out["sm0_dx"] = y, x.grad

    # embedding
    w = leaf(inp["emb_w"])
    y = F.embedding(inp["emb_ids"].long(), w)
    y.backward(inp["emb_dy"])
    out["emb_y"], out["emb_dw"] = y, w.grad

    # rope (interleaved pairs), theta 500, offset 3, and its inverse
    for tag, inverse in (("rope", False), ("rope_inv", True)):
        x = leaf(inp["rope_x"])
        y = rope(x, 500.0, 3, inverse)
        y.backward(inp["rope_dy"])
        out[tag + "_y"], out[tag + "_dx"] = y, x.grad

    # AdamW + clip_grad_norm_, 3 steps over 3 parameters
    params = [inp["adam_p%d" % i].clone().requires_grad_(True) for i in range(3)]
    opt = torch.optim.AdamW(params, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    for step in range(1, 4):
        for i, p in enumerate(params):
            p.grad = inp["adam_g%d_%d" % (step, i)].clone()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm=0.5)
        out["adam_norm_%d" % step] = norm.reshape(())
        opt.step()
    for i, p in enumerate(params):
        st = opt.state[p]
        out["adam_p%d" % i] = p
        out["adam_m%d" % i] = st["exp_avg"]
        out["adam_v%d" % i] = st["exp_avg_sq"]

    tensor_ops(inp, out)
    write(sys.argv[2], out)


if __name__ == "__main__":
    main()
