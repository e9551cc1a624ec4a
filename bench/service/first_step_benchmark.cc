// Time from submission to the first training step of a 4-rank CPU job
// (target: under 3 s).
//
// A coordinator and an agent with 4 CPU slots run in this process (as in
// `loom run`); the agent launches the real `loom worker` for each rank. For
// each repetition it submits a tp=2 x dp=2 GPT job and measures the time
// until the coordinator sees step >= 1 (rank 0's progress, reported by its
// agent), then until SUCCEEDED. Prints each repetition and the median.
//
//   bazel run -c opt //bench/service:first_step_benchmark -- [--reps N]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/service/agent/agent.h"
#include "runtime/service/coordinator.h"
#include "runtime/service/server.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: first_step_benchmark [--reps N]\n");
      return 2;
    }
  }
  // The loom binary beside this one in bazel-bin (runfiles) or on PATH.
  std::string loom = "runtime/loom";
  if (access(loom.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "runtime/loom not found (run from the runfiles root: bazel run)\n");
    return 1;
  }
  loom = std::filesystem::absolute(loom).string();
  char tmpl[] = "/tmp/loom-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  const std::string root = tmpl;

  loom::runtime::service::ServerOptions so;
  so.coordinator.data_dir = root + "/coordinator";
  so.coordinator.heartbeat_interval_ms = 500;
  auto server = loom::runtime::service::CoordinatorServer::Start(so);
  if (!server.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  loom::runtime::service::agent::AgentOptions ao;
  ao.coordinator = absl::StrCat("127.0.0.1:", (*server)->port());
  ao.join_token = (*server)->join_token();
  ao.data_dir = root + "/agent";
  ao.cpu_slots = 4;
  ao.worker_argv = {loom, "worker"};
  ao.poll_wait_ms = 100;
  loom::runtime::service::agent::Agent agent(ao);
  if (absl::Status s = agent.Start(); !s.ok()) {
    std::fprintf(stderr, "agent: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  auto* c = (*server)->coordinator();
  std::vector<double> first, total;
  std::printf("4-rank CPU job (gpt, tp=2 x dp=2, 1 layer, d_model 64), coordinator + agent in process\n");
  for (int r = 0; r < reps; ++r) {
    loom::v1::JobSpec spec;
    spec.set_name(absl::StrCat("bench-", r));
    spec.mutable_model()->set_n_layer(1);
    spec.mutable_model()->set_n_head(2);
    spec.mutable_model()->set_d_model(64);
    spec.mutable_model()->set_seq_len(64);
    spec.mutable_train()->set_steps(5);
    spec.mutable_train()->set_batch_size(8);
    spec.mutable_train()->set_eval_batches(1);
    spec.mutable_train()->set_sample_tokens(8);
    spec.mutable_parallel()->set_dp(2);
    spec.mutable_parallel()->set_tp(2);
    spec.set_run_dir(absl::StrCat(root, "/run", r));
    loom::runtime::jobspec::ApplyDefaults(spec);
    loom::v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    auto t0 = Clock::now();
    auto sub = c->Submit(req);
    if (!sub.ok()) {
      std::fprintf(stderr, "submit: %s\n", std::string(sub.status().message()).c_str());
      return 1;
    }
    double t_first = -1;
    uint64_t version = 0;
    while (true) {
      version = c->WaitForChange(version, std::chrono::milliseconds(50));
      auto got = c->Get(sub->job().job_id());
      if (!got.ok()) return 1;
      if (t_first < 0 && got->job().current_step() >= 1) t_first = Seconds(t0, Clock::now());
      auto st = got->job().state();
      if (st == loom::v1::SUCCEEDED || st == loom::v1::FAILED || st == loom::v1::CANCELLED) {
        if (st != loom::v1::SUCCEEDED) {
          std::fprintf(stderr, "job %s: %s\n", loom::v1::JobState_Name(st).c_str(), got->job().root_cause().c_str());
          return 1;
        }
        break;
      }
    }
    total.push_back(Seconds(t0, Clock::now()));
    first.push_back(t_first);
    std::printf("rep %d: submit -> first step %.3f s, -> SUCCEEDED %.3f s\n", r, t_first, total.back());
    std::fflush(stdout);
  }
  std::sort(first.begin(), first.end());
  std::sort(total.begin(), total.end());
  std::printf("median submit -> first step: %.3f s (must reach < 3 s); median submit -> SUCCEEDED: %.3f s\n",
              first[first.size() / 2], total[total.size() / 2]);
  agent.Stop();
  (*server)->Shutdown();
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
  return 0;
}
