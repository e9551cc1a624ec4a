#include "runtime/service/server.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "base/echo.h"
#include "base/status.h"
#include "proto/loom/v1/service.grpc.pb.h"
#include "runtime/service/dashboard/api.h"
#include "runtime/service/dashboard/static_routes.h"
#include "runtime/service/auth/token.h"

namespace loom::runtime::service {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kLogReadBytes = 1 << 20;  // per ReadLogs call of StreamLogs

bool SameStatus(const v1::JobStatus& a, const v1::JobStatus& b) {
  return a.state() == b.state() && a.current_step() == b.current_step() &&
         a.restart_count() == b.restart_count() && a.wait_reason() == b.wait_reason() &&
         a.last_checkpoint_step() == b.last_checkpoint_step() && a.placement_size() == b.placement_size() &&
         a.rendezvous_address() == b.rendezvous_address();
}

class JobServiceImpl final : public v1::JobService::Service {
 public:
  JobServiceImpl(Coordinator* c, const auth::TokenSet* tokens) : c_(c), tokens_(tokens) {}

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override {
    std::string who;
    if (auto s = auth::CheckAuthorization(ctx->client_metadata(), *tokens_, &who); !s.ok()) return s;
    auto r = c_->Submit(*req, who);
    if (!r.ok()) return ToGrpc(r.status());
    *resp = std::move(*r);
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::GetJobResponse* resp) override {
    if (auto s = Authorize(ctx); !s.ok()) return s;
    auto r = c_->Get(req->job_id());
    if (!r.ok()) return ToGrpc(r.status());
    *resp = std::move(*r);
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override {
    if (auto s = Authorize(ctx); !s.ok()) return s;
    auto r = c_->List(*req);
    if (!r.ok()) return ToGrpc(r.status());
    *resp = std::move(*r);
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                         v1::CancelJobResponse* resp) override {
    if (auto s = Authorize(ctx); !s.ok()) return s;
    auto r = c_->Cancel(req->job_id());
    if (!r.ok()) return ToGrpc(r.status());
    *resp->mutable_job() = std::move(*r);
    return grpc::Status::OK;
  }

  // One event per observed change, ending after a terminal state.
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobEvent>* writer) override {
    if (auto s = Authorize(ctx); !s.ok()) return s;
    uint64_t version = 0;
    bool sent = false;
    v1::JobStatus last;
    for (;;) {
      auto r = c_->Get(req->job_id());
      if (!r.ok()) return ToGrpc(r.status());
      if (!sent || !SameStatus(last, r->job())) {
        v1::JobEvent ev;
        *ev.mutable_job() = r->job();
        ev.set_message(v1::JobState_Name(r->job().state()));
        if (!writer->Write(ev)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
        last = r->job();
        sent = true;
      }
      if (store::IsTerminal(last.state())) return grpc::Status::OK;
      if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
      if (c_->stopping()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator shutting down");
      version = c_->WaitForChange(version, milliseconds(200));
    }
  }

  // The job's indexed log files, oldest bytes first; with follow, new bytes
  // as they appear until the job is terminal.
  grpc::Status StreamLogs(grpc::ServerContext* ctx, const v1::StreamLogsRequest* req,
                          grpc::ServerWriter<v1::LogChunk>* writer) override {
    if (auto s = Authorize(ctx); !s.ok()) return s;
    auto job = c_->Get(req->job_id());
    if (!job.ok()) return ToGrpc(job.status());
    if (req->has_rank() && (req->rank() < 0 || req->rank() >= job->job().world_size())) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("rank: must be in [0, ", job->job().world_size(), "), got ", req->rank()));
    }
    std::map<std::string, int64_t> offsets;
    const int32_t rank = req->has_rank() ? req->rank() : -1;
    uint64_t version = 0;
    for (;;) {
      bool terminal = store::IsTerminal(c_->Get(req->job_id())->job().state());
      bool wrote = false;
      for (;;) {
        auto chunks = c_->ReadLogs(req->job_id(), rank, &offsets, kLogReadBytes);
        if (!chunks.ok()) return ToGrpc(chunks.status());
        if (chunks->empty()) break;
        for (const v1::LogChunk& chunk : *chunks) {
          if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
        }
        wrote = true;
      }
      if (!req->follow() || (terminal && !wrote)) return grpc::Status::OK;
      if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "log stream cancelled");
      if (c_->stopping()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator shutting down");
      version = c_->WaitForChange(version, milliseconds(200));
    }
  }

