// An in-memory model of the Kubernetes API server for tests, served over HTTPS
// on loopback (cpp-httplib SSLServer) with bearer-token auth.
//
// Semantics modelled (those the operator relies on), for any namespaced
// resource under /api/v1 or /apis/GROUP/VERSION:
//   - GET / LIST (labelSelector k=v[,k=v]) / POST / PUT / PATCH (JSON merge
//     patch) / DELETE, JSON bodies, Status objects on errors;
//   - one global resourceVersion counter; PUT/PATCH with a stale
//     metadata.resourceVersion -> 409 Conflict; POST of an existing name -> 409
//     AlreadyExists; metadata.uid, creationTimestamp, generation (bumped on
//     spec changes);
//   - the status subresource (PUT .../status changes only status; the main
//     resource ignores status changes) for `status_resources`;
//   - watch=1&resourceVersion=RV as a chunked stream of JSON lines, replaying
//     history after RV; RV older than the compaction point -> ERROR event 410;
//     the stream ends after timeoutSeconds or DropWatches();
//   - deletion: with finalizers only sets deletionTimestamp (MODIFIED); the
//     object goes when an update empties its finalizers;
//   - garbage collection: when an object goes, dependents whose every
//     ownerReference points to a gone uid are deleted too (background).
//
// Tests reach it only over HTTPS (KubeClient) or through the direct accessors
// below, which stand in for other controllers (e.g. a kubelet setting pod
// status).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace httplib {
class SSLServer;
}

namespace loom::deploy::operator_::testing {

class FakeApiServer {
 public:
  using Json = nlohmann::json;

  // cert/key PEM files for the server; `token` is the accepted bearer token.
  FakeApiServer(std::string cert_file, std::string key_file, std::string token);
  ~FakeApiServer();

  // Listens on 127.0.0.1 (port 0: any); returns the port.
  absl::StatusOr<int> Start(int port = 0);
  void Stop();

  // Plurals with a status subresource (default: trainingjobs).
  void SetStatusResources(std::set<std::string> plurals);

  // Drops history at or below the current resourceVersion: watches from older
  // versions get 410 Gone.
  void Compact();
  // Ends every open watch stream now (a disconnect).
  void DropWatches();

  // Direct access for test controllers. `collection` is the path without the
  // name, e.g. "/api/v1/namespaces/ns/pods".
  std::vector<Json> Objects(const std::string& collection);
  absl::StatusOr<Json> GetObject(const std::string& collection, const std::string& name);
  // Replaces status (as a kubelet or controller would); bumps resourceVersion.
  absl::Status SetStatus(const std::string& collection, const std::string& name, const Json& status);
  // Deletes regardless of finalizers (test cleanup).
  void ForceDelete(const std::string& collection, const std::string& name);

  int64_t resource_version();
  int requests() const { return requests_; }
  int watch_requests() const { return watch_requests_; }

 private:
  struct Event {
    int64_t rv;
    std::string collection, type;
    Json obj;
  };
  struct Response {
    int code;
    Json body;
  };

  Response Handle(const std::string& method, const std::string& path,
                  const std::multimap<std::string, std::string>& params, const std::string& body);
  Response HandleLocked(const std::string& method, const std::string& collection, const std::string& ns,
                        const std::string& plural, const std::string& name, const std::string& sub,
                        const std::multimap<std::string, std::string>& params, const std::string& body);
  void Record(const std::string& collection, const std::string& type, const Json& obj);
  // Removes the object and garbage-collects dependents. mu_ held.
  void RemoveLocked(const std::string& collection, const std::string& name);
  Response DeleteLocked(const std::string& collection, const std::string& name);
  static Json StatusBody(int code, const std::string& reason, const std::string& message);
  static bool Matches(const Json& obj, const std::string& selector);

  std::string cert_file_, key_file_, token_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  int64_t rv_ = 1;
  int64_t compacted_rv_ = 0;
  int64_t uid_counter_ = 0;
  int drop_generation_ = 0;
  bool stopping_ = false;
  std::set<std::string> status_resources_{"trainingjobs"};
  std::map<std::string, std::map<std::string, Json>> objects_;  // collection -> name -> obj
  std::vector<Event> history_;
  std::atomic<int> requests_{0}, watch_requests_{0};
};

// Writes a self-signed certificate for 127.0.0.1/localhost with the openssl
// CLI (RSA 2048); returns false on failure.
bool MakeSelfSignedCert(const std::string& dir, std::string* cert_file, std::string* key_file);

}  // namespace loom::deploy::operator_::testing
