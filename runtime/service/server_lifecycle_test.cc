// Job lifecycle through the gRPC API with agents played by the test: gang
// scheduling, restarts, progress, lost agents, coordinator restarts.
#include "runtime/service/server_test_fixture.h"

namespace loom::runtime::service {
namespace {

using grpc::StatusCode;

TEST_F(ServerTest, GangScheduleRunAndSucceed) {
  std::string agent = Register(4);
  v1::SubmitJobResponse first, second;
  ASSERT_TRUE(Submit(Spec("2d", 2, 2), "a", &first).ok());
  EXPECT_EQ(first.job().state(), v1::SCHEDULED);
  ASSERT_EQ(first.job().placement_size(), 4);
  ASSERT_TRUE(Submit(Spec("next", 2, 2), "b", &second).ok());
  EXPECT_EQ(second.job().state(), v1::PENDING);
  EXPECT_NE(second.job().wait_reason().find("waiting for resources: needs 4 CPU slots; 0 free"), std::string::npos)
      << second.job().wait_reason();

  auto orders = Poll(agent);
  ASSERT_EQ(orders.orders_size(), 1);
  const auto& launch = orders.orders(0).launch();
  EXPECT_EQ(launch.job_id(), first.job().job_id());
  EXPECT_EQ(launch.ranks_size(), 4);
  EXPECT_EQ(launch.world_size(), 4);
  EXPECT_TRUE(launch.host_rendezvous());
  EXPECT_EQ(launch.spec().name(), "2d");
  EXPECT_EQ(Get(first.job().job_id()).state(), v1::RUNNING);

  for (int r = 0; r < 4; ++r) ASSERT_TRUE(Exit(agent, first.job().job_id(), r, 0).ok());
  v1::JobStatus done = Get(first.job().job_id());
  EXPECT_EQ(done.state(), v1::SUCCEEDED);
  EXPECT_EQ(done.exit_codes_size(), 4);
  EXPECT_EQ(Get(second.job().job_id()).state(), v1::SCHEDULED);  // took the freed slots
  // Terminal states never change: a late report is ignored, cancel refused.
  EXPECT_TRUE(Exit(agent, first.job().job_id(), 0, 1).ok());
  EXPECT_EQ(Get(first.job().job_id()).state(), v1::SUCCEEDED);
  v1::CancelJobRequest c;
  c.set_job_id(first.job().job_id());
  v1::CancelJobResponse cr;
  EXPECT_EQ(jobs_->CancelJob(Ctx().get(), c, &cr).error_code(), StatusCode::FAILED_PRECONDITION);

  // Cancelling the scheduled job sends the agent a kill order.
  c.set_job_id(second.job().job_id());
  ASSERT_TRUE(jobs_->CancelJob(Ctx().get(), c, &cr).ok());
  EXPECT_EQ(cr.job().state(), v1::CANCELLED);
  orders = Poll(agent);
  ASSERT_GE(orders.orders_size(), 1);
  EXPECT_TRUE(orders.orders(orders.orders_size() - 1).has_kill());
  EXPECT_EQ(orders.orders(orders.orders_size() - 1).kill().job_id(), second.job().job_id());

  std::string text = registry_.Render();
  EXPECT_NE(text.find("loom_jobs{state=\"SUCCEEDED\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("loom_jobs{state=\"CANCELLED\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("loom_agents_alive 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("loom_scheduling_latency_seconds_count 2\n"), std::string::npos) << text;
}

TEST_F(ServerTest, WorkerDeathRestartsOnceThenFails) {
  std::string agent = Register(2);
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Spec("flaky", 2, 1), "f", &r).ok());
  const std::string id = r.job().job_id();
  Poll(agent);
  ASSERT_TRUE(Exit(agent, id, 1, 137).ok());
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::RESTARTING);
  EXPECT_EQ(s.restart_count(), 1);
  EXPECT_EQ(s.root_cause_rank(), 1);
  auto orders = Poll(agent);
  ASSERT_EQ(orders.orders_size(), 2);
  EXPECT_TRUE(orders.orders(0).has_kill());
  EXPECT_EQ(orders.orders(1).launch().attempt(), 1);
  EXPECT_EQ(Get(id).state(), v1::RUNNING);
  ASSERT_TRUE(Exit(agent, id, 0, 0, /*attempt=*/0).ok());  // stale attempt: ignored
  ASSERT_TRUE(Exit(agent, id, 0, 9, /*attempt=*/1).ok());
  s = Get(id);
  EXPECT_EQ(s.state(), v1::FAILED);
  EXPECT_EQ(s.restart_count(), 1);
  EXPECT_EQ(s.root_cause_rank(), 0);
  EXPECT_EQ(s.root_cause(), "boom on rank 0");
  EXPECT_EQ(s.exit_codes(0), 9);
  EXPECT_EQ(s.exit_codes(1), kExitUnknown);  // rank 1 had not exited
  EXPECT_FALSE(IsRetryableExit(127));
  EXPECT_FALSE(IsRetryableExit(126));
  EXPECT_TRUE(IsRetryableExit(137));

