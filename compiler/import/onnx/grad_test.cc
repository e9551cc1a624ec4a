// Autodiff through every differentiable imported op, against f64 finite
// differences.
//
// Each case is a one-node ONNX model in f64: its differentiable operands are
// parameters (named by the "loom.parameters" metadata), its other operands
// constants or data inputs. After import the graph gets a scalar loss,
// sum_k sum(out_k * r_k) over the float outputs with fixed random r_k, and
// compiles with autodiff (the pipeline training uses, no optimizer). Its
// gradients must match central differences of the forward program (step
// 1e-6) within 1e-6 norm-wise relative error per parameter.
#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/rng.h"
#include "base/status.h"
#include "compiler/compile.h"
#include "compiler/executor.h"
#include "compiler/import/onnx/importer.h"
#include "compiler/import/onnx/params.h"
#include "compiler/import/onnx/testing/onnx_test_util.h"
#include "gtest/gtest.h"

namespace loom::compiler::import::onnx {
namespace {

using testing::AttrFloat;
using testing::AttrInt;
using testing::AttrInts;
using testing::AttrString;
using testing::ModelBuilder;

struct Operand {
  std::string name;
  Tensor value;
  enum Kind { kParam, kConst, kData } kind = kParam;
};

struct GradCase {
  std::string name, op;
  std::vector<Operand> ins;  // in node-input order; an empty name is an absent input
  int outputs = 1;
  int opset = 17;
  std::function<void(::onnx::NodeProto&)> attrs;
};

Tensor Rand(const std::vector<int64_t>& shape, uint64_t seed, double lo = -1, double hi = 1) {
  Tensor t = Tensor::MustEmpty(shape, DType::kF64);
  Philox rng(seed, 0);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = lo + (hi - lo) * rng.Uniform(i);
  return t;
}

Tensor Ints(const std::vector<int64_t>& shape, const std::vector<int64_t>& v) {
  Tensor t = Tensor::MustEmpty(shape, DType::kI64);
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

Operand P(const std::string& n, const std::vector<int64_t>& s, uint64_t seed, double lo = -1, double hi = 1) {
  return {n, Rand(s, seed, lo, hi), Operand::kParam};
}
Operand C(const std::string& n, Tensor t) { return {n, std::move(t), Operand::kConst}; }
Operand D(const std::string& n, Tensor t) { return {n, std::move(t), Operand::kData}; }

// The case's model, imported, with the scalar loss appended.
absl::StatusOr<ImportedModel> Build(const GradCase& c, std::map<std::string, Tensor>* data) {
  ModelBuilder mb(c.opset);
  std::vector<std::string> names, params;
  for (const Operand& o : c.ins) {
    names.push_back(o.name);
    if (o.name.empty()) continue;
    if (o.kind == Operand::kData) {
      mb.Input(o.name, o.value.dtype(), std::vector<int64_t>(o.value.shape().begin(), o.value.shape().end()));
      (*data)[o.name] = o.value;
    } else {
      mb.Initializer(o.name, o.value);
      if (o.kind == Operand::kParam) params.push_back(o.name);
    }
  }
  std::vector<std::string> outs;
  for (int k = 0; k < c.outputs; ++k) outs.push_back(absl::StrCat("out", k));
  auto& node = mb.Node(c.op, names, outs, c.name);
  if (c.attrs) c.attrs(node);
  for (const std::string& o : outs) mb.Output(o);
  mb.Metadata(kParametersKey, absl::StrJoin(params, ","));
  LOOM_ASSIGN_OR_RETURN(ImportedModel m, ImportModelBytes(mb.Bytes()));
  ir::Graph& g = m.graph;
  int loss = -1;
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const int v = g.outputs()[k].value;
    if (!IsFloating(g.meta(v).dtype)) continue;
    const std::string r = absl::StrCat("r", k);
    const int rv = g.AddInput(r, g.meta(v), ir::InputKind::kInput);
    (*data)[r] = Rand(std::vector<int64_t>(g.meta(v).shape.begin(), g.meta(v).shape.end()), 100 + k);
    LOOM_ASSIGN_OR_RETURN(int prod, g.AddOp1("mul", {v, rv}));
    LOOM_ASSIGN_OR_RETURN(int s, g.AddOp1("sum", {prod}));
    if (g.meta(s).dtype != DType::kF64) {
      LOOM_ASSIGN_OR_RETURN(s, g.AddOp1("cast", {s}, ir::Attrs{{"dtype", std::string("f64")}}));
    }
    if (loss < 0) {
      loss = s;
    } else {
      LOOM_ASSIGN_OR_RETURN(loss, g.AddOp1("add", {loss, s}));
    }
  }
  g.mutable_outputs().clear();
  g.AddOutput(loss);
  return m;
}

absl::StatusOr<std::vector<Tensor>> Run(Executor& e, const ImportedModel& m, const std::map<std::string, Tensor>& data,
                                        const std::map<std::string, Tensor>& params) {
  std::vector<Tensor> in;
  for (const ir::GraphInput& gi : e.program().graph.inputs()) {
    if (params.count(gi.name)) in.push_back(params.at(gi.name));
    else if (data.count(gi.name)) in.push_back(data.at(gi.name));
    else in.push_back(m.initial.at(gi.name));
  }
  std::vector<Tensor> out;
  LOOM_RETURN_IF_ERROR(e.Run(in, &out));
  for (Tensor& t : out) t = t.Clone();
  return out;
}

void CheckGradients(const GradCase& c) {
  SCOPED_TRACE(c.name);
  std::map<std::string, Tensor> data;
  auto m = Build(c, &data);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_FALSE(m->params.empty());
  CompileOptions fwd_opts, grad_opts;
  fwd_opts.differentiate = false;
  auto fwd = Compile(m->graph, fwd_opts);
  auto grad = Compile(m->graph, grad_opts);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  ASSERT_TRUE(grad.ok()) << grad.status();
  Executor fe(std::move(fwd->program)), ge(std::move(grad->program));
  std::map<std::string, Tensor> params;
  for (const std::string& p : m->params) params[p] = m->initial.at(p).Clone();
  auto g = Run(ge, *m, data, params);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->size(), 1 + m->params.size());
  const double h = 1e-6;
  for (size_t k = 0; k < m->params.size(); ++k) {
    Tensor& p = params[m->params[k]];
    Tensor fd = Tensor::Zeros(p.shape(), DType::kF64);
    for (int64_t i = 0; i < p.numel(); ++i) {
      const double x = p.GetDouble(i);
      p.SetDouble(i, x + h);
      auto up = Run(fe, *m, data, params);
      p.SetDouble(i, x - h);
      auto down = Run(fe, *m, data, params);
      p.SetDouble(i, x);
      ASSERT_TRUE(up.ok() && down.ok());
      fd.SetDouble(i, ((*up)[0].GetDouble(0) - (*down)[0].GetDouble(0)) / (2 * h));
    }
    const double err = RelativeError((*g)[1 + k], fd);
    EXPECT_LE(err, 1e-6) << "d loss / d " << m->params[k];
  }
}

// ---- The cases --------------------------------------------------------------------

std::vector<GradCase> ElementwiseCases() {
  std::vector<GradCase> cs;
  for (const char* op : {"Add", "Sub", "Mul"}) cs.push_back({op, op, {P("a", {2, 3}, 1), P("b", {3}, 2)}});
  cs.push_back({"Div", "Div", {P("a", {2, 3}, 1), P("b", {2, 1}, 2, 0.5, 2)}});
  cs.push_back({"Pow", "Pow", {P("a", {2, 3}, 1, 0.5, 2), P("b", {3}, 2)}});
  cs.push_back({"Pow_const_exponent", "Pow", {P("a", {2, 3}, 1, 0.5, 2), C("e", Rand({}, 3, 2.5, 2.5))}});
  cs.push_back({"Mul_scalar_const", "Mul", {P("a", {2, 3}, 1), C("s", Rand({}, 4, 1.5, 1.5))}});
  cs.push_back({"Div_scalar_const", "Div", {P("a", {2, 3}, 1), C("s", Rand({1}, 4, 1.5, 1.5))}});
  cs.push_back({"Sub_scalar_const", "Sub", {P("a", {2, 3}, 1), C("s", Rand({}, 4, 1.5, 1.5))}});
  cs.push_back({"Add_const_scalar_first", "Add", {C("s", Rand({}, 4, 1.5, 1.5)), P("a", {2, 3}, 1)}});
  for (const char* op : {"Neg", "Erf", "Exp", "Relu", "Tanh", "Sigmoid", "Sin", "Cos"})
    cs.push_back({op, op, {P("x", {2, 5}, 7, -2, 2)}});
  for (const char* op : {"Sqrt", "Reciprocal", "Log"}) cs.push_back({op, op, {P("x", {2, 5}, 7, 0.5, 2)}});
  Tensor cond = Tensor::MustEmpty({2, 3}, DType::kBool);
  for (int64_t i = 0; i < 6; ++i) static_cast<uint8_t*>(cond.raw_data())[i] = i % 2;
  cs.push_back({"Where", "Where", {C("c", cond), P("a", {2, 3}, 1), P("b", {3}, 2)}});
  return cs;
}

std::vector<GradCase> ShapeCases() {
  std::vector<GradCase> cs;
  cs.push_back({"Reshape", "Reshape", {P("x", {2, 6}, 1), C("s", Ints({3}, {3, -1, 2}))}});
  cs.push_back({"Transpose", "Transpose", {P("x", {2, 3, 4}, 1)}, 1, 17, [](auto& n) { AttrInts(n, "perm", {2, 0, 1}); }});
  cs.push_back({"Unsqueeze", "Unsqueeze", {P("x", {2, 3}, 1), C("a", Ints({2}, {0, -1}))}});
  cs.push_back({"Squeeze", "Squeeze", {P("x", {2, 1, 3}, 1), C("a", Ints({1}, {1}))}});
  cs.push_back({"Flatten", "Flatten", {P("x", {2, 3, 4}, 1)}, 1, 17, [](auto& n) { AttrInt(n, "axis", 2); }});
  cs.push_back({"Concat", "Concat", {P("a", {2, 3}, 1), P("b", {2, 2}, 2)}, 1, 17, [](auto& n) { AttrInt(n, "axis", -1); }});
  cs.push_back({"Split", "Split", {P("x", {2, 7}, 1), C("s", Ints({3}, {2, 0, 5}))}, 3, 17, [](auto& n) { AttrInt(n, "axis", 1); }});
  cs.push_back({"Slice_steps", "Slice", {P("x", {5, 7}, 1), C("st", Ints({2}, {4, 1})), C("en", Ints({2}, {-6, 100})),
                                         C("ax", Ints({2}, {0, 1})), C("sp", Ints({2}, {-2, 3}))}});
  cs.push_back({"Expand", "Expand", {P("x", {3, 1}, 1), C("s", Ints({3}, {2, 3, 4}))}});
  cs.push_back({"Tile", "Tile", {P("x", {2, 3}, 1), C("r", Ints({2}, {2, 3}))}});
  cs.push_back({"Gather", "Gather", {P("x", {3, 4}, 1), C("i", Ints({2, 2}, {0, 3, -1, 1}))}, 1, 17,
                [](auto& n) { AttrInt(n, "axis", 1); }});
  cs.push_back({"Gather_embedding", "Gather", {P("table", {5, 3}, 1), D("ids", Ints({2, 3}, {0, 4, 2, 2, 1, 0}))}});
  cs.push_back({"Trilu", "Trilu", {P("x", {2, 3, 4}, 1), C("k", Ints({}, {1}))}, 1, 17, [](auto& n) { AttrInt(n, "upper", 0); }});
  return cs;
}

std::vector<GradCase> NnCases() {
  std::vector<GradCase> cs;
  cs.push_back({"MatMul_3d", "MatMul", {P("a", {2, 3, 4}, 1), P("b", {4, 5}, 2)}});
  cs.push_back({"MatMul_vector", "MatMul", {P("a", {4}, 1), P("b", {2, 4, 3}, 2)}});
  cs.push_back({"Gemm", "Gemm", {P("a", {4, 3}, 1), P("b", {5, 4}, 2), P("c", {5}, 3)}, 1, 17, [](auto& n) {
                  AttrInt(n, "transA", 1);
                  AttrInt(n, "transB", 1);
                  AttrFloat(n, "alpha", 0.5f);
                  AttrFloat(n, "beta", 2.0f);
                }});
  cs.push_back({"Softmax", "Softmax", {P("x", {2, 3, 4}, 1)}, 1, 13, [](auto& n) { AttrInt(n, "axis", 1); }});
  cs.push_back({"Softmax_opset11_coerced", "Softmax", {P("x", {2, 3, 4}, 1)}, 1, 11, [](auto& n) { AttrInt(n, "axis", 1); }});
  cs.push_back({"LogSoftmax", "LogSoftmax", {P("x", {3, 5}, 1, -3, 3)}});
  cs.push_back({"LayerNormalization", "LayerNormalization", {P("x", {2, 3, 4}, 1), P("w", {4}, 2), P("b", {4}, 3)}});
  cs.push_back({"LayerNormalization_axis1_stats", "LayerNormalization",
                {P("x", {2, 3, 4}, 1), P("w", {3, 4}, 2), P("b", {3, 4}, 3)}, 3, 17, [](auto& n) {
                  AttrInt(n, "axis", 1);
                  AttrFloat(n, "epsilon", 1e-3f);
                  AttrInt(n, "stash_type", ::onnx::TensorProto::DOUBLE);  // f64 statistics: f32 ones defeat f64 FD
                }});
  cs.push_back({"Dropout_inference", "Dropout", {P("x", {2, 3}, 1)}});
  cs.push_back({"ReduceMean", "ReduceMean", {P("x", {2, 3, 4}, 1)}, 1, 17, [](auto& n) { AttrInts(n, "axes", {1, -1}); }});
  cs.push_back({"ReduceSum", "ReduceSum", {P("x", {2, 3, 4}, 1), C("a", Ints({1}, {0}))}, 1, 17,
                [](auto& n) { AttrInt(n, "keepdims", 0); }});
  cs.push_back({"ReduceMax", "ReduceMax", {P("x", {2, 3, 4}, 1)}, 1, 17, [](auto& n) { AttrInts(n, "axes", {2}); }});
  return cs;
}

std::vector<GradCase> EinsumAndLossCases() {
  std::vector<GradCase> cs;
  auto eq = [](const char* e) { return [e](::onnx::NodeProto& n) { AttrString(n, "equation", e); }; };
  cs.push_back({"Einsum_matmul", "Einsum", {P("a", {2, 3}, 1), P("b", {3, 4}, 2)}, 1, 17, eq("ij,jk->ik")});
  cs.push_back({"Einsum_batch", "Einsum", {P("a", {2, 3, 4}, 1), P("b", {2, 4, 5}, 2)}, 1, 17, eq("bij,bjk->bik")});
  cs.push_back({"Einsum_outer", "Einsum", {P("a", {3}, 1), P("b", {4}, 2)}, 1, 17, eq("i,j->ij")});
  cs.push_back({"Einsum_diagonal", "Einsum", {P("a", {2, 3, 3}, 1)}, 1, 17, eq("...ii->...i")});
  cs.push_back({"Einsum_implicit_sum", "Einsum", {P("a", {2, 3}, 1), P("b", {3, 2}, 2)}, 1, 17, eq("ij,jk")});
  cs.push_back({"Einsum_three", "Einsum", {P("a", {2, 3}, 1), P("b", {3, 4}, 2), P("c", {4}, 3)}, 1, 17, eq("ij,jk,k->i")});
  const Tensor labels = Ints({4}, {0, 2, -1, 1});
  cs.push_back({"SCE_mean_fast", "SoftmaxCrossEntropyLoss", {P("x", {4, 3}, 1, -2, 2), C("l", labels)}, 1, 17,
                [](auto& n) { AttrInt(n, "ignore_index", -1); }});
  cs.push_back({"SCE_weighted_sum_logprob", "SoftmaxCrossEntropyLoss",
                {P("x", {2, 3, 2}, 1, -2, 2), C("l", Ints({2, 2}, {0, 2, 1, 1})), P("w", {3}, 2, 0.5, 2)}, 2, 17,
                [](auto& n) {
                  AttrString(n, "reduction", "sum");
                  AttrInt(n, "ignore_index", 2);
                }});
  cs.push_back({"NLL_mean_weighted", "NegativeLogLikelihoodLoss",
                {P("x", {4, 3}, 1, -2, 0), C("l", labels), P("w", {3}, 2, 0.5, 2)}, 1, 17,
                [](auto& n) { AttrInt(n, "ignore_index", -1); }});
  cs.push_back({"NLL_none", "NegativeLogLikelihoodLoss", {P("x", {3, 3, 2}, 1, -2, 0), C("l", Ints({3, 2}, {0, 1, 2, 2, 1, 0}))},
                1, 17, [](auto& n) { AttrString(n, "reduction", "none"); }});
  return cs;
}

TEST(OnnxGrad, Elementwise) {
  for (const GradCase& c : ElementwiseCases()) CheckGradients(c);
}
TEST(OnnxGrad, ShapeAndIndex) {
  for (const GradCase& c : ShapeCases()) CheckGradients(c);
}
TEST(OnnxGrad, NnAndReduce) {
  for (const GradCase& c : NnCases()) CheckGradients(c);
}
TEST(OnnxGrad, EinsumAndLosses) {
  for (const GradCase& c : EinsumAndLossCases()) CheckGradients(c);
}

}  // namespace
}  // namespace loom::compiler::import::onnx
