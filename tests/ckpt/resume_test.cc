// Distributed checkpoints (runtime/train/checkpointer.h, saved and resumed by
// the training loop both drivers share): save under tp=2 x dp=2 (four
// `loom worker` processes through `loom run`) at step 3, resume under dp=4
// and dp=4 ZeRO-3 (loom run), under one process twice (dp=1, tp=1: `loom
// train`, and RunParallelTraining in this process over a world of one), and
// check that the losses at steps 4..6 equal the uninterrupted tp=2 x dp=2
// run's (1e-5 relative). The model trains with dropout (model.dropout: 0.1,
// on the embeddings, residual branches and attention probabilities), so the
// resumed runs also draw the uninterrupted run's masks at steps 4..6,
// under every layout (compiler/models/models.h: masks keyed by seed, step and
// the global element index).
// Across devices (needs a GPU: skips "needs a GPU" without one; on the GPU
// machine bench/cuda/run_checks.sh runs it): a device: cuda dp=2 checkpoint
// (2 ranks sharing the GPU, cuda:gloo, f32) resumes on the CPU at tp=2, and
// a CPU tp=2 checkpoint resumes on cuda at dp=2, every job of the pair without
// dropout (the CUDA step has none, so both devices train one model); the resumed
// losses at steps 4..6 follow the saving job's uninterrupted run within the
// cuda-vs-cpu f32 parity bound (1e-4 relative, bench/cuda/gpt_cuda_parity).
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "collectives/process_group.h"
#include "collectives/store/store_server.h"
#include "collectives/store/tcp_store.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_device.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/launch/parallel_train.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string output;
};

Result RunLoom(const std::string& args) {
  std::string cmd = absl::StrCat("timeout 240 runtime/loom ", args, " 2>&1");
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  while (p && fgets(buf, sizeof(buf), p)) r.output += buf;
  int st = p ? pclose(p) : -1;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

std::string Tmp(const std::string& name) { return absl::StrCat(::testing::TempDir(), "/ckpt_", name); }

// A job spec file: the small GPT under (dp, tp), `steps` steps, checkpoints
// every 3 steps into `ckpt`, losses logged at every step into `run`.
// cuda: device: cuda, every rank on the one GPU (cuda:gloo). dropout: 0.1 on
// the model, on the CPU only (the CUDA step has no dropout, so jobs that
// continue each other across devices leave it off on both).
std::string Job(const std::string& name, int dp, int tp, int steps, const std::string& ckpt, const std::string& run,
                int zero = 0, bool cuda = false, bool dropout = true) {
  std::string path = Tmp(name + ".yaml");
  std::ofstream(path) << "name: " << name << "\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16"
                      << (cuda || !dropout ? "}\n" : ", dropout: 0.1}\n")
                      << (cuda ? absl::StrCat("device: cuda\nresources: {ranks_per_gpu: ", dp * tp, "}\n") : "")
                      << "train: {steps: " << steps
                      << ", batch_size: 8, eval_every: 100, eval_batches: 1, sample_tokens: 8, log_every: 1,"
                         " lr: 3e-3, warmup_steps: 2, weight_decay: 0.1, grad_clip: 1.0}\n"
                      << "parallel: {dp: " << dp << ", tp: " << tp << ", zero_stage: " << zero
                      << (cuda ? ", backend: \"cpu:gloo,cuda:gloo\"}\n" : ", backend: cpu:gloo}\n")
                      << "checkpoint: {every: 3, keep: 2, dir: " << ckpt << "}\n"
                      << "run_dir: " << run << "\n";
  return path;
}

std::map<int, double> Losses(const std::string& dir) {
  std::map<int, double> out;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    int step = 0;
    double loss = 0;
    if (std::sscanf(line.c_str(), "{\"step\": %d, \"loss\": %lf", &step, &loss) == 2) out[step] = loss;
  }
  return out;
}

void ExpectSameLosses(const std::map<int, double>& ref, const std::map<int, double>& got, int from, int to,
                      double rel = 1e-5) {
  for (int s = from; s <= to; ++s) {
    ASSERT_TRUE(ref.count(s) && got.count(s)) << "step " << s;
    EXPECT_NEAR(got.at(s), ref.at(s), rel * std::abs(ref.at(s))) << "step " << s;
  }
}

