// `loom run` as a user runs it: the real binary holding a coordinator and an
// agent, launching `loom worker` ranks, following the job and exiting with its
// result; Ctrl-C cancels and leaves no worker behind.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/usable_cpus.h"
#include "gtest/gtest.h"
#include "tests/testing/loom_cli.h"

namespace {

using Result = loom::tests::testing::CliResult;
using loom::tests::testing::RunLoom;

std::string Tmp(const std::string& name) { return absl::StrCat(::testing::TempDir(), "/", name); }

std::string Job(const std::string& name, const std::string& extra) {
  std::string path = Tmp(name + ".yaml");
  std::ofstream(path) << "name: " << name
                      << "\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n"
                         "train: {steps: 5, batch_size: 4, eval_every: 5, eval_batches: 1, sample_tokens: 8}\n"
                      << extra;
  return path;
}

// Processes whose environment mentions `needle` (the run's state folder).
int ProcessesMentioning(const std::string& needle) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream env(e.path() / "environ", std::ios::binary);
    if (!env) continue;
    std::stringstream ss;
    ss << env.rdbuf();
    n += ss.str().find(needle) != std::string::npos;
  }
  return n;
}

TEST(RunCli, OneRankJobSucceedsAndShowsRankZeroOutput) {
  std::string run = Tmp("run1");
  Result r = RunLoom(absl::StrCat("run ", Job("one", ""), " --run-dir ", run));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("SUCCEEDED"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 5/5"), std::string::npos) << r.output;  // rank 0's progress, followed
  EXPECT_NE(r.output.find("run folder: " + run), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(run + "/metrics.jsonl"));
}

// Losses at each logged step, from a run folder's metrics.jsonl.
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

// device: cuda runs one GPU rank with NCCL as the CUDA backend. Without a GPU
// it fails at once naming the reason (never a job left pending); with one it
// trains and says which backend carried the CUDA collectives.
TEST(RunCli, CudaJobRunsOnNcclOrFailsClearlyWithoutGpu) {
  std::string run = Tmp("run_cuda");
  Result r = RunLoom(absl::StrCat("run ", Job("gpu", "device: cuda\n"), " --run-dir ", run));
  if (r.code == 0) {
    EXPECT_NE(r.output.find("CUDA collectives through nccl"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("step 5/5"), std::string::npos) << r.output;
    return;
  }
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("device: cuda: no GPU"), std::string::npos) << r.output;
}

// --ranks-per-gpu (resources.ranks_per_gpu): ranks sharing a GPU cannot use
// NCCL, so a job file that names it is refused (exit 2, naming
// parallel.backend) by `loom run` and `loom train` before anything starts;
// without a written backend the default becomes cuda:gloo and the job goes on
// to look for its one GPU.
TEST(RunCli, RanksPerGpuRefusesNcclAndDefaultsToCudaGloo) {
  const std::string nccl = Job("share_nccl", "device: cuda\nparallel: {dp: 2, backend: \"cpu:gloo,cuda:nccl\"}\n");
  Result r = RunLoom(absl::StrCat("run ", nccl, " --ranks-per-gpu 2 --run-dir ", Tmp("run_share_nccl")));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.backend: NCCL takes one rank per GPU, but resources.ranks_per_gpu = 2"),
            std::string::npos)
      << r.output;
  const std::string in_file =
      Job("share_train", "device: cuda\nresources: {ranks_per_gpu: 2}\nparallel: {backend: \"cuda:nccl\"}\n");
  r = RunLoom("train " + in_file);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.backend: NCCL takes one rank per GPU"), std::string::npos) << r.output;
  r = RunLoom(absl::StrCat("run ", Job("share_range", "device: cuda\n"), " --ranks-per-gpu 65"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("resources.ranks_per_gpu: must be in [1, 64] (got 65)"), std::string::npos) << r.output;
  r = RunLoom(absl::StrCat("run ", Job("share_zero", "device: cuda\n"), " --ranks-per-gpu 0"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--ranks-per-gpu"), std::string::npos) << r.output;
  // No written backend: accepted; here it stops at the missing GPU.
  const std::string gloo = Job("share_gloo", "device: cuda\nparallel: {dp: 2}\n");
  r = RunLoom(absl::StrCat("run ", gloo, " --ranks-per-gpu 2 --run-dir ", Tmp("run_share_gloo")));
  EXPECT_EQ(r.output.find("parallel.backend"), std::string::npos) << r.output;
  if (r.code == 1) EXPECT_NE(r.output.find("device: cuda: no GPU"), std::string::npos) << r.output;
}

// The thread count in a compile line ("..., 3 threads").
int ThreadsOf(const std::string& output) {
  const size_t at = output.find(" threads\n");
  if (at == std::string::npos) return -1;
  const size_t comma = output.rfind(", ", at);
  return comma == std::string::npos ? -1 : std::atoi(output.c_str() + comma + 2);
}

// Ranks of one machine share its usable CPUs (at least one thread each)
// unless resources.threads_per_rank, or --threads-per-rank, sets the count;
// `loom train` takes them all. Rank 0's compile line says how many it has.
TEST(RunCli, RanksShareTheMachinesCpusUnlessTheSpecSetsThreads) {
  const int cpus = loom::UsableCpus();
  Result r = RunLoom(absl::StrCat("run ", Job("threads_dp2", "parallel: {dp: 2}\n"), " --run-dir ", Tmp("run_thr2")));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(ThreadsOf(r.output), std::max(1, cpus / 2)) << r.output;
  r = RunLoom(absl::StrCat("run ", Job("threads_flag", "parallel: {dp: 2}\n"), " --threads-per-rank 3 --run-dir ",
                           Tmp("run_thr3")));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(ThreadsOf(r.output), 3) << r.output;
  r = RunLoom("train " + Job("threads_train", ""));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(ThreadsOf(r.output), cpus) << r.output;
  r = RunLoom("train " + Job("threads_train1", "resources: {threads_per_rank: 1}\n"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(ThreadsOf(r.output), 1) << r.output;
  r = RunLoom(absl::StrCat("run ", Job("threads_range", ""), " --threads-per-rank 2000"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("resources.threads_per_rank: must be in [0, 1024] (got 2000)"), std::string::npos)
      << r.output;
}

TEST(RunCli, TwoDimensionalJobMatchesOneProcess) {
  // tp=2 x dp=2 on four `loom worker` processes (gloo over loopback) against
  // `loom train` on one process: the same losses at every logged step.
  const std::string extra = "train: {steps: 12, batch_size: 4, log_every: 3}\n";
  std::string one = Tmp("one_proc"), four = Tmp("four_proc");
  std::string spec1 = Tmp("p1.yaml"), spec4 = Tmp("p4.yaml");
  const std::string model = "model: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n";
  std::ofstream(spec1) << "name: p1\n" << model << extra << "run_dir: " << one << "\n";
  std::ofstream(spec4) << "name: p4\n" << model << extra << "run_dir: " << four << "\nparallel: {dp: 2, tp: 2}\n";
  Result r1 = RunLoom("train " + spec1);
  ASSERT_EQ(r1.code, 0) << r1.output;
  Result r4 = RunLoom("run " + spec4);
  ASSERT_EQ(r4.code, 0) << r4.output;
  EXPECT_NE(r4.output.find("mesh (dp=2, tp=2) over 4 ranks"), std::string::npos) << r4.output;
  auto a = Losses(one), b = Losses(four);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GE(a.size(), 4u);
  for (const auto& [step, loss] : a) {
    ASSERT_TRUE(b.count(step)) << step;
    EXPECT_NEAR(b[step], loss, 1e-5 * std::abs(loss)) << "step " << step;
  }
}

TEST(RunCli, GradientAccumulationAtTp2Dp2MatchesOneProcessBatch) {
  // train.grad_accum_steps: 4 micro-batches of 2 rows (1 per dp rank) per
  // update, tp=2 x dp=2 with ZeRO-2, each rank reading its rows of the
  // update's batch, against `loom train` with batch 8 in one step: the same
  // losses at every logged step.
  std::string one = Tmp("accum_one"), four = Tmp("accum_four");
  std::string spec1 = Tmp("a1.yaml"), spec4 = Tmp("a4.yaml");
  const std::string model = "model: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n";
  std::ofstream(spec1) << "name: a1\n" << model << "train: {steps: 8, batch_size: 8, log_every: 2}\nrun_dir: " << one
                       << "\n";
  std::ofstream(spec4) << "name: a4\n" << model
                       << "train: {steps: 8, batch_size: 8, log_every: 2, grad_accum_steps: 4}\nrun_dir: " << four
                       << "\nparallel: {dp: 2, tp: 2, zero_stage: 2}\n";
  Result r1 = RunLoom("train " + spec1);
  ASSERT_EQ(r1.code, 0) << r1.output;
  Result r4 = RunLoom("run " + spec4);
  ASSERT_EQ(r4.code, 0) << r4.output;
  auto a = Losses(one), b = Losses(four);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GE(a.size(), 4u);
  for (const auto& [step, loss] : a) {
    ASSERT_TRUE(b.count(step)) << step;
    EXPECT_NEAR(b[step], loss, 1e-5 * std::abs(loss)) << "step " << step;
  }
}

TEST(RunCli, FlagsOverrideTheSpecAndBadOnesExit2) {
  Result r = RunLoom(absl::StrCat("run ", Job("flags", "parallel: {tp: 2}\n"), " --nproc-per-node 3"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--nproc-per-node"), std::string::npos) << r.output;
  r = RunLoom(absl::StrCat("run ", Job("flags2", ""), " --bogus"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--bogus"), std::string::npos) << r.output;
  r = RunLoom(absl::StrCat("run ", Job("flags3", ""), " --steps zero"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--steps"), std::string::npos) << r.output;
  r = RunLoom("run /nonexistent/job.yaml");
  EXPECT_EQ(r.code, 2) << r.output;
}

TEST(RunCli, WorkerConfigErrorFailsOnceWithTheRootCause) {
  // The spec is valid; the worker finds the corpus too short for one
  // validation window: a configuration error (exit 2), not retried.
  std::string corpus = Tmp("tiny.txt");
  std::ofstream(corpus) << "far too short to train on\n";
  Result r = RunLoom(absl::StrCat("run ", Job("badata", "data: {path: " + corpus + "}\nmax_restarts: 3\n")));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("FAILED"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0: data.path: " + corpus), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restart 1"), std::string::npos) << "a config error was retried:\n" << r.output;
}

// Starts `loom run` on a 100000-step job (extra spec lines first) in the
// background, its stderr to `log` and its state kept in `state`, and waits
// until rank 0 trains (its progress file moves past step 1). Returns the pid,
// or 0 when the job never started training.
pid_t StartLongRun(const std::string& name, const std::string& extra, const std::string& state,
                   const std::string& log) {
  std::filesystem::remove_all(state);
  std::string spec = Tmp(name + ".yaml");
  std::ofstream(spec) << "name: " << name << "\n" << extra
                      << "model: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n"
                         "train: {steps: 100000, batch_size: 4, eval_every: 100000}\n";
  pid_t pid = fork();
  if (pid == 0) {
    FILE* f = freopen(log.c_str(), "w", stderr);
    (void)f;
    execl("runtime/loom", "loom", "run", spec.c_str(), "--keep-state", state.c_str(), nullptr);
    _exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream p(state + "/agent/logs/job-1/rank0.progress");
    int64_t step = 0;
    if ((p >> step) && step > 1) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return 0;
}

TEST(RunCli, InterruptCancelsAndLeavesNoWorker) {
  std::string state = Tmp("state_int"), log = Tmp("int.log");
  pid_t pid = StartLongRun("long", "", state, log);
  ASSERT_GT(pid, 0) << "the job never started training";
  EXPECT_GE(ProcessesMentioning(state), 1);
  auto t0 = std::chrono::steady_clock::now();
  kill(pid, SIGINT);
  int status = 0;
  for (int i = 0; i < 600 && waitpid(pid, &status, WNOHANG) != pid; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status)) << "loom run did not exit within 30 s of SIGINT";
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_LT(waited, 30.0);
  std::ifstream in(log);
  std::stringstream out;
  out << in.rdbuf();
  EXPECT_NE(out.str().find("CANCELLED"), std::string::npos) << out.str();
  EXPECT_EQ(ProcessesMentioning(state), 0) << "a worker of the cancelled job is still running";
}

// The pid of the worker process whose environment holds `needle` and rank 0 (0: none).
pid_t RankZeroWorker(const std::string& needle) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream env(e.path() / "environ", std::ios::binary);
    if (!env) continue;
    std::stringstream ss;
    ss << env.rdbuf();
    const std::string s = ss.str();
    if (s.find(needle) != std::string::npos && s.find(std::string("LOOM_RANK=0\0", 12)) != std::string::npos)
      return static_cast<pid_t>(std::atoi(e.path().filename().c_str()));
  }
  return 0;
}

// A rank that dies of a signal leaves no error file; `loom run` shows the tail
// of its stderr, where the failure signal handler wrote what killed it.
TEST(RunCli, RankKilledBySignalShowsItsStderrTail) {
  std::string state = Tmp("state_segv"), log = Tmp("segv.log");
  pid_t pid = StartLongRun("segv", "max_restarts: 0\n", state, log);
  ASSERT_GT(pid, 0) << "the job never started training";
  pid_t worker = RankZeroWorker(state);
  ASSERT_GT(worker, 0) << "no rank-0 worker found";
  kill(worker, SIGSEGV);
  int status = 0;
  for (int i = 0; i < 600 && waitpid(pid, &status, WNOHANG) != pid; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(WIFEXITED(status)) << "loom run did not exit within 30 s of its rank's crash";
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::ifstream in(log);
  std::stringstream out;
  out << in.rdbuf();
  EXPECT_NE(out.str().find("exited with -11"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("rank 0's stderr"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("SIGSEGV"), std::string::npos) << out.str();
}

}  // namespace