  // Exit code 2 is a bad configuration: no retry.
  ASSERT_TRUE(Submit(Spec("badcfg", 2, 1), "g", &r).ok());
  Poll(agent);
  ASSERT_TRUE(Exit(agent, r.job().job_id(), 0, kExitConfigError).ok());
  s = Get(r.job().job_id());
  EXPECT_EQ(s.state(), v1::FAILED);
  EXPECT_EQ(s.restart_count(), 0);
}

TEST_F(ServerTest, ProgressReachesWatchersAndNeverGoesBack) {
  std::string agent = Register(1);
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Spec("progress"), "p", &r).ok());
  Poll(agent);
  auto report = [&](int64_t step, int64_t ckpt, int attempt = 0) {
    v1::ReportProgressRequest req;
    req.set_agent_id(agent);
    req.set_job_id(r.job().job_id());
    req.set_attempt(attempt);
    req.set_step(step);
    req.set_checkpoint_step(ckpt);
    req.set_rendezvous_address("127.0.0.1:29500");
    v1::ReportProgressResponse resp;
    return nodes_->ReportProgress(AgentCtx(agent).get(), req, &resp);
  };
  ASSERT_TRUE(report(10, -1).ok());
  ASSERT_TRUE(report(20, 20).ok());
  ASSERT_TRUE(report(15, 10).ok());   // out of order: ignored
  ASSERT_TRUE(report(99, 99, 3).ok());  // another attempt: ignored
  v1::JobStatus s = Get(r.job().job_id());
  EXPECT_EQ(s.current_step(), 20);
  EXPECT_EQ(s.last_checkpoint_step(), 20);
  EXPECT_EQ(s.rendezvous_address(), "127.0.0.1:29500");
  ASSERT_TRUE(Exit(agent, r.job().job_id(), 0, 0).ok());
  s = Get(r.job().job_id());
  EXPECT_EQ(s.state(), v1::SUCCEEDED);
  EXPECT_EQ(s.last_checkpoint_step(), 20);  // kept after the end
}

