"""Tests of tools/loom_export.py (run by loom_export_test.sh with Debian's
/usr/bin/python3: torch 1.13 and onnx)."""
import contextlib
import io
import os
import sys
import tempfile
import textwrap
import unittest

import onnx
import onnx.helper
import onnx.numpy_helper
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loom_export  # noqa: E402

MODELS = textwrap.dedent('''
    import torch, torch.nn as nn

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(11, 6)
            self.ln = nn.LayerNorm(6)
            self.drop = nn.Dropout(0.0)
            self.head = nn.Linear(6, 11, bias=False)
            self.head.weight = self.wte.weight
            self.unused = nn.Parameter(torch.ones(3))
            self.register_buffer("scale", torch.full((6,), 0.5))
        def forward(self, idx):
            return self.head(self.drop(self.ln(self.wte(idx))) * self.scale)

    def tied():
        torch.manual_seed(0)
        return Tied(), torch.randint(0, 11, (2, 5))

    class WithLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)
        def forward(self, features, labels):
            return nn.functional.cross_entropy(self.lin(features), labels)

    def with_loss():
        return WithLoss(), {"features": torch.randn(2, 4), "labels": torch.tensor([0, 2])}

    def not_a_model():
        return 3, torch.zeros(1)

    def not_a_pair():
        return Tied()
''')


def metadata(m):
    return {kv.key: kv.value for kv in m.metadata_props}


class ExportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        cls.models = os.path.join(cls.dir, "models.py")
        with open(cls.models, "w") as f:
            f.write(MODELS)

    def run_main(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = loom_export.main(list(args))
        return code, out.getvalue() + err.getvalue()

    def test_tied_weights_buffers_and_unused_parameters(self):
        path = os.path.join(self.dir, "tied.onnx")
        code, out = self.run_main(f"{self.models}:tied", "--out", path)
        self.assertEqual(code, 0, out)
        self.assertIn("(torchscript), opset 17", out)
        self.assertIn("parameter 'unused' is not used by forward; left out", out)
        m = onnx.load(path)
        meta = metadata(m)
        # The tied weight is one parameter under its first name; the buffer is not a parameter.
        self.assertEqual(meta["loom.parameters"], "wte.weight,ln.weight,ln.bias")
        self.assertEqual(meta["loom.inputs"], "idx")
        self.assertEqual(meta["loom.outputs"], "logits")
        self.assertNotIn("loom.loss", meta)
        self.assertIn("torch " + torch.__version__, meta["loom.exporter"])
        inits = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
        model, _ = loom_export.load_factory(f"{self.models}:tied")()
        for name, p in model.named_parameters():  # the real values, not the fill pattern
            if name != "unused":
                self.assertTrue(torch.equal(torch.from_numpy(inits[name].copy()), p.detach()), name)
        self.assertTrue((inits["scale"] == 0.5).all())
        dims = m.graph.input[0].type.tensor_type.shape.dim
        self.assertEqual((dims[0].dim_param, dims[1].dim_value), ("batch", 5))
        # Training mode: the Dropout node stays, with its training_mode input.
        self.assertEqual([len(n.input) for n in m.graph.node if n.op_type == "Dropout"], [3])

    def test_static_batch_and_opset(self):
        path = os.path.join(self.dir, "static.onnx")
        code, out = self.run_main(f"{self.models}:tied", "--out", path, "--no-dynamic-batch", "--opset", "14")
        self.assertEqual(code, 0, out)
        m = onnx.load(path)
        self.assertEqual(m.graph.input[0].type.tensor_type.shape.dim[0].dim_value, 2)
        self.assertEqual([o.version for o in m.opset_import if o.domain in ("", "ai.onnx")], [14])
        code, out = self.run_main(f"{self.models}:tied", "--out", path, "--opset", "18")
        self.assertEqual(code, 2)
        self.assertIn("--opset: 18 is outside", out)

    def test_dict_inputs_and_a_loss_output(self):
        path = os.path.join(self.dir, "loss.onnx")
        code, out = self.run_main(f"{self.models}:with_loss", "--out", path)
        self.assertEqual(code, 0, out)
        meta = metadata(onnx.load(path))
        self.assertEqual(meta["loom.inputs"], "features,labels")
        self.assertEqual(meta["loom.loss"], "loss")
        self.assertEqual(meta["loom.parameters"], "lin.weight,lin.bias")

    def test_bad_arguments_name_what_is_wrong(self):
        out_path = os.path.join(self.dir, "bad.onnx")
        for spec, want in [("nocolon", "expected MODULE:FACTORY"),
                           ("/no/such/file.py:f", "no such file"),
                           ("no_such_module_xyz:f", "module 'no_such_module_xyz'"),
                           (f"{self.models}:missing", "'missing' is not a function"),
                           (f"{self.models}:not_a_model", "expected an nn.Module"),
                           (f"{self.models}:not_a_pair", "expected (nn.Module, example batch)")]:
            code, out = self.run_main(spec, "--out", out_path)
            self.assertEqual(code, 2, spec)
            self.assertIn(want, out, spec)


def graph_with(initializers, node_inputs):
    nodes = [onnx.helper.make_node("Identity", [n], [f"out_{i}"]) for i, n in enumerate(node_inputs)]
    outputs = [onnx.helper.make_tensor_value_info(f"out_{i}", onnx.TensorProto.FLOAT, None)
               for i in range(len(node_inputs))]
    inits = [onnx.numpy_helper.from_array(v.numpy(), name) for name, v in initializers.items()]
    return onnx.helper.make_graph(nodes, "g", [], outputs, inits)


class MappingTest(unittest.TestCase):
    """The identity mapping on graphs the way exporters rename and copy."""

    def setUp(self):
        self.w = torch.nn.Parameter(torch.zeros(2, 3))
        self.b = torch.nn.Parameter(torch.zeros(3))
        self.params = [("layer.w", self.w), ("layer.b", self.b)]
        self.first = loom_export.fill_unique(self.params)

    def test_renamed_initializers_get_the_parameter_names(self):
        g = graph_with({"onnx::MatMul_7": self.w.detach().clone(), "layer.b": self.b.detach().clone()},
                       ["onnx::MatMul_7", "layer.b"])
        mapping = loom_export.map_parameters(g, self.params, self.first, {"layer.w", "layer.b"})
        self.assertEqual(mapping, {"onnx::MatMul_7": "layer.w", "layer.b": "layer.b"})
        loom_export.rename_values(g, mapping)
        self.assertEqual([i.name for i in g.initializer], ["layer.w", "layer.b"])
        self.assertEqual(g.node[0].input[0], "layer.w")

    def test_a_parameter_only_in_computed_form_is_refused_by_name(self):
        g = graph_with({"onnx::Transpose_3": self.w.detach().t().contiguous(), "layer.b": self.b.detach().clone()},
                       ["onnx::Transpose_3", "layer.b"])
        with self.assertRaisesRegex(loom_export.ExportError, r"parameter 'layer.w' \(shape \[2, 3\]\).*computed"):
            loom_export.map_parameters(g, self.params, self.first, {"layer.w", "layer.b"})

    def test_a_parameter_in_two_initializers_is_refused_by_name(self):
        g = graph_with({"a": self.w.detach().clone(), "b": self.w.detach().clone(), "layer.b": self.b.detach().clone()},
                       ["a", "b", "layer.b"])
        with self.assertRaisesRegex(loom_export.ExportError, r"parameter 'layer.w' is held by 2 initializers \(a, b\)"):
            loom_export.map_parameters(g, self.params, self.first, {"layer.w", "layer.b"})

    def test_unique_fill_gives_every_element_its_own_value(self):
        values = torch.cat([self.w.detach().reshape(-1), self.b.detach()])
        self.assertEqual(len(set(values.tolist())), values.numel())
        self.assertTrue(torch.isfinite(values).all())

    def test_f64_parameters_are_refused_by_name(self):
        with self.assertRaisesRegex(loom_export.ExportError, r"parameter 'd' is torch.float64"):
            loom_export.fill_unique([("d", torch.nn.Parameter(torch.zeros(2, dtype=torch.float64)))])


if __name__ == "__main__":
    unittest.main()
