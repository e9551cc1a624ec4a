// The loom binary on ONNX models: `loom inspect`, `loom ops --onnx`,
// `loom train` and `loom run` on a small language model written here, and the
// issue's bad inputs at each entry point: exit 2 from inspect/train/run, and
// INVALID_ARGUMENT naming spec.model.onnx from `loom submit` (a coordinator
// started here).
#include <csignal>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "compiler/import/onnx/testing/onnx_test_util.h"
#include "gtest/gtest.h"
#include "runtime/service/testing/daemons.h"
#include "tests/testing/loom_cli.h"

namespace loom {
namespace {

using compiler::import::onnx::testing::ModelBuilder;
using testing::CliResult;
using testing::RunLoom;

constexpr int64_t kV = 32, kC = 8, kT = 8;

Tensor Weights(const std::vector<int64_t>& shape, double scale) {
  std::vector<double> v(NumElements(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.7 * static_cast<double>(i) + 0.3);
  return Tensor::FromVector(shape, v, DType::kF32);
}

// ids [batch, seq] -> Gather(embedding) -> MatMul(head) -> logits [batch, seq, V].
std::string TinyLm() {
  ModelBuilder mb(17);
  mb.Input("ids", DType::kI64, {-1, kT});
  mb.Initializer("emb", Weights({kV, kC}, 0.1));
  mb.Initializer("head", Weights({kC, kV}, 0.1));
  mb.Node("Gather", {"emb", "ids"}, {"h"}, "embed");
  mb.Node("MatMul", {"h", "head"}, {"logits"}, "lm_head");
  mb.Output("logits");
  return mb.Bytes();
}

std::string Job(const std::string& root, const std::string& model, const std::string& extra = "") {
  const std::string path = absl::StrCat(root, "/job_", std::hash<std::string>()(model + extra), ".yaml");
  std::ofstream(path) << "name: onnx-lm\nmodel: {onnx: " << model << ", seq_len: " << kT << ", vocab: " << kV
                      << "}\ndata: {path: " << root << "/tokens.u16, format: tokens}\n"
                      << "train: {steps: 3, batch_size: 2, eval_every: 3, eval_batches: 1, sample_tokens: 4}\n"
                      << "run_dir: " << root << "/runs/lm\n"
                      << extra;
  return path;
}

class OnnxCli : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::TestDir("onnx_cli");
    std::ofstream(root_ + "/lm.onnx", std::ios::binary) << TinyLm();
    const std::string bytes = TinyLm();
    std::ofstream(root_ + "/truncated.onnx", std::ios::binary) << bytes.substr(0, bytes.size() / 3);
    std::vector<uint16_t> tokens(4096);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7) % kV);
    std::ofstream(root_ + "/tokens.u16", std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  }
  std::string root_;
};

TEST_F(OnnxCli, InspectAndOps) {
  CliResult r = RunLoom(absl::StrCat("inspect ", root_, "/lm.onnx --dim d0=2"));
  EXPECT_EQ(r.code, 0) << r.output;
  for (const char* s : {"Gather", "supported", "parameters: 2 tensors, 512 values", "emb", "data inputs: 1",
                        "embedding(%emb, %ids)", "patterns matched"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << " missing from:\n" << r.output;
  r = RunLoom(absl::StrCat("inspect ", root_, "/truncated.onnx"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("truncated or malformed"), std::string::npos) << r.output;
  r = RunLoom("ops --onnx");
  EXPECT_EQ(r.code, 0);
  for (const char* op : {"Einsum", "SoftmaxCrossEntropyLoss", "LayerNormalization", "Trilu"})
    EXPECT_NE(r.output.find(op), std::string::npos) << op;
}

TEST_F(OnnxCli, TrainAndRunTakeTheModelAndRefuseBadOnes) {
  CliResult r = RunLoom("train " + Job(root_, root_ + "/lm.onnx"), 300);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("final validation loss"), std::string::npos) << r.output;
  for (const char* cmd : {"train ", "run "}) {
    r = RunLoom(cmd + Job(root_, root_ + "/truncated.onnx"), 300);
    EXPECT_EQ(r.code, 2) << cmd << r.output;
    EXPECT_NE(r.output.find("model.onnx: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("truncated or malformed"), std::string::npos) << r.output;
    r = RunLoom(cmd + Job(root_, root_ + "/lm.onnx", "parallel: {dp: 2}\n"), 300);
    EXPECT_EQ(r.code, 2) << cmd << r.output;
    EXPECT_NE(r.output.find("ONNX models train in one process"), std::string::npos) << r.output;
  }
}

TEST_F(OnnxCli, SubmitRefusesABadModelNamingTheField) {
  const std::string data = root_ + "/coord", port_file = root_ + "/port";
  pid_t coord = testing::Spawn({"runtime/loom", "coordinator", "--data-dir", data, "--listen", "127.0.0.1:0",
                                "--metrics-listen", "off", "--port-file", port_file},
                               root_ + "/coord.log");
  ASSERT_GT(testing::ReadPort(port_file, 20), 0) << "coordinator did not start";
  int port = 0;
  std::ifstream(port_file) >> port;
  const std::string submit = absl::StrCat("submit ", Job(root_, root_ + "/truncated.onnx"), " --coordinator 127.0.0.1:",
                                          port, " --data-dir ", data);
  CliResult r = RunLoom(submit, 60);
  kill(coord, SIGTERM);
  testing::WaitExit(coord, 20);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("spec.model.onnx: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("truncated or malformed"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace loom
