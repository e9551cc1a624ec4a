// The loom binary on ONNX models: `loom inspect`, `loom ops --onnx`,
// `loom train`, `loom run` (one rank, and dp x tp with a tp plan) and
// `loom plan` on a small language model written here, and the bad
// inputs at each entry point: exit 2 from inspect/train/run/plan, and
// INVALID_ARGUMENT naming spec.model.onnx or spec.parallel.tp_plan from
// `loom submit` (a coordinator started here).
#include <cmath>
#include <csignal>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "compiler/import/onnx/testing/onnx_test_util.h"
#include "gtest/gtest.h"
#include "runtime/service/testing/daemons.h"
#include "tests/testing/loom_cli.h"

namespace loom::tests::cli {
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

// TinyLm with every other feature of the embedding dropped (Slice with step
// 2, as interleaved rotary embeddings export): the CUDA lowering has no
// launch for a stepped slice.
std::string SteppedSliceLm() {
  ModelBuilder mb(17);
  mb.Input("ids", DType::kI64, {-1, kT});
  mb.Initializer("emb", Weights({kV, kC}, 0.1));
  mb.Initializer("head", Weights({kC / 2, kV}, 0.1));
  mb.Initializer("starts", Tensor::FromVector({1}, std::vector<double>{0}, DType::kI64));
  mb.Initializer("ends", Tensor::FromVector({1}, std::vector<double>{kC}, DType::kI64));
  mb.Initializer("axes", Tensor::FromVector({1}, std::vector<double>{2}, DType::kI64));
  mb.Initializer("steps", Tensor::FromVector({1}, std::vector<double>{2}, DType::kI64));
  mb.Node("Gather", {"emb", "ids"}, {"h"}, "embed");
  mb.Node("Slice", {"h", "starts", "ends", "axes", "steps"}, {"even"}, "even_features");
  mb.Node("MatMul", {"even", "head"}, {"logits"}, "lm_head");
  mb.Output("logits");
  return mb.Bytes();
}

// A job on `model`; its run folder is root/runs/<run>.
std::string Job(const std::string& root, const std::string& model, const std::string& extra = "",
                const std::string& run = "lm") {
  const std::string path = absl::StrCat(root, "/job_", std::hash<std::string>()(model + extra + run), ".yaml");
  std::ofstream(path) << "name: onnx-lm\nmodel: {onnx: " << model << ", seq_len: " << kT << ", vocab: " << kV
                      << "}\ndata: {path: " << root << "/tokens.u16, format: tokens}\n"
                      << "train: {steps: 3, batch_size: 2, log_every: 1, eval_every: 3, eval_batches: 1, sample_tokens: 4}\n"
                      << "run_dir: " << root << "/runs/" << run << "\n"
                      << extra;
  return path;
}

// The losses a run folder's metrics.jsonl holds, in step order.
std::vector<double> Losses(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<double> out;
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("\"loss\": ");
    if (line.find("\"step\"") == std::string::npos || at == std::string::npos) continue;
    out.push_back(std::stod(line.substr(at + 8)));
  }
  return out;
}

// tp=2 over the tiny model: the table is looked up (vocab), the head's
// output features are the vocabulary (colwise).
constexpr char kTpPlan[] = "parallel:\n  dp: 2\n  tp: 2\n  tp_plan: {emb: vocab, head: colwise}\n";
// head is no lookup table: vocab cannot apply to it.
constexpr char kBadPlan[] = "parallel:\n  tp: 2\n  tp_plan: {emb: vocab, head: vocab}\n";

class OnnxCli : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = runtime::service::testing::TestDir("onnx_cli");
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

// device: cuda takes ONNX models through the CUDA lowering; an op it cannot
// lower stops `loom run` before launch and `loom train` at compile time, as
// bad input naming the op, the ONNX node and the reason. (The tiny model
// itself lowers: without a GPU, `loom train` then fails for want of a device,
// not of a lowering.)
TEST_F(OnnxCli, CudaRefusesAnOpWithNoCudaLoweringNamingTheOnnxNode) {
  std::ofstream(root_ + "/sliced.onnx", std::ios::binary) << SteppedSliceLm();
  for (const char* cmd : {"run ", "train "}) {
    CliResult r = RunLoom(cmd + Job(root_, root_ + "/sliced.onnx", "device: cuda\n", "sliced"), 300);
    EXPECT_EQ(r.code, 2) << cmd << r.output;
    for (const char* s : {"device: cuda", "op 'slice'", "from ONNX node 'even_features' (Slice, opset 17)",
                          "slices with a step other than 1 are not supported"})
      EXPECT_NE(r.output.find(s), std::string::npos) << cmd << s << " missing from:\n" << r.output;
  }
  CliResult r = RunLoom("train " + Job(root_, root_ + "/lm.onnx", "device: cuda\n", "lm_cuda"), 300);
  if (r.code == 0) {  // a machine with a GPU
    EXPECT_NE(r.output.find("device cuda"), std::string::npos) << r.output;
    return;
  }
  EXPECT_EQ(r.code, 1) << "no device is a runtime failure, not bad input:\n" << r.output;
  EXPECT_NE(r.output.find("device: cuda"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("lower"), std::string::npos) << r.output;
}

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
  }
  r = RunLoom("train " + Job(root_, root_ + "/lm.onnx", "parallel: {dp: 2}\n"), 300);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("`loom train` runs one process"), std::string::npos) << r.output;
}

