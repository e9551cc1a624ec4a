// End-to-end tests of `loom train` and `loom compile` as a user runs them: the
// real binary in a child process, its exit code and its output.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/loom_cli.h"
#include "nlohmann/json.hpp"
#include "runtime/data/bigram.h"
#include "runtime/data/dataset.h"
#include "runtime/jobspec/jobspec.h"

namespace {

using Result = loom::tests::testing::CliResult;
using loom::tests::testing::RunLoom;

std::string Write(const std::string& name, const std::string& text) {
  std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  std::ofstream(path) << text;
  return path;
}

void ExpectBadInput(const std::string& yaml, const std::vector<std::string>& needles) {
  Result r = RunLoom(absl::StrCat("train ", Write("bad.yaml", yaml)));
  EXPECT_EQ(r.code, 2) << r.output;
  for (const std::string& n : needles) EXPECT_NE(r.output.find(n), std::string::npos) << n << " not in: " << r.output;
}

TEST(TrainCli, BadInputNamesKeyAndValueAndExits2) {
  ExpectBadInput("model: {n_layer: 2\n  d_model: [", {"malformed YAML", "line"});
  ExpectBadInput("model: {n_layers: 2}\n", {"unknown key 'model.n_layers'"});
  ExpectBadInput("model: {d_model: 100, n_head: 3}\n", {"model.d_model", "100", "n_head"});
  ExpectBadInput("data: {path: /no/such/corpus.txt}\n", {"data.path", "/no/such/corpus.txt"});
  ExpectBadInput("train: {batch_size: many}\n", {"train.batch_size", "many"});
  ExpectBadInput("train: {lr_schedule: exponential}\n", {"train.lr_schedule", "exponential"});
  ExpectBadInput("train: {lr_schedule: wsd, steps: 50, decay_steps: 60}\n", {"train.decay_steps", "60"});
  ExpectBadInput("train: {lr_schedule: cosine, min_lr: -1}\n", {"train.min_lr", "-1"});
  ExpectBadInput("train: {sample_tokens: -5}\n", {"train.sample_tokens", "-5"});
  ExpectBadInput("train: {precision: bf16}\n", {"train.precision", "bf16", "device: cuda"});
  ExpectBadInput("train: {grad_accum_steps: 0}\n", {"train.grad_accum_steps", "got 0"});
  ExpectBadInput("train: {batch_size: 8, grad_accum_steps: 3}\n", {"train.grad_accum_steps", "3", "train.batch_size"});
  // More memory than any machine has (the planner's estimate for one rank,
  // about 2 TiB of activations): refused before anything is loaded.
  ExpectBadInput("model: {n_layer: 32, d_model: 4096, n_head: 32, seq_len: 1024}\ntrain: {batch_size: 512}\n",
                 {"train.batch_size", "512", "MiB", "the planner's estimate", "this machine has"});
  // Settings the model builder and the run folder reject after validation:
  // still bad input (exit 2) naming the spec field.
  ExpectBadInput("model: {family: gpt, n_head: 4, n_kv_head: 2, d_model: 64}\n",
                 {"model.n_kv_head", "2", "grouped-query"});
  ExpectBadInput("run_dir: /proc/no/such/run\n", {"run_dir", "/proc/no/such/run"});
  Result r = RunLoom("train /no/such/job.yaml");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("/no/such/job.yaml"), std::string::npos);
  EXPECT_EQ(RunLoom("train").code, 2);
  EXPECT_EQ(RunLoom("frobnicate").code, 2);
}

