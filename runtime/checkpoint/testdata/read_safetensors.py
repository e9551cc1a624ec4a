#!/usr/bin/python3
"""Independent safetensors reader (Python standard library only: struct + json).

Written from the format description, not from Loom's code, to check that Loom's
exported files are readable by others.

Usage: read_safetensors.py FILE [EXPECTED.json]
  Prints one line per tensor (name, dtype, shape, first values). With
  EXPECTED.json ({"name": {"dtype": "F32", "shape": [...], "values": [...]}}),
  checks that the file holds exactly those tensors, shapes and values, and
  exits non-zero on the first difference.
"""
import json
import struct
import sys

FORMATS = {"F64": ("d", 8), "F32": ("f", 4), "F16": ("e", 2), "I64": ("q", 8),
           "I32": ("i", 4), "BOOL": ("?", 1), "BF16": (None, 2)}


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("file shorter than the 8-byte length prefix")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError("header runs past the end of the file")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    spans = []
    for name, info in header.items():
        dtype, shape = info["dtype"], info["shape"]
        begin, end = info["data_offsets"]
        fmt, size = FORMATS[dtype]
        count = 1
        for d in shape:
            count *= d
        if end - begin != count * size or end > len(data):
            raise ValueError("%s: bad data_offsets" % name)
        raw = data[begin:end]
        if dtype == "BF16":
            halves = struct.unpack("<%dH" % count, raw)
            values = [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
        else:
            values = list(struct.unpack("<%d%s" % (count, fmt), raw))
        tensors[name] = {"dtype": dtype, "shape": shape, "values": values}
        spans.append((begin, end))
    # The data section must be covered back to back, without holes or overlaps.
    pos = 0
    for begin, end in sorted(spans):
        if begin != pos:
            raise ValueError("data section has a hole or overlap at byte %d" % begin)
        pos = end
    if pos != len(data):
        raise ValueError("data section has %d trailing bytes" % (len(data) - pos))
    return metadata, tensors


def main():
    metadata, tensors = read(sys.argv[1])
    for name in sorted(tensors):
        t = tensors[name]
        print("%s %s %s %s" % (name, t["dtype"], t["shape"], t["values"][:4]))
    if len(sys.argv) > 2:
        with open(sys.argv[2]) as f:
            expected = json.load(f)
        if sorted(expected) != sorted(tensors):
            print("FAIL: names %s != %s" % (sorted(tensors), sorted(expected)))
            return 1
        for name, want in expected.items():
            got = tensors[name]
            for key in ("dtype", "shape"):
                if got[key] != want[key]:
                    print("FAIL: %s %s %s != %s" % (name, key, got[key], want[key]))
                    return 1
            vals = [float(v) for v in got["values"]]
            if vals != [float(v) for v in want["values"]]:
                print("FAIL: %s values differ" % name)
                return 1
        if metadata.get("format") != "pt":
            print("FAIL: metadata %s" % metadata)
            return 1
        print("OK: %d tensors match" % len(expected))
    return 0


if __name__ == "__main__":
    sys.exit(main())
