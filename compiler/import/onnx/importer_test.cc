// The importer on small models built here: folding, the parameter/buffer
// split, input binding, and every kind of bad input the issue lists
// (truncated or hostile files, huge or negative dims, external data outside
// the roots, cycles, missing initializers, mismatched shapes, unsupported ops,
// control flow, dtypes and opsets). Each bad input must be InvalidArgument
// naming what is wrong; none may crash or allocate what the file claims.
#include "compiler/import/onnx/importer.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "compiler/import/onnx/params.h"
#include "compiler/import/onnx/training.h"
#include "compiler/import/onnx/testing/onnx_test_util.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"

namespace loom::compiler::import::onnx {
namespace {

using testing::AttrInt;
using testing::AttrInts;
using testing::ModelBuilder;

Tensor F32(const std::vector<int64_t>& shape, double start = 0.5) {
  std::vector<double> v(NumElements(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + 0.25 * static_cast<double>(i % 7);
  return Tensor::FromVector(shape, v, DType::kF32);
}

Tensor I64(const std::vector<int64_t>& values) {
  Tensor t = Tensor::MustEmpty({static_cast<int64_t>(values.size())}, DType::kI64);
  for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
  return t;
}

void ExpectInvalid(const absl::Status& s, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s.ok()) << "expected an error mentioning " << parts[0];
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s.message() << "\nmissing: " << p;
}

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

// x [2, 3] @ w [3, 4] -> y, with w a parameter by reachability.
ModelBuilder Linear() {
  ModelBuilder mb(17);
  mb.Input("x", DType::kF32, {2, 3});
  mb.Initializer("w", F32({3, 4}));
  mb.Node("MatMul", {"x", "w"}, {"y"}, "mm");
  mb.Output("y");
  return mb;
}

TEST(OnnxImport, LinearModelRunsAndClassifiesItsWeight) {
  auto m = ImportModelBytes(Linear().Bytes());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->params, std::vector<std::string>{"w"});
  EXPECT_EQ(m->data_inputs, std::vector<std::string>{"x"});
  EXPECT_EQ(m->report.param_rule, ParamRule::kReachability);
  EXPECT_GT(m->report.shape_checked, 0);
  auto out = testing::RunForward(*m, {{"x", F32({2, 3}, -1)}});
  ASSERT_TRUE(out.ok()) << out.status();
  auto want = kernels::RunOp("matmul", {F32({2, 3}, -1), F32({3, 4})});
  ASSERT_TRUE(want.ok());
  EXPECT_LT(RelativeError((*out)[0], (*want)[0]), 1e-6);
}

TEST(OnnxImport, ShapeChainsFoldIntoOneReshape) {
  // torch's x.view(x.size(0), -1): Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
  ModelBuilder mb(17);
  mb.Input("x", DType::kF32, {2, 3, 4});
  mb.Node("Shape", {"x"}, {"s"});
  mb.Initializer("zero", I64({0}));
  mb.Node("Gather", {"s", "zero"}, {"b"});
  mb.Initializer("minus1", I64({-1}));
  mb.Node("Concat", {"b", "minus1"}, {"shape"}).add_attribute()->CopyFrom([] {
    ::onnx::AttributeProto a;
    a.set_name("axis");
    a.set_type(::onnx::AttributeProto::INT);
    a.set_i(0);
    return a;
  }());
  mb.Node("Reshape", {"x", "shape"}, {"y"});
  mb.Output("y");
  auto m = ImportModelBytes(mb.Bytes());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(ir::PrintGraph(m->graph), R"IR(graph @test(%x: f32[2, 3, 4]) {
  %0 = reshape(%x) {shape=[2, 12]} : f32[2, 12]
  return %0
}
)IR");
}

TEST(OnnxImport, MetadataNamesTheParameters) {
  ModelBuilder mb = Linear();
  mb.Initializer("scale", F32({4}));
  mb.Node("Mul", {"y", "scale"}, {"z"});
  mb.model().mutable_graph()->mutable_output(0)->set_name("z");
  mb.Metadata(kParametersKey, " w ");
  auto m = ImportModelBytes(mb.Bytes());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->report.param_rule, ParamRule::kMetadata);
  EXPECT_EQ(m->params, std::vector<std::string>{"w"});
  EXPECT_EQ(m->buffers, std::vector<std::string>{"scale"});
  ModelBuilder bad = Linear();
  bad.Metadata(kParametersKey, "w,nope");
  ExpectInvalid(ImportModelBytes(bad.Bytes()).status(), {"loom.parameters", "'nope' is not an initializer"});
}

