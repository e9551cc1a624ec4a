// 1,000 malformed requests, under a fixed seed, against a real coordinator
// server on loopback: random bytes as request bodies of every JobService and
// NodeService method, and decodable requests with mutated fields (huge or
// binary strings, extreme numbers, unknown job ids, wrong or missing
// credentials). Each call must be answered within 5 s, with a status message
// and response of at most 4 KiB; bytes the request type cannot decode must be
// rejected; and a rejected request must leave the store as it was (jobs,
// their events, agents).
#include <chrono>
#include <climits>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/impl/codegen/sync_stream.h>

#include "runtime/service/server_test_fixture.h"

namespace loom::runtime::service {
namespace {

constexpr uint64_t kSeed = 20261204;
constexpr int kRequests = 1000;
constexpr size_t kMaxAnswerBytes = 4096;
constexpr auto kAnswerWithin = std::chrono::seconds(5);

struct Method {
  const char* path;
  bool streaming;
  google::protobuf::Message* prototype;  // the request type, for decoding checks
};

// What one call came back with.
struct Answer {
  grpc::Status status;
  size_t response_bytes = 0;  // the largest single response message
  double seconds = 0;
};

class MalformedRequestTest : public ServerTest {
 protected:
  // Heartbeats far apart: nothing changes the store on a timer during the run.
  void SetUp() override { StartServer(600000); }

  // The store's contents as one string: every job, every job's events, every agent.
  std::string StoreSnapshot() {
    store::JobStore* store = server_->coordinator()->store();
    std::string out;
    store::ListQuery all;
    all.limit = 100000;
    auto jobs = store->ListJobs(all);
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    if (!jobs.ok()) return out;
    for (const store::JobRecord& j : *jobs) {
      out += absl::StrCat("job ", j.id, " ", j.name, " key ", j.idempotency_key, " state ", j.state, " updated ",
                          j.update_ms, " restarts ", j.restart_count, " cause ", j.root_cause_rank, " ", j.root_cause,
                          " ckpt ", j.last_checkpoint_step, " spec ", j.spec.size(), "\n");
      auto events = store->Events(j.id);
      EXPECT_TRUE(events.ok()) << events.status();
      if (events.ok())
        for (const store::JobEventRecord& e : *events) out += absl::StrCat("  event ", e.id, " ", e.message, "\n");
    }
    auto agents = store->Agents();
    EXPECT_TRUE(agents.ok()) << agents.status();
    if (agents.ok())
      for (const store::AgentRecord& a : *agents)
        out += absl::StrCat("agent ", a.id, " ", a.hostname, " ", a.secret_sha256, "\n");
    return out;
  }

  void AddAuth(grpc::ClientContext* ctx, int which, const std::string& agent) {
    switch (which) {
      case 0: auth::AddBearer(ctx, server_->token()); break;
      case 1: auth::AddBearer(ctx, server_->join_token()); break;
      case 2: auth::AddBearer(ctx, auth::AgentBearer(agent, secrets_[agent])); break;
      case 3: auth::AddBearer(ctx, auth::AgentBearer(agent, std::string(64, 'f'))); break;
      case 4: auth::AddBearer(ctx, "not-the-token"); break;
      case 5: ctx->AddMetadata("authorization", std::string(300, 'B')); break;
      default: break;  // no credential
    }
  }

  Answer Call(const Method& m, const std::string& body, int auth, const std::string& agent) {
    grpc::ClientContext ctx;
    const auto start = std::chrono::steady_clock::now();
    ctx.set_deadline(std::chrono::system_clock::now() + kAnswerWithin);
    AddAuth(&ctx, auth, agent);
    grpc::Slice slice(body);
    grpc::ByteBuffer request(&slice, 1);
    Answer a;
    if (!m.streaming) {
      grpc::ByteBuffer response;
      a.status = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
          channel_.get(), grpc::internal::RpcMethod(m.path, grpc::internal::RpcMethod::NORMAL_RPC), &ctx, request,
          &response);
      a.response_bytes = response.Length();
    } else {
      std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
          grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
              channel_.get(), grpc::internal::RpcMethod(m.path, grpc::internal::RpcMethod::SERVER_STREAMING), &ctx,
              request));
      grpc::ByteBuffer msg;
      while (reader->Read(&msg)) a.response_bytes = std::max(a.response_bytes, msg.Length());
      a.status = reader->Finish();
    }
    a.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return a;
  }
};

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// A string field's mutation: huge, binary, path-like, or an id that names nothing.
std::string MutatedString(std::mt19937_64& rng, const std::string& known) {
  switch (rng() % 9) {
    case 0: return std::string(64 << 10, 'x');
    case 1: return RandomBytes(rng, 1 + rng() % 64);
    case 2: return "";
    case 3: return "../../etc/passwd";
    case 4: return "999999999";
    case 5: return "-1";
    case 6: return "99999999999999999999999999";
    case 7: return known + std::string(1, '\0') + "tail";
    default: return known;
  }
}

