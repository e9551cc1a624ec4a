// Test helpers for the ONNX importer: a small ModelProto builder and a
// forward runner over Loom's compile pipeline and CPU executor.
//
//   ModelBuilder mb(17);
//   mb.Input("x", DType::kF32, {2, 3});
//   mb.Initializer("w", Tensor::FromVector({3, 4}, w));
//   mb.Node("MatMul", {"x", "w"}, {"y"});
//   mb.Output("y");
//   auto m = ImportModelBytes(mb.Bytes());
//   auto outs = RunForward(*m, {{"x", x}});
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "compiler/import/onnx/importer.h"
#include "onnx/onnx_pb.h"

namespace loom::compiler::import::onnx::testing {

class ModelBuilder {
 public:
  explicit ModelBuilder(int opset = 17);
  // A data input; a negative dim is left symbolic under the name "d<i>".
  ModelBuilder& Input(const std::string& name, DType dtype, const std::vector<int64_t>& shape);
  ModelBuilder& Initializer(const std::string& name, const Tensor& value);
  ::onnx::NodeProto& Node(const std::string& op, const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs, const std::string& name = "");
  ModelBuilder& Output(const std::string& name);
  ModelBuilder& Metadata(const std::string& key, const std::string& value);
  ::onnx::ModelProto& model() { return model_; }
  std::string Bytes() const;

 private:
  ::onnx::ModelProto model_;
};

// Attribute helpers for ModelBuilder::Node(...).
void AttrInt(::onnx::NodeProto& n, const std::string& name, int64_t v);
void AttrFloat(::onnx::NodeProto& n, const std::string& name, float v);
void AttrInts(::onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v);
void AttrString(::onnx::NodeProto& n, const std::string& name, const std::string& v);
void AttrTensor(::onnx::NodeProto& n, const std::string& name, const Tensor& v);

// Compiles m.graph (forward only, the pipeline training uses) and runs it on
// the CPU executor; `data` gives the data inputs by name, m.initial the rest.
absl::StatusOr<std::vector<Tensor>> RunForward(const ImportedModel& m, const std::map<std::string, Tensor>& data);

}  // namespace loom::compiler::import::onnx::testing