// device: cuda takes checkpoint.dir like the CPU: the job is accepted and the
// run goes on to the GPU. Without one it stops there (exit 1, naming the
// device step); with one it trains and writes its checkpoints.
TEST(TrainCli, CudaJobWithCheckpointsIsAccepted) {
  const std::string ck = absl::StrCat(::testing::TempDir(), "/cuda_ckpt");
  std::filesystem::remove_all(ck);
  Result r = RunLoom(absl::StrCat(
      "train ",
      Write("cuda_ckpt.yaml", absl::StrCat("device: cuda\n"
                                           "model: {n_layer: 1, n_head: 2, d_model: 16, seq_len: 8, vocab: 256}\n"
                                           "train: {steps: 2, batch_size: 2, eval_every: 2, eval_batches: 1, "
                                           "sample_tokens: 0}\n"
                                           "checkpoint: {every: 1, dir: ",
                                           ck, "}\n"))));
  EXPECT_EQ(r.output.find("checkpoint.dir"), std::string::npos) << r.output;
  if (r.code == 0) {
    EXPECT_TRUE(std::filesystem::exists(absl::StrCat(ck, "/step_000000000002"))) << r.output;
  } else {
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("device: cuda: building the GPU training step"), std::string::npos) << r.output;
  }
}

// A short run with a decaying schedule and sample_tokens: 0: the logged
// learning rates follow compiler/schedule.h to min_lr on the last step, the
// validation lines carry the perplexity, and no sample is drawn or written.
TEST(TrainCli, CosineScheduleNoSampleAndPerplexity) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/recipe_run");
  std::filesystem::remove_all(dir);
  std::string job = Write("recipe.yaml",
                          "model: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16, vocab: 256}\n"
                          "train: {steps: 6, batch_size: 2, eval_every: 6, eval_batches: 1, log_every: 1, "
                          "sample_tokens: 0, lr: 1e-3, lr_schedule: cosine, min_lr: 1e-4, warmup_steps: 2}\n"
                          "run_dir: " + dir + "\n");
  Result r = RunLoom(absl::StrCat("train ", job));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("final validation loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", perplexity "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("sample:"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/sample.txt"));
  // Warmup 0.5e-3, 1e-3; then cosine over steps 3..6 from 1e-3 to 1e-4.
  const double pi = 3.14159265358979323846;
  const std::vector<double> want = {5e-4, 1e-3, 1e-3, 1e-4 + 9e-4 * (1 + std::cos(pi / 3)) / 2,
                                    1e-4 + 9e-4 * (1 + std::cos(2 * pi / 3)) / 2, 1e-4};
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<double> lrs;
  bool ppl = false;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("lr")) lrs.push_back(j["lr"].get<double>());
    if (j.contains("val_perplexity"))
      ppl = std::abs(j["val_perplexity"].get<double>() - std::exp(j["val_loss"].get<double>())) < 1e-3;
  }
  ASSERT_EQ(lrs.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(lrs[i], want[i], 1e-8) << "step " << i + 1;
  EXPECT_TRUE(ppl) << "no val_perplexity = exp(val_loss) in metrics.jsonl";
}

// train.grad_accum_steps through the shared loop: 4 micro-batches of 1 row
// per update log the losses of batch_size 4 in one step (within 1e-5).
std::vector<double> LoggedLosses(const std::string& name, int accum) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/", name);
  std::filesystem::remove_all(dir);
  const std::string job = Write(name + ".yaml", absl::StrCat(
      "model: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16, vocab: 256}\n"
      "train: {steps: 4, batch_size: 4, grad_accum_steps: ", accum, ", eval_every: 4, eval_batches: 1, "
      "log_every: 1, sample_tokens: 0, lr: 3e-3, grad_clip: 1}\nrun_dir: ", dir, "\n"));
  Result r = RunLoom(absl::StrCat("train ", job));
  EXPECT_EQ(r.code, 0) << r.output;
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

TEST(TrainCli, GradAccumLogsTheLossesOfTheWholeBatch) {
  const std::vector<double> whole = LoggedLosses("accum1", 1), micro = LoggedLosses("accum4", 4);
  ASSERT_EQ(whole.size(), 4u);
  ASSERT_EQ(micro.size(), 4u);
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(micro[i], whole[i], 1e-5) << "step " << i + 1;
  EXPECT_NE(whole[0], whole[3]) << "the run trained";
}