class Resume : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The uninterrupted run and the run that stops after its step-3 checkpoint.
    fs::remove_all(Tmp("ck_full"));
    fs::remove_all(Tmp("ck_saved"));
    Result full = RunLoom("run " + Job("full", 2, 2, 6, Tmp("ck_full"), Tmp("run_full")));
    ASSERT_EQ(full.code, 0) << full.output;
    Result save = RunLoom("run " + Job("save", 2, 2, 3, Tmp("ck_saved"), Tmp("run_save")));
    ASSERT_EQ(save.code, 0) << save.output;
  }
  // A private copy of the saved checkpoint folder (a resumed run writes into it).
  static std::string CopyOfSaved(const std::string& name) {
    std::string dst = Tmp(name);
    fs::remove_all(dst);
    fs::copy(Tmp("ck_saved"), dst, fs::copy_options::recursive);
    return dst;
  }
};

TEST_F(Resume, SavedCheckpointHasEveryTensorOnceWithAdamState) {
  auto r = loom::runtime::checkpoint::LoadLatest(Tmp("ck_saved"));
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& m = r->ckpt.manifest;
  EXPECT_EQ(m.step, 3);
  EXPECT_EQ(m.world_size, 4);
  EXPECT_EQ(m.layout, "(dp=2, tp=2)");
  EXPECT_GT(m.sampler.position, 0);
  int params = 0, moments = 0;
  for (const auto& t : m.tensors) {
    const bool moment = t.name.size() > 2 && (t.name.substr(t.name.size() - 2) == ".m" || t.name.substr(t.name.size() - 2) == ".v");
    (moment ? moments : params)++;
    for (const auto& s : t.shards) EXPECT_LT(s.rank, 2) << t.name << ": a dp-replicated block written by dp rank 1";
  }
  EXPECT_GT(params, 0);
  EXPECT_EQ(moments, 2 * params);
  // The manifest's own validation (ParseManifest) checks the shards cover each tensor exactly once.
}

TEST_F(Resume, UnderDp4LossesMatchTheUninterruptedRun) {
  std::string ck = CopyOfSaved("ck_dp4");
  Result r = RunLoom("run " + Job("dp4", 4, 1, 6, ck, Tmp("run_dp4")));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming at step 4"), std::string::npos) << r.output;
  auto got = Losses(Tmp("run_dp4"));
  EXPECT_EQ(got.count(1), 0u) << "the resumed run repeated step 1";
  ExpectSameLosses(Losses(Tmp("run_full")), got, 4, 6);
  // It went on checkpointing: step 6 is the latest now.
  auto latest = loom::runtime::checkpoint::LoadLatest(ck);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->ckpt.step, 6);
}

TEST_F(Resume, UnderDp4Zero3LossesMatchTheUninterruptedRun) {
  std::string ck = CopyOfSaved("ck_z3");
  Result r = RunLoom("run " + Job("z3", 4, 1, 6, ck, Tmp("run_z3"), 3));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming at step 4"), std::string::npos) << r.output;
  ExpectSameLosses(Losses(Tmp("run_full")), Losses(Tmp("run_z3")), 4, 6);
}

TEST_F(Resume, UnderOneProcessLossesMatchTheUninterruptedRun) {
  std::string ck = CopyOfSaved("ck_one");
  auto spec = loom::runtime::jobspec::LoadJobSpec(Job("one", 1, 1, 6, ck, Tmp("run_one")));
  ASSERT_TRUE(spec.ok()) << spec.status();
  loom::collectives::store::StoreServer::Options so;
  so.secret = "s";
  auto server = loom::collectives::store::StoreServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status();
  auto store = loom::collectives::store::TcpStore::Connect((*server)->address(), "s");
  ASSERT_TRUE(store.ok()) << store.status();
  loom::collectives::ProcessGroupOptions po;
  auto pg = loom::collectives::ProcessGroup::Create(*store, 0, 1, po);
  ASSERT_TRUE(pg.ok()) << pg.status();
  ASSERT_EQ(loom::runtime::launch::RunParallelTraining(
                *spec, std::shared_ptr<loom::collectives::ProcessGroup>(std::move(*pg))),
            0);
  ExpectSameLosses(Losses(Tmp("run_full")), Losses(Tmp("run_one")), 4, 6);
}

