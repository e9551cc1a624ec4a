// The agent against a real in-process coordinator: ranks run as shell
// processes; success, restart after a rank failure, cancel with SIGTERM ->
// SIGKILL escalation, and no process left behind.
#include "runtime/service/agent/agent.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/usable_cpus.h"
#include "gtest/gtest.h"
#include "runtime/service/auth/token.h"
#include "runtime/service/server.h"
#include "runtime/service/testing/daemons.h"

namespace loom::runtime::service::agent {
namespace {

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = std::string(tmp ? tmp : "/tmp") + "/agent_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    ServerOptions o;
    o.coordinator.data_dir = root_ + "/coord";
    o.coordinator.kill_grace_ms = 300;
    auto s = CoordinatorServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }

  // Ranks run `script` with /bin/sh, or `argv` when given.
  std::unique_ptr<Agent> StartAgent(const std::string& script, int slots = 2,
                                    const std::vector<std::string>& argv = {}) {
    AgentOptions a;
    a.coordinator = "127.0.0.1:" + std::to_string(server_->port());
    a.join_token = server_->join_token();
    a.data_dir = root_ + "/agent";
    a.cpu_slots = slots;
    a.worker_argv = argv.empty() ? std::vector<std::string>{"/bin/sh", "-c", script} : argv;
    auto agent = std::make_unique<Agent>(a);
    absl::Status s = agent->Start();
    EXPECT_TRUE(s.ok()) << s;
    return agent;
  }

  std::string Submit(int dp, int max_restarts = 0) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_name("agent-job");
    req.mutable_spec()->mutable_parallel()->set_dp(dp);
    req.mutable_spec()->set_max_restarts(max_restarts);
    auto r = server_->coordinator()->Submit(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job().job_id() : "";
  }

  // Waits (deadline 10 s) for a terminal state.
  v1::JobStatus WaitDone(const std::string& id) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    v1::JobStatus s;
    while (std::chrono::steady_clock::now() < deadline) {
      s = server_->coordinator()->Get(id)->job();
      if (store::IsTerminal(s.state())) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return s;
  }

  std::string root_;
  std::unique_ptr<CoordinatorServer> server_;
};