TEST(CompileCli, DumpsEveryStageAndRejectsUnknownOnes) {
  std::string job = Write("tiny.yaml",
                          "model: {family: gpt, n_layer: 1, n_head: 2, d_model: 16, seq_len: 8, vocab: 256}\n"
                          "train: {batch_size: 2}\n");
  for (const char* stage : {"initial", "joint", "optimized", "fused", "planned"}) {
    Result r = RunLoom(absl::StrCat("compile ", job, " --dump=", stage));
    EXPECT_EQ(r.code, 0) << stage << ": " << r.output;
    EXPECT_NE(r.output.find("graph"), std::string::npos) << stage;
  }
  Result joint = RunLoom(absl::StrCat("compile ", job, " --dump=joint"));
  EXPECT_NE(joint.output.find("adamw"), std::string::npos);
  EXPECT_NE(joint.output.find("layernorm_backward"), std::string::npos);
  Result bad = RunLoom(absl::StrCat("compile ", job, " --dump=bogus"));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("bogus"), std::string::npos);
}

// parallel.bucket_mb merges the dp gradient all-reduces into buckets: the
// parallel program has fewer of them (one per gradient without it); a size
// out of range is refused naming the field.
TEST(CompileCli, BucketMbMergesTheDpGradientAllReduces) {
  const std::string base =
      "model: {family: gpt, n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab: 256}\n"
      "train: {batch_size: 4}\n";
  auto count = [](const std::string& out) {
    int n = 0;
    for (size_t at = out.find("all_reduce("); at != std::string::npos; at = out.find("all_reduce(", at + 1)) ++n;
    return n;
  };
  Result plain = RunLoom(absl::StrCat("compile ", Write("dp2.yaml", base + "parallel: {dp: 2}\n"), " --dump=parallel"));
  ASSERT_EQ(plain.code, 0) << plain.output;
  Result bucketed = RunLoom(absl::StrCat(
      "compile ", Write("dp2_bucket.yaml", base + "parallel: {dp: 2, bucket_mb: 1}\n"), " --dump=parallel"));
  ASSERT_EQ(bucketed.code, 0) << bucketed.output;
  EXPECT_GT(count(plain.output), 10) << "one per gradient";
  EXPECT_GE(count(bucketed.output), 1);
  EXPECT_LT(count(bucketed.output), count(plain.output) / 2) << bucketed.output.substr(0, 2000);
  Result bad = RunLoom(absl::StrCat(
      "compile ", Write("dp2_bad.yaml", base + "parallel: {dp: 2, bucket_mb: -1}\n"), " --dump=parallel"));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("parallel.bucket_mb"), std::string::npos) << bad.output;
}

