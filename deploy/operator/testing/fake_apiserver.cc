#include "deploy/operator/testing/fake_apiserver.h"

#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace loom::deploy::operator_::testing {
namespace {

std::string Now() { return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()); }

int64_t RvOf(const nlohmann::json& obj) {
  int64_t rv = 0;
  if (obj.contains("metadata") && obj["metadata"].contains("resourceVersion") &&
      obj["metadata"]["resourceVersion"].is_string())
    (void)absl::SimpleAtoi(obj["metadata"]["resourceVersion"].get<std::string>(), &rv);
  return rv;
}

std::string Param(const std::multimap<std::string, std::string>& p, const std::string& k) {
  auto it = p.find(k);
  return it == p.end() ? "" : it->second;
}

}  // namespace

FakeApiServer::FakeApiServer(std::string cert_file, std::string key_file, std::string token)
    : cert_file_(std::move(cert_file)), key_file_(std::move(key_file)), token_(std::move(token)) {}

FakeApiServer::~FakeApiServer() { Stop(); }

FakeApiServer::Json FakeApiServer::StatusBody(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
          {"code", code},     {"reason", reason},   {"message", message}};
}

bool FakeApiServer::Matches(const Json& obj, const std::string& selector) {
  if (selector.empty()) return true;
  const Json* labels = nullptr;
  if (obj.contains("metadata") && obj["metadata"].contains("labels")) labels = &obj["metadata"]["labels"];
  for (absl::string_view term : absl::StrSplit(selector, ',')) {
    std::vector<std::string> kv = absl::StrSplit(term, '=');
    if (kv.size() != 2) return false;
    if (!labels || !labels->contains(kv[0]) || (*labels)[kv[0]] != kv[1]) return false;
  }
  return true;
}