std::string ReadFile(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Start retries a registration until its deadline only for failures that
// may pass: no coordinator yet, an attempt that ran out of time, or a
// transport failure without a code (an interrupted TLS handshake under load
// came back as Unknown and ended the agent). A refusal is final.
TEST(AgentRegister, TransportFailuresAreRetriedAndRefusalsAreNot) {
  for (absl::StatusCode c : {absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded,
                             absl::StatusCode::kUnknown})
    EXPECT_TRUE(TransientRegisterError(absl::Status(c, "x"))) << absl::StatusCodeToString(c);
  for (absl::StatusCode c : {absl::StatusCode::kOk, absl::StatusCode::kUnauthenticated,
                             absl::StatusCode::kPermissionDenied, absl::StatusCode::kInvalidArgument,
                             absl::StatusCode::kFailedPrecondition, absl::StatusCode::kResourceExhausted})
    EXPECT_FALSE(TransientRegisterError(absl::Status(c, "x"))) << absl::StatusCodeToString(c);
}

AgentOptions UnreachableAgent(const std::string& root, int port) {
  AgentOptions a;
  a.coordinator = "127.0.0.1:" + std::to_string(port);
  a.join_token = "join-token-of-a-coordinator-not-started-yet";
  a.data_dir = root + "/agent";
  a.worker_argv = {"/bin/true"};
  return a;
}

// An agent started before its coordinator keeps trying, with a growing
// wait, and registers once the coordinator listens (here 2.5 s later); it
// gives up at its deadline when it has one, and returns Cancelled as soon as
// its cancel check says so.
TEST_F(AgentTest, RegistrationWaitsForALateCoordinatorUntilDeadlineOrCancel) {
  const int port = runtime::service::testing::FreeLoopbackPort();
  ASSERT_GT(port, 0);
  {
    Agent agent(UnreachableAgent(root_, port));
    auto t0 = std::chrono::steady_clock::now();
    absl::Status s = agent.Start(std::chrono::milliseconds(1500));
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_GE(took, 1.5);
    EXPECT_LT(took, 15.0);  // the deadline, one wait of at most 5 s, one 5 s try
  }
  {
    Agent agent(UnreachableAgent(root_, port));
    std::atomic<bool> stop{false};
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      stop = true;
    });
    auto t0 = std::chrono::steady_clock::now();
    absl::Status s = agent.Start(std::chrono::milliseconds(0), [&] { return stop.load(); });
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    canceller.join();
    EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
    EXPECT_GE(took, 0.8);
    EXPECT_LT(took, 15.0);
  }
  AgentOptions late = UnreachableAgent(root_, port);
  absl::Status registered = absl::UnknownError("Start did not return");
  std::thread starter([&] {
    Agent agent(late);
    registered = agent.Start(std::chrono::milliseconds(0));
    agent.Stop();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  ServerOptions o;
  o.coordinator.data_dir = root_ + "/late-coord";
  o.listen_address = "127.0.0.1:" + std::to_string(port);
  o.join_token = late.join_token;
  auto server = CoordinatorServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  starter.join();  // the retry wait is at most 5 s: this returns within seconds
  EXPECT_TRUE(registered.ok()) << registered;
  EXPECT_EQ((*server)->coordinator()->ListAgents().agents_size(), 1);
}

TEST_F(AgentTest, RunsRanksAndKeepsTheirLogs) {
  auto agent = StartAgent("echo rank $LOOM_RANK of $LOOM_WORLD_SIZE; echo oops >&2");
  std::string id = Submit(2);
  v1::JobStatus s = WaitDone(id);
  EXPECT_EQ(s.state(), v1::SUCCEEDED) << s.DebugString();
  EXPECT_EQ(ReadFile(root_ + "/agent/logs/" + id + "/rank1.out"), "rank 1 of 2\n");
  EXPECT_EQ(ReadFile(root_ + "/agent/logs/" + id + "/rank0.err"), "oops\n");
  EXPECT_EQ(agent->running_ranks(), 0);
  // Shipped to the coordinator before the exits were reported.
  EXPECT_EQ(ReadFile(root_ + "/coord/logs/" + id + "/rank1.out"), "rank 1 of 2\n");
  auto logs = server_->coordinator()->store()->Logs(*ParseJobId(id));
  ASSERT_TRUE(logs.ok());
  EXPECT_EQ(logs->size(), 4u);  // 2 ranks x stdout, stderr
}

// A device: cuda job on an agent offering GPUs (no GPU is touched: the ranks
// are shell scripts): with resources.ranks_per_gpu 2, ranks 0 and 1 get
// LOOM_GPU=0 and ranks 2 and 3 LOOM_GPU=1, each with CUDA_VISIBLE_DEVICES
// naming its GPU only.
TEST_F(AgentTest, RanksSharingAGpuGetItsDeviceIndex) {
  AgentOptions a;
  a.coordinator = "127.0.0.1:" + std::to_string(server_->port());
  a.join_token = server_->join_token();
  a.data_dir = root_ + "/agent";
  a.cpu_slots = 1;
  a.gpus = 2;
  a.worker_argv = {"/bin/sh", "-c", "echo rank $LOOM_RANK gpu $LOOM_GPU visible $CUDA_VISIBLE_DEVICES"};
  Agent agent(a);
  ASSERT_TRUE(agent.Start().ok());
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_name("shared-gpu");
  req.mutable_spec()->set_device("cuda");
  req.mutable_spec()->mutable_parallel()->set_dp(4);
  req.mutable_spec()->mutable_resources()->set_ranks_per_gpu(2);
  auto r = server_->coordinator()->Submit(req);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string id = r->job().job_id();
  v1::JobStatus s = WaitDone(id);
  EXPECT_EQ(s.state(), v1::SUCCEEDED) << s.DebugString();
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_EQ(ReadFile(root_ + "/agent/logs/" + id + "/rank" + std::to_string(rank) + ".out"),
              "rank " + std::to_string(rank) + " gpu " + std::to_string(rank / 2) + " visible " +
                  RankVisibleDevices(rank / 2, std::getenv("CUDA_VISIBLE_DEVICES")) + "\n");
}

// Each rank's LOOM_NUM_THREADS: by default the node's usable CPUs shared
// among the ranks running once the order's start (at least 1), so ranks do
// not oversubscribe the node; resources.threads_per_rank as written; never a
// value the agent itself inherited.
TEST(RankThreads, SharesTheUsableCpusUnlessTheSpecSetsThem) {
  EXPECT_EQ(RankThreads(0, 16, 0, 1), 16);
  EXPECT_EQ(RankThreads(0, 16, 0, 4), 4);
  EXPECT_EQ(RankThreads(0, 16, 2, 4), 2);
  EXPECT_EQ(RankThreads(0, 16, 0, 3), 5);
  EXPECT_EQ(RankThreads(0, 2, 0, 4), 1);
  EXPECT_EQ(RankThreads(0, 2, 6, 0), 1);
  EXPECT_EQ(RankThreads(3, 2, 0, 4), 3);
}

TEST_F(AgentTest, RanksGetTheirThreadCountInTheirEnvironment) {
  ASSERT_EQ(setenv("LOOM_NUM_THREADS", "77", 1), 0);  // the agent's own: not passed on
  auto agent = StartAgent("echo threads $LOOM_NUM_THREADS", 2);
  const std::string shared = Submit(2);
  EXPECT_EQ(WaitDone(shared).state(), v1::SUCCEEDED);
  const std::string expect = "threads " + std::to_string(RankThreads(0, UsableCpus(), 0, 2)) + "\n";
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_EQ(ReadFile(root_ + "/agent/logs/" + shared + "/rank" + std::to_string(rank) + ".out"), expect);
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_name("three-threads");
  req.mutable_spec()->mutable_resources()->set_threads_per_rank(3);
  auto r = server_->coordinator()->Submit(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(WaitDone(r->job().job_id()).state(), v1::SUCCEEDED);
  EXPECT_EQ(ReadFile(root_ + "/agent/logs/" + r->job().job_id() + "/rank0.out"), "threads 3\n");
  agent->Stop();
  unsetenv("LOOM_NUM_THREADS");
}

TEST(RankVisibleDevices, NamesTheAgentsOwnDeviceAtThatIndex) {
  EXPECT_EQ(RankVisibleDevices(1, nullptr), "1");
  EXPECT_EQ(RankVisibleDevices(0, ""), "0");
  EXPECT_EQ(RankVisibleDevices(1, "2,3"), "3");
  EXPECT_EQ(RankVisibleDevices(0, "GPU-5e1f"), "GPU-5e1f");
  EXPECT_EQ(RankVisibleDevices(2, "2,3"), "2");  // beyond the list: the index as offered
}

TEST_F(AgentTest, RankFailureRestartsTheGroupWithTheErrorFile) {
  auto agent = StartAgent(
      "if [ \"$LOOM_RANK\" = 1 ] && [ \"$LOOM_ATTEMPT\" = 0 ]; then echo 'rank 1: disk full' > $LOOM_ERROR_FILE; exit 3; fi;"
      " sleep 0.2");
  std::string id = Submit(2, /*max_restarts=*/1);
  v1::JobStatus s = WaitDone(id);
  EXPECT_EQ(s.state(), v1::SUCCEEDED) << s.DebugString();
  EXPECT_EQ(s.restart_count(), 1);
  EXPECT_EQ(s.root_cause_rank(), 1);
  EXPECT_EQ(s.root_cause(), "rank 1: disk full\n");
}

TEST_F(AgentTest, CancelTerminatesThenKillsTheWholeGroup) {
  // Each rank ignores SIGTERM and has a child of its own: only SIGKILL of the
  // group after the grace period ends them all.
  auto agent = StartAgent("trap '' TERM; sleep 30 & sleep 30; wait");
  std::string id = Submit(2);
  std::vector<pid_t> groups;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline &&
         (groups.size() < 2 || server_->coordinator()->Get(id)->job().state() != v1::RUNNING)) {
    groups = agent->process_groups(id);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(groups.size(), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the shells start their children
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(server_->coordinator()->Cancel(id).ok());
  bool gone = false;
  while (!gone && std::chrono::steady_clock::now() < t0 + std::chrono::seconds(5)) {
    gone = true;
    for (pid_t g : groups) gone = gone && kill(-g, 0) == -1 && errno == ESRCH;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(gone) << "processes of the job remain";
  EXPECT_GE(secs, 0.25);  // SIGTERM was ignored: only the SIGKILL after the 300 ms grace ended them
  EXPECT_LT(secs, 3.0);
  EXPECT_EQ(server_->coordinator()->Get(id)->job().state(), v1::CANCELLED);
}

// `loom agent` blocks SIGTERM and SIGINT (it sigwaits for them) and may run
// under a parent that ignores signals; a mask and ignored signals survive
// fork and exec, yet a rank must start with neither, or a kill order's SIGTERM
// never reaches it.
TEST_F(AgentTest, RanksStartWithAnEmptySignalMaskAndDefaultDispositions) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &block, &old), 0);
  auto old_hup = signal(SIGHUP, SIG_IGN);
  // grep itself, not through a shell (dash clears its signal mask at start).
  auto agent = StartAgent("", 2, {"/bin/grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"});  // inherits both
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  signal(SIGHUP, old_hup);
  std::string id = Submit(1);
  ASSERT_EQ(WaitDone(id).state(), v1::SUCCEEDED);
  // Masks of signals 1..64, bit n-1 for signal n. Signals 32 and 33 belong to
  // the C library's threads (sigaction refuses them), so only 1..31 count.
  unsigned long long blocked = ~0ull, ignored = ~0ull;
  std::istringstream status(ReadFile(root_ + "/agent/logs/" + id + "/rank0.out"));
  std::string key, hex;
  while (status >> key >> hex) (key == "SigBlk:" ? blocked : ignored) = std::stoull(hex, nullptr, 16);
  EXPECT_EQ(blocked & 0x7fffffffull, 0u) << std::hex << blocked;  // SIGTERM is bit 14, SIGINT bit 1
  EXPECT_EQ(ignored & 0x7fffffffull, 0u) << std::hex << ignored;  // SIGHUP is bit 0
}

TEST_F(AgentTest, StopLeavesNoProcessBehind) {
  auto agent = StartAgent("sleep 30 & sleep 30; wait");
  std::string id = Submit(2);
  std::vector<pid_t> groups;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (groups.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    groups = agent->process_groups(id);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(groups.size(), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  agent->Stop();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (pid_t g : groups) EXPECT_TRUE(kill(-g, 0) == -1 && errno == ESRCH) << "group " << g << " survived";
}

}  // namespace
}  // namespace loom::runtime::service::agent

namespace loom::runtime::service::agent {
namespace {

// A rank's lines in LOOM_METRICS_FILE reach the coordinator's series within
// 1 s of being written, with the rank's number; bad lines are skipped.
TEST_F(AgentTest, ShipsMetricLinesPromptly) {
  auto agent = StartAgent(
      "echo '{\"step\": 1, \"loss\": 4.5, \"lr\": 0.001, \"tokens_per_s\": 100.0, \"step_time_ms\": 12.5}' "
      ">> \"$LOOM_METRICS_FILE\"; echo 'not json' >> \"$LOOM_METRICS_FILE\"; "
      "while [ ! -e \"$LOOM_METRICS_FILE.done\" ]; do sleep 0.05; done");
  std::string id = Submit(1);
  auto points = [&] { return *server_->coordinator()->Metrics(id, -1); };
  auto wait_for = [&](size_t n) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (points().size() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return points().size() >= n;
  };
  ASSERT_TRUE(wait_for(1));
  std::vector<v1::MetricPoint> p = points();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].step(), 1);
  EXPECT_EQ(p[0].rank(), 0);
  EXPECT_EQ(p[0].loss(), 4.5);
  EXPECT_EQ(p[0].lr(), 0.001);
  EXPECT_EQ(p[0].tokens_per_s(), 100.0);
  EXPECT_EQ(p[0].step_time_ms(), 12.5);
  EXPECT_FALSE(p[0].has_val_loss());
  EXPECT_GT(p[0].time_unix_ms(), 0);

  // A point written now (as the worker would) reaches the coordinator within 1 s.
  const std::string file = root_ + "/agent/logs/" + id + "/rank0.metrics.jsonl";
  auto t0 = std::chrono::steady_clock::now();
  std::ofstream(file, std::ios::app) << "{\"step\": 2, \"val_loss\": 3.25}\n" << std::flush;
  ASSERT_TRUE(wait_for(2));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  std::printf("metric line reached the coordinator in %lld ms\n", static_cast<long long>(ms));
  EXPECT_LT(ms, 1000);
  p = points();
  EXPECT_EQ(p[1].step(), 2);
  EXPECT_EQ(p[1].val_loss(), 3.25);
  EXPECT_FALSE(p[1].has_loss());
  // A partial line waits for its newline.
  std::ofstream(file, std::ios::app) << "{\"step\": 3, \"loss\"" << std::flush;
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(points().size(), 2u);
  std::ofstream(file, std::ios::app) << ": 2.0}\n" << std::flush;
  ASSERT_TRUE(wait_for(3));
  EXPECT_EQ(points()[2].loss(), 2.0);
  std::ofstream(file + ".done") << "";
  EXPECT_EQ(WaitDone(id).state(), v1::SUCCEEDED);
}

}  // namespace
}  // namespace loom::runtime::service::agent