// --dump=cuda: the CUDA launch plan and the device memory by kind, from a
// dry build (no GPU needed); train.memory: lean halves the optimizer state
// and drops the shadows of the llama's GEMM-only weights; the state moves
// to the host with train.offload_optimizer_state; train.residual_precision:
// f32 keeps the stream f32 and casts its gradient for the GEMMs;
// train.grad_precision: bf16 halves the GEMM weights' gradients.
TEST(CompileCli, DumpCudaPrintsThePlanAndItsDeviceMemory) {
  const std::string model =
      "model: {family: llama, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 128, seq_len: 64, vocab: 256}\n"
      "device: cuda\n";
  // A figure of the "# device memory (GiB): what X, ..." line; -1 when absent.
  auto memory = [](const std::string& out, const std::string& what) {
    const size_t line = out.find("# device memory (GiB): ");
    const size_t at = line == std::string::npos ? line : out.find(what + " ", line);
    if (at == std::string::npos) return -1.0;
    return std::strtod(out.c_str() + at + what.size() + 1, nullptr);
  };
  Result std_run = RunLoom(absl::StrCat(
      "compile ", Write("cuda_std.yaml", model + "train: {batch_size: 4, precision: bf16}\n"), " --dump=cuda"));
  ASSERT_EQ(std_run.code, 0) << std_run.output;
  EXPECT_NE(std_run.output.find(": gemm "), std::string::npos) << std_run.output;
  EXPECT_NE(std_run.output.find("adamw"), std::string::npos);
  Result lean = RunLoom(absl::StrCat(
      "compile ", Write("cuda_lean.yaml", model + "train: {batch_size: 4, precision: bf16, memory: lean}\n"),
      " --dump=cuda"));
  ASSERT_EQ(lean.code, 0) << lean.output;
  EXPECT_NE(lean.output.find("train.memory lean"), std::string::npos);
  const double std_state = memory(std_run.output, "optimizer state"), lean_state = memory(lean.output, "optimizer state");
  ASSERT_GT(std_state, 0) << std_run.output;
  EXPECT_NEAR(lean_state, std_state / 2, 1e-3) << lean.output;
  EXPECT_GT(memory(std_run.output, "bf16 shadows"), 0);
  EXPECT_EQ(memory(lean.output, "bf16 shadows"), 0);
  Result off = RunLoom(absl::StrCat(
      "compile ",
      Write("cuda_off.yaml", model + "train: {batch_size: 4, precision: bf16, offload_optimizer_state: true}\n"),
      " --dump=cuda"));
  ASSERT_EQ(off.code, 0) << off.output;
  EXPECT_EQ(memory(off.output, "optimizer state"), 0);
  EXPECT_NEAR(memory(off.output, "optimizer state on the host"), std_state, 1e-3) << off.output;
  // train.residual_precision: f32: the header says so, the add+norm launches
  // stay fused, and the norm backwards read the GEMMs' bf16 gradient and
  // write the stream gradient's bf16 copy for the GEMMs themselves: no cast
  // launch more than the bf16 stream's plan.
  Result res = RunLoom(absl::StrCat(
      "compile ",
      Write("cuda_res.yaml", model + "train: {batch_size: 4, precision: bf16, residual_precision: f32}\n"),
      " --dump=cuda"));
  ASSERT_EQ(res.code, 0) << res.output;
  EXPECT_NE(res.output.find("bf16 (f32 residual stream)"), std::string::npos) << res.output;
  EXPECT_EQ(std_run.output.find("f32 residual stream"), std::string::npos);
  EXPECT_NE(res.output.find("add+rmsnorm (%"), std::string::npos);
  auto count = [](const std::string& out, const std::string& what) {
    int c = 0;
    for (size_t at = out.find(what); at != std::string::npos; at = out.find(what, at + 1)) ++c;
    return c;
  };
  EXPECT_EQ(count(res.output, ": copy cast ("), count(std_run.output, ": copy cast (")) << res.output;
  // Of the 5 norm backwards (2 a layer, and the final norm's), each but the
  // first layer's first (whose dx only the embedding's backward reads)
  // writes {f32 dx, f32 dweight, bf16 copy}.
  const std::regex with_copy(": rmsnorm_backward [^\n]*-> \\(%[0-9]+:f32,%[0-9]+:f32,%[0-9]+:bf16\\)");
  const auto copies = std::distance(std::sregex_iterator(res.output.begin(), res.output.end(), with_copy),
                                    std::sregex_iterator());
  EXPECT_EQ(copies, 4) << res.output;
  // train.grad_precision: bf16: the header says so, and the gradient norm
  // reads the 7 GEMM weights' gradients of each layer and the output head's
  // in bf16 (none in the standard plan), the embedding's and the norms' f32;
  // parameters and state keep their size.
  Result g16 = RunLoom(absl::StrCat(
      "compile ", Write("cuda_g16.yaml", model + "train: {batch_size: 4, precision: bf16, grad_precision: bf16}\n"),
      " --dump=cuda"));
  ASSERT_EQ(g16.code, 0) << g16.output;
  EXPECT_NE(g16.output.find("bf16 (bf16 gradients)"), std::string::npos) << g16.output;
  EXPECT_EQ(std_run.output.find("bf16 gradients"), std::string::npos);
  auto norm_reads = [&count](const std::string& out, const std::string& dt) {
    const size_t at = out.find(": grad_norm grad_norm (");
    if (at == std::string::npos) return -1;
    return count(out.substr(at, out.find(") ->", at) - at), dt);
  };
  EXPECT_EQ(norm_reads(std_run.output, ":bf16"), 0) << std_run.output;
  EXPECT_EQ(norm_reads(g16.output, ":bf16"), 2 * 7 + 1) << g16.output;
  EXPECT_EQ(norm_reads(g16.output, ":f32"), 1 + 2 * 2 + 1) << g16.output;
  EXPECT_EQ(memory(g16.output, "optimizer state"), std_state);
  EXPECT_EQ(memory(g16.output, "parameters"), memory(std_run.output, "parameters"));
}

