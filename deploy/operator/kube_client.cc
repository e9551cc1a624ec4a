#include "deploy/operator/kube_client.h"

#include <httplib.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace loom::deploy::operator_ {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// Percent-encoding for query values.
std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

X509_STORE* StoreFromPem(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (!bio) return nullptr;
  X509_STORE* store = X509_STORE_new();
  int n = 0;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store, cert);
    X509_free(cert);
    ++n;
  }
  BIO_free(bio);
  if (n == 0) {
    X509_STORE_free(store);
    return nullptr;
  }
  return store;
}

std::unique_ptr<httplib::SSLClient> MakeClient(const KubeConfig& cfg, int read_timeout_s) {
  std::unique_ptr<httplib::SSLClient> cli;
  if (!cfg.client_cert_pem.empty()) {
    BIO* cb = BIO_new_mem_buf(cfg.client_cert_pem.data(), static_cast<int>(cfg.client_cert_pem.size()));
    BIO* kb = BIO_new_mem_buf(cfg.client_key_pem.data(), static_cast<int>(cfg.client_key_pem.size()));
    X509* cert = cb ? PEM_read_bio_X509(cb, nullptr, nullptr, nullptr) : nullptr;
    EVP_PKEY* key = kb ? PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr) : nullptr;
    if (cb) BIO_free(cb);
    if (kb) BIO_free(kb);
    if (cert && key) cli = std::make_unique<httplib::SSLClient>(cfg.host, cfg.port, cert, key);
    if (cert) X509_free(cert);
    if (key) EVP_PKEY_free(key);
  }
  if (!cli) cli = std::make_unique<httplib::SSLClient>(cfg.host, cfg.port);
  cli->enable_server_certificate_verification(true);
  if (X509_STORE* store = StoreFromPem(cfg.ca_pem)) cli->set_ca_cert_store(store);  // takes ownership
  cli->set_tcp_nodelay(true);
  cli->set_connection_timeout(cfg.timeout_s, 0);
  cli->set_read_timeout(read_timeout_s, 0);
  cli->set_write_timeout(cfg.timeout_s, 0);
  return cli;
}

httplib::Headers AuthHeaders(const KubeConfig& cfg) {
  httplib::Headers h{{"Accept", "application/json"}};
  if (!cfg.token.empty()) h.emplace("Authorization", "Bearer " + cfg.token);
  return h;
}

std::string ListQuery(const ListOptions& opts) {
  std::string q;
  if (!opts.label_selector.empty()) q = "labelSelector=" + UrlEncode(opts.label_selector);
  return q;
}

}  // namespace

std::string ResourcePath(const Resource& r, const std::string& ns, const std::string& name, const std::string& sub) {
  std::string p = r.group.empty() ? absl::StrCat("/api/", r.version) : absl::StrCat("/apis/", r.group, "/", r.version);
  absl::StrAppend(&p, "/namespaces/", ns, "/", r.plural);
  if (!name.empty()) absl::StrAppend(&p, "/", name);
  if (!sub.empty()) absl::StrAppend(&p, "/", sub);
  return p;
}

absl::Status ParseServerUrl(const std::string& url, KubeConfig* cfg) {
  const std::string scheme = "https://";
  if (url.rfind(scheme, 0) != 0)
    return absl::InvalidArgumentError(absl::StrCat("server: expected https://HOST[:PORT], got '", url, "'"));
  std::string rest = url.substr(scheme.size());
  if (auto slash = rest.find('/'); slash != std::string::npos) rest = rest.substr(0, slash);
  cfg->port = 443;
  std::string host = rest;
  if (!rest.empty() && rest[0] == '[') {  // [ipv6]:port
    auto close = rest.find(']');
    if (close == std::string::npos) return absl::InvalidArgumentError("server: bad IPv6 address");
    host = rest.substr(1, close - 1);
    rest = rest.substr(close + 1);
    if (!rest.empty() && rest[0] == ':' && !absl::SimpleAtoi(rest.substr(1), &cfg->port))
      return absl::InvalidArgumentError(absl::StrCat("server: bad port in '", url, "'"));
  } else if (auto colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &cfg->port))
      return absl::InvalidArgumentError(absl::StrCat("server: bad port in '", url, "'"));
  }
  if (host.empty()) return absl::InvalidArgumentError(absl::StrCat("server: no host in '", url, "'"));
  cfg->host = host;
  return absl::OkStatus();
}

