// The coordinator's gRPC API over a real loopback server: tokens, status
// codes for bad input (and no state change), idempotency, paging, streams,
// health/reflection, metrics, TLS, shutdown.
#include "runtime/jobspec/jobspec.h"
#include "runtime/service/server_test_fixture.h"

namespace loom::runtime::service {
namespace {

using grpc::StatusCode;

TEST_F(ServerTest, TokenIsRequiredAndNothingChangesWithoutIt) {
  Register(4);
  std::string none = "", wrong = "0123";
  for (const std::string* tok : {&none, &wrong}) {
    v1::SubmitJobRequest sreq;
    *sreq.mutable_spec() = Spec("x");
    v1::SubmitJobResponse sresp;
    EXPECT_EQ(jobs_->SubmitJob(Ctx(tok).get(), sreq, &sresp).error_code(), StatusCode::UNAUTHENTICATED);
    v1::GetJobRequest greq;
    greq.set_job_id("job-1");
    v1::GetJobResponse gresp;
    EXPECT_EQ(jobs_->GetJob(Ctx(tok).get(), greq, &gresp).error_code(), StatusCode::UNAUTHENTICATED);
    v1::ListJobsResponse lresp;
    EXPECT_EQ(jobs_->ListJobs(Ctx(tok).get(), {}, &lresp).error_code(), StatusCode::UNAUTHENTICATED);
    v1::CancelJobResponse cresp;
    EXPECT_EQ(jobs_->CancelJob(Ctx(tok).get(), {}, &cresp).error_code(), StatusCode::UNAUTHENTICATED);
    v1::JobEvent ev;
    auto ctx = Ctx(tok);
    v1::WatchJobRequest wreq;
    wreq.set_job_id("job-1");
    auto reader = jobs_->WatchJob(ctx.get(), wreq);
    EXPECT_FALSE(reader->Read(&ev));
    EXPECT_EQ(reader->Finish().error_code(), StatusCode::UNAUTHENTICATED);
    v1::RegisterAgentRequest rreq;
    rreq.mutable_resources()->set_cpu_slots(1);
    v1::RegisterAgentResponse rresp;
    EXPECT_EQ(nodes_->RegisterAgent(Ctx(tok).get(), rreq, &rresp).error_code(), StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(TotalJobs(), 0);
  // The token on disk is the one the server checks, and the CLI finds it.
  EXPECT_EQ(*auth::FindClientToken(root_ + "/data"), server_->token());
  EXPECT_EQ(server_->token().size(), 64u);
}

TEST_F(ServerTest, BadInputGetsTheRightCodeAndChangesNoState) {
  std::string agent = Register(4);
  struct Case {
    std::string what;
    v1::SubmitJobRequest req;
    StatusCode code;
    std::string needle;  // in the message
  };
  std::vector<Case> cases;
  auto add = [&](std::string what, v1::JobSpec spec, StatusCode code, std::string needle) {
    Case c{what, {}, code, needle};
    *c.req.mutable_spec() = spec;
    c.req.set_idempotency_key(what);
    cases.push_back(c);
  };
  cases.push_back({"no spec", {}, StatusCode::INVALID_ARGUMENT, "spec: required"});
  v1::JobSpec s = Spec("bad-heads");
  s.mutable_model()->set_n_head(5);
  add("indivisible heads", s, StatusCode::INVALID_ARGUMENT, "spec.model.d_model");
  s = Spec("bert");
  s.mutable_model()->set_family("bert");
  add("unknown model", s, StatusCode::INVALID_ARGUMENT, "spec.model.family");
  s = Spec("prec");
  s.mutable_train()->set_precision("f8");
  add("bad precision", s, StatusCode::INVALID_ARGUMENT, "spec.train.precision");
  s = Spec("outside");
  s.set_run_dir("/etc/loom");
  add("path outside roots", s, StatusCode::INVALID_ARGUMENT, "spec.run_dir");
  s = Spec("dotdot");
  s.mutable_checkpoint()->set_dir(root_ + "/runs/../../escape");
  add("dotdot", s, StatusCode::INVALID_ARGUMENT, "spec.checkpoint.dir");
  s = Spec("missing-data");
  s.mutable_data()->set_path(root_ + "/runs/none.txt");
  add("missing data file", s, StatusCode::INVALID_ARGUMENT, "spec.data.path");
  s = Spec("init-outside");
  s.set_init_from("/etc/passwd");  // exists, but outside the allowed roots
  add("init_from outside roots", s, StatusCode::INVALID_ARGUMENT, "spec.init_from: '/etc/passwd' is outside");
  s = Spec("init-missing");
  s.set_init_from(root_ + "/runs/none.safetensors");
  add("missing init_from file", s, StatusCode::INVALID_ARGUMENT, "spec.init_from");
  s = Spec("prio");
  s.set_priority(5000);
  add("priority", s, StatusCode::INVALID_ARGUMENT, "spec.priority");
  s = Spec("big", 4, 2);  // 8 ranks, cluster has 4 slots
  add("larger than cluster", s, StatusCode::FAILED_PRECONDITION, "wait_for_capacity");
  s = Spec("huge");
  s.set_name(std::string(2 << 20, 'x'));
  add("oversized request", s, StatusCode::RESOURCE_EXHAUSTED, "");
  Case badkey{"bad key", {}, StatusCode::INVALID_ARGUMENT, "idempotency_key"};
  *badkey.req.mutable_spec() = Spec("k");
  badkey.req.set_idempotency_key("line\nbreak");
  cases.push_back(badkey);

  int before = TotalJobs();
  for (const Case& c : cases) {
    v1::SubmitJobResponse resp;
    grpc::Status st = jobs_->SubmitJob(Ctx().get(), c.req, &resp);
    EXPECT_EQ(st.error_code(), c.code) << c.what << ": " << st.error_message();
    EXPECT_NE(st.error_message().find(c.needle), std::string::npos) << c.what << ": " << st.error_message();
    EXPECT_EQ(TotalJobs(), before) << c.what;
  }

  v1::GetJobRequest g;
  v1::GetJobResponse gr;
  g.set_job_id("nope");
  grpc::Status st = jobs_->GetJob(Ctx().get(), g, &gr);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("job_id"), std::string::npos);
  g.set_job_id("job-999");
  EXPECT_EQ(jobs_->GetJob(Ctx().get(), g, &gr).error_code(), StatusCode::NOT_FOUND);
  v1::CancelJobRequest c;
  c.set_job_id("job-999");
  v1::CancelJobResponse cr;
  EXPECT_EQ(jobs_->CancelJob(Ctx().get(), c, &cr).error_code(), StatusCode::NOT_FOUND);
  v1::ListJobsRequest l;
  v1::ListJobsResponse lr;
  l.set_page_size(-1);
  st = jobs_->ListJobs(Ctx().get(), l, &lr);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("page_size"), std::string::npos);
  l.set_page_size(10);
  l.set_page_token("xyz");
  st = jobs_->ListJobs(Ctx().get(), l, &lr);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("page_token"), std::string::npos);
  v1::RegisterAgentRequest r;
  v1::RegisterAgentResponse rr;
  r.mutable_resources()->set_cpu_slots(-3);
  st = nodes_->RegisterAgent(JoinCtx().get(), r, &rr);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("resources.cpu_slots"), std::string::npos);
  EXPECT_EQ(server_->coordinator()->store()->Agents()->size(), 1u);  // no identity issued for it
  v1::HeartbeatRequest h;
  h.set_agent_id("ghost");
  v1::HeartbeatResponse hr;
  st = nodes_->Heartbeat(AgentCtx(agent).get(), h, &hr);
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(st.error_message().find("agent_id"), std::string::npos);
  EXPECT_EQ(TotalJobs(), before);