absl::StatusOr<int> FakeApiServer::Start(int port) {
  server_ = std::make_unique<httplib::SSLServer>(cert_file_.c_str(), key_file_.c_str());
  if (!server_->is_valid()) return absl::InternalError("fake apiserver: bad certificate or key");
  server_->set_tcp_nodelay(true);
  server_->set_keep_alive_timeout(1);
  auto handler = [this](const httplib::Request& req, httplib::Response& res) {
    requests_++;
    auto auth = req.get_header_value("Authorization");
    if (auth != "Bearer " + token_) {
      res.status = 401;
      res.set_content(StatusBody(401, "Unauthorized", "Unauthorized").dump(), "application/json");
      return;
    }
    std::multimap<std::string, std::string> params(req.params.begin(), req.params.end());
    std::string watch = Param(params, "watch");
    if (req.method == "GET" && (watch == "1" || watch == "true")) {
      watch_requests_++;
      // path: the collection.
      std::string collection = req.path;
      std::string selector = Param(params, "labelSelector");
      int64_t from = 0;
      std::string rv_param = Param(params, "resourceVersion");
      int timeout_s = 60;
      (void)absl::SimpleAtoi(Param(params, "timeoutSeconds"), &timeout_s);
      int drop_gen;
      {
        std::lock_guard<std::mutex> l(mu_);
        drop_gen = drop_generation_;
        if (rv_param.empty() || rv_param == "0" || !absl::SimpleAtoi(rv_param, &from)) from = rv_;
      }
      auto deadline = std::make_shared<absl::Time>(absl::Now() + absl::Seconds(timeout_s));
      auto cursor = std::make_shared<int64_t>(from);
      res.status = 200;
      res.set_chunked_content_provider("application/json", [this, collection, selector, deadline, cursor, drop_gen](
                                                               size_t, httplib::DataSink& sink) {
        std::unique_lock<std::mutex> l(mu_);
        if (*cursor < compacted_rv_) {
          std::string line =
              Json{
                  {"type", "ERROR"},
                  {"object", StatusBody(410, "Expired",
                                        absl::StrCat("too old resource version: ", *cursor, " (", compacted_rv_, ")"))}}
                  .dump() +
              "\n";
          l.unlock();
          sink.write(line.data(), line.size());
          sink.done();
          return true;
        }
        cv_.wait_for(l, std::chrono::milliseconds(200));
        std::string out;
        for (const Event& e : history_) {
          if (e.rv <= *cursor) continue;
          *cursor = e.rv;
          if (e.collection != collection || !Matches(e.obj, selector)) continue;
          out += Json{{"type", e.type}, {"object", e.obj}}.dump() + "\n";
        }
        bool end = stopping_ || drop_generation_ != drop_gen || absl::Now() >= *deadline;
        l.unlock();
        if (!out.empty() && !sink.write(out.data(), out.size())) return false;
        if (end) sink.done();
        return true;
      });
      return;
    }
    Response r = Handle(req.method, req.path, params, req.body);
    res.status = r.code;
    res.set_content(r.body.dump(), "application/json");
  };
  server_->Get(".*", handler);
  server_->Post(".*", handler);
  server_->Put(".*", handler);
  server_->Patch(".*", handler);
  server_->Delete(".*", handler);
  int bound =
      port == 0 ? server_->bind_to_any_port("127.0.0.1") : (server_->bind_to_port("127.0.0.1", port) ? port : -1);
  if (bound <= 0) return absl::UnavailableError("fake apiserver: cannot bind");
  httplib::SSLServer* s = server_.get();
  thread_ = std::thread([s] { s->listen_after_bind(); });
  while (!s->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return bound;
}

void FakeApiServer::Stop() {
  if (!server_) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

void FakeApiServer::SetStatusResources(std::set<std::string> plurals) {
  std::lock_guard<std::mutex> l(mu_);
  status_resources_ = std::move(plurals);
}

void FakeApiServer::Compact() {
  std::lock_guard<std::mutex> l(mu_);
  compacted_rv_ = rv_;
  history_.clear();
}

void FakeApiServer::DropWatches() {
  {
    std::lock_guard<std::mutex> l(mu_);
    drop_generation_++;
  }
  cv_.notify_all();
}

int64_t FakeApiServer::resource_version() {
  std::lock_guard<std::mutex> l(mu_);
  return rv_;
}

std::vector<FakeApiServer::Json> FakeApiServer::Objects(const std::string& collection) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<Json> out;
  for (const auto& [name, obj] : objects_[collection]) out.push_back(obj);
  return out;
}

absl::StatusOr<FakeApiServer::Json> FakeApiServer::GetObject(const std::string& collection, const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  auto& c = objects_[collection];
  auto it = c.find(name);
  if (it == c.end()) return absl::NotFoundError(name);
  return it->second;
}

absl::Status FakeApiServer::SetStatus(const std::string& collection, const std::string& name, const Json& status) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto& c = objects_[collection];
    auto it = c.find(name);
    if (it == c.end()) return absl::NotFoundError(name);
    it->second["status"] = status;
    it->second["metadata"]["resourceVersion"] = std::to_string(++rv_);
    Record(collection, "MODIFIED", it->second);
  }
  cv_.notify_all();
  return absl::OkStatus();
}

void FakeApiServer::ForceDelete(const std::string& collection, const std::string& name) {
  {
    std::lock_guard<std::mutex> l(mu_);
    RemoveLocked(collection, name);
  }
  cv_.notify_all();
}

void FakeApiServer::Record(const std::string& collection, const std::string& type, const Json& obj) {
  history_.push_back(Event{RvOf(obj), collection, type, obj});
}