absl::StatusOr<KubeConfig> LoadInClusterConfig(const std::string& root) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !*host || !port || !*port)
    return absl::FailedPreconditionError(
        "in-cluster config: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set (not in a pod?)");
  KubeConfig cfg;
  cfg.host = host;
  if (!absl::SimpleAtoi(port, &cfg.port))
    return absl::InvalidArgumentError(absl::StrCat("KUBERNETES_SERVICE_PORT: not a port: '", port, "'"));
  const std::string dir = root + "/var/run/secrets/kubernetes.io/serviceaccount/";
  auto token = ReadFile(dir + "token");
  if (!token.ok()) return token.status();
  cfg.token = Trim(*token);
  auto ca = ReadFile(dir + "ca.crt");
  if (!ca.ok()) return ca.status();
  cfg.ca_pem = *ca;
  auto ns = ReadFile(dir + "namespace");
  cfg.ns = ns.ok() ? Trim(*ns) : "default";
  return cfg;
}

absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path, ": ", e.what()));
  }
  auto find = [&](const char* list, const std::string& name) -> YAML::Node {
    for (const auto& n : root[list])
      if (n["name"] && n["name"].as<std::string>() == name) return n;
    return YAML::Node();
  };
  try {
    std::string ctx_name = context.empty() ? root["current-context"].as<std::string>("") : context;
    YAML::Node ctx = find("contexts", ctx_name);
    if (!ctx) return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path, ": no context '", ctx_name, "'"));
    ctx = ctx["context"];
    YAML::Node cluster = find("clusters", ctx["cluster"].as<std::string>(""));
    if (!cluster) return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path, ": context's cluster not found"));
    cluster = cluster["cluster"];
    KubeConfig cfg;
    if (absl::Status s = ParseServerUrl(cluster["server"].as<std::string>(""), &cfg); !s.ok())
      return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path, ": ", s.message()));
    auto decode = [&](const YAML::Node& data, const YAML::Node& file, const char* what) -> absl::StatusOr<std::string> {
      if (data) {
        std::string out;
        if (!absl::Base64Unescape(data.as<std::string>(), &out))
          return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path, ": ", what, "-data: bad base64"));
        return out;
      }
      if (file) return ReadFile(file.as<std::string>());
      return std::string();
    };
    auto ca = decode(cluster["certificate-authority-data"], cluster["certificate-authority"], "certificate-authority");
    if (!ca.ok()) return ca.status();
    cfg.ca_pem = *ca;
    YAML::Node user = find("users", ctx["user"].as<std::string>(""));
    if (user) {
      user = user["user"];
      if (user["token"]) {
        cfg.token = user["token"].as<std::string>();
      } else if (user["tokenFile"]) {
        auto t = ReadFile(user["tokenFile"].as<std::string>());
        if (!t.ok()) return t.status();
        cfg.token = Trim(*t);
      }
      auto cert = decode(user["client-certificate-data"], user["client-certificate"], "client-certificate");
      if (!cert.ok()) return cert.status();
      auto key = decode(user["client-key-data"], user["client-key"], "client-key");
      if (!key.ok()) return key.status();
      cfg.client_cert_pem = *cert;
      cfg.client_key_pem = *key;
    }
    cfg.ns = ctx["namespace"].as<std::string>("default");
    return cfg;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path, ": ", e.what()));
  }
}