int64_t MutatedInt(std::mt19937_64& rng) {
  static const int64_t kValues[] = {0, -1, 1, INT32_MIN, INT32_MAX, INT64_MIN, INT64_MAX, -100000, 1 << 30};
  return kValues[rng() % (sizeof(kValues) / sizeof(kValues[0]))];
}

// A decodable request for method `k` (an index into the table below) whose
// fields are mutated; `job` is a live job's id and `agent` a registered agent.
std::string MutatedRequest(std::mt19937_64& rng, int k, const std::string& job, const std::string& agent,
                           bool valid_agent_credential) {
  auto i32 = [&] { return static_cast<int32_t>(MutatedInt(rng)); };
  switch (k) {
    case 0: {  // SubmitJob: a spec with one field out of range or malformed
      v1::SubmitJobRequest r;
      *r.mutable_spec() = Spec("fz-" + std::to_string(rng() % 1000));
      switch (rng() % 8) {
        case 0: r.mutable_spec()->set_name(MutatedString(rng, "x")); break;
        case 1: r.mutable_spec()->mutable_model()->set_n_layer(i32()); break;
        case 2: r.mutable_spec()->mutable_model()->set_family(MutatedString(rng, "gpt")); break;
        case 3: r.mutable_spec()->mutable_train()->set_lr(-1e30f); break;
        case 4: r.mutable_spec()->mutable_parallel()->set_dp(i32()); break;
        case 5: r.mutable_spec()->mutable_data()->set_path(MutatedString(rng, "/nonexistent")); break;
        case 6: r.mutable_spec()->set_init_from(MutatedString(rng, "/etc/shadow")); break;
        default: r.mutable_spec()->mutable_model()->set_d_model(i32()); break;
      }
      r.set_idempotency_key(MutatedString(rng, "key"));
      return r.SerializeAsString();
    }
    case 1: { v1::GetJobRequest r; r.set_job_id(MutatedString(rng, job)); return r.SerializeAsString(); }
    case 2: {
      v1::ListJobsRequest r;
      r.set_page_size(i32());
      r.set_page_token(MutatedString(rng, "1"));
      return r.SerializeAsString();
    }
    case 3: { v1::CancelJobRequest r; r.set_job_id(MutatedString(rng, "999999")); return r.SerializeAsString(); }
    case 4: { v1::WatchJobRequest r; r.set_job_id(MutatedString(rng, "999999")); return r.SerializeAsString(); }
    case 5: { v1::StreamLogsRequest r; r.set_job_id(MutatedString(rng, "999999")); return r.SerializeAsString(); }
    case 6: {
      v1::RegisterAgentRequest r;
      r.set_hostname(MutatedString(rng, "node"));
      r.mutable_resources()->set_cpu_slots(i32());
      r.mutable_resources()->set_gpus(i32());
      r.mutable_resources()->set_memory_bytes(MutatedInt(rng));
      r.set_agent_id(MutatedString(rng, agent));
      r.add_running()->set_job_id(MutatedString(rng, job));
      r.set_rendezvous_address(MutatedString(rng, "127.0.0.1:1"));
      return r.SerializeAsString();
    }
    case 7: { v1::HeartbeatRequest r; r.set_agent_id(MutatedString(rng, agent)); return r.SerializeAsString(); }
    case 8: {
      v1::PollOrdersRequest r;
      r.set_agent_id(MutatedString(rng, agent));
      // With the agent's own credential a long poll legitimately waits up to
      // wait_ms; keep it short there.
      r.set_wait_ms(valid_agent_credential ? static_cast<int32_t>(rng() % 2 ? -5 : 100) : i32());
      return r.SerializeAsString();
    }
    case 9: {
      v1::ReportExitRequest r;
      r.set_agent_id(MutatedString(rng, agent));
      r.set_job_id(MutatedString(rng, "999999"));
      r.set_rank(i32());
      r.set_exit_code(i32());
      r.set_attempt(i32());
      r.set_error(MutatedString(rng, "boom"));
      return r.SerializeAsString();
    }
    case 10: {
      v1::ReportProgressRequest r;
      r.set_agent_id(MutatedString(rng, agent));
      r.set_job_id(MutatedString(rng, "999999"));
      r.set_attempt(i32());
      r.set_step(MutatedInt(rng));
      r.set_checkpoint_step(MutatedInt(rng));
      r.set_rendezvous_address(MutatedString(rng, "h:1"));
      return r.SerializeAsString();
    }
    default: {
      v1::AppendLogsRequest r;
      r.set_agent_id(MutatedString(rng, agent));
      r.set_job_id(MutatedString(rng, "999999"));
      r.set_rank(i32());
      r.set_stream(MutatedString(rng, "stdout"));
      r.set_offset(MutatedInt(rng));
      r.set_data(RandomBytes(rng, rng() % 2 ? 16 : (900 << 10)));
      return r.SerializeAsString();
    }
  }
}