TEST_F(ServerTest, CoordinatorRestartAdoptsRunningRanks) {
  server_.reset();
  StartServer(/*heartbeat_ms=*/200);
  std::string agent = Register(2);
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Spec("adopt", 2), "a", &r).ok());
  const std::string id = r.job().job_id();
  Poll(agent);
  ASSERT_EQ(Get(id).state(), v1::RUNNING);

  server_.reset();  // the coordinator dies; the agent's workers keep running
  StartServer(200, /*fresh=*/false);
  v1::RegisterAgentRequest reg;
  reg.set_agent_id(agent);
  reg.mutable_resources()->set_cpu_slots(2);
  auto* run = reg.add_running();
  run->set_job_id(id);
  for (int rank = 0; rank < 2; ++rank) run->add_ranks()->set_rank(rank);
  reg.add_running()->set_job_id("job-999");  // unknown: must be killed
  v1::RegisterAgentResponse rr;
  ASSERT_TRUE(nodes_->RegisterAgent(AgentCtx(agent).get(), reg, &rr).ok());  // its credential outlives the restart
  EXPECT_EQ(rr.agent_id(), agent);
  v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::RUNNING);
  ASSERT_EQ(s.placement_size(), 2);
  v1::SubmitJobResponse second;
  ASSERT_TRUE(Submit(Spec("second", 2), "b", &second).ok());
  EXPECT_EQ(second.job().state(), v1::PENDING);  // the adopted ranks hold the slots
  // Past the reclaim deadline the adopted job is left alone.
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(900);
  KeepAliveUntil(agent, [&] { return std::chrono::steady_clock::now() > until; });
  s = Get(id);
  EXPECT_EQ(s.state(), v1::RUNNING);
  EXPECT_EQ(s.restart_count(), 0);
  auto orders = Poll(agent);
  ASSERT_EQ(orders.orders_size(), 1);
  EXPECT_EQ(orders.orders(0).kill().job_id(), "job-999");
  for (int rank = 0; rank < 2; ++rank) ASSERT_TRUE(Exit(agent, id, rank, 0).ok());
  EXPECT_EQ(Get(id).state(), v1::SUCCEEDED);
  EXPECT_EQ(Get(second.job().job_id()).state(), v1::SCHEDULED);
}

TEST_F(ServerTest, UnclaimedJobsRestartAfterCoordinatorRestart) {
  server_.reset();
  StartServer(/*heartbeat_ms=*/200);
  std::string old_agent = Register(2);
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Spec("orphan", 2), "o", &r).ok());
  Poll(old_agent);
  ASSERT_EQ(Get(r.job().job_id()).state(), v1::RUNNING);
  server_.reset();
  StartServer(200, /*fresh=*/false);
  std::string fresh = Register(2, "fresh");  // does not run the job
  v1::JobStatus s;
  EXPECT_TRUE(KeepAliveUntil(fresh, [&] {
    s = Get(r.job().job_id());
    return s.state() == v1::SCHEDULED;
  })) << v1::JobState_Name(s.state());
  EXPECT_EQ(s.restart_count(), 1);
  EXPECT_EQ(s.placement(0).agent_id(), fresh);
  EXPECT_NE(s.root_cause().find("not reclaimed"), std::string::npos) << s.root_cause();
}

TEST_F(ServerTest, EveryNodeResponseNamesTheIncarnationAndARestartChangesIt) {
  v1::RegisterAgentRequest reg;
  reg.mutable_resources()->set_cpu_slots(2);
  v1::RegisterAgentResponse rr;
  ASSERT_TRUE(nodes_->RegisterAgent(JoinCtx().get(), reg, &rr).ok());
  secrets_[rr.agent_id()] = rr.agent_secret();
  const std::string first = rr.incarnation();
  EXPECT_EQ(first.size(), 16u) << first;
  EXPECT_EQ(Poll(rr.agent_id()).incarnation(), first);
  v1::HeartbeatRequest hb;
  hb.set_agent_id(rr.agent_id());
  v1::HeartbeatResponse hr;
  ASSERT_TRUE(nodes_->Heartbeat(AgentCtx(rr.agent_id()).get(), hb, &hr).ok());
  EXPECT_EQ(hr.incarnation(), first);
  server_.reset();
  StartServer(1000, /*fresh=*/false);
  v1::PollOrdersRequest poll;
  poll.set_agent_id(rr.agent_id());
  v1::PollOrdersResponse pr;
  EXPECT_EQ(nodes_->PollOrders(AgentCtx(rr.agent_id()).get(), poll, &pr).error_code(), StatusCode::NOT_FOUND);
  reg.set_agent_id(rr.agent_id());
  const std::string id = rr.agent_id();
  ASSERT_TRUE(nodes_->RegisterAgent(AgentCtx(id).get(), reg, &rr).ok());
  EXPECT_EQ(rr.agent_id(), id);
  EXPECT_TRUE(rr.agent_secret().empty());  // it keeps its credential
  EXPECT_NE(rr.incarnation(), first);
  EXPECT_EQ(Poll(rr.agent_id()).incarnation(), rr.incarnation());
}