  grpc::Status ListAgents(grpc::ServerContext* ctx, const v1::ListAgentsRequest*,
                          v1::ListAgentsResponse* resp) override {
    if (auto s = Authorize(ctx); !s.ok()) return s;
    *resp = c_->ListAgents();
    return grpc::Status::OK;
  }

 private:
  grpc::Status Authorize(grpc::ServerContext* ctx) {
    std::string who;
    return auth::CheckAuthorization(ctx->client_metadata(), *tokens_, &who);
  }

  Coordinator* c_;
  const auth::TokenSet* tokens_;
};

// The identity of a mutual-TLS peer's verified certificate ("" without one).
std::string PeerIdentity(const grpc::ServerContext* ctx) {
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) return "";
  std::string out;
  for (const grpc::string_ref& v : auth->GetPeerIdentity()) {
    absl::StrAppend(&out, out.empty() ? "" : ",", absl::string_view(v.data(), v.size()));
  }
  return out;
}

// NodeService takes agent credentials only (server.h): the join token for
// RegisterAgent of a new agent, "<agent id>:<secret>" otherwise.
class NodeServiceImpl final : public v1::NodeService::Service {
 public:
  NodeServiceImpl(Coordinator* c, std::string join_token) : c_(c), join_token_(std::move(join_token)) {}

  grpc::Status RegisterAgent(grpc::ServerContext* ctx, const v1::RegisterAgentRequest* req,
                             v1::RegisterAgentResponse* resp) override {
    auto caller = Caller(ctx, /*registration=*/true);
    if (!caller.ok()) return ToGrpc(caller.status());
    auto r = c_->RegisterAgent(*req, *caller);
    if (!r.ok()) return ToGrpc(r.status());
    *resp = std::move(*r);
    resp->set_incarnation(c_->incarnation());
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    if (auto s = Check(ctx, "Heartbeat", req->agent_id()); !s.ok()) return s;
    resp->set_incarnation(c_->incarnation());
    return ToGrpc(c_->Heartbeat(req->agent_id()));
  }

  grpc::Status PollOrders(grpc::ServerContext* ctx, const v1::PollOrdersRequest* req,
                          v1::PollOrdersResponse* resp) override {
    if (auto s = Check(ctx, "PollOrders", req->agent_id()); !s.ok()) return s;
    auto r = c_->PollOrders(req->agent_id(), req->wait_ms());
    if (!r.ok()) return ToGrpc(r.status());
    *resp = std::move(*r);
    resp->set_incarnation(c_->incarnation());
    return grpc::Status::OK;
  }

  grpc::Status ReportExit(grpc::ServerContext* ctx, const v1::ReportExitRequest* req,
                          v1::ReportExitResponse* resp) override {
    if (auto s = Check(ctx, "ReportExit", req->agent_id()); !s.ok()) return s;
    resp->set_incarnation(c_->incarnation());
    return ToGrpc(c_->ReportExit(*req));
  }

  grpc::Status ReportProgress(grpc::ServerContext* ctx, const v1::ReportProgressRequest* req,
                              v1::ReportProgressResponse* resp) override {
    if (auto s = Check(ctx, "ReportProgress", req->agent_id()); !s.ok()) return s;
    resp->set_incarnation(c_->incarnation());
    return ToGrpc(c_->ReportProgress(*req));
  }

  grpc::Status AppendLogs(grpc::ServerContext* ctx, const v1::AppendLogsRequest* req,
                          v1::AppendLogsResponse* resp) override {
    if (auto s = Check(ctx, "AppendLogs", req->agent_id()); !s.ok()) return s;
    resp->set_incarnation(c_->incarnation());
    return ToGrpc(c_->AppendLogs(*req));
  }

  grpc::Status ReportMetrics(grpc::ServerContext* ctx, const v1::ReportMetricsRequest* req,
                             v1::ReportMetricsResponse* resp) override {
    if (auto s = Check(ctx, "ReportMetrics", req->agent_id()); !s.ok()) return s;
    resp->set_incarnation(c_->incarnation());
    return ToGrpc(c_->ReportMetrics(*req));
  }

