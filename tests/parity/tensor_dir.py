"""A tiny tensor exchange format shared by Loom's C++ tests and PyTorch scripts.

A directory holds index.json ({"name": {"dtype": "f32"|"f64"|"i32", "shape": [...]}})
and one raw little-endian file per tensor, name.bin (slashes in names are kept as
'.'). Only the Python standard library and torch are used here.
"""
import json
import os

import torch

_DTYPES = {"f32": torch.float32, "f64": torch.float64, "i32": torch.int32, "i64": torch.int64}
_NAMES = {v: k for k, v in _DTYPES.items()}


def load(path):
    with open(os.path.join(path, "index.json")) as f:
        index = json.load(f)
    out = {}
    for name, meta in index.items():
        with open(os.path.join(path, name + ".bin"), "rb") as f:
            raw = bytearray(f.read())
        t = torch.frombuffer(raw, dtype=_DTYPES[meta["dtype"]]) if raw else torch.empty(0, dtype=_DTYPES[meta["dtype"]])
        out[name] = t.reshape(meta["shape"]).clone()
    return out


def save(path, tensors):
    os.makedirs(path, exist_ok=True)
    index = {}
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        index[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape)}
        with open(os.path.join(path, name + ".bin"), "wb") as f:
            f.write(t.numpy().tobytes())
    with open(os.path.join(path, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
