# Reads a Loom export with the `safetensors` package and PyTorch (GPU machine).
import json, sys
import safetensors, torch
from safetensors import safe_open
from safetensors.torch import load_file

path, expected_path = sys.argv[1], sys.argv[2]
expected = json.load(open(expected_path))
names = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "F16": torch.float16,
         "I32": torch.int32, "I64": torch.int64, "BOOL": torch.bool}
tensors = load_file(path, device="cuda" if torch.cuda.is_available() else "cpu")
with safe_open(path, framework="pt") as f:
    meta = f.metadata()
assert sorted(tensors) == sorted(expected), (sorted(tensors), sorted(expected))
for name, want in expected.items():
    t = tensors[name]
    assert t.dtype == names[want["dtype"]], (name, t.dtype)
    assert list(t.shape) == want["shape"], (name, t.shape)
    ref = torch.tensor(want["values"], dtype=torch.float64).reshape(want["shape"])
    assert torch.equal(t.double().cpu(), ref), name
print("safetensors", safetensors.__version__, "torch", torch.__version__, "device", next(iter(tensors.values())).device,
      "metadata", meta)
print("OK: %d tensors match (names, dtypes, shapes, values)" % len(expected))
