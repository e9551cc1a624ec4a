// `loom coordinator --backend slurm` against the two-node test cluster: jobs
// submitted with `loom submit` run as Slurm batch jobs, and Loom's view of
// each job (loom status, logs, /metrics) agrees with Slurm's own
// (squeue / scontrol show job). Nothing is mocked.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/slurm/backend_fixture.h"
#include "tests/slurm/slurm_cluster.h"
#include "tests/testing/loom_cli.h"
#include "tests/testing/processes.h"

namespace loom::tests::slurm {
namespace {

bool Terminal(const std::string& status) {
  const std::string s = JsonField(status, "state");
  return s == "SUCCEEDED" || s == "FAILED" || s == "CANCELLED";
}

class SlurmBackend : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SlurmClusterOptions o;
    o.cpus_per_node = 4;  // 8 job slots: the 20 jobs are tiny and mostly wait on process start
    auto c = SlurmCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr) << "the Slurm test cluster did not start"; }

  // Slurm's own view of Loom's job: "<slurm id> <state>" of the one batch job
  // named loom.<name>.<job>; with `settle`, once it has left RUNNING and
  // COMPLETING (up to 10 s).
  static std::pair<std::string, std::string> SlurmView(const std::string& name, const std::string& job,
                                                       bool settle = true) {
    std::string out;
    for (int i = 0; i < 100; ++i) {
      out = cluster_->Run(absl::StrCat("squeue -h -t all --name=loom.", name, ".", job, " -o '%i %T'"), 10).output;
      if (!settle || (out.find("COMPLETING") == std::string::npos && out.find("RUNNING") == std::string::npos)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const size_t sp = out.find(' '), nl = out.find('\n');
    if (sp == std::string::npos || nl == std::string::npos || nl + 1 != out.size()) return {"", out};
    return {out.substr(0, sp), out.substr(sp + 1, nl - sp - 1)};
  }
  static SlurmCluster* cluster_;
};
SlurmCluster* SlurmBackend::cluster_ = nullptr;

struct Submitted {
  std::string job, name, want_loom, want_slurm;
};

// The acceptance run: 20 jobs through `loom submit`. 4 run for a
// million steps and are cancelled with `loom cancel` once they report step
// 1 (two ranks each, on both nodes); 4 have a bad config that passes
// submit-time validation but fails at run time: init_from names a checkpoint file that exists (all that
// validation checks) but is corrupt (not safetensors: its header length is
// absurd), so the worker fails loading it, `loom run` in the batch job exits 2
// and Slurm's job FAILS; 12 succeed (10 with one rank, 2 with two ranks on
// two nodes). The cancelled jobs go first: they hold all eight CPUs of the
// cluster while the others wait in Slurm's queue.
TEST_F(SlurmBackend, TwentyJobsReachTheirStatesInBothViews) {
  const auto start = Clock::now();
  std::filesystem::create_directories(Tmp("data"));
  const std::string corrupt = Tmp("data/corrupt.safetensors");
  std::ofstream(corrupt) << "this is not a safetensors file\n";
  Coordinator c(Tmp("coord"));
  ASSERT_GT(c.port(), 0) << c.log();
  std::vector<Submitted> jobs;
  std::vector<std::string> specs;
  for (int i = 0; i < 4; ++i) {
    jobs.push_back({"", absl::StrCat("long", i), "CANCELLED", "CANCELLED"});
    specs.push_back(Spec(jobs.back().name, 2, 1000000));
  }
  for (int i = 0; i < 4; ++i) {
    jobs.push_back({"", absl::StrCat("bad", i), "FAILED", "FAILED"});
    specs.push_back(Spec(jobs.back().name, 1, 3, "init_from: " + corrupt + "\n"));
  }
  for (int i = 0; i < 12; ++i) {
    jobs.push_back({"", absl::StrCat("ok", i), "SUCCEEDED", "COMPLETED"});
    specs.push_back(Spec(jobs.back().name, i % 6 == 5 ? 2 : 1, 3));
  }
  // `loom submit` four at a time: the long jobs first (Slurm's builtin
  // scheduler starts jobs in the order they arrive), then the other 16.
  auto submit = [&](int from, int to) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int i = from + t; i < to; i += 4) jobs[i].job = c.Submit(specs[i]);
      });
    for (std::thread& th : threads) th.join();
  };
  submit(0, 4);
  submit(4, 20);
  for (const Submitted& s : jobs) ASSERT_FALSE(s.job.empty()) << c.log();
  // While the long jobs hold the cluster, a job behind them is queued in
  // both views, with Slurm's reason.
  std::string queued = c.Status(jobs[19].job);
  EXPECT_EQ(JsonField(queued, "state"), "PENDING") << queued;
  // Cancel each long job mid-run: running in Slurm, step 1 reported to Loom.
  for (int i = 0; i < 4; ++i) {
    std::string s = c.AwaitStatus(jobs[i].job, 60, [](const std::string& st) {
      int64_t step = 0;
      return JsonField(st, "state") == "RUNNING" && absl::SimpleAtoi(JsonField(st, "current_step"), &step) && step >= 1;
    });
    ASSERT_EQ(JsonField(s, "state"), "RUNNING") << s << c.log();
  }
  queued = c.Status(jobs[19].job);
  EXPECT_EQ(JsonField(queued, "state"), "PENDING") << queued;
  EXPECT_NE(JsonField(queued, "wait_reason").find("Slurm job"), std::string::npos) << queued;
  std::vector<std::thread> cancels;
  for (int i = 0; i < 4; ++i)
    cancels.emplace_back([&, i] {
      testing::CliResult r = c.Cli("cancel " + jobs[i].job);
      EXPECT_EQ(r.code, 0) << r.output;
    });
  for (std::thread& t : cancels) t.join();
  for (const Submitted& s : jobs) {
    const std::string st = c.AwaitStatus(s.job, 120, Terminal);
    EXPECT_EQ(JsonField(st, "state"), s.want_loom) << s.name << " " << st;
    const auto [slurm_id, slurm_state] = SlurmView(s.name, s.job);
    EXPECT_FALSE(slurm_id.empty()) << s.name << ": not exactly one Slurm job: " << slurm_state;
    EXPECT_EQ(slurm_state, s.want_slurm) << s.name << " (Slurm job " << slurm_id << ")";
    if (s.want_loom == "FAILED") {
      const std::string cause = JsonField(st, "root_cause");
      EXPECT_NE(cause.find(absl::StrCat("Slurm job ", slurm_id, " ended FAILED, exit code 2:0")), std::string::npos)
          << cause;
      EXPECT_NE(cause.find("init_from: safetensors file"), std::string::npos) << "the run's own error: " << cause;
    }
  }
  // Logs come from the Slurm job's output: the batch script's `loom run`
  // (whose own embedded coordinator numbers its job job-1) in the job's run
  // folder; metrics count the jobs by state.
  testing::CliResult logs = c.Cli("logs " + jobs[8].job);
  EXPECT_EQ(logs.code, 0) << logs.output;
  EXPECT_NE(logs.output.find(absl::StrCat("/runs/", jobs[8].name, "-", jobs[8].job, " (metrics.jsonl")),
            std::string::npos)
      << logs.output;
  EXPECT_NE(logs.output.find("loom run: job-1 SUCCEEDED"), std::string::npos) << logs.output;
  const std::string metrics =
      testing::Shell(absl::StrCat("/usr/bin/python3 -c \"import urllib.request; print(urllib.request.urlopen("
                                  "'http://127.0.0.1:",
                                  c.metrics_port(), "/metrics', timeout=10).read().decode())\""))
          .output;
  EXPECT_NE(metrics.find("loom_jobs{state=\"SUCCEEDED\"} 12"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("loom_jobs{state=\"FAILED\"} 4"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("loom_jobs{state=\"CANCELLED\"} 4"), std::string::npos) << metrics;
  EXPECT_EQ(WEXITSTATUS(c.Stop()), 0) << c.log();
  std::fprintf(stderr, "20 jobs through the Slurm backend: %.1f s\n",
               std::chrono::duration<double>(Clock::now() - start).count());
}

// The gang is Slurm's: with two ranks per node, a four-rank job is one batch
// job of 2 nodes x 2 tasks, whose `loom run` starts one srun task per node
// (not one per allocated task) and trains across both.
TEST_F(SlurmBackend, FourRanksRunAsTwoNodesOfTwoTasks) {
  Coordinator c(Tmp("gang"), {"--slurm-ranks-per-node", "2"});
  ASSERT_GT(c.port(), 0) << c.log();
  const std::string job = c.Submit(Spec("gang", 4, 3));
  const std::string st = c.AwaitStatus(job, 90, Terminal);
  EXPECT_EQ(JsonField(st, "state"), "SUCCEEDED") << st << "\n" << c.Cli("logs " + job).output;
  const auto [slurm_id, state] = SlurmView("gang", job);
  EXPECT_EQ(state, "COMPLETED");
  const std::string record = cluster_->Run("scontrol show job -o " + slurm_id, 10).output;
  EXPECT_NE(record.find(" NumNodes=2 "), std::string::npos) << record;
  EXPECT_NE(record.find(" NumTasks=4 "), std::string::npos) << record;
  EXPECT_NE(c.Cli("logs " + job).output.find("4 ranks on 2 nodes"), std::string::npos);
}

// The Slurm job id is stored with the Loom job: a coordinator stopped while
// its job runs and started again on the same data folder follows the same
// Slurm job (step progress keeps coming), and `loom cancel` still reaches it.
TEST_F(SlurmBackend, RestartFollowsTheSameSlurmJob) {
  std::string job;
  {
    Coordinator c(Tmp("restart"));
    ASSERT_GT(c.port(), 0) << c.log();
    job = c.Submit(Spec("survivor", 1, 1000000));
    const std::string s = c.AwaitStatus(job, 60, [](const std::string& st) {
      int64_t step = 0;
      return JsonField(st, "state") == "RUNNING" && absl::SimpleAtoi(JsonField(st, "current_step"), &step) && step >= 1;
    });
    ASSERT_EQ(JsonField(s, "state"), "RUNNING") << s << c.log();
    EXPECT_EQ(WEXITSTATUS(c.Stop()), 0) << c.log();
  }
  const auto [slurm_id, running] = SlurmView("survivor", job, /*settle=*/false);
  ASSERT_EQ(running, "RUNNING") << "the Slurm job outlives its coordinator";
  Coordinator c(Tmp("restart"));
  ASSERT_GT(c.port(), 0) << c.log();
  int64_t before = 0;
  absl::SimpleAtoi(JsonField(c.Status(job), "current_step"), &before);
  int64_t after_restart = 0;
  const std::string s = c.AwaitStatus(job, 30, [&](const std::string& st) {
    return absl::SimpleAtoi(JsonField(st, "current_step"), &after_restart) && after_restart > before;
  });
  EXPECT_EQ(JsonField(s, "state"), "RUNNING") << s;
  EXPECT_GT(after_restart, before) << "no progress read after the restart: " << s;
  testing::CliResult r = c.Cli("cancel " + job);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(JsonField(c.Status(job), "state"), "CANCELLED");
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  std::pair<std::string, std::string> after;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    after = SlurmView("survivor", job, /*settle=*/false);
  } while (after.second != "CANCELLED" && Clock::now() < deadline);
  EXPECT_EQ(after.first, slurm_id);
  EXPECT_EQ(after.second, "CANCELLED") << "scancel of the stored Slurm job id";
}

}  // namespace
}  // namespace loom::tests::slurm