void FakeApiServer::RemoveLocked(const std::string& collection, const std::string& name) {
  auto& c = objects_[collection];
  auto it = c.find(name);
  if (it == c.end()) return;
  Json obj = it->second;
  c.erase(it);
  obj["metadata"]["resourceVersion"] = std::to_string(++rv_);
  Record(collection, "DELETED", obj);
  // Garbage collection: dependents whose owners are all gone.
  std::set<std::string> live;
  for (auto& [col, objs] : objects_)
    for (auto& [n, o] : objs) live.insert(o["metadata"].value("uid", ""));
  std::vector<std::pair<std::string, std::string>> orphans;
  for (auto& [col, objs] : objects_) {
    for (auto& [n, o] : objs) {
      const Json& md = o["metadata"];
      if (!md.contains("ownerReferences") || md["ownerReferences"].empty()) continue;
      bool any_live = false;
      for (const Json& ref : md["ownerReferences"]) any_live |= live.count(ref.value("uid", "")) > 0;
      if (!any_live) orphans.emplace_back(col, n);
    }
  }
  for (auto& [col, n] : orphans) DeleteLocked(col, n);
}

FakeApiServer::Response FakeApiServer::DeleteLocked(const std::string& collection, const std::string& name) {
  auto& c = objects_[collection];
  auto it = c.find(name);
  if (it == c.end()) return {404, StatusBody(404, "NotFound", absl::StrCat(name, " not found"))};
  Json& obj = it->second;
  if (obj["metadata"].contains("finalizers") && !obj["metadata"]["finalizers"].empty()) {
    if (!obj["metadata"].contains("deletionTimestamp")) {
      obj["metadata"]["deletionTimestamp"] = Now();
      obj["metadata"]["resourceVersion"] = std::to_string(++rv_);
      Record(collection, "MODIFIED", obj);
    }
    return {200, obj};
  }
  Json copy = obj;
  RemoveLocked(collection, name);
  return {200, copy};
}

FakeApiServer::Response FakeApiServer::Handle(const std::string& method, const std::string& path,
                                              const std::multimap<std::string, std::string>& params,
                                              const std::string& body) {
  static const std::regex kPath(
      R"(^(/api/v1|/apis/[^/]+/[^/]+)/namespaces/([^/]+)/([^/]+)(?:/([^/]+))?(?:/(status))?$)");
  std::smatch m;
  if (!std::regex_match(path, m, kPath)) return {404, StatusBody(404, "NotFound", absl::StrCat("no route for ", path))};
  std::string collection = absl::StrCat(m[1].str(), "/namespaces/", m[2].str(), "/", m[3].str());
  Response r;
  {
    std::lock_guard<std::mutex> l(mu_);
    r = HandleLocked(method, collection, m[2].str(), m[3].str(), m[4].str(), m[5].str(), params, body);
  }
  cv_.notify_all();
  return r;
}