TEST_F(MalformedRequestTest, ThousandMalformedRequestsAreAnsweredBoundedAndChangeNothing) {
  // Live state for the requests to aim at: one agent, one job that stays
  // pending (dp 2 on one slot).
  const std::string agent = Register(1);
  v1::SubmitJobResponse submitted;
  grpc::Status live = Submit(Spec("live", /*dp=*/2), "live-key", &submitted, /*wait=*/true);
  ASSERT_TRUE(live.ok()) << live.error_message();
  const std::string job = submitted.job().job_id();

  v1::SubmitJobRequest submit;
  v1::GetJobRequest get;
  v1::ListJobsRequest list;
  v1::CancelJobRequest cancel;
  v1::WatchJobRequest watch;
  v1::StreamLogsRequest logs;
  v1::RegisterAgentRequest reg;
  v1::HeartbeatRequest beat;
  v1::PollOrdersRequest poll;
  v1::ReportExitRequest exit_req;
  v1::ReportProgressRequest progress;
  v1::AppendLogsRequest append;
  const std::vector<Method> methods = {
      {"/loom.v1.JobService/SubmitJob", false, &submit},      {"/loom.v1.JobService/GetJob", false, &get},
      {"/loom.v1.JobService/ListJobs", false, &list},         {"/loom.v1.JobService/CancelJob", false, &cancel},
      {"/loom.v1.JobService/WatchJob", true, &watch},         {"/loom.v1.JobService/StreamLogs", true, &logs},
      {"/loom.v1.NodeService/RegisterAgent", false, &reg},    {"/loom.v1.NodeService/Heartbeat", false, &beat},
      {"/loom.v1.NodeService/PollOrders", false, &poll},      {"/loom.v1.NodeService/ReportExit", false, &exit_req},
      {"/loom.v1.NodeService/ReportProgress", false, &progress},
      {"/loom.v1.NodeService/AppendLogs", false, &append},
  };

  // Protobuf logs every string field with invalid UTF-8 it meets; hundreds
  // of those lines would bury the test's own output.
  google::protobuf::LogSilencer quiet;
  std::mt19937_64 rng(kSeed);
  int rejected = 0, undecodable = 0, accepted = 0;
  std::string before = StoreSnapshot();
  for (int i = 0; i < kRequests; ++i) {
    const int k = static_cast<int>(rng() % methods.size());
    const Method& m = methods[k];
    const int auth = static_cast<int>(rng() % 7);
    const bool random_body = rng() % 3 == 0;
    std::string body = random_body ? RandomBytes(rng, rng() % 3 == 0 ? (rng() % 8192) : (rng() % 64))
                                   : MutatedRequest(rng, k, job, agent, auth == 2);
    const bool decodes = m.prototype->ParseFromString(body);
    const Answer a = Call(m, body, auth, agent);
    const std::string where = absl::StrCat("request ", i, " ", m.path, " auth ", auth, random_body ? " random" : " mutated",
                                           ": ", a.status.error_code(), " ", a.status.error_message().substr(0, 200));
    ASSERT_NE(a.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << where;
    ASSERT_NE(a.status.error_code(), grpc::StatusCode::UNAVAILABLE) << where << " (server gone?)";
    EXPECT_LT(a.seconds, 5.0) << where;
    EXPECT_LE(a.status.error_message().size(), kMaxAnswerBytes) << where;
    EXPECT_LE(a.status.error_details().size(), kMaxAnswerBytes) << where;
    EXPECT_LE(a.response_bytes, kMaxAnswerBytes) << where;
    if (!decodes) {
      ++undecodable;
      EXPECT_FALSE(a.status.ok()) << where << ": undecodable bytes accepted";
    }
    const std::string after = StoreSnapshot();
    if (a.status.ok()) {
      ++accepted;
    } else {
      ++rejected;
      EXPECT_EQ(after, before) << where << ": a rejected request changed the store";
    }
    before = after;
  }
  // The mix exercises both sides: most are rejected, some bytes do not decode.
  EXPECT_GT(rejected, kRequests / 2);
  EXPECT_GT(undecodable, 50);
  std::printf("rejected %d (undecodable %d), accepted %d\n", rejected, undecodable, accepted);
  // The server still serves well-formed calls.
  EXPECT_EQ(Get(job).job_id(), job);
}

}  // namespace
}  // namespace loom::runtime::service