  // A large job may still wait for capacity when it asks to.
  v1::SubmitJobResponse resp;
  ASSERT_TRUE(Submit(Spec("big", 4, 2), "wait", &resp, /*wait=*/true).ok());
  EXPECT_EQ(resp.job().state(), v1::PENDING);
  EXPECT_EQ(resp.job().world_size(), 8);
  EXPECT_NE(resp.job().wait_reason().find("larger than the cluster"), std::string::npos) << resp.job().wait_reason();
}

// Fields far larger than any valid value, yet within the request size limit:
// each is refused with a short INVALID_ARGUMENT that names the field and
// quotes at most 200 bytes of the value.
TEST_F(ServerTest, OversizedFieldsGetAShortInvalidArgument) {
  server_.reset();
  max_receive_bytes_ = 4 << 20;
  StartServer(1000);
  Register(4);
  struct Case {
    std::string field;
    v1::JobSpec spec;
  };
  std::vector<Case> cases;
  // 1 MiB: over the 4096-byte bound of every string field; 4000 bytes: within
  // it, refused by the field's own rule.
  for (size_t n : {size_t{1} << 20, size_t{4000}}) {
    const std::string big(n, 'a');
    v1::JobSpec s = Spec("x");
    s.set_name(big);
    cases.push_back({"spec.name", s});
    s = Spec("run-dir");
    s.set_run_dir("/" + big);
    cases.push_back({"spec.run_dir", s});
    s = Spec("data");
    s.mutable_data()->set_path("/" + big);
    cases.push_back({"spec.data.path", s});
    s = Spec("family");
    s.mutable_model()->set_family(big);
    cases.push_back({"spec.model.family", s});
    if (n < jobspec::kMaxStringBytes) continue;
    s = Spec("pattern");
    s.mutable_parallel()->add_tp_plan()->set_pattern(big);
    cases.push_back({"spec.parallel.tp_plan[0].pattern", s});
  }
  const int before = TotalJobs();
  for (const Case& c : cases) {
    v1::SubmitJobResponse resp;
    grpc::Status st = Submit(c.spec, "", &resp);
    EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << c.field << ": " << st.error_message().substr(0, 300);
    EXPECT_EQ(st.error_message().rfind(c.field + ":", 0), 0u) << st.error_message().substr(0, 300);
    EXPECT_LE(st.error_message().size(), 600u) << c.field;
    EXPECT_NE(st.error_message().find(std::string(199, 'a')), std::string::npos) << c.field;  // paths start with /
    EXPECT_EQ(st.error_message().find(std::string(201, 'a')), std::string::npos) << c.field;
  }
  EXPECT_EQ(TotalJobs(), before);
}

