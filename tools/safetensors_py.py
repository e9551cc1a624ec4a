#!/usr/bin/python3
"""Read and write safetensors files from Python with torch only (Debian has no
`safetensors` package for Python).

The format: an 8-byte little-endian header length N, N bytes of JSON mapping
each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
into the data section) plus an optional "__metadata__" string map, then the
data section with every tensor's bytes, little-endian, row-major.

  import safetensors_py as st
  st.save("model.safetensors", model.state_dict(), {"format": "pt"})
  tensors, metadata = st.load("model.safetensors")
  model.load_state_dict(tensors, strict=True)

load() checks the header (known dtypes, shapes that match their byte ranges,
ranges inside the data section and disjoint) and raises ValueError naming the
file and the tensor. save() writes tensors in the order given, the header
padded with spaces so the data section starts 8-aligned. Tensors sharing
storage (tied weights) are written as separate copies.

Command line: safetensors_py.py inspect FILE   (one line per tensor)
"""
import json
import struct
import sys

import torch

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
NAMES = {v: k for k, v in DTYPES.items()}


def _nbytes(dtype, shape):
    n = torch.tensor([], dtype=dtype).element_size()
    for d in shape:
        n *= d
    return n


def read_header(path):
    """(header without __metadata__, metadata, data_start, file size) of a file."""
    with open(path, "rb") as f:
        prefix = f.read(8)
        f.seek(0, 2)
        size = f.tell()
        if len(prefix) < 8:
            raise ValueError("%s: shorter than the 8-byte header length" % path)
        (n,) = struct.unpack("<Q", prefix)
        if n > size - 8:
            raise ValueError("%s: header length %d runs past the end of the file (%d bytes)" % (path, n, size))
        f.seek(8)
        header = json.loads(f.read(n).decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("%s: the header is not a JSON object" % path)
    metadata = header.pop("__metadata__", {}) or {}
    return header, metadata, 8 + n, size


def load(path):
    """(dict name -> torch.Tensor in file order, metadata dict)."""
    header, metadata, start, size = read_header(path)
    spans = []
    for name, info in header.items():
        if info.get("dtype") not in DTYPES:
            raise ValueError("%s: tensor '%s': unknown dtype %r" % (path, name, info.get("dtype")))
        begin, end = info["data_offsets"]
        want = _nbytes(DTYPES[info["dtype"]], info["shape"])
        if end - begin != want or begin < 0 or start + end > size:
            raise ValueError("%s: tensor '%s': data_offsets [%d, %d) do not hold %s %s"
                             % (path, name, begin, end, info["dtype"], info["shape"]))
        spans.append((begin, end, name))
    spans.sort()
    for a, b in zip(spans, spans[1:]):
        if b[0] < a[1]:
            raise ValueError("%s: tensors '%s' and '%s' overlap" % (path, a[2], b[2]))
    out = {}
    with open(path, "rb") as f:
        for name, info in header.items():
            begin, end = info["data_offsets"]
            dtype, shape = DTYPES[info["dtype"]], info["shape"]
            if end == begin:
                out[name] = torch.empty(shape, dtype=dtype)
                continue
            f.seek(start + begin)
            raw = bytearray(f.read(end - begin))
            out[name] = torch.frombuffer(raw, dtype=dtype).reshape(shape)
    return out, metadata


def save(path, tensors, metadata=None):
    """Writes dict name -> torch.Tensor (any device; stored from the CPU)."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    pos = 0
    for name, t in tensors.items():
        t = t.detach().to("cpu").contiguous()
        if t.dtype not in NAMES:
            raise ValueError("tensor '%s': dtype %s has no safetensors name" % (name, t.dtype))
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [pos, pos + len(raw)]}
        blobs.append(raw)
        pos += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def main(argv):
    if len(argv) != 3 or argv[1] != "inspect":
        print("usage: safetensors_py.py inspect FILE", file=sys.stderr)
        return 2
    header, metadata, _, _ = read_header(argv[2])
    for k, v in metadata.items():
        print("metadata %s = %s" % (k, v))
    for name, info in header.items():
        print("%s %s %s" % (name, info["dtype"], info["shape"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
