#!/usr/bin/env python3
"""Export a PyTorch model to ONNX with the settings Loom trains from.

  loom_export.py MODULE:FACTORY --out model.onnx [--opset 17] [--no-dynamic-batch]

MODULE is a Python file (models/gpt.py) or a dotted module name (mypkg.models)
importable from the current folder; FACTORY is a function in it that takes no
arguments and returns (model, example): an nn.Module and an example batch (a
tensor, a tuple of tensors given to forward in order, or a dict of tensors
given by name).

What the file gets:
  - the graph in training mode (dropout stays, with training_mode = true),
    nothing constant-folded, parameters kept as initializers (not graph
    inputs), the first axis of every input and output dynamic ("batch");
  - metadata_props (what `loom inspect` shows and the importer reads):
      loom.parameters  the initializers that are the module's parameters
                       (comma-separated); everything else is a buffer;
      loom.inputs      the data inputs, in order;
      loom.outputs     the outputs, in order; loom.loss the output that is
                       the model's own loss, when forward returns a scalar;
      loom.exporter    the torch version and which exporter wrote the file.
Every parameter's initializer carries the parameter's name from
named_parameters() (a tied weight: the first name). The exporter maps them by
identity: each parameter is filled with values no other tensor holds, the
model is exported, every initializer holding a parameter's values is renamed
to that parameter, and the real values are written back. A parameter that
forward uses but that reaches the graph only as a computed value (or in more
than one initializer) is an error naming it; a parameter forward never uses
is left out with a warning.

Exporters: torch 1.x uses torch.onnx.export's TorchScript exporter. torch 2.x
uses whatever torch.onnx.export does by default in that version (the
TorchScript exporter up to 2.8; from 2.9 the torch.export-based one, called
with optimize=False so that no parameter is folded, external_data=False for
one file, and the batch as a torch.export.Dim shared by every input's first
axis); the script prints which, and loom.exporter records it.
Run it with the Python that has your torch (on Debian: /usr/bin/python3).

Exit codes: 0 written; 2 bad arguments or a model the exporter cannot map
(the message names the argument or the parameter); 3 torch or onnx missing.
"""
import argparse
import importlib
import importlib.util
import inspect
import os
import sys

try:
    import torch
    import onnx
    import onnx.numpy_helper
except ImportError as e:  # scripts and tests tell this apart from a failure
    print(f"loom_export: {e} (install python3-torch and python3-onnx)", file=sys.stderr)
    raise SystemExit(3)

DEFAULT_OPSET = 17
BATCH_DIM = "batch"


class ExportError(Exception):
    """Bad input: a message naming the argument or parameter (exit 2)."""


def load_factory(spec):
    if ":" not in spec:
        raise ExportError(f"'{spec}': expected MODULE:FACTORY (a file or dotted module, a colon, a function name)")
    module_name, factory_name = spec.rsplit(":", 1)
    if module_name.endswith(".py") or os.sep in module_name:
        if not os.path.isfile(module_name):
            raise ExportError(f"module '{module_name}': no such file")
        folder = os.path.dirname(os.path.abspath(module_name))
        sys.path.insert(0, folder)  # the file's own imports resolve beside it
        mod_spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(module_name))[0],
                                                          module_name)
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            raise ExportError(f"module '{module_name}': {e}")
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise ExportError(f"'{factory_name}' is not a function of module '{module_name}'")
    return factory


def check_factory_result(result, spec):
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise ExportError(f"{spec} returned {type(result).__name__}; expected (nn.Module, example batch)")
    model, example = result
    if not isinstance(model, torch.nn.Module):
        raise ExportError(f"{spec} returned a {type(model).__name__} as the model; expected an nn.Module")
    if isinstance(example, torch.Tensor):
        example = (example,)
    if isinstance(example, dict):
        bad = [k for k, v in example.items() if not isinstance(v, torch.Tensor)]
    elif isinstance(example, (tuple, list)):
        example = tuple(example)
        bad = [str(i) for i, v in enumerate(example) if not isinstance(v, torch.Tensor)]
    else:
        raise ExportError(f"{spec}: the example batch is a {type(example).__name__}; expected a tensor, tuple or dict")
    if bad:
        raise ExportError(f"{spec}: example batch entries {', '.join(bad)} are not tensors")
    return model, example


