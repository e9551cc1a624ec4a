// Agent identity over a real loopback server: the user token opens no
// NodeService call, the join token only registers new agents, and an agent's
// own credential acts only for that agent's id and for ranks placed on it.
// Agent ids are never reused, across coordinator restarts too, and under
// mutual TLS an agent is bound to the client certificate it registered with.
#include "runtime/service/server_test_fixture.h"

namespace loom::runtime::service {
namespace {

using grpc::StatusCode;

class AgentIdentityTest : public ServerTest {
 protected:
  // Every NodeService call an agent makes, for `agent_id` and job `job`,
  // with `ctx` credentials; returns each call's code.
  std::map<std::string, StatusCode> EveryNodeCall(const std::function<std::unique_ptr<grpc::ClientContext>()>& ctx,
                                                  const std::string& agent_id, const std::string& job) {
    std::map<std::string, StatusCode> out;
    v1::RegisterAgentRequest reg;
    reg.set_agent_id(agent_id);
    reg.mutable_resources()->set_cpu_slots(8);
    v1::RegisterAgentResponse rr;
    out["RegisterAgent"] = nodes_->RegisterAgent(ctx().get(), reg, &rr).error_code();
    v1::HeartbeatRequest hb;
    hb.set_agent_id(agent_id);
    v1::HeartbeatResponse hr;
    out["Heartbeat"] = nodes_->Heartbeat(ctx().get(), hb, &hr).error_code();
    v1::PollOrdersRequest poll;
    poll.set_agent_id(agent_id);
    v1::PollOrdersResponse pr;
    out["PollOrders"] = nodes_->PollOrders(ctx().get(), poll, &pr).error_code();
    EXPECT_EQ(pr.orders_size(), 0) << "orders handed to a caller that is not the agent";
    v1::ReportExitRequest ex;
    ex.set_agent_id(agent_id);
    ex.set_job_id(job);
    ex.set_rank(0);
    ex.set_exit_code(1);
    ex.set_error("forged");
    v1::ReportExitResponse er;
    out["ReportExit"] = nodes_->ReportExit(ctx().get(), ex, &er).error_code();
    v1::ReportProgressRequest pg;
    pg.set_agent_id(agent_id);
    pg.set_job_id(job);
    pg.set_step(1000);
    pg.set_checkpoint_step(1000);
    v1::ReportProgressResponse pgr;
    out["ReportProgress"] = nodes_->ReportProgress(ctx().get(), pg, &pgr).error_code();
    v1::AppendLogsRequest lg;
    lg.set_agent_id(agent_id);
    lg.set_job_id(job);
    lg.set_stream("stdout");
    lg.set_data("forged log line\n");
    v1::AppendLogsResponse lr;
    out["AppendLogs"] = nodes_->AppendLogs(ctx().get(), lg, &lr).error_code();
    return out;
  }

  // A running one-rank job on a fresh agent; returns (agent, job id).
  std::pair<std::string, std::string> RunningJob() {
    std::string agent = Register(1, "honest");
    v1::SubmitJobResponse r;
    EXPECT_TRUE(Submit(Spec("victim"), "v", &r).ok());
    return {agent, r.job().job_id()};
  }

