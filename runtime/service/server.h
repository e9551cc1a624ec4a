// The coordinator's gRPC server: JobService and NodeService over a
// Coordinator, plus the standard health service (grpc.health.v1.Health) and
// server reflection, and on the HTTP port (metrics_port) /metrics beside the
// dashboard (runtime/service/dashboard). Credentials (UNAUTHENTICATED when
// missing or wrong):
//   JobService   `authorization: Bearer <user token>`: the default token or a
//                named one from tokens_file; a job records the name as its
//                submitter;
//   NodeService  RegisterAgent of a new agent: `Bearer <join token>`; every
//                other call: `Bearer <agent id>:<agent secret>` (the secret
//                RegisterAgent returned), whose agent must be the request's
//                agent_id (PERMISSION_DENIED otherwise). With mutual TLS an
//                agent's calls must also come with the client certificate it
//                registered with.
// A user token never passes NodeService, nor an agent credential JobService.
// Health and reflection are open. Requests larger than max_receive_bytes are
// refused by gRPC with RESOURCE_EXHAUSTED. Listens on loopback unless told
// otherwise; one server per port (no SO_REUSEPORT).
//
//   ServerOptions o;
//   o.coordinator.data_dir = "/var/lib/loom";
//   LOOM_ASSIGN_OR_RETURN(auto server, CoordinatorServer::Start(o));
//   // server->port(), server->token(), server->join_token(); Wait() or Shutdown().
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "runtime/service/auth/token.h"
#include "runtime/service/coordinator.h"
#include "runtime/service/metrics/http_server.h"

namespace loom::runtime::service {

struct ServerOptions {
  CoordinatorOptions coordinator;
  std::string listen_address = "127.0.0.1:0";  // port 0: any free port
  int max_receive_bytes = 4 << 20;
  // Empty: the token in <data_dir>/token (created at first start).
  std::string token;
  // Named user tokens, lines "name token" (auth::ReadTokensFile), accepted
  // beside the default token by JobService and the dashboard API.
  std::string tokens_file;
  // Empty: the agents' join token in <data_dir>/join-token (created at first start).
  std::string join_token;
  // GET /metrics (Prometheus text) on metrics_host:metrics_port; -1: off,
  // 0: any free port. Uses coordinator.metrics, or a registry of its own.
  std::string metrics_host = "127.0.0.1";
  int metrics_port = -1;
  // TLS: PEM files. Cert and key together turn TLS on; a client CA also
  // requires and verifies client certificates (mutual TLS).
  std::string tls_cert_file, tls_key_file, tls_client_ca_file;
};

class CoordinatorServer {
 public:
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(const ServerOptions& options);
  ~CoordinatorServer();

  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }  // -1 when off
  metrics::Registry* registry() { return registry_; }
  const std::string& token() const { return token_; }
  const std::string& join_token() const { return join_token_; }
  const auth::TokenSet& tokens() const { return tokens_; }
  Coordinator* coordinator() { return coordinator_.get(); }
  void Shutdown();
  void Wait() { server_->Wait(); }

 private:
  CoordinatorServer() = default;
  metrics::Registry own_registry_;
  metrics::Registry* registry_ = nullptr;
  std::unique_ptr<metrics::HttpServer> metrics_http_;
  int metrics_port_ = -1;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<grpc::Service> job_service_, node_service_;
  std::unique_ptr<grpc::Server> server_;
  std::string token_, join_token_;
  auth::TokenSet tokens_;
  int port_ = 0;
  bool shut_down_ = false;
};

// Server credentials for the TLS fields of `o` (insecure when none is set).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ServerOptions& o);
// Client credentials: TLS when `ca_file` is set (verifying the server against
// it), with a client certificate when cert and key are set too.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeClientCredentials(const std::string& ca_file,
                                                                              const std::string& cert_file,
                                                                              const std::string& key_file);

// absl::Status -> grpc::Status (the codes are the same numbers). The message
// travels in a response header, so it is cut to kMaxStatusMessageBytes (values
// inside it are already cut to 200 bytes where they are quoted: EchoValue).
inline constexpr size_t kMaxStatusMessageBytes = 1024;
grpc::Status ToGrpc(const absl::Status& s);

}  // namespace loom::runtime::service