def input_names(model, example):
    if isinstance(example, dict):
        return list(example)
    params = [p.name for p in inspect.signature(model.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [params[i] if i < len(params) else f"input_{i}" for i in range(len(example))]


def flatten_outputs(out):
    """(names, tensors) of forward's result: a tensor, a tuple/list or a dict."""
    if isinstance(out, torch.Tensor):
        return ["loss" if out.dim() == 0 else "logits"], [out]
    if isinstance(out, dict):
        return list(out), list(out.values())
    if isinstance(out, (tuple, list)):
        names = ["loss" if out[0].dim() == 0 else "logits"] + [f"output_{i}" for i in range(1, len(out))]
        return names, list(out)
    raise ExportError(f"forward returned a {type(out).__name__}; expected a tensor, tuple or dict of tensors")


def call(model, example):
    return model(**example) if isinstance(example, dict) else model(*example)


def used_parameters(model, example, params):
    """Names of the parameters the outputs depend on (autograd decides)."""
    _, outs = flatten_outputs(call(model, example))
    total = sum(o.float().sum() for o in outs if o.is_floating_point() and o.requires_grad)
    if not isinstance(total, torch.Tensor):
        return set()
    grads = torch.autograd.grad(total, [p for _, p in params], allow_unused=True)
    return {name for (name, _), g in zip(params, grads) if g is not None}


def fill_unique(params):
    """Gives every parameter element a distinct f32 bit pattern (counting up
    from 1.0). Returns the first pattern of each parameter."""
    first, start = {}, 0x3F800000
    with torch.no_grad():
        for name, p in params:
            if p.dtype != torch.float32:
                raise ExportError(f"parameter '{name}' is {p.dtype}; Loom trains f32 parameters (call model.float())")
            bits = torch.arange(start, start + p.numel(), dtype=torch.int32)
            p.copy_(bits.view(torch.float32).reshape(p.shape))
            first[name] = start
            start += p.numel()
    if start >= 0x7F800000:
        raise ExportError("the model has more parameter elements than distinct finite f32 values above 1.0")
    return first


def tensor_bits(init):
    """The initializer's contents as int32 bit patterns, or None when it is not f32."""
    if init.data_type != onnx.TensorProto.FLOAT:
        return None
    arr = onnx.numpy_helper.to_array(init)
    return torch.from_numpy(arr.copy()).reshape(-1).view(torch.int32)


def map_parameters(graph, params, first, used):
    """initializer name -> parameter name, by the unique values."""
    by_start = {first[n]: (n, p) for n, p in params}
    found = {}
    for init in graph.initializer:
        bits = tensor_bits(init)
        if bits is None or bits.numel() == 0:
            continue
        hit = by_start.get(int(bits[0]))
        if hit is None:
            continue
        name, p = hit
        expect = torch.arange(first[name], first[name] + p.numel(), dtype=torch.int32)
        if list(init.dims) == list(p.shape) and torch.equal(bits, expect):
            found.setdefault(name, []).append(init.name)
    mapping = {}
    for name, p in params:
        inits = found.get(name, [])
        if len(inits) > 1:
            raise ExportError(f"parameter '{name}' is held by {len(inits)} initializers ({', '.join(inits)}); "
                              "Loom would train them as separate weights")
        if not inits:
            if name in used:
                raise ExportError(f"parameter '{name}' (shape {list(p.shape)}) reaches the ONNX graph only as a "
                                  "computed value (the exporter folded or copied it), so it cannot be trained as a "
                                  "parameter; use it directly in forward")
            print(f"loom_export: warning: parameter '{name}' is not used by forward; left out", file=sys.stderr)
            continue
        mapping[inits[0]] = name
    return mapping


def rename_values(graph, mapping):
    """Renames initializers (and every reference to them) old -> new."""
    taken = {v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info)}
    taken |= {o for n in graph.node for o in n.output} | {i.name for i in graph.initializer}
    for old, new in mapping.items():
        if old != new and new in taken:
            raise ExportError(f"parameter '{new}': the exported graph already has a value of that name")
    for init in graph.initializer:
        init.name = mapping.get(init.name, init.name)
    for vi in list(graph.input) + list(graph.value_info):
        vi.name = mapping.get(vi.name, vi.name)
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in mapping:
                node.input[i] = mapping[name]


def write_back(graph, originals):
    for init in graph.initializer:
        if init.name in originals:
            value = originals[init.name].detach().cpu().contiguous().numpy()
            init.CopyFrom(onnx.numpy_helper.from_array(value, init.name))


def default_exporter():
    """'torchscript' or 'dynamo': what torch.onnx.export does when not told."""
    if int(torch.__version__.split(".")[0]) < 2:
        return "torchscript"
    dynamo = inspect.signature(torch.onnx.export).parameters.get("dynamo")
    return "dynamo" if dynamo is not None and dynamo.default is True else "torchscript"


def run_export(model, example, path, opset, names, out_names, dynamic_batch):
    kind = default_exporter()
    common = dict(export_params=True, opset_version=opset, input_names=names, output_names=out_names)
    if kind == "torchscript":  # a dict as the last element of args is read as keyword arguments
        args = (example,) if isinstance(example, dict) else example
        axes = {n: {0: BATCH_DIM} for n in names + out_names} if dynamic_batch else None
        torch.onnx.export(model, args, path, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          keep_initializers_as_inputs=False, dynamic_axes=axes, **common)
        return kind
    # torch.export-based: the module is captured in the mode it is in (train);
    # one Dim shared by every input's first axis is the batch.
    extra = {}
    params = inspect.signature(torch.onnx.export).parameters
    if "optimize" in params:
        extra["optimize"] = False  # no folding: parameters stay initializers of their own
    if "external_data" in params:
        extra["external_data"] = False
    if dynamic_batch:
        batch = torch.export.Dim(BATCH_DIM)
        extra["dynamic_shapes"] = ({n: {0: batch} for n in example} if isinstance(example, dict)
                                   else tuple({0: batch} for _ in example))
    kwargs = example if isinstance(example, dict) else None
    args = () if isinstance(example, dict) else tuple(example)
    torch.onnx.export(model, args, path, kwargs=kwargs, dynamo=True, **common, **extra)
    return kind


def set_metadata(model_proto, entries):
    keep = [kv for kv in model_proto.metadata_props if kv.key not in entries]
    del model_proto.metadata_props[:]
    model_proto.metadata_props.extend(keep)
    for key, value in entries.items():
        kv = model_proto.metadata_props.add()
        kv.key, kv.value = key, value


def export(spec, out, opset=DEFAULT_OPSET, dynamic_batch=True):
    model, example = check_factory_result(load_factory(spec)(), spec)
    model.train()
    params = list(model.named_parameters())  # shared parameters once, under their first name
    names = input_names(model, example)
    out_names, outs = flatten_outputs(call(model, example))
    used = used_parameters(model, example, params)
    originals = {n: p.detach().clone() for n, p in params}
    first = fill_unique(params)
    try:
        kind = run_export(model, example, out, opset, names, out_names, dynamic_batch)
    finally:
        with torch.no_grad():
            for n, p in params:
                p.copy_(originals[n])
    m = onnx.load(out)
    mapping = map_parameters(m.graph, params, first, used)
    rename_values(m.graph, mapping)
    write_back(m.graph, originals)
    meta = {
        "loom.parameters": ",".join(n for n, _ in params if n in mapping.values()),
        "loom.inputs": ",".join(i.name for i in m.graph.input),
        "loom.outputs": ",".join(o.name for o in m.graph.output),
        "loom.exporter": f"torch {torch.__version__} ({kind})",
    }
    if outs[0].dim() == 0:
        meta["loom.loss"] = m.graph.output[0].name
    set_metadata(m, meta)
    onnx.checker.check_model(m)
    onnx.save(m, out)
    return kind, mapping, meta


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("factory", help="MODULE:FACTORY, e.g. models.py:gpt or mypkg.models:build")
    ap.add_argument("--out", required=True, help="the ONNX file to write")
    ap.add_argument("--opset", type=int, default=DEFAULT_OPSET, help="ONNX opset (Loom imports 7-17; default 17)")
    ap.add_argument("--dynamic-batch", action=argparse.BooleanOptionalAction, default=True,
                    help="make the first axis of inputs and outputs symbolic (default: on)")
    a = ap.parse_args(argv)
    if not 7 <= a.opset <= 17:
        print(f"loom_export: --opset: {a.opset} is outside the opsets Loom imports (7-17)", file=sys.stderr)
        return 2
    try:
        kind, mapping, meta = export(a.factory, a.out, a.opset, a.dynamic_batch)
    except ExportError as e:
        print(f"loom_export: {e}", file=sys.stderr)
        return 2
    renamed = {old: new for old, new in mapping.items() if old != new}
    print(f"loom_export: {a.out}: {meta['loom.exporter']}, opset {a.opset}")
    print(f"  inputs: {meta['loom.inputs']}; outputs: {meta['loom.outputs']}"
          + (f" (loss: {meta['loom.loss']})" if "loom.loss" in meta else ""))
    print(f"  {len(mapping)} parameters" + (f", {len(renamed)} renamed from the exporter's names: "
                                            + ", ".join(f"{o} -> {n}" for o, n in renamed.items()) if renamed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
