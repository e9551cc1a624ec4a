"""PyTorch parity check for Loom SDPA (run by sdpa_torch_parity_test).

Usage: /usr/bin/python3 torch_parity.py DIR
DIR holds cases.json and data.bin (raw little-endian f32) written by the test.
For each case it recomputes attention written out in torch 1.13 (which has no
scaled_dot_product_attention):

    s = q @ k^T * scale (+ additive mask | masked_fill(~bool_mask, -inf)),
    causal: masked_fill(~tril(ones(T, S)), -inf)   (top-left aligned)
    out = softmax(s, -1) @ v,   GQA via repeat_interleave over heads,

in f32, gets dq/dk/dv by autograd from out.backward(dout), and compares Loom's
out, lse, dq, dk, dv for every implementation: ||loom - torch|| / ||torch|| < 1e-5.
Exit 0 and "PARITY OK" on success, 1 on a mismatch, 77 if torch is missing.
"""
import json
import math
import sys

import numpy as np

try:
    import torch
except ImportError:  # pragma: no cover
    print("torch not importable")
    sys.exit(77)

TOL = 1e-5


def tensor(data, spec):
    n = int(np.prod(spec["shape"])) if spec["shape"] else 1
    a = data[spec["offset"]:spec["offset"] + n].reshape(spec["shape"])
    return torch.from_numpy(a.copy())


def reference(c, data):
    q = tensor(data, c["q"]).requires_grad_(True)
    k = tensor(data, c["k"]).requires_grad_(True)
    v = tensor(data, c["v"]).requires_grad_(True)
    dout = tensor(data, c["dout"])
    H, T, D = q.shape[1], q.shape[2], q.shape[3]
    Hkv, S = k.shape[1], k.shape[2]
    G = H // Hkv
    scale = c["scale"] if c["scale"] is not None else 1.0 / math.sqrt(D)
    kk = k.repeat_interleave(G, dim=1)
    vv = v.repeat_interleave(G, dim=1)
    s = q @ kk.transpose(-1, -2) * scale
    if c["mask_kind"] == 1:
        s = s.masked_fill(~(tensor(data, c["mask"]) != 0), float("-inf"))
    elif c["mask_kind"] == 2:
        s = s + tensor(data, c["mask"])
    if c["causal"]:
        keep = torch.ones(T, S).tril().bool()
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    out = torch.softmax(s, dim=-1) @ vv
    out.backward(dout)
    return {"out": out.detach(), "lse": lse.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def main():
    d = sys.argv[1]
    with open(d + "/cases.json") as f:
        cases = json.load(f)
    data = np.fromfile(d + "/data.bin", dtype="<f4")
    torch.set_num_threads(1)
    worst = 0.0
    ok = True
    for c in cases:
        ref = reference(c, data)
        for r in c["results"]:
            errs = {}
            for key in ("out", "lse", "dq", "dk", "dv"):
                got = tensor(data, r[key])
                want = ref[key]
                e = float(torch.linalg.norm((got - want).double()) / max(torch.linalg.norm(want.double()), 1e-30))
                errs[key] = e
                worst = max(worst, e)
                if not (e < TOL):
                    ok = False
            print(f"{c['name']:<20} {r['impl']:<7} " + " ".join(f"{k}={v:.2e}" for k, v in errs.items()))
    print(f"worst relative error {worst:.2e} (bound {TOL:g})")
    if not ok:
        print("PARITY FAILED")
        sys.exit(1)
    print("PARITY OK")


if __name__ == "__main__":
    main()