// The reclaim grace of reloaded jobs counts from StartReclaimClock (the server
// calls it once it listens), not from when the coordinator was created: a slow
// start must not eat the agents' time to come back.
TEST_F(ServerTest, ReclaimGraceCountsFromWhenTheServerListens) {
  server_.reset();
  StartServer(/*heartbeat_ms=*/50);
  std::string agent = Register(2);
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Spec("slow-start", 2), "s", &r).ok());
  Poll(agent);
  ASSERT_EQ(Get(r.job().job_id()).state(), v1::RUNNING);
  server_.reset();
  CoordinatorOptions o;
  o.data_dir = root_ + "/data";
  o.heartbeat_interval_ms = 50;
  o.reclaim_grace_ms = 0;  // the grace is 3 heartbeats: 150 ms
  auto c = Coordinator::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // a start slower than the grace
  (*c)->CheckAgents();
  auto job = (*c)->Get(r.job().job_id());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->job().state(), v1::RUNNING) << job->job().root_cause();
  EXPECT_EQ(job->job().restart_count(), 0);
  (*c)->StartReclaimClock();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  (*c)->CheckAgents();
  job = (*c)->Get(r.job().job_id());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->job().restart_count(), 1);
  EXPECT_NE(job->job().root_cause().find("not reclaimed"), std::string::npos) << job->job().root_cause();
}

TEST_F(ServerTest, LostAgentRequeuesItsJobs) {
  server_.reset();
  StartServer(/*heartbeat_ms=*/100);
  std::string a = Register(2, "a");
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Spec("moves", 2), "m", &r).ok());
  Poll(a);
  EXPECT_EQ(Get(r.job().job_id()).state(), v1::RUNNING);
  // No heartbeats from `a`: declared lost after 3 intervals (deadline 5 s).
  v1::JobStatus s;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    s = Get(r.job().job_id());
  } while (s.state() != v1::PENDING && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(s.state(), v1::PENDING);
  EXPECT_EQ(s.restart_count(), 1);
  EXPECT_NE(s.root_cause().find("lost"), std::string::npos);
  std::string b = Register(2, "b");
  s = Get(r.job().job_id());
  EXPECT_EQ(s.state(), v1::SCHEDULED);
  EXPECT_EQ(s.placement(0).agent_id(), b);
}

// An agent that only long-polls, asking to wait far longer than the
// heartbeat interval, is never silent for a whole interval: each poll ends
// within it, and the agent is never declared lost.
TEST_F(ServerTest, LongPollEndsWithinTheHeartbeatInterval) {
  server_.reset();
  StartServer(/*heartbeat_ms=*/100);
  std::string a = Register(2, "a");
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < end) {
    auto start = std::chrono::steady_clock::now();
    Poll(a, /*wait_ms=*/5000);  // fails the test with NOT_FOUND once `a` is lost
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2500));
  }
  v1::ListAgentsResponse agents = server_->coordinator()->ListAgents();
  ASSERT_EQ(agents.agents_size(), 1);
  EXPECT_EQ(agents.agents(0).state(), "alive") << agents.DebugString();
}

TEST_F(ServerTest, RestartReloadsJobsFromTheStore) {
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Spec("durable", 2), "d", &r, true).ok());
  std::string token = server_->token();
  server_.reset();  // the next start reuses data_dir
  ServerOptions o;
  o.coordinator.data_dir = root_ + "/data";
  auto s = CoordinatorServer::Start(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->token(), token);
  auto job = (*s)->coordinator()->Get(r.job().job_id());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->job().state(), v1::PENDING);
  v1::RegisterAgentRequest reg;
  reg.mutable_resources()->set_cpu_slots(2);
  AgentCaller join;
  join.join = true;
  ASSERT_TRUE((*s)->coordinator()->RegisterAgent(reg, join).ok());
  EXPECT_EQ((*s)->coordinator()->Get(r.job().job_id())->job().state(), v1::SCHEDULED);
}

}  // namespace
}  // namespace loom::runtime::service