TEST(OnnxImport, ValuesOfInputsAreFoldedOnlyWhereNeeded) {
  ModelBuilder mb(17);
  mb.Input("x", DType::kF32, {2, 6});
  mb.Input("shape", DType::kI64, {2});
  mb.Node("Reshape", {"x", "shape"}, {"y"}, "r");
  mb.Output("y");
  ImportOptions o;
  ExpectInvalid(ImportModelBytes(mb.Bytes(), o).status(),
                {"node 'r' (Reshape, opset 17)", "input 1 'shape'", "must be known at import time"});
  o.input_values = {{"shape", I64({3, 4})}, {"x", F32({2, 6})}};
  auto m = ImportModelBytes(mb.Bytes(), o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->data_inputs, std::vector<std::string>{"x"});  // x stays a data input
  EXPECT_EQ(m->report.constant_inputs, std::vector<std::string>{"shape"});
}

TEST(OnnxImport, SymbolicDimsBindFromOptions) {
  ModelBuilder mb(17);
  mb.Input("x", DType::kF32, {-1, 3});
  mb.Initializer("w", F32({3, 4}));
  mb.Node("MatMul", {"x", "w"}, {"y"});
  mb.Output("y");
  ExpectInvalid(ImportModelBytes(mb.Bytes()).status(), {"graph input 'x'", "dim 0 is symbolic ('d0')"});
  ImportOptions o;
  o.dims = {{"d0", 5}};
  auto m = ImportModelBytes(mb.Bytes(), o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph.meta(m->graph.outputs()[0].value).shape, (Shape{5, 4}));
  ImportOptions huge;
  huge.dims = {{"d0", int64_t{1} << 40}};
  ExpectInvalid(ImportModelBytes(mb.Bytes(), huge).status(), {"graph input 'x'", "exceeds the limit"});
}

TEST(OnnxImport, BatchBindsASymbolicFirstDimOfAnyName) {
  ModelBuilder mb(17);
  mb.Input("x", DType::kF32, {-1, -1});  // dims d0, d1
  mb.Initializer("w", F32({3, 4}));
  mb.Node("MatMul", {"x", "w"}, {"y"});
  mb.Output("y");
  ImportOptions o;
  o.batch = 6;
  // Only the first dim: d1 stays unbound.
  ExpectInvalid(ImportModelBytes(mb.Bytes(), o).status(), {"graph input 'x'", "dim 1 is symbolic ('d1')"});
  o.dims = {{"d1", 3}};
  auto m = ImportModelBytes(mb.Bytes(), o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph.meta(m->graph.outputs()[0].value).shape, (Shape{6, 4}));
  o.dims = {{"d0", 2}, {"d1", 3}};  // dims wins over batch
  m = ImportModelBytes(mb.Bytes(), o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph.meta(m->graph.outputs()[0].value).shape, (Shape{2, 4}));
}