absl::Status HttpError(int code, const std::string& method, const std::string& path, const std::string& body) {
  std::string reason, message;
  Json j = Json::parse(body, nullptr, false);
  if (j.is_object()) {
    reason = j.value("reason", "");
    message = j.value("message", "");
  }
  std::string msg = absl::StrCat(method, " ", path, ": HTTP ", code, reason.empty() ? "" : " ", reason,
                                 message.empty() ? "" : ": ", message);
  switch (code) {
    case 400:
    case 422:
      return absl::InvalidArgumentError(msg);
    case 401:
      return absl::UnauthenticatedError(msg);
    case 403:
      return absl::PermissionDeniedError(msg);
    case 404:
      return absl::NotFoundError(msg);
    case 409:
      return reason == "AlreadyExists" ? absl::AlreadyExistsError(msg) : absl::AbortedError(msg);
    case 410:
      return absl::OutOfRangeError(msg);
    default:
      return absl::UnavailableError(msg);
  }
}

KubeClient::KubeClient(KubeConfig cfg) : cfg_(std::move(cfg)) {}

KubeClient::~KubeClient() = default;

absl::StatusOr<Json> KubeClient::Do(const std::string& method, const std::string& path, const Json* body,
                                    const std::string& content_type) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!cli_) {
    cli_ = MakeClient(cfg_, cfg_.timeout_s);
    cli_->set_keep_alive(true);  // one TLS connection for all plain requests
  }
  httplib::SSLClient* cli = cli_.get();
  httplib::Headers h = AuthHeaders(cfg_);
  std::string payload = body ? body->dump() : "";
  httplib::Result res{nullptr, httplib::Error::Unknown};
  // A kept-alive connection the server has closed fails without the request
  // being processed: retry once on a fresh connection.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt == 1) {
      cli_ = MakeClient(cfg_, cfg_.timeout_s);
      cli_->set_keep_alive(true);
      cli = cli_.get();
    }
    if (method == "GET") {
      res = cli->Get(path.c_str(), h);
    } else if (method == "POST") {
      res = cli->Post(path.c_str(), h, payload, content_type.c_str());
    } else if (method == "PUT") {
      res = cli->Put(path.c_str(), h, payload, content_type.c_str());
    } else if (method == "PATCH") {
      res = cli->Patch(path.c_str(), h, payload, content_type.c_str());
    } else if (method == "DELETE") {
      res = cli->Delete(path.c_str(), h);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("method: unsupported '", method, "'"));
    }
    if (res) break;
  }
  if (!res) {
    long verify = cli->get_openssl_verify_result();
    cli_.reset();  // reconnect next time
    return absl::UnavailableError(absl::StrCat(method, " ", path, ": ", httplib::to_string(res.error()), " (",
                                               cfg_.host, ":", cfg_.port, ", verify result ", verify, ")"));
  }
  if (res->status < 200 || res->status >= 300) return HttpError(res->status, method, path, res->body);
  Json j = Json::parse(res->body, nullptr, false);
  if (j.is_discarded()) return absl::UnavailableError(absl::StrCat(method, " ", path, ": response is not JSON"));
  return j;
}

absl::StatusOr<Json> KubeClient::Get(const Resource& r, const std::string& ns, const std::string& name) {
  return Do("GET", ResourcePath(r, ns, name), nullptr);
}

absl::StatusOr<Json> KubeClient::List(const Resource& r, const std::string& ns, const ListOptions& opts) {
  std::string q = ListQuery(opts);
  return Do("GET", ResourcePath(r, ns) + (q.empty() ? "" : "?" + q), nullptr);
}

absl::StatusOr<Json> KubeClient::Create(const Resource& r, const std::string& ns, const Json& obj) {
  return Do("POST", ResourcePath(r, ns), &obj);
}

absl::StatusOr<Json> KubeClient::Update(const Resource& r, const std::string& ns, const Json& obj) {
  return Do("PUT", ResourcePath(r, ns, obj["metadata"].value("name", "")), &obj);
}

absl::StatusOr<Json> KubeClient::UpdateStatus(const Resource& r, const std::string& ns, const Json& obj) {
  return Do("PUT", ResourcePath(r, ns, obj["metadata"].value("name", ""), "status"), &obj);
}