 private:
  // Who calls: the join token (accepted only with `registration`) or an
  // agent's credential; UNAUTHENTICATED for anything else, a user token too.
  absl::StatusOr<AgentCaller> Caller(grpc::ServerContext* ctx, bool registration) {
    const std::string bearer = auth::BearerOf(ctx->client_metadata());
    if (bearer.empty()) return absl::UnauthenticatedError("missing authorization: Bearer <agent credential> metadata");
    AgentCaller caller;
    caller.cert_identity = PeerIdentity(ctx);
    if (auth::ConstantTimeEquals(bearer, join_token_)) {
      if (!registration) {
        return absl::UnauthenticatedError("the join token only registers agents; call with the agent's credential");
      }
      caller.join = true;
      return caller;
    }
    std::string id, secret;
    if (!auth::SplitAgentBearer(bearer, &id, &secret)) return absl::UnauthenticatedError("wrong agent credential");
    LOOM_RETURN_IF_ERROR(c_->AuthenticateAgent(id, secret, caller.cert_identity));
    caller.agent_id = id;
    return caller;
  }

  // An authenticated agent acting for `agent_id`, its own id.
  // The call counts as a sign of life from the time it arrived.
  grpc::Status Check(grpc::ServerContext* ctx, const std::string& call, const std::string& agent_id) {
    const auto arrived = std::chrono::steady_clock::now();
    auto caller = Caller(ctx, /*registration=*/false);
    if (!caller.ok()) return ToGrpc(caller.status());
    if (agent_id != caller->agent_id) {
      return ToGrpc(c_->RefuseNodeCall(
          call, caller->agent_id, absl::StrCat("agent_id: '", agent_id.substr(0, 64), "' is not the caller's id")));
    }
    c_->NoteHeard(agent_id, arrived);
    return grpc::Status::OK;
  }

  Coordinator* c_;
  std::string join_token_;
};

}  // namespace

// The user tokens: the token file (or ServerOptions::token) as "default",
// then the tokens file's.
static absl::StatusOr<auth::TokenSet> UserTokens(const ServerOptions& o, const std::string& default_token) {
  std::vector<auth::NamedToken> tokens = {{auth::kDefaultTokenName, default_token}};
  if (!o.tokens_file.empty()) {
    absl::StatusOr<std::vector<auth::NamedToken>> named = auth::ReadTokensFile(o.tokens_file);
    // Any problem with the file is a configuration error (exit 2 from `loom coordinator`).
    if (!named.ok()) return absl::InvalidArgumentError(named.status().message());
    for (auth::NamedToken& t : *named) {
      if (t.name == auth::kDefaultTokenName || auth::ConstantTimeEquals(t.token, default_token)) {
        return absl::InvalidArgumentError(absl::StrCat("tokens_file: ", o.tokens_file, ": '", t.name,
                                                       "' clashes with the default token (its name or its token)"));
      }
      tokens.push_back(std::move(t));
    }
  }
  return auth::TokenSet(std::move(tokens));
}