TEST_F(Resume, UnderLoomTrainLossesMatchTheUninterruptedRun) {
  std::string ck = CopyOfSaved("ck_train");
  Result r = RunLoom("train " + Job("train", 1, 1, 6, ck, Tmp("run_train")));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming at step 4"), std::string::npos) << r.output;
  auto got = Losses(Tmp("run_train"));
  EXPECT_EQ(got.count(3), 0u) << "the resumed run repeated step 3";
  ExpectSameLosses(Losses(Tmp("run_full")), got, 4, 6);
  // It went on checkpointing, as one process: step 6 is the latest now.
  auto latest = loom::runtime::checkpoint::LoadLatest(ck);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->ckpt.step, 6);
  EXPECT_EQ(latest->ckpt.manifest.world_size, 1);
  EXPECT_EQ(latest->ckpt.manifest.layout, "(dp=1, tp=1)");
}

TEST_F(Resume, FinalCheckpointOfResumedRunIsBitwiseTheUninterruptedOne) {
  // Same layout (tp=2 x dp=2) resumed from step 3: the step-6 shard files
  // equal the uninterrupted run's byte for byte.
  std::string ck = CopyOfSaved("ck_same");
  Result r = RunLoom("run " + Job("same", 2, 2, 6, ck, Tmp("run_same")));
  ASSERT_EQ(r.code, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank) {
    char f[64];
    std::snprintf(f, sizeof(f), "/step_000000000006/rank%05d.safetensors", rank);
    std::ifstream a(Tmp("ck_full") + f, std::ios::binary), b(ck + f, std::ios::binary);
    std::string sa((std::istreambuf_iterator<char>(a)), {}), sb((std::istreambuf_iterator<char>(b)), {});
    EXPECT_FALSE(sa.empty()) << f;
    EXPECT_TRUE(sa == sb) << f << " differs";
  }
}

// Saves at step 3 under (from_dp, from_tp) on `from_cuda`'s device, resumes
// to step 6 under (to_dp, to_tp) on the other device, and compares with the
// saving job run uninterrupted to step 6.
void ReshardAcrossDevices(const std::string& tag, bool from_cuda, int from_dp, int from_tp, int to_dp, int to_tp) {
  const std::string ck = Tmp(tag + "_ck"), ref_ck = Tmp(tag + "_ref_ck");
  fs::remove_all(ck);
  fs::remove_all(ref_ck);
  const bool dropout = false;
  Result save =
      RunLoom("run " + Job(tag + "_save", from_dp, from_tp, 3, ck, Tmp(tag + "_run_save"), 0, from_cuda, dropout));
  ASSERT_EQ(save.code, 0) << save.output;
  Result ref =
      RunLoom("run " + Job(tag + "_ref", from_dp, from_tp, 6, ref_ck, Tmp(tag + "_run_ref"), 0, from_cuda, dropout));
  ASSERT_EQ(ref.code, 0) << ref.output;
  Result r =
      RunLoom("run " + Job(tag + "_resume", to_dp, to_tp, 6, ck, Tmp(tag + "_run_resume"), 0, !from_cuda, dropout));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming at step 4"), std::string::npos) << r.output;
  ExpectSameLosses(Losses(Tmp(tag + "_run_ref")), Losses(Tmp(tag + "_run_resume")), 4, 6, 1e-4);
}

TEST(ResumeAcrossDevices, CudaDp2CheckpointResumesOnCpuTp2) {
  const absl::Status avail = loom::kernels::cuda::CudaAvailable();
  if (!avail.ok()) GTEST_SKIP() << "needs a GPU: " << avail.message();
  ReshardAcrossDevices("cuda_to_cpu", true, 2, 1, 1, 2);
}

TEST(ResumeAcrossDevices, CpuTp2CheckpointResumesOnCudaDp2) {
  const absl::Status avail = loom::kernels::cuda::CudaAvailable();
  if (!avail.ok()) GTEST_SKIP() << "needs a GPU: " << avail.message();
  ReshardAcrossDevices("cpu_to_cuda", false, 1, 2, 2, 1);
}

}  // namespace