// A job that can never fit is refused at submit (per-rank memory above the
// largest agent's, even when it would wait for capacity; more ranks than the
// cluster unless it waits), and one that waits never holds up the queue.
TEST_F(ServerTest, JobsThatCanNeverFitAreRefusedAndNeverBlockTheQueue) {
  v1::RegisterAgentRequest reg;
  reg.set_hostname("node");
  reg.mutable_resources()->set_cpu_slots(4);
  reg.mutable_resources()->set_memory_bytes(int64_t{1} << 30);
  v1::RegisterAgentResponse rr;
  ASSERT_TRUE(nodes_->RegisterAgent(JoinCtx().get(), reg, &rr).ok());
  v1::JobSpec huge = Spec("huge-model");
  huge.mutable_model()->set_n_layer(48);
  huge.mutable_model()->set_n_head(16);
  huge.mutable_model()->set_d_model(2048);  // about 2.4e9 parameters: tens of GiB per rank
  const int before = TotalJobs();
  for (bool wait : {false, true}) {
    v1::SubmitJobResponse resp;
    grpc::Status st = Submit(huge, "", &resp, wait);
    EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION) << st.error_message();
    EXPECT_NE(st.error_message().find("MiB per rank"), std::string::npos) << st.error_message();
    EXPECT_NE(st.error_message().find("the largest agent has 1024 MiB"), std::string::npos) << st.error_message();
  }
  EXPECT_EQ(TotalJobs(), before);
  // Waiting for capacity at the head of the queue (priority 10) ...
  v1::JobSpec wide = Spec("wide", 8, 1);
  wide.set_priority(10);
  v1::SubmitJobResponse w;
  ASSERT_TRUE(Submit(wide, "wide", &w, /*wait=*/true).ok());
  EXPECT_EQ(w.job().state(), v1::PENDING);
  // ... does not keep a job that fits from being placed.
  v1::SubmitJobResponse small;
  ASSERT_TRUE(Submit(Spec("small", 2), "small", &small).ok());
  EXPECT_EQ(small.job().placement_size(), 2) << small.job().wait_reason();
  EXPECT_EQ(Get(w.job().job_id()).state(), v1::PENDING);
  // A malformed report of memory is refused.
  reg.mutable_resources()->set_memory_bytes(-1);
  EXPECT_EQ(nodes_->RegisterAgent(JoinCtx().get(), reg, &rr).error_code(), StatusCode::INVALID_ARGUMENT);
}