// device: cuda on a machine without a usable GPU (CI): a clear error naming
// the device, never a crash or a silent CPU run. With a GPU it trains.
TEST(TrainCli, CudaWithoutGpuFailsClearly) {
  std::string job = Write("cuda.yaml",
                          "model: {family: gpt, n_layer: 1, n_head: 2, d_model: 128, seq_len: 16, vocab: 256}\n"
                          "train: {batch_size: 2, steps: 2, eval_every: 2, eval_batches: 1, sample_tokens: 4, "
                          "precision: bf16}\n"
                          "device: cuda\n");
  Result r = RunLoom(absl::StrCat("train ", job));
  if (r.code == 0) {
    EXPECT_NE(r.output.find("device cuda"), std::string::npos) << r.output;
    return;
  }
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("device: cuda"), std::string::npos) << r.output;
}

// The default example learns: after its few hundred steps the validation loss
// is below a bigram count model fitted on the same training split.
TEST(TrainCli, DefaultExampleBeatsBigramBaseline) {
  ASSERT_TRUE(std::filesystem::exists(loom::runtime::data::kDefaultCorpus))
      << loom::runtime::data::kDefaultCorpus << " is missing (scripts/setup.sh installs fortunes)";
  const std::string dir = absl::StrCat(::testing::TempDir(), "/run_", getpid());
  std::ifstream in("examples/gpt-small.yaml");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string job = Write("example.yaml", ss.str() + "run_dir: " + dir + "\n");
  Result r = RunLoom(absl::StrCat("train ", job));
  ASSERT_EQ(r.code, 0) << r.output;
  // The baseline on the example's own split, computed here through the library.
  auto spec = loom::runtime::jobspec::LoadJobSpec("examples/gpt-small.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto data = loom::runtime::data::Dataset::Open(*spec);
  ASSERT_TRUE(data.ok()) << data.status();
  auto baseline = loom::runtime::data::BigramBaseline(**data, 256);
  ASSERT_TRUE(baseline.ok() && baseline->fitted) << baseline.status() << " " << baseline->note;
  const double bigram = baseline->loss;
  double val = -1;
  int train_points = 0, last_step = 0;
  std::ifstream metrics(dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(metrics, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("val_loss")) val = j["val_loss"];
    if (j.contains("loss")) {
      ++train_points;
      last_step = j["step"];
    }
  }
  // The TensorBoard event file holds the same points, read by an independent
  // decoder (framing, CRCs, protobuf schema).
  std::string events;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) events = e.path().string();
  ASSERT_FALSE(events.empty()) << "no TensorBoard event file in " << dir;
  Result tb = loom::tests::testing::Shell("/usr/bin/python3 runtime/train/tb_events_check.py '" + events + "'");
  ASSERT_EQ(tb.code, 0) << tb.output;
  int tb_loss = 0;
  std::istringstream tbs(tb.output);
  while (std::getline(tbs, line))
    if (line.rfind("train/loss ", 0) == 0) ++tb_loss;
  EXPECT_EQ(tb_loss, train_points) << tb.output;
  EXPECT_NE(tb.output.find("val/loss "), std::string::npos) << tb.output;
  // metrics.prom parses with prometheus_client; its step counter is the steps run.
  Result prom = loom::tests::testing::Shell("/usr/bin/python3 runtime/train/prom_check.py '" + dir + "/metrics.prom'");
  ASSERT_EQ(prom.code, 0) << prom.output;
  EXPECT_NE(prom.output.find(absl::StrCat("loom_train_steps_total - ", last_step, "\n")), std::string::npos)
      << prom.output;
  ASSERT_GT(val, 0) << "no validation loss in metrics.jsonl";
  std::printf("validation loss %.4f, bigram %.4f\n", val, bigram);
  EXPECT_LT(val, bigram);
  for (const char* f : {"loss.svg", "sample.txt", "job.yaml"})
    EXPECT_EQ(access((dir + "/" + f).c_str(), R_OK), 0) << f;
  EXPECT_NE(r.output.find("run folder: " + dir), std::string::npos);
}

}  // namespace