absl::StatusOr<Json> KubeClient::Patch(const Resource& r, const std::string& ns, const std::string& name,
                                       const Json& patch) {
  return Do("PATCH", ResourcePath(r, ns, name), &patch, "application/merge-patch+json");
}

absl::Status KubeClient::Delete(const Resource& r, const std::string& ns, const std::string& name) {
  auto res = Do("DELETE", ResourcePath(r, ns, name), nullptr);
  return res.status();
}

absl::Status KubeClient::Watch(const Resource& r, const std::string& ns, const ListOptions& opts,
                               const std::string& resource_version, int timeout_s, const WatchHandler& handler,
                               std::string* last_rv) {
  std::string q = ListQuery(opts);
  std::string path = absl::StrCat(ResourcePath(r, ns),
                                  "?watch=1&allowWatchBookmarks=true&resourceVersion=", UrlEncode(resource_version),
                                  "&timeoutSeconds=", timeout_s, q.empty() ? "" : "&", q);
  // The server closes the stream after timeoutSeconds; allow some slack.
  auto cli = MakeClient(cfg_, timeout_s + 15);
  std::string buf;
  absl::Status status = absl::OkStatus();
  bool stopped = false;
  int http_status = 0;
  std::string error_body;
  auto res = cli->Get(
      path.c_str(), AuthHeaders(cfg_),
      [&](const httplib::Response& resp) {
        http_status = resp.status;
        return true;
      },
      [&](const char* data, size_t len) {
        if (http_status != 200) {
          error_body.append(data, len);
          return true;
        }
        buf.append(data, len);
        size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos) {
          std::string line = buf.substr(0, nl);
          buf.erase(0, nl + 1);
          if (line.empty()) continue;
          Json ev = Json::parse(line, nullptr, false);
          if (!ev.is_object()) {
            status = absl::UnavailableError("watch: malformed event line");
            return false;
          }
          std::string type = ev.value("type", "");
          const Json& obj = ev["object"];
          if (type == "ERROR") {
            int code = obj.value("code", 500);
            status = HttpError(code, "WATCH", path, obj.dump());
            return false;
          }
          if (obj.contains("metadata") && obj["metadata"].contains("resourceVersion"))
            *last_rv = obj["metadata"]["resourceVersion"].get<std::string>();
          if (type == "BOOKMARK") continue;
          if (!handler(type, obj)) {
            stopped = true;
            return false;
          }
        }
        return true;
      });
  if (http_status != 0 && http_status != 200) return HttpError(http_status, "WATCH", path, error_body);
  if (!status.ok()) return status;
  if (stopped) return absl::OkStatus();
  if (!res && res.error() != httplib::Error::Canceled && res.error() != httplib::Error::Read)
    return absl::UnavailableError(absl::StrCat("WATCH ", path, ": ", httplib::to_string(res.error())));
  return absl::OkStatus();
}

void KubeClient::ListWatch(const Resource& r, const std::string& ns, const ListOptions& opts,
                           const std::function<void(const Json& list)>& on_list, const WatchHandler& on_event,
                           const std::atomic<bool>* stop, int watch_timeout_s) {
  std::string rv;
  int backoff_ms = 100;
  while (!stop->load()) {
    if (rv.empty()) {
      auto list = List(r, ns, opts);
      if (!list.ok()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
        backoff_ms = std::min(backoff_ms * 2, 5000);
        continue;
      }
      relists_++;
      rv = (*list)["metadata"].value("resourceVersion", "0");
      on_list(*list);
    }
    absl::Status s = Watch(
        r, ns, opts, rv, watch_timeout_s,
        [&](const std::string& type, const Json& obj) {
          if (stop->load()) return false;
          return on_event(type, obj);
        },
        &rv);
    if (stop->load()) break;
    watch_restarts_++;
    if (absl::IsOutOfRange(s)) {
      rv.clear();  // 410 Gone: the resourceVersion is too old, relist.
      continue;
    }
    if (!s.ok()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min(backoff_ms * 2, 5000);
    } else {
      backoff_ms = 100;
    }
  }
}

}  // namespace loom::deploy::operator_