// A device: cuda job's ranks share the agent's GPUs up to
// resources.ranks_per_gpu; the launch order gives each rank its device index
// (the agent's LOOM_GPU). NCCL with ranks sharing a GPU is refused at submit.
TEST_F(ServerTest, CudaRanksShareAGpuUpToRanksPerGpu) {
  v1::RegisterAgentRequest reg;
  reg.set_hostname("gpu-node");
  reg.mutable_resources()->set_cpu_slots(8);
  reg.mutable_resources()->set_gpus(1);
  v1::RegisterAgentResponse rr;
  ASSERT_TRUE(nodes_->RegisterAgent(JoinCtx().get(), reg, &rr).ok());
  secrets_[rr.agent_id()] = rr.agent_secret();
  v1::JobSpec one = Spec("one-per-gpu", 2);
  one.set_device("cuda");
  v1::SubmitJobResponse resp;
  grpc::Status st = Submit(one, "", &resp);
  EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find("job needs 2 GPUs"), std::string::npos) << st.error_message();
  v1::JobSpec nccl = one;
  nccl.mutable_resources()->set_ranks_per_gpu(2);
  nccl.mutable_parallel()->set_backend("cpu:gloo,cuda:nccl");
  st = Submit(nccl, "", &resp);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_EQ(st.error_message().rfind("spec.parallel.backend: NCCL takes one rank per GPU", 0), 0u) << st.error_message();
  v1::JobSpec shared = one;
  shared.mutable_resources()->set_ranks_per_gpu(2);
  ASSERT_TRUE(Submit(shared, "shared", &resp).ok());
  ASSERT_EQ(resp.job().placement_size(), 2) << resp.job().wait_reason();
  for (const auto& p : resp.job().placement()) EXPECT_EQ(p.gpu(), 0) << p.rank();
  auto orders = Poll(rr.agent_id());
  ASSERT_EQ(orders.orders_size(), 1);
  const v1::LaunchOrder& launch = orders.orders(0).launch();
  ASSERT_EQ(launch.ranks_size(), 2);
  EXPECT_EQ(launch.ranks(0).gpu(), 0);
  EXPECT_EQ(launch.ranks(1).gpu(), 0);
  EXPECT_EQ(launch.spec().parallel().backend(), "cpu:gloo,cuda:gloo");
  // The GPU is the job's: a second shared job waits for it.
  shared.set_name("second");
  ASSERT_TRUE(Submit(shared, "second", &resp).ok());
  EXPECT_EQ(resp.job().placement_size(), 0);
  EXPECT_NE(resp.job().wait_reason().find("needs 1 GPUs (2 ranks, 2 per GPU); 0 free of 1"), std::string::npos)
      << resp.job().wait_reason();
}