// A classifier: float features [batch, 3] -> logits [batch, 5]. x takes the
// features as f32, y the labels as i32 [batch] (not x's shape).
TEST(OnnxImport, TrainingGraphOfAClassifierTakesFloatInputsAndOneLabelPerRow) {
  ModelBuilder mb(17);
  mb.Input("features", DType::kF32, {4, 3});
  mb.Initializer("w", F32({3, 5}));
  mb.Node("MatMul", {"features", "w"}, {"logits"});
  mb.Output("logits");
  auto m = ImportModelBytes(mb.Bytes());
  ASSERT_TRUE(m.ok()) << m.status();
  TrainingGraphOptions o;
  auto t = BuildTrainingGraph(*m, o);
  ASSERT_TRUE(t.ok()) << t.status();
  const ir::Graph& g = t->graph;
  EXPECT_EQ(g.meta(g.inputs()[g.FindInput("x")].value).ToString(), "f32[4, 3]");
  EXPECT_EQ(g.meta(g.inputs()[g.FindInput("y")].value).ToString(), "i32[4]");
  o.vocab = 7;
  ExpectInvalid(BuildTrainingGraph(*m, o).status(), {"model.vocab: 7", "5 classes"});
  // f64 features are fed as f32 and cast.
  ModelBuilder m64(17);
  m64.Input("features", DType::kF64, {4, 3});
  m64.Initializer("w", Tensor::Zeros({3, 5}, DType::kF64));
  m64.Node("MatMul", {"features", "w"}, {"logits"});
  m64.Output("logits");
  auto i64 = ImportModelBytes(m64.Bytes());
  ASSERT_TRUE(i64.ok()) << i64.status();
  auto t64 = BuildTrainingGraph(*i64, {});
  ASSERT_TRUE(t64.ok()) << t64.status();
  EXPECT_EQ(t64->graph.meta(t64->graph.inputs()[t64->graph.FindInput("x")].value).dtype, DType::kF32);
  EXPECT_EQ(t64->graph.nodes()[0].op, "cast");
}

TEST(OnnxImport, TrainingGraphNamesTheDataInputsItCannotFeed) {
  ModelBuilder mb(17);
  mb.Input("a", DType::kF32, {4, 3});
  mb.Input("b", DType::kF32, {4, 3});
  mb.Node("Add", {"a", "b"}, {"logits"});
  mb.Output("logits");
  auto m = ImportModelBytes(mb.Bytes());
  ASSERT_TRUE(m.ok()) << m.status();
  ExpectInvalid(BuildTrainingGraph(*m, {}).status(), {"2 data inputs (a, b)", "name the token input"});
  TrainingGraphOptions o;
  o.token_input = "a";
  ExpectInvalid(BuildTrainingGraph(*m, o).status(), {"data input 'b' has no source"});
  o.target = "b";  // b is the label input: floating, fed y as f32 and used as the classes of each row
  ExpectInvalid(BuildTrainingGraph(*m, o).status(), {"the targets f32[4, 3]", "one class per row"});
}

TEST(OnnxImport, TrainingGraphFeedsDropoutTheStepAndEvaluationDropsIt) {
  // ids -> Gather(table) -> Dropout(0.5, training) -> logits [2, 4, 8] (dims as the trainer feeds).
  ModelBuilder mb(17);
  mb.Input("ids", DType::kI64, {2, 4});
  mb.Initializer("table", F32({8, 8}));
  mb.Initializer("ratio", Tensor::FromVector({}, {0.5}, DType::kF32));
  Tensor on = Tensor::MustEmpty({}, DType::kBool);
  static_cast<uint8_t*>(on.raw_data())[0] = 1;
  mb.Initializer("train", on);
  mb.Node("Gather", {"table", "ids"}, {"h"});
  mb.Node("Dropout", {"h", "ratio", "train"}, {"logits"});
  mb.Output("logits");
  auto m = ImportModelBytes(mb.Bytes());
  ASSERT_TRUE(m.ok()) << m.status();
  TrainingGraphOptions o;
  auto train = BuildTrainingGraph(*m, o);
  ASSERT_TRUE(train.ok()) << train.status();
  const ir::Graph& g = train->graph;
  ASSERT_GE(g.FindInput(kDropoutStep), 0);
  bool fed = false;
  for (const ir::Node& n : g.nodes())
    if (n.op == "dropout") fed = n.inputs.size() == 2 && n.inputs[1] == g.inputs()[g.FindInput(kDropoutStep)].value;
  EXPECT_TRUE(fed) << ir::PrintGraph(g);
  o.return_logits = true;
  auto eval = BuildTrainingGraph(*m, o);
  ASSERT_TRUE(eval.ok()) << eval.status();
  for (const ir::Node& n : eval->graph.nodes()) EXPECT_NE(n.op, "dropout");
  EXPECT_TRUE(eval->has_logits);
  o.token_input = "nope";
  ExpectInvalid(BuildTrainingGraph(*m, o).status(), {"'nope' is not a data input"});
}