static absl::StatusOr<std::string> ReadPem(const std::string& field, const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in || ss.str().find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": cannot read a PEM file at '", path, "'"));
  }
  return ss.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ServerOptions& o) {
  if (o.tls_cert_file.empty() && o.tls_key_file.empty()) {
    if (!o.tls_client_ca_file.empty()) {
      return absl::InvalidArgumentError("tls_client_ca_file: needs tls_cert_file and tls_key_file");
    }
    return grpc::InsecureServerCredentials();
  }
  if (o.tls_cert_file.empty() || o.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.tls_cert_file.empty() ? "tls_cert_file" : "tls_key_file", ": TLS needs both a cert and a key"));
  }
  grpc::SslServerCredentialsOptions opts(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  LOOM_ASSIGN_OR_RETURN(pair.private_key, ReadPem("tls_key_file", o.tls_key_file));
  LOOM_ASSIGN_OR_RETURN(pair.cert_chain, ReadPem("tls_cert_file", o.tls_cert_file));
  opts.pem_key_cert_pairs.push_back(pair);
  if (!o.tls_client_ca_file.empty()) {
    LOOM_ASSIGN_OR_RETURN(opts.pem_root_certs, ReadPem("tls_client_ca_file", o.tls_client_ca_file));
    opts.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(opts);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeClientCredentials(const std::string& ca_file,
                                                                              const std::string& cert_file,
                                                                              const std::string& key_file) {
  if (ca_file.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions opts;
  LOOM_ASSIGN_OR_RETURN(opts.pem_root_certs, ReadPem("tls_ca", ca_file));
  if (!cert_file.empty() || !key_file.empty()) {
    LOOM_ASSIGN_OR_RETURN(opts.pem_cert_chain, ReadPem("tls_cert", cert_file));
    LOOM_ASSIGN_OR_RETURN(opts.pem_private_key, ReadPem("tls_key", key_file));
  }
  return grpc::SslCredentials(opts);
}

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), Truncated(s.message(), kMaxStatusMessageBytes));
}

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(const ServerOptions& options) {
  if (options.max_receive_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_receive_bytes: must be positive, got ", options.max_receive_bytes));
  }
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds, MakeServerCredentials(options));
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  if (options.token.empty()) {
    LOOM_ASSIGN_OR_RETURN(s->token_, auth::LoadOrCreateToken(options.coordinator.data_dir));
  } else {
    s->token_ = options.token;
  }
  if (options.join_token.empty()) {
    LOOM_ASSIGN_OR_RETURN(s->join_token_, auth::LoadOrCreateToken(options.coordinator.data_dir, auth::kJoinTokenFile));
  } else {
    s->join_token_ = options.join_token;
  }
  LOOM_ASSIGN_OR_RETURN(s->tokens_, UserTokens(options, s->token_));
  for (const auth::NamedToken& t : s->tokens_.tokens()) {
    if (auth::ConstantTimeEquals(t.token, s->join_token_)) {
      return absl::InvalidArgumentError(absl::StrCat("join_token: must differ from the user token '", t.name, "'"));
    }
  }
  CoordinatorOptions copts = options.coordinator;
  s->registry_ = copts.metrics ? copts.metrics : &s->own_registry_;
  copts.metrics = s->registry_;
  LOOM_ASSIGN_OR_RETURN(s->coordinator_, Coordinator::Create(copts));
  if (options.metrics_port >= 0) {
    Coordinator* coordinator = s->coordinator_.get();
    const auth::TokenSet* tokens = &s->tokens_;
    s->metrics_http_ = std::make_unique<metrics::HttpServer>(s->registry_, [coordinator, tokens](httplib::Server& http) {
      dashboard::AddStaticRoutes(http);
      dashboard::AddApiRoutes(http, coordinator, tokens);
    });
    LOOM_ASSIGN_OR_RETURN(s->metrics_port_, s->metrics_http_->Start(options.metrics_host, options.metrics_port));
  }
  s->job_service_ = std::make_unique<JobServiceImpl>(s->coordinator_.get(), &s->tokens_);
  s->node_service_ = std::make_unique<NodeServiceImpl>(s->coordinator_.get(), s->join_token_);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder b;
  // gRPC sets SO_REUSEPORT by default: a second coordinator would share the port.
  b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  b.AddListeningPort(options.listen_address, creds, &s->port_);
  b.SetMaxReceiveMessageSize(options.max_receive_bytes);
  b.RegisterService(s->job_service_.get());
  b.RegisterService(s->node_service_.get());
  s->server_ = b.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("coordinator: cannot listen on ", options.listen_address));
  }
  s->server_->GetHealthCheckService()->SetServingStatus(true);
  s->coordinator_->StartReclaimClock();  // the grace counts from now: agents can reach us
  return s;
}

void CoordinatorServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  server_->GetHealthCheckService()->SetServingStatus(false);
  coordinator_->Stop();  // ends long polls and watch loops
  // Streams poll every 200 ms; give them that long to notice, then cancel.
  server_->Shutdown(std::chrono::system_clock::now() + milliseconds(500));
  server_->Wait();
  if (metrics_http_) metrics_http_->Stop();
}

CoordinatorServer::~CoordinatorServer() {
  if (server_) Shutdown();
  if (metrics_http_) metrics_http_->Stop();  // before the coordinator its handlers use
}

}  // namespace loom::runtime::service