// `loom run` trains an ONNX job on dp=2 x tp=2 ranks with a name-pattern
// plan to the losses of `loom train`; a plan the graph refuses stops
// `loom run` before any rank starts, naming the parameter.
TEST_F(OnnxCli, RunTrainsInParallelWithATpPlanAndRefusesABadOne) {
  CliResult r = RunLoom("train " + Job(root_, root_ + "/lm.onnx", "", "one"), 300);
  ASSERT_EQ(r.code, 0) << r.output;
  r = RunLoom("run " + Job(root_, root_ + "/lm.onnx", kTpPlan, "tp"), 300);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("mesh (dp=2, tp=2) over 4 ranks"), std::string::npos) << r.output;
  const std::vector<double> one = Losses(root_ + "/runs/one"), tp = Losses(root_ + "/runs/tp");
  ASSERT_EQ(one.size(), 3u);
  ASSERT_EQ(tp.size(), 3u);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(tp[i], one[i], 1e-5 * std::abs(one[i])) << "step " << i + 1;
  r = RunLoom("run " + Job(root_, root_ + "/lm.onnx", kBadPlan, "bad"), 300);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.tp_plan: parameter 'head' [8, 32] (vocab, rule 'head')"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("submitted"), std::string::npos) << r.output;
}

// `loom plan` on an ONNX job: every layout from its compiled program, tp
// layouts with the proposed plan (tp: auto) or the job's, which a bad one
// stops with exit 2.
TEST_F(OnnxCli, PlanPrintsTheCompiledEstimateAndTheTpPlan) {
  CliResult r = RunLoom("plan " + Job(root_, root_ + "/lm.onnx", "parallel: {dp: 4, tp: auto}\n"), 120);
  EXPECT_EQ(r.code, 0) << r.output;
  for (const char* s : {"model: onnx ", "dp=2 tp=2 zero=0", "dp=1 tp=4 zero=0",
                        "skipped dp=4 tp=1: train.batch_size: must be divisible by parallel.dp = 4 (got 2)",
                        "memory and time from each layout's compiled per-rank program",
                        "tensor-parallel plan for tp=2 (proposed), as parallel.tp_plan:", "  'emb': vocab",
                        "  'head': colwise", "choice: "})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << " missing from:\n" << r.output;
  r = RunLoom("plan --json " + Job(root_, root_ + "/lm.onnx", kTpPlan), 120);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\"tp_plan\": ["), std::string::npos) << r.output;
  r = RunLoom("plan " + Job(root_, root_ + "/lm.onnx", kBadPlan), 120);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.tp_plan: parameter 'head'"), std::string::npos) << r.output;
}

TEST_F(OnnxCli, SubmitRefusesABadModelNamingTheField) {
  const std::string data = root_ + "/coord", port_file = root_ + "/port";
  pid_t coord =
      runtime::service::testing::Spawn({"runtime/loom", "coordinator", "--data-dir", data, "--listen", "127.0.0.1:0",
                                        "--metrics-listen", "off", "--port-file", port_file, "--data-roots", root_},
                                       root_ + "/coord.log");
  ASSERT_GT(runtime::service::testing::ReadPort(port_file, 20), 0) << "coordinator did not start";
  int port = 0;
  std::ifstream(port_file) >> port;
  const std::string submit = absl::StrCat("submit ", Job(root_, root_ + "/truncated.onnx"), " --coordinator 127.0.0.1:",
                                          port, " --data-dir ", data);
  CliResult r = RunLoom(submit, 60);
  const std::string bad_plan = absl::StrCat("submit ", Job(root_, root_ + "/lm.onnx", kBadPlan),
                                            " --coordinator 127.0.0.1:", port, " --data-dir ", data);
  CliResult plan = RunLoom(bad_plan, 60);
  kill(coord, SIGTERM);
  runtime::service::testing::WaitExit(coord, 20);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("spec.model.onnx: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("truncated or malformed"), std::string::npos) << r.output;
  EXPECT_EQ(plan.code, 2) << plan.output;
  EXPECT_NE(plan.output.find("spec.parallel.tp_plan: parameter 'head'"), std::string::npos) << plan.output;
}

}  // namespace
}  // namespace loom::tests::cli