// Attention as exporters write it (masked_fill over a tril buffer): the
// recovery passes make it sdpa{is_causal}, drop the mask buffer and report
// the match; without them the graph is as converted. Both compute the same.
ModelBuilder CausalAttention() {
  ModelBuilder mb(14);
  for (const char* n : {"q", "k", "v"}) mb.Input(n, DType::kF32, {1, 2, 4, 8});
  std::vector<double> tril(16);
  for (int i = 0; i < 16; ++i) tril[i] = (i % 4) <= (i / 4) ? 1.0 : 0.0;
  mb.Initializer("bias", Tensor::FromVector({1, 1, 4, 4}, tril, DType::kF32));
  auto constant = [&](const std::string& name, double v) {
    testing::AttrTensor(mb.Node("Constant", {}, {name}), "value", Tensor::FromVector({}, {v}, DType::kF32));
  };
  constant("scale", 1.0 / std::sqrt(8.0));
  constant("zero", 0.0);
  constant("ninf", -std::numeric_limits<double>::infinity());
  AttrInts(mb.Node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
  mb.Node("MatMul", {"q", "kt"}, {"s"});
  mb.Node("Mul", {"s", "scale"}, {"scaled"});
  mb.Node("Equal", {"bias", "zero"}, {"drop"});
  mb.Node("Where", {"drop", "ninf", "scaled"}, {"masked"});
  AttrInt(mb.Node("Softmax", {"masked"}, {"p"}), "axis", -1);
  mb.Node("MatMul", {"p", "v"}, {"y"});
  mb.Output("y");
  return mb;
}

TEST(OnnxImport, RecoveryPassesRebuildAttentionAndDropTheMask) {
  ModelBuilder mb = CausalAttention();
  auto fused = ImportModelBytes(mb.Bytes());
  ASSERT_TRUE(fused.ok()) << fused.status();
  ImportOptions off;
  off.recover_patterns = false;
  auto plain = ImportModelBytes(mb.Bytes(), off);
  ASSERT_TRUE(plain.ok()) << plain.status();
  std::map<std::string, int> ops;
  for (const ir::Node& n : fused->graph.nodes()) ++ops[n.op];
  EXPECT_EQ(ops["sdpa"], 1) << ir::PrintGraph(fused->graph);
  EXPECT_EQ(ops["softmax"] + ops["where"] + ops["matmul"], 0) << ir::PrintGraph(fused->graph);
  EXPECT_TRUE(fused->report.recovered);
  ASSERT_EQ(fused->report.patterns.size(), 1u);
  EXPECT_NE(fused->report.patterns[0].find("sdpa{is_causal=true}"), std::string::npos) << fused->report.patterns[0];
  EXPECT_TRUE(fused->buffers.empty()) << "the folded mask is no longer read";
  for (const std::string& b : plain->buffers) EXPECT_EQ(fused->initial.count(b), 0u) << b;
  EXPECT_FALSE(plain->report.recovered);
  EXPECT_TRUE(plain->report.patterns.empty());
  EXPECT_FALSE(plain->buffers.empty());
  EXPECT_EQ(fused->report.converted_nodes, plain->report.graph_nodes);
  std::map<std::string, Tensor> data;
  for (const char* n : {"q", "k", "v"}) data[n] = F32({1, 2, 4, 8}, n[0] == 'q' ? -1.0 : 0.25);
  auto a = testing::RunForward(*fused, data);
  auto b = testing::RunForward(*plain, data);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_LE(RelativeError((*a)[0], (*b)[0]), 1e-6);
}

// ---- Bad input -------------------------------------------------------------------

TEST(OnnxImportBadInput, TruncatedAndGarbageFiles) {
  const std::string good = Linear().Bytes();
  ExpectInvalid(ImportModelBytes(good.substr(0, good.size() / 2)).status(), {"truncated or malformed"});
  ExpectInvalid(ImportModelBytes(std::string(100, '\xff')).status(), {"truncated or malformed"});
  ExpectInvalid(ImportModelBytes("").status(), {"no graph"});
  // A graph field whose length prefix claims 2 GiB: refused without reading it.
  std::string claim = "\x3a\xff\xff\xff\xff\x07";
  ExpectInvalid(ImportModelBytes(claim + "abc").status(), {"truncated or malformed"});
}

TEST(OnnxImportBadInput, HugeNegativeAndMismatchedTensorSizes) {
  ModelBuilder huge = Linear();
  auto* t = huge.model().mutable_graph()->mutable_initializer(0);
  t->clear_dims();
  t->add_dims(int64_t{1} << 40);
  t->add_dims(int64_t{1} << 40);
  ExpectInvalid(ImportModelBytes(huge.Bytes()).status(), {"initializer 'w'", "exceeds the limit"});
  ModelBuilder neg = Linear();
  neg.model().mutable_graph()->mutable_initializer(0)->set_dims(0, -3);
  ExpectInvalid(ImportModelBytes(neg.Bytes()).status(), {"initializer 'w'", "negative dim -3"});
  ModelBuilder short_data = Linear();
  short_data.model().mutable_graph()->mutable_initializer(0)->mutable_raw_data()->resize(7);
  ExpectInvalid(ImportModelBytes(short_data.Bytes()).status(), {"initializer 'w'", "raw_data has 7 bytes", "needs 48"});
  ModelBuilder big_input = Linear();
  auto* dim = big_input.model().mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0);
  dim->set_dim_value(int64_t{1} << 62);
  ExpectInvalid(ImportModelBytes(big_input.Bytes()).status(), {"graph input 'x'", "exceeds the limit"});
}