TEST_F(ServerTest, IdempotentResubmissionReturnsTheSameJob) {
  v1::SubmitJobResponse a, b, c;
  ASSERT_TRUE(Submit(Spec("idem"), "key-1", &a, true).ok());
  EXPECT_FALSE(a.existing());
  ASSERT_TRUE(Submit(Spec("idem"), "key-1", &b, true).ok());
  EXPECT_TRUE(b.existing());
  EXPECT_EQ(a.job().job_id(), b.job().job_id());
  grpc::Status st = Submit(Spec("other"), "key-1", &c, true);
  EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("idempotency_key"), std::string::npos);
  EXPECT_EQ(TotalJobs(), 1001);  // one job, one event
  // Resubmission is answered even when the cluster could not take it now.
  ASSERT_TRUE(Submit(Spec("idem"), "key-1", &b, /*wait=*/false).ok());
  EXPECT_TRUE(b.existing());
}

TEST_F(ServerTest, ListJobsPagesFiltersAndPrefixes) {
  std::vector<std::string> ids;
  for (int i = 0; i < 7; ++i) {
    v1::SubmitJobResponse r;
    ASSERT_TRUE(Submit(Spec(i % 2 ? "odd" : "even"), "k" + std::to_string(i), &r, true).ok());
    ids.push_back(r.job().job_id());
  }
  v1::CancelJobRequest c;
  c.set_job_id(ids[0]);
  v1::CancelJobResponse cr;
  ASSERT_TRUE(jobs_->CancelJob(Ctx().get(), c, &cr).ok());
  EXPECT_EQ(cr.job().state(), v1::CANCELLED);

  std::vector<std::string> seen;
  v1::ListJobsRequest req;
  req.set_page_size(3);
  std::vector<int> sizes;
  for (int page = 0; page < 10; ++page) {
    v1::ListJobsResponse resp;
    ASSERT_TRUE(jobs_->ListJobs(Ctx().get(), req, &resp).ok());
    sizes.push_back(resp.jobs_size());
    for (const auto& j : resp.jobs()) seen.push_back(j.job_id());
    if (resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
  EXPECT_EQ(sizes, (std::vector<int>{3, 3, 1}));
  EXPECT_EQ(seen, ids);

  v1::ListJobsRequest f;
  f.add_states(v1::PENDING);
  f.set_name_prefix("ev");
  v1::ListJobsResponse fr;
  ASSERT_TRUE(jobs_->ListJobs(Ctx().get(), f, &fr).ok());
  EXPECT_EQ(fr.jobs_size(), 3);  // 4 "even", one of them cancelled
  EXPECT_TRUE(fr.next_page_token().empty());
}

TEST_F(ServerTest, WatchJobStreamsStateChangesUntilTerminal) {
  std::string agent = Register(1);
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Spec("watched"), "w", &r).ok());
  std::vector<v1::JobState> states;
  grpc::Status watch_status;
  std::thread watcher([&] {
    v1::WatchJobRequest req;
    req.set_job_id(r.job().job_id());
    auto ctx = Ctx();
    auto reader = jobs_->WatchJob(ctx.get(), req);
    v1::JobEvent ev;
    while (reader->Read(&ev)) states.push_back(ev.job().state());
    watch_status = reader->Finish();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Poll(agent);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(Exit(agent, r.job().job_id(), 0, 0).ok());
  watcher.join();
  EXPECT_TRUE(watch_status.ok()) << watch_status.error_message();
  EXPECT_EQ(states, (std::vector<v1::JobState>{v1::SCHEDULED, v1::RUNNING, v1::SUCCEEDED}));
}

TEST_F(ServerTest, StreamLogsReadsIndexedFiles) {
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Spec("logs", 2), "l", &r, true).ok());
  int64_t id = *ParseJobId(r.job().job_id());
  for (int rank = 0; rank < 2; ++rank) {
    std::string path = root_ + "/rank" + std::to_string(rank) + ".out";
    std::ofstream(path) << "hello from " << rank << "\n";
    ASSERT_TRUE(server_->coordinator()->store()->AddLog({id, rank, "stdout", path}).ok());
  }
  v1::StreamLogsRequest req;
  req.set_job_id(r.job().job_id());
  req.set_rank(1);
  req.set_has_rank(true);
  auto ctx = Ctx();
  auto reader = jobs_->StreamLogs(ctx.get(), req);
  std::string got;
  v1::LogChunk chunk;
  while (reader->Read(&chunk)) got += chunk.data();
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(got, "hello from 1\n");
  req.set_rank(7);
  auto ctx2 = Ctx();
  auto bad = jobs_->StreamLogs(ctx2.get(), req);
  EXPECT_FALSE(bad->Read(&chunk));
  EXPECT_EQ(bad->Finish().error_code(), StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServerTest, AppendLogsIsIdempotentAndValidated) {
  std::string agent = Register(2);
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Spec("shipped", 2), "s", &r).ok());
  auto append = [&](const std::string& stream, int rank, int64_t offset, const std::string& data) {
    v1::AppendLogsRequest req;
    req.set_agent_id(agent);
    req.set_job_id(r.job().job_id());
    req.set_rank(rank);
    req.set_stream(stream);
    req.set_offset(offset);
    req.set_data(data);
    v1::AppendLogsResponse resp;
    return nodes_->AppendLogs(AgentCtx(agent).get(), req, &resp);
  };
  ASSERT_TRUE(append("stdout", 1, 0, "abc").ok());
  ASSERT_TRUE(append("stdout", 1, 0, "abc").ok());  // a retry
  ASSERT_TRUE(append("stdout", 1, 3, "def\n").ok());
  grpc::Status st = append("stdin", 1, 0, "x");
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("stream"), std::string::npos);
  st = append("stdout", 2, 0, "x");
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("rank"), std::string::npos);
  EXPECT_EQ(append("stdout", 0, -1, "x").error_code(), StatusCode::INVALID_ARGUMENT);
  v1::StreamLogsRequest req;
  req.set_job_id(r.job().job_id());
  auto ctx = Ctx();
  auto reader = jobs_->StreamLogs(ctx.get(), req);
  std::string got;
  v1::LogChunk chunk;
  while (reader->Read(&chunk)) got += chunk.data();
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(got, "abcdef\n");
}