FakeApiServer::Response FakeApiServer::HandleLocked(const std::string& method, const std::string& collection,
                                                    const std::string& ns, const std::string& plural,
                                                    const std::string& name, const std::string& sub,
                                                    const std::multimap<std::string, std::string>& params,
                                                    const std::string& body) {
  auto& c = objects_[collection];
  const bool has_status = status_resources_.count(plural) > 0;
  if (method == "GET" && name.empty()) {
    Json items = Json::array();
    std::string sel = Param(params, "labelSelector");
    for (auto& [n, o] : c)
      if (Matches(o, sel)) items.push_back(o);
    return {200,
            {{"kind", "List"},
             {"apiVersion", "v1"},
             {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
             {"items", items}}};
  }
  if (method == "GET") {
    auto it = c.find(name);
    if (it == c.end()) return {404, StatusBody(404, "NotFound", absl::StrCat(plural, " \"", name, "\" not found"))};
    return {200, it->second};
  }
  if (method == "DELETE") return DeleteLocked(collection, name);

  Json in = Json::parse(body, nullptr, false);
  if (!in.is_object()) return {400, StatusBody(400, "BadRequest", "body is not a JSON object")};

  if (method == "POST") {
    if (!name.empty()) return {405, StatusBody(405, "MethodNotAllowed", "POST to a named object")};
    if (!in.contains("metadata") || !in["metadata"].contains("name") || !in["metadata"]["name"].is_string() ||
        in["metadata"]["name"].get<std::string>().empty())
      return {422, StatusBody(422, "Invalid", "metadata.name: Required value")};
    std::string n = in["metadata"]["name"];
    if (c.count(n)) return {409, StatusBody(409, "AlreadyExists", absl::StrCat(plural, " \"", n, "\" already exists"))};
    Json& md = in["metadata"];
    md["namespace"] = ns;
    md["uid"] = absl::StrCat("uid-", ++uid_counter_);
    md["creationTimestamp"] = Now();
    md["generation"] = 1;
    md["resourceVersion"] = std::to_string(++rv_);
    md.erase("deletionTimestamp");
    if (has_status) in.erase("status");
    c[n] = in;
    Record(collection, "ADDED", in);
    return {201, in};
  }

  auto it = c.find(name);
  if (it == c.end()) return {404, StatusBody(404, "NotFound", absl::StrCat(plural, " \"", name, "\" not found"))};
  Json& cur = it->second;
  Json next;
  if (method == "PUT") {
    next = in;
  } else if (method == "PATCH") {
    next = cur;
    next.merge_patch(in);
  } else {
    return {405, StatusBody(405, "MethodNotAllowed", method)};
  }
  if (!next.contains("metadata") || !next["metadata"].is_object())
    return {422, StatusBody(422, "Invalid", "metadata: Required value")};
  // Optimistic concurrency.
  std::string want_rv = next["metadata"].value("resourceVersion", "");
  if (!want_rv.empty() && want_rv != cur["metadata"].value("resourceVersion", ""))
    return {409, StatusBody(409, "Conflict",
                            absl::StrCat("Operation cannot be fulfilled on ", plural, " \"", name,
                                         "\": the object has been modified; please apply your changes to the "
                                         "latest version and try again"))};
  if (next["metadata"].value("name", "") != name)
    return {400, StatusBody(400, "BadRequest", "metadata.name does not match the URL")};
  Json result = cur;
  if (sub == "status") {
    if (!has_status) return {404, StatusBody(404, "NotFound", "no status subresource")};
    if (next.contains("status"))
      result["status"] = next["status"];
    else
      result.erase("status");
  } else if (!sub.empty()) {
    return {404, StatusBody(404, "NotFound", absl::StrCat("no subresource ", sub))};
  } else {
    // Immutable/system metadata stays; user metadata and everything else replaced.
    Json md = cur["metadata"];
    for (const char* k : {"labels", "annotations", "finalizers", "ownerReferences"}) {
      if (next["metadata"].contains(k))
        md[k] = next["metadata"][k];
      else
        md.erase(k);
    }
    Json status = cur.contains("status") ? cur["status"] : Json();
    bool spec_changed = next.value("spec", Json()) != cur.value("spec", Json());
    result = next;
    result["metadata"] = md;
    if (has_status) {
      if (status.is_null())
        result.erase("status");
      else
        result["status"] = status;
    }
    if (spec_changed) result["metadata"]["generation"] = cur["metadata"].value("generation", 1) + 1;
    // Finalizers emptied on an object being deleted: it goes now.
    if (md.contains("deletionTimestamp") && (!md.contains("finalizers") || md["finalizers"].empty())) {
      cur = result;
      Json copy = result;
      RemoveLocked(collection, name);
      return {200, copy};
    }
  }
  if (result == cur) return {200, cur};  // no-op writes keep the resourceVersion
  result["metadata"]["resourceVersion"] = std::to_string(++rv_);
  cur = result;
  Record(collection, "MODIFIED", cur);
  return {200, cur};
}

bool MakeSelfSignedCert(const std::string& dir, std::string* cert_file, std::string* key_file) {
  *cert_file = dir + "/server.crt";
  *key_file = dir + "/server.key";
  std::string cmd =
      absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -keyout ", *key_file,
                   " -out ", *cert_file, " -addext subjectAltName=IP:127.0.0.1,DNS:localhost >/dev/null 2>&1");
  return std::system(cmd.c_str()) == 0;
}

}  // namespace loom::deploy::operator_::testing
