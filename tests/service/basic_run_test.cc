// The service's basic run, end to end with the real `loom` binary: a
// coordinator and two agents with 2 CPU slots each (two "nodes" on
// loopback), and the 2D GPT job (tp=2 x dp=2) submitted twice: once with the
// CLI (`loom submit --watch`), once from Python through stubs generated from
// the project's protos. Both succeed, logs stream, and /metrics parses with
// prometheus_client with a step counter equal to the steps run; every step's
// metric points reached the dashboard API.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/service/testing/daemons.h"
#include "tests/testing/loom_cli.h"

namespace loom::tests::service::testing {
namespace {

constexpr int kSteps = 12;

std::string Shell(const std::string& cmd, int* rc) {
  tests::testing::CliResult r = loom::tests::testing::Shell(cmd);
  *rc = r.code;
  return r.output;
}

TEST(BasicRun, TwoDimensionalJobThroughCliAndPython) {
  const std::string root = runtime::service::testing::TestDir("basic_run");
  const std::string data = root + "/coord", port_file = root + "/port";
  pid_t coord = runtime::service::testing::Spawn(
      {"runtime/loom", "coordinator", "--data-dir", data, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
       "--port-file", port_file, "--heartbeat-ms", "200", "--data-roots", root},
      root + "/coord.log");
  ASSERT_GT(runtime::service::testing::ReadPort(port_file, 20), 0) << "coordinator did not start";
  int port = 0, metrics_port = 0;
  {
    std::ifstream in(port_file);
    in >> port >> metrics_port;
  }
  ASSERT_GT(metrics_port, 0);
  const std::string addr = absl::StrCat("127.0.0.1:", port);
  std::vector<pid_t> agents;
  for (int n = 0; n < 2; ++n) {
    std::string node = absl::StrCat("node", n);
    agents.push_back(
        runtime::service::testing::Spawn({"runtime/loom", "agent", "--coordinator", addr, "--token-dir", data,
                                          "--data-dir", root + "/" + node, "--cpu-slots", "2", "--hostname", node},
                                         root + "/" + node + ".log"));
  }
  const std::string run_cli = root + "/run_cli", run_py = root + "/run_py";
  std::ofstream(root + "/job.yaml") << "name: cli-2d\n"
                                       "model: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n"
                                       "train: {steps: "
                                    << kSteps << ", batch_size: 4, log_every: " << kSteps << ", eval_every: " << kSteps
                                    << "}\nparallel: {dp: 2, tp: 2}\nrun_dir: " << run_cli << "\n";
  int rc = 0;
  std::string out = Shell(absl::StrCat("timeout 240 runtime/loom submit ", root, "/job.yaml --coordinator ", addr,
                                     " --data-dir ", data, " --wait-for-capacity --watch"),
                        &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("SUCCEEDED"), std::string::npos) << out;
  out = Shell(absl::StrCat("runtime/loom logs job-1 --rank 0 --coordinator ", addr, " --data-dir ", data), &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(absl::StrCat("step ", kSteps, "/", kSteps)), std::string::npos) << out;
  // Every step's point reached the coordinator through the agents before the
  // job ended: rank 0 with the loss (and the validation at the last step),
  // each rank with its step time.
  out = Shell(absl::StrCat("/usr/bin/python3 tests/service/api_points.py http://127.0.0.1:", metrics_port,
                           "/api/v1/jobs/job-1/metrics ", data, "/token"),
              &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(absl::StrCat("rank 0: ", kSteps + 1, " points, steps 1..", kSteps, ", loss ", kSteps,
                                  ", val_loss 1, step_time_ms ", kSteps, "\n")),
            std::string::npos)
      << out;
  for (int r = 1; r < 4; ++r) {
    EXPECT_NE(out.find(absl::StrCat("rank ", r, ": ", kSteps, " points, steps 1..", kSteps,
                                    ", loss 0, val_loss 0, step_time_ms ", kSteps, "\n")),
              std::string::npos)
        << out;
  }

  out = Shell(absl::StrCat("PYTHONPATH=. timeout 300 /usr/bin/python3 tests/service/py_client.py ", addr, " ", data,
                         " --train ", run_py, " ", kSteps),
            &rc);
  EXPECT_EQ(rc, 0) << out;
  for (const char* line : {"ok submit job-", "ok watch SUCCEEDED", "ok logs rank 0 trained", "ok list", "ok errors"})
    EXPECT_NE(out.find(line), std::string::npos) << line << " missing from:\n" << out;

  // The coordinator's /metrics: both jobs' steps; rank 0's metrics.prom: its own.
  out = Shell(absl::StrCat("/usr/bin/python3 runtime/train/prom_check.py http://127.0.0.1:", metrics_port, "/metrics"),
            &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(absl::StrCat("loom_job_steps_total - ", 2 * kSteps, "\n")), std::string::npos) << out;
  EXPECT_NE(out.find("loom_jobs state=SUCCEEDED 2\n"), std::string::npos) << out;
  for (const std::string& run : {run_cli, run_py}) {
    out = Shell("/usr/bin/python3 runtime/train/prom_check.py " + run + "/metrics.prom", &rc);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find(absl::StrCat("loom_train_steps_total - ", kSteps, "\n")), std::string::npos) << out;
    EXPECT_NE(out.find("loom_collective_ops_total backend=gloo,op=all_reduce"), std::string::npos) << out;
  }

  for (pid_t a : agents) kill(a, SIGTERM);
  for (pid_t a : agents) EXPECT_NE(runtime::service::testing::WaitExit(a, 10), -1);
  kill(coord, SIGTERM);
  EXPECT_NE(runtime::service::testing::WaitExit(coord, 10), -1);
}

}  // namespace
}  // namespace loom::tests::service::testing