TEST(OnnxImportBadInput, CyclesUndefinedInputsAndDuplicates) {
  ModelBuilder cyc(17);
  cyc.Input("x", DType::kF32, {2});
  cyc.Node("Add", {"x", "b"}, {"a"}, "first");
  cyc.Node("Neg", {"a"}, {"b"}, "second");
  cyc.Output("b");
  ExpectInvalid(ImportModelBytes(cyc.Bytes()).status(), {"cycle", "node '"});
  ModelBuilder missing(17);
  missing.Input("x", DType::kF32, {2, 3});
  missing.Node("MatMul", {"x", "w"}, {"y"}, "mm");
  missing.Output("y");
  ExpectInvalid(ImportModelBytes(missing.Bytes()).status(), {"node 'mm'", "input 'w' is not defined"});
  ModelBuilder dup = Linear();
  dup.Node("Neg", {"x"}, {"y"}, "again");
  ExpectInvalid(ImportModelBytes(dup.Bytes()).status(), {"value 'y' is defined more than once"});
  ModelBuilder no_out = Linear();
  no_out.Output("nowhere");
  ExpectInvalid(ImportModelBytes(no_out.Bytes()).status(), {"graph output 'nowhere' is not defined"});
}

TEST(OnnxImportBadInput, MismatchedShapesNameTheNode) {
  ModelBuilder mb(17);
  mb.Input("x", DType::kF32, {2, 3});
  mb.Initializer("w", F32({4, 5}));
  mb.Node("MatMul", {"x", "w"}, {"y"}, "proj");
  mb.Output("y");
  ExpectInvalid(ImportModelBytes(mb.Bytes()).status(), {"node 'proj' (MatMul, opset 17)", "matmul"});
}

