// A small Kubernetes REST client for the Loom operator (cpp-httplib over TLS,
// nlohmann::json objects).
//
// Credentials come from the pod (LoadInClusterConfig: the service-account
// token and CA under /var/run/secrets/kubernetes.io/serviceaccount plus
// KUBERNETES_SERVICE_HOST/PORT) or from a kubeconfig (LoadKubeconfig: the
// current context's server, certificate-authority[-data], token[File] and
// optional client-certificate/key[-data]). The server is always verified
// against the CA; plain http is refused.
//
// KubeApi is the interface the reconciler uses (so tests can inject faults);
// KubeClient implements it over HTTPS with `Authorization: Bearer`. HTTP errors
// map to absl codes: 404 NotFound, 409 AlreadyExists (create) or Aborted
// (resourceVersion conflict), 410 OutOfRange ("Gone": the resourceVersion is too
// old), 401 Unauthenticated, 403 PermissionDenied, 400/422 InvalidArgument,
// transport failures and 5xx Unavailable.
//
// Watch streams newline-delimited JSON events from a chunked response; an
// ERROR event with code 410 ends it with OutOfRange. ListWatch runs list+watch
// forever: resumes from the last seen resourceVersion after a disconnect,
// relists after 410.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace httplib {
class SSLClient;
}

namespace loom::deploy::operator_ {

using Json = nlohmann::json;

// Group/version/resource, e.g. {"apps", "v1", "deployments"}; group "" is the
// core API (/api/v1).
struct Resource {
  std::string group, version, plural;
};

inline const Resource kPods{"", "v1", "pods"};
inline const Resource kServices{"", "v1", "services"};
inline const Resource kSecrets{"", "v1", "secrets"};
inline const Resource kDeployments{"apps", "v1", "deployments"};
inline const Resource kTrainingJobs{"loom.dev", "v1", "trainingjobs"};
inline const Resource kPodGroups{"scheduling.x-k8s.io", "v1alpha1", "podgroups"};

// "/api/v1/namespaces/NS/PLURAL[/NAME[/SUB]]" or the /apis/GROUP/VERSION form.
std::string ResourcePath(const Resource& r, const std::string& ns, const std::string& name = "",
                         const std::string& sub = "");

struct KubeConfig {
  std::string host;  // server host name or IP
  int port = 443;
  std::string ca_pem;  // trusted CA(s), PEM
  std::string token;   // bearer token (may be empty with a client cert)
  std::string client_cert_pem, client_key_pem;
  std::string ns;  // default namespace ("default" when unknown)
  int timeout_s = 30;
};

// `root` prefixes the service-account paths (tests); env is read with getenv.
absl::StatusOr<KubeConfig> LoadInClusterConfig(const std::string& root = "");
// `context` empty: current-context.
absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");
// "https://host[:port]" -> host, port.
absl::Status ParseServerUrl(const std::string& url, KubeConfig* cfg);

struct ListOptions {
  std::string label_selector;  // "k=v,k2=v2"
};

class KubeApi {
 public:
  virtual ~KubeApi() = default;
  virtual absl::StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& name) = 0;
  // The List object: items plus metadata.resourceVersion.
  virtual absl::StatusOr<Json> List(const Resource& r, const std::string& ns, const ListOptions& opts = {}) = 0;
  virtual absl::StatusOr<Json> Create(const Resource& r, const std::string& ns, const Json& obj) = 0;
  // PUT; metadata.resourceVersion, when set, must match (else Aborted).
  virtual absl::StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& obj) = 0;
  // PUT to the status subresource.
  virtual absl::StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns, const Json& obj) = 0;
  // JSON merge patch (RFC 7386).
  virtual absl::StatusOr<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                                     const Json& patch) = 0;
  // NotFound when already gone.
  virtual absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name) = 0;
};

// A watch event: type ADDED, MODIFIED, DELETED, BOOKMARK (ERROR ends the
// stream). Return false from the handler to stop watching.
using WatchHandler = std::function<bool(const std::string& type, const Json& obj)>;

class KubeClient : public KubeApi {
 public:
  explicit KubeClient(KubeConfig cfg);
  ~KubeClient() override;

  absl::StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& name) override;
  absl::StatusOr<Json> List(const Resource& r, const std::string& ns, const ListOptions& opts = {}) override;
  absl::StatusOr<Json> Create(const Resource& r, const std::string& ns, const Json& obj) override;
  absl::StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& obj) override;
  absl::StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns, const Json& obj) override;
  absl::StatusOr<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                             const Json& patch) override;
  absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name) override;

  // One watch request from `resource_version` (must be non-empty). Returns OK
  // when the server ends the stream (timeout, disconnect) or the handler stops;
  // OutOfRange on 410 Gone. *last_rv follows every event's resourceVersion.
  absl::Status Watch(const Resource& r, const std::string& ns, const ListOptions& opts,
                     const std::string& resource_version, int timeout_s, const WatchHandler& handler,
                     std::string* last_rv);

  // List, then watch from the list's resourceVersion, until *stop. `on_list`
  // gets every list (the initial one and each relist after 410); `on_event`
  // gets watch events. Resumes after disconnects from the last resourceVersion.
  void ListWatch(const Resource& r, const std::string& ns, const ListOptions& opts,
                 const std::function<void(const Json& list)>& on_list, const WatchHandler& on_event,
                 const std::atomic<bool>* stop, int watch_timeout_s = 60);

  // Counters for tests and logs.
  int relists() const { return relists_; }
  int watch_restarts() const { return watch_restarts_; }

  const KubeConfig& config() const { return cfg_; }

 private:
  absl::StatusOr<Json> Do(const std::string& method, const std::string& path, const Json* body,
                          const std::string& content_type = "application/json");

  KubeConfig cfg_;
  std::mutex mu_;  // guards cli_
  std::unique_ptr<httplib::SSLClient> cli_;
  std::atomic<int> relists_{0}, watch_restarts_{0};
};

// Maps an HTTP status (and the Status body's reason) to an absl::Status.
absl::Status HttpError(int code, const std::string& method, const std::string& path, const std::string& body);

}  // namespace loom::deploy::operator_