  // The job is untouched: RUNNING, no restart, no progress, no shipped log.
  void ExpectUntouched(const std::string& job) {
    v1::JobStatus s = Get(job);
    EXPECT_EQ(s.state(), v1::SCHEDULED) << s.DebugString();
    EXPECT_EQ(s.restart_count(), 0);
    EXPECT_EQ(s.current_step(), 0);
    EXPECT_EQ(s.last_checkpoint_step(), -1);
    EXPECT_TRUE(server_->coordinator()->store()->Logs(*ParseJobId(job))->empty());
  }
};

// A client holding only the user token is no agent: no call of NodeService
// passes, it sees no launch order (so no rendezvous secret), and the job it
// aims at is unchanged; the honest agent still gets its order afterwards.
TEST_F(AgentIdentityTest, UserTokenOpensNoNodeServiceCall) {
  auto [agent, job] = RunningJob();
  const std::string user = server_->token();
  for (const std::string& id : {std::string(), agent}) {
    auto codes = EveryNodeCall([&] { return Ctx(&user); }, id, job);
    for (const auto& [call, code] : codes) EXPECT_EQ(code, StatusCode::UNAUTHENTICATED) << call << " as '" << id << "'";
  }
  ExpectUntouched(job);
  auto orders = Poll(agent);
  ASSERT_EQ(orders.orders_size(), 1);
  EXPECT_EQ(orders.orders(0).launch().rendezvous_secret().size(), 48u);
  EXPECT_EQ(server_->coordinator()->store()->Agents()->size(), 1u);
}

// The join token registers new agents and nothing else: it cannot take over
// an existing id, poll, report or ship logs.
TEST_F(AgentIdentityTest, JoinTokenOnlyRegistersNewAgents) {
  auto [agent, job] = RunningJob();
  auto codes = EveryNodeCall([&] { return JoinCtx(); }, agent, job);
  EXPECT_EQ(codes["RegisterAgent"], StatusCode::PERMISSION_DENIED);  // taking over `agent`
  for (const char* call : {"Heartbeat", "PollOrders", "ReportExit", "ReportProgress", "AppendLogs"}) {
    EXPECT_EQ(codes[call], StatusCode::UNAUTHENTICATED) << call;
  }
  ExpectUntouched(job);
  // The join token and agent credentials never pass JobService.
  const std::string join = server_->join_token();
  const std::string cred = auth::AgentBearer(agent, secrets_[agent]);
  for (const std::string* tok : {&join, &cred}) {
    v1::ListJobsResponse lr;
    EXPECT_EQ(jobs_->ListJobs(Ctx(tok).get(), {}, &lr).error_code(), StatusCode::UNAUTHENTICATED);
    v1::CancelJobRequest c;
    c.set_job_id(job);
    v1::CancelJobResponse cr;
    EXPECT_EQ(jobs_->CancelJob(Ctx(tok).get(), c, &cr).error_code(), StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(Poll(agent).orders_size(), 1);
}

// A registered agent (its own valid credential) acting for another agent or
// for ranks not placed on it is refused, logged and counted, and has no
// effect; a wrong secret is refused outright.
TEST_F(AgentIdentityTest, AgentCannotActForAnotherAgentsRanks) {
  auto [agent, job] = RunningJob();
  std::string rogue = Register(1, "rogue");
  auto codes = EveryNodeCall([&] { return AgentCtx(rogue); }, agent, job);
  for (const auto& [call, code] : codes) EXPECT_EQ(code, StatusCode::PERMISSION_DENIED) << call << " for " << agent;
  // Under its own id: registering again and heartbeats are its own business;
  // exit, progress and logs of the victim's rank are not.
  codes = EveryNodeCall([&] { return AgentCtx(rogue); }, rogue, job);
  EXPECT_EQ(codes["RegisterAgent"], StatusCode::OK);
  EXPECT_EQ(codes["Heartbeat"], StatusCode::OK);
  EXPECT_EQ(codes["PollOrders"], StatusCode::OK);
  for (const char* call : {"ReportExit", "ReportProgress", "AppendLogs"}) {
    EXPECT_EQ(codes[call], StatusCode::PERMISSION_DENIED) << call;
  }
  ExpectUntouched(job);
  const std::string text = registry_.Render();
  EXPECT_NE(text.find("loom_node_calls_refused_total{call=\"ReportExit\"} 2"), std::string::npos) << text;
  const std::string wrong = auth::AgentBearer(rogue, std::string(64, '0'));
  v1::HeartbeatRequest hb;
  hb.set_agent_id(rogue);
  v1::HeartbeatResponse hr;
  EXPECT_EQ(nodes_->Heartbeat(Ctx(&wrong).get(), hb, &hr).error_code(), StatusCode::UNAUTHENTICATED);
  // The honest agent's own reports still count.
  Poll(agent);
  ASSERT_TRUE(Exit(agent, job, 0, 0).ok());
  EXPECT_EQ(Get(job).state(), v1::SUCCEEDED);
}

// Agent ids come from the store: a restarted coordinator never hands out an
// id it issued before, and a known agent keeps its id and credential.
TEST_F(AgentIdentityTest, AgentIdsAreNeverReusedAcrossRestarts) {
  std::string first = Register(1, "node");
  server_.reset();
  StartServer(1000, /*fresh=*/false);
  std::string second = Register(1, "node");
  EXPECT_NE(second, first);
  server_.reset();
  StartServer(1000, /*fresh=*/false);
  std::string third = Register(1, "node");
  EXPECT_NE(third, first);
  EXPECT_NE(third, second);
  v1::RegisterAgentRequest reg;
  reg.set_agent_id(first);
  reg.mutable_resources()->set_cpu_slots(1);
  v1::RegisterAgentResponse rr;
  ASSERT_TRUE(nodes_->RegisterAgent(AgentCtx(first).get(), reg, &rr).ok());
  EXPECT_EQ(rr.agent_id(), first);
}

// Under mutual TLS the agent's id is bound to the client certificate it
// registered with: its credential over another client certificate fails.
TEST_F(AgentIdentityTest, AgentIsBoundToItsClientCertificate) {
  std::string d = root_ + "/tls";
  std::filesystem::create_directories(d);
  ASSERT_TRUE(MakeCerts(d, {"node-a", "node-b"})) << "openssl failed; see " << d << "/openssl.log";
  server_.reset();
  ServerOptions o;
  o.coordinator.data_dir = root_ + "/mtls";
  o.tls_cert_file = d + "/server.pem";
  o.tls_key_file = d + "/server.key";
  o.tls_client_ca_file = d + "/ca.pem";
  auto s = CoordinatorServer::Start(o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto stub = [&](const std::string& client) {
    auto creds = MakeClientCredentials(d + "/ca.pem", d + "/" + client + ".pem", d + "/" + client + ".key");
    EXPECT_TRUE(creds.ok()) << creds.status();
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    return v1::NodeService::NewStub(
        grpc::CreateCustomChannel("127.0.0.1:" + std::to_string((*s)->port()), *creds, args));
  };
  auto ctx = [](const std::string& bearer) {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    auth::AddBearer(c.get(), bearer);
    return c;
  };
  auto a = stub("node-a"), b = stub("node-b");
  v1::RegisterAgentRequest reg;
  reg.mutable_resources()->set_cpu_slots(1);
  v1::RegisterAgentResponse rr;
  grpc::Status st = a->RegisterAgent(ctx((*s)->join_token()).get(), reg, &rr);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_NE((*(*s)->coordinator()->store()->Agents())[0].cert_identity.find("node-a"), std::string::npos);
  const std::string cred = auth::AgentBearer(rr.agent_id(), rr.agent_secret());
  v1::HeartbeatRequest hb;
  hb.set_agent_id(rr.agent_id());
  v1::HeartbeatResponse hr;
  EXPECT_TRUE(a->Heartbeat(ctx(cred).get(), hb, &hr).ok());
  st = b->Heartbeat(ctx(cred).get(), hb, &hr);
  EXPECT_EQ(st.error_code(), StatusCode::UNAUTHENTICATED) << st.error_message();
  reg.set_agent_id(rr.agent_id());
  EXPECT_EQ(b->RegisterAgent(ctx(cred).get(), reg, &rr).error_code(), StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace loom::runtime::service