TEST(OnnxImportBadInput, UnsupportedOpsControlFlowDtypesAndOpsets) {
  ModelBuilder loop = Linear();
  loop.Node("Loop", {"", ""}, {"l"}, "the_loop");
  ExpectInvalid(ImportModelBytes(loop.Bytes()).status(), {"node 'the_loop' (Loop, opset 17)", "control flow"});
  ModelBuilder iff = Linear();
  iff.Node("If", {"x"}, {"i"}, "branch");
  ExpectInvalid(ImportModelBytes(iff.Bytes()).status(), {"node 'branch' (If, opset 17)", "control flow"});
  ModelBuilder unk = Linear();
  unk.Node("Hardmax", {"y"}, {"h"}, "hm");
  ExpectInvalid(ImportModelBytes(unk.Bytes()).status(), {"node 'hm' (Hardmax, opset 17)", "not supported"});
  ModelBuilder dom = Linear();
  dom.Node("FusedGemm", {"x"}, {"f"}, "ms").set_domain("com.microsoft");
  ExpectInvalid(ImportModelBytes(dom.Bytes()).status(), {"node 'ms'", "domain 'com.microsoft'"});
  ModelBuilder u8(17);
  u8.Input("x", DType::kF32, {2});
  u8.model().mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::UINT8);
  u8.Node("Neg", {"x"}, {"y"});
  u8.Output("y");
  ExpectInvalid(ImportModelBytes(u8.Bytes()).status(), {"graph input 'x'", "dtype UINT8 is not supported"});
  for (int opset : {6, 18}) {
    ModelBuilder mb = Linear();
    mb.model().mutable_opset_import(0)->set_version(opset);
    ExpectInvalid(ImportModelBytes(mb.Bytes()).status(), {absl::StrCat("opset ", opset, " is not supported")});
  }
  ModelBuilder attr = Linear();
  AttrInt(attr.Node("Softmax", {"y"}, {"s"}, "sm"), "bogus", 1);
  ExpectInvalid(ImportModelBytes(attr.Bytes()).status(), {"node 'sm' (Softmax, opset 17)", "attribute 'bogus'"});
}

TEST(OnnxImportBadInput, ExternalDataStaysInsideTheRoots) {
  namespace fs = std::filesystem;
  const std::string root = TempDir() + "/ext_root", outside = TempDir() + "/ext_outside";
  fs::create_directories(root + "/weights");
  fs::create_directories(outside);
  const Tensor w = F32({3, 4});
  for (const std::string& f : {root + "/weights/w.bin", outside + "/w.bin"})
    std::ofstream(f, std::ios::binary).write(static_cast<const char*>(w.raw_data()), static_cast<std::streamsize>(w.nbytes()));
  fs::remove(root + "/link.bin");
  fs::create_symlink(outside + "/w.bin", root + "/link.bin");
  auto with_location = [&](const std::string& loc, const std::string& offset) {
    ModelBuilder mb = Linear();
    auto* t = mb.model().mutable_graph()->mutable_initializer(0);
    t->clear_raw_data();
    t->set_data_location(::onnx::TensorProto::EXTERNAL);
    auto* kv = t->add_external_data();
    kv->set_key("location");
    kv->set_value(loc);
    if (!offset.empty()) {
      kv = t->add_external_data();
      kv->set_key("offset");
      kv->set_value(offset);
    }
    const std::string path = root + "/model.onnx";
    std::ofstream(path, std::ios::binary) << mb.Bytes();
    return ImportModel(path);
  };
  auto ok = with_location("weights/w.bin", "");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_LT(RelativeError(ok->initial.at("w"), w), 1e-12);
  ExpectInvalid(with_location("../ext_outside/w.bin", "").status(), {"initializer 'w'", "outside the allowed roots"});
  ExpectInvalid(with_location("link.bin", "").status(), {"initializer 'w'", "outside the allowed roots"});
  ExpectInvalid(with_location(outside + "/w.bin", "").status(), {"initializer 'w'", "is absolute"});
  ExpectInvalid(with_location("weights/missing.bin", "").status(), {"initializer 'w'", "No such file"});
  ExpectInvalid(with_location("weights/w.bin", "40").status(), {"initializer 'w'", "lies outside"});
  ExpectInvalid(with_location("weights/w.bin", "-1").status(), {"initializer 'w'", "not a non-negative integer"});
  ASSERT_TRUE(with_location("weights/w.bin", "").ok());
  std::string bytes;
  {
    std::ifstream in(root + "/model.onnx", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ExpectInvalid(ImportModelBytes(bytes).status(), {"initializer 'w'", "external data needs the model's folder"});
}

}  // namespace
}  // namespace loom::compiler::import::onnx
