// StoreServer: the TCP key-value store that rendezvous runs through.
//
// Whoever launches the rank-0 group hosts it and hands "host:port" plus the
// per-job secret to workers through their environment (LOOM_STORE_ADDR,
// LOOM_STORE_SECRET). It binds 127.0.0.1 unless `host` says otherwise.
//
//   StoreServer::Options o;  o.secret = "job-secret";
//   LOOM_ASSIGN_OR_RETURN(auto server, StoreServer::Start(o));
//   std::string addr = server->address();   // "127.0.0.1:41234"
//
// Connection contract: the first frame must be kHello with the secret; a wrong
// secret gets PermissionDenied and the connection is closed. A frame longer
// than max_message_bytes gets ResourceExhausted and the connection is closed.
// One thread per connection; Wait blocks only its own connection.
//
// Tenants: one server can host the rendezvous of several jobs (a node agent
// hosts one server for every job whose rank 0 it runs). AddTenant(secret, ns)
// admits clients presenting `secret` and confines them to keys under `ns`
// (they see their own key names, never another tenant's); RemoveTenant drops
// the secret and the tenant's keys. `options.secret` (may be empty: tenants
// only) is the tenant with the whole key space.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "collectives/internal/socket.h"
#include "collectives/store/wire.h"

namespace loom::collectives::store {

class StoreServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;  // 0: ephemeral
    std::string secret;
    size_t max_message_bytes = wire::kDefaultMaxMessageBytes;
  };

  static absl::StatusOr<std::unique_ptr<StoreServer>> Start(Options options);
  ~StoreServer();  // stops accepting, closes every connection, joins threads

  int port() const { return port_; }
  absl::Status AddTenant(const std::string& secret, const std::string& key_namespace);
  void RemoveTenant(const std::string& secret);
  std::string address() const;

 private:
  explicit StoreServer(Options o) : options_(std::move(o)) {}
  void AcceptLoop();
  void Serve(int conn_index);
  // Runs one authenticated request; returns the encoded response.
  std::string Handle(absl::string_view request, const std::string& ns);
  // One per op: decode the rest of the request, run it on keys under `ns`.
  std::string HandleSet(wire::Decoder& d, const std::string& ns);
  std::string HandleGet(wire::Decoder& d, const std::string& ns);
  std::string HandleAdd(wire::Decoder& d, const std::string& ns);
  std::string HandleWait(wire::Decoder& d, const std::string& ns);
  std::string HandleCompareAndSet(wire::Decoder& d, const std::string& ns);
  std::string HandleDelete(wire::Decoder& d, const std::string& ns);
  std::string HandleList(wire::Decoder& d, const std::string& ns);
  std::string HandleDeletePrefix(wire::Decoder& d, const std::string& ns);
  // The key namespace of `secret`, or nullopt when it admits nothing.
  std::optional<std::string> Namespace(absl::string_view secret);

  absl::Mutex tenant_mu_;
  std::map<std::string, std::string> tenants_ ABSL_GUARDED_BY(tenant_mu_);  // secret -> namespace

  Options options_;
  int port_ = 0;
  internal::Fd listener_;
  std::thread accept_thread_;

  absl::Mutex conn_mu_;
  std::vector<std::unique_ptr<internal::Fd>> conns_ ABSL_GUARDED_BY(conn_mu_);
  std::vector<std::thread> conn_threads_ ABSL_GUARDED_BY(conn_mu_);

  absl::Mutex mu_;
  absl::CondVar cv_;  // signalled when a key is written or on shutdown
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::string> data_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loom::collectives::store