// Health and reflection answer without a token; checked with Python's grpcio
// using raw bytes (Debian ships no health/reflection stubs for Python).
TEST_F(ServerTest, HealthAndReflectionWithPythonClient) {
  std::string script =
      "import sys, grpc\n"
      "ch = grpc.insecure_channel('127.0.0.1:' + sys.argv[1], options=[('grpc.enable_http_proxy', 0)])\n"
      "check = ch.unary_unary('/grpc.health.v1.Health/Check')\n"
      "print('health', check(b'', timeout=5).hex())\n"
      "refl = ch.stream_stream('/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo')\n"
      "out = b''.join(refl(iter([b'\\x3a\\x00']), timeout=5))\n"
      "print('job', b'loom.v1.JobService' in out, 'node', b'loom.v1.NodeService' in out)\n";
  std::string path = root_ + "/probe.py";
  std::ofstream(path) << script;
  FILE* p = popen(("/usr/bin/python3 " + path + " " + std::to_string(server_->port()) + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[1024];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << out;
  EXPECT_EQ(out, "health 0801\njob True node True\n");  // status: SERVING
}

// Eight clients submit the same 40 keys concurrently, each key many times:
// every key ends acknowledged and exists exactly once.
TEST_F(ServerTest, ConcurrentRetriesCreateEachJobOnce) {
  std::vector<std::thread> clients;
  std::atomic<int> acked{0}, failed{0};
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        int k = (i + 5 * t) % 40;
        v1::SubmitJobResponse resp;
        grpc::Status st = Submit(Spec("c" + std::to_string(k)), "key-" + std::to_string(k), &resp, true);
        (st.ok() ? acked : failed)++;
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(acked.load(), 320);
  EXPECT_EQ(failed.load(), 0);
  v1::ListJobsRequest req;
  req.set_page_size(1000);
  v1::ListJobsResponse resp;
  ASSERT_TRUE(jobs_->ListJobs(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.jobs_size(), 40);
  std::set<std::string> names;
  for (const auto& j : resp.jobs()) names.insert(j.name());
  EXPECT_EQ(names.size(), 40u);
}

TEST_F(ServerTest, MetricsEndpointParsesWithPrometheusClient) {
  server_.reset();
  ServerOptions o;
  o.coordinator.data_dir = root_ + "/data2";
  o.metrics_port = 0;
  auto s = CoordinatorServer::Start(o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_GT((*s)->metrics_port(), 0);
  v1::RegisterAgentRequest reg;
  reg.mutable_resources()->set_cpu_slots(2);
  AgentCaller join;
  join.join = true;
  ASSERT_TRUE((*s)->coordinator()->RegisterAgent(reg, join).ok());
  v1::SubmitJobRequest sub;
  *sub.mutable_spec() = Spec("m", 2);
  ASSERT_TRUE((*s)->coordinator()->Submit(sub).ok());
  std::string path = root_ + "/scrape.py";
  std::ofstream(path) << "import sys, urllib.request\n"
                         "from prometheus_client.parser import text_string_to_metric_families\n"
                         "t = urllib.request.urlopen('http://127.0.0.1:%s/metrics' % sys.argv[1], timeout=5).read()\n"
                         "v = {}\n"
                         "for f in text_string_to_metric_families(t.decode()):\n"
                         "    for x in f.samples: v[x.name + str(sorted(x.labels.items()))] = x.value\n"
                         "print(v[\"loom_jobs[('state', 'SCHEDULED')]\"], v['loom_agents_alive[]'],\n"
                         "      v[\"loom_jobs_submitted_total[('result', 'accepted')]\"],\n"
                         "      v['loom_scheduling_latency_seconds_count[]'], v['loom_queue_length[]'])\n";
  FILE* p = popen(("/usr/bin/python3 " + path + " " + std::to_string((*s)->metrics_port()) + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[1024];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << out;
  EXPECT_EQ(out, "1.0 1.0 1.0 1.0 0.0\n");
}

TEST_F(ServerTest, ShutdownDoesNotWaitForLongPollsOrWatchers) {
  std::string agent = Register(1);
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Spec("pending", 2), "s", &r, true).ok());
  std::thread poller([&] {
    v1::PollOrdersRequest req;
    req.set_agent_id(agent);
    req.set_wait_ms(5000);
    v1::PollOrdersResponse resp;
    nodes_->PollOrders(AgentCtx(agent).get(), req, &resp);
  });
  std::thread watcher([&] {
    v1::WatchJobRequest req;
    req.set_job_id(r.job().job_id());
    auto ctx = Ctx();
    auto reader = jobs_->WatchJob(ctx.get(), req);
    v1::JobEvent ev;
    while (reader->Read(&ev)) {
    }
    reader->Finish();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto t0 = std::chrono::steady_clock::now();
  server_.reset();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  poller.join();
  watcher.join();
  EXPECT_LT(secs, 2.0);
}

// A coordinator with a run root confines spec paths to it and its data roots
// by default, gives jobs without a run_dir a folder under the run root, and
// names its roots in every launch order (the worker checks them again).
TEST_F(ServerTest, RunRootAndDataRootsConfineJobsByDefault) {
  server_.reset();
  std::filesystem::create_directories(root_ + "/data");
  std::ofstream(root_ + "/data/c.txt") << std::string(2048, 'z');
  CoordinatorOptions o;
  o.data_dir = root_ + "/confined";
  o.run_root = root_ + "/runroot";
  o.data_roots = {root_ + "/data"};
  auto c = Coordinator::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(std::filesystem::is_directory(root_ + "/runroot"));
  AgentCaller join;
  join.join = true;
  v1::RegisterAgentRequest reg;
  reg.mutable_resources()->set_cpu_slots(1);
  auto agent = (*c)->RegisterAgent(reg, join);
  ASSERT_TRUE(agent.ok()) << agent.status();
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec("assigned");
  req.mutable_spec()->mutable_data()->set_path(root_ + "/data/c.txt");
  auto sub = (*c)->Submit(req);
  ASSERT_TRUE(sub.ok()) << sub.status();
  auto orders = (*c)->PollOrders(agent->agent_id(), 0);
  ASSERT_TRUE(orders.ok());
  ASSERT_EQ(orders->orders_size(), 1);
  const v1::LaunchOrder& launch = orders->orders(0).launch();
  EXPECT_EQ(launch.spec().run_dir(), root_ + "/runroot/assigned-" + sub->job().job_id());
  ASSERT_EQ(launch.allowed_roots_size(), 2);
  EXPECT_EQ(launch.allowed_roots(0), root_ + "/runroot");
  EXPECT_EQ(launch.allowed_roots(1), root_ + "/data");
  EXPECT_TRUE((*c)->Get(sub->job().job_id())->spec().run_dir().empty());  // the stored spec is the user's
  req.mutable_spec()->mutable_data()->set_path("/etc/passwd");
  auto refused = (*c)->Submit(req);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("spec.data.path: '/etc/passwd' is outside"), std::string::npos)
      << refused.status();
  req.mutable_spec()->mutable_data()->set_path(root_ + "/data/c.txt");
  req.mutable_spec()->mutable_data()->mutable_tokenizer()->set_model("/etc/passwd");
  refused = (*c)->Submit(req);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("spec.data.tokenizer.model: '/etc/passwd' is outside"), std::string::npos)
      << refused.status();
  c->reset();
  // An explicit allowed_roots replaces the default and must hold the run root.
  o.allowed_roots = {root_ + "/data"};
  auto bad = Coordinator::Create(o);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("run_root"), std::string::npos) << bad.status();
}

TEST_F(ServerTest, TlsAndMutualTls) {
  std::string d = root_ + "/tls";
  std::filesystem::create_directories(d);
  ASSERT_TRUE(MakeCerts(d)) << "openssl failed; see " << d << "/openssl.log";
  server_.reset();
  for (bool mutual : {false, true}) {
    ServerOptions o;
    o.coordinator.data_dir = root_ + (mutual ? "/mtls" : "/tlsdata");
    o.tls_cert_file = d + "/server.pem";
    o.tls_key_file = d + "/server.key";
    if (mutual) o.tls_client_ca_file = d + "/ca.pem";
    auto s = CoordinatorServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    std::string addr = "127.0.0.1:" + std::to_string((*s)->port());
    auto call = [&](std::shared_ptr<grpc::ChannelCredentials> creds) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
      auto stub = v1::JobService::NewStub(grpc::CreateCustomChannel(addr, creds, args));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
      auth::AddBearer(&ctx, (*s)->token());
      v1::ListJobsResponse resp;
      return stub->ListJobs(&ctx, {}, &resp).error_code();
    };
    EXPECT_NE(call(grpc::InsecureChannelCredentials()), StatusCode::OK) << "plaintext accepted";
    auto server_only = MakeClientCredentials(d + "/ca.pem", "", "");
    ASSERT_TRUE(server_only.ok());
    auto with_cert = MakeClientCredentials(d + "/ca.pem", d + "/client.pem", d + "/client.key");
    ASSERT_TRUE(with_cert.ok()) << with_cert.status();
    EXPECT_EQ(call(*with_cert), StatusCode::OK);
    if (mutual) {
      EXPECT_NE(call(*server_only), StatusCode::OK) << "client without a certificate accepted";
    } else {
      EXPECT_EQ(call(*server_only), StatusCode::OK);
    }
  }
  ServerOptions bad;
  bad.coordinator.data_dir = root_ + "/bad";
  bad.tls_cert_file = d + "/server.pem";
  auto s = CoordinatorServer::Start(bad);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.status().message()).find("tls_key_file"), std::string::npos);
  bad.tls_key_file = d + "/missing.key";
  EXPECT_EQ(CoordinatorServer::Start(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::runtime::service
