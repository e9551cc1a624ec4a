#include "collectives/store/store_server.h"

#include <algorithm>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom::collectives::store {
namespace {

using wire::Decoder;
using wire::Encoder;

std::string ErrorResponse(const absl::Status& s) {
  Encoder e;
  e.U8(static_cast<uint8_t>(s.code())).Str(s.message());
  return e.bytes();
}

// Success: status byte 0, then the op's fields.
Encoder OkResponse() {
  Encoder e;
  e.U8(0);
  return e;
}

std::string Malformed(uint8_t op) {
  return ErrorResponse(absl::InvalidArgumentError(absl::StrCat("store: malformed request (op ", op, ")")));
}

bool KeyOk(const std::string& k) { return k.size() <= wire::kMaxKeyBytes; }

bool SecretsEqual(absl::string_view a, absl::string_view b) {
  // Constant time in the length of `a` (the presented secret).
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ (i < b.size() ? b[i] : 0);
  return diff == 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(Options options) {
  std::unique_ptr<StoreServer> s(new StoreServer(std::move(options)));
  auto l = internal::Listen(s->options_.host, s->options_.port, &s->port_);
  if (!l.ok()) return l.status();
  s->listener_ = std::move(*l);
  s->accept_thread_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

std::optional<std::string> StoreServer::Namespace(absl::string_view secret) {
  if (!options_.secret.empty() && SecretsEqual(secret, options_.secret)) return std::string();
  absl::MutexLock l(&tenant_mu_);
  std::optional<std::string> found;
  for (const auto& [sec, ns] : tenants_)  // every entry compared: no early exit on a match
    if (SecretsEqual(secret, sec)) found = ns;
  return found;
}

absl::Status StoreServer::AddTenant(const std::string& secret, const std::string& key_namespace) {
  if (secret.size() < 16) return absl::InvalidArgumentError("StoreServer::AddTenant: secret: needs at least 16 bytes");
  if (key_namespace.empty()) return absl::InvalidArgumentError("StoreServer::AddTenant: key_namespace: must not be empty");
  absl::MutexLock l(&tenant_mu_);
  for (const auto& [sec, ns] : tenants_) {
    if (ns == key_namespace && sec != secret)
      return absl::AlreadyExistsError(absl::StrCat("StoreServer::AddTenant: namespace '", key_namespace, "' is taken"));
  }
  tenants_[secret] = key_namespace;
  return absl::OkStatus();
}

void StoreServer::RemoveTenant(const std::string& secret) {
  std::string ns;
  {
    absl::MutexLock l(&tenant_mu_);
    auto it = tenants_.find(secret);
    if (it == tenants_.end()) return;
    ns = it->second;
    tenants_.erase(it);
  }
  absl::MutexLock l(&mu_);
  for (auto it = data_.begin(); it != data_.end();) {
    if (absl::StartsWith(it->first, ns)) {
      data_.erase(it++);
    } else {
      ++it;
    }
  }
}

std::string StoreServer::address() const { return absl::StrCat(options_.host, ":", port_); }

StoreServer::~StoreServer() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  listener_.Shutdown();
  accept_thread_.join();
  std::vector<std::thread> threads;
  {
    absl::MutexLock l(&conn_mu_);
    for (auto& c : conns_) c->Shutdown();
    threads.swap(conn_threads_);
  }
  for (auto& t : threads) t.join();
}

void StoreServer::AcceptLoop() {
  while (true) {
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
    }
    auto c = internal::Accept(listener_, absl::Now() + absl::Milliseconds(200));
    if (!c.ok()) {
      if (absl::IsDeadlineExceeded(c.status())) continue;
      return;
    }
    absl::MutexLock l(&conn_mu_);
    conns_.push_back(std::make_unique<internal::Fd>(std::move(*c)));
    int index = static_cast<int>(conns_.size()) - 1;
    conn_threads_.emplace_back([this, index] { Serve(index); });
  }
}

void StoreServer::Serve(int conn_index) {
  int fd;
  {
    absl::MutexLock l(&conn_mu_);
    fd = conns_[conn_index]->get();
  }
  const size_t max = options_.max_message_bytes;
  std::string req;
  std::string ns;  // the key namespace of the presented secret
  // Authenticate: the first frame must be kHello with the secret.
  absl::Status s = wire::ReadFrame(fd, &req, max, absl::Now() + absl::Seconds(30));
  if (!s.ok()) {
    if (absl::IsResourceExhausted(s)) (void)wire::WriteFrame(fd, ErrorResponse(s), max, absl::Now() + absl::Seconds(1));
    internal::Fd* c;
    { absl::MutexLock l(&conn_mu_); c = conns_[conn_index].get(); }
    c->Shutdown();
    return;
  }
  {
    Decoder d(req);
    uint8_t op = d.U8();
    std::string secret = d.Str();
    std::optional<std::string> tenant = op == wire::kHello && d.done() ? Namespace(secret) : std::nullopt;
    if (!tenant.has_value()) {
      absl::Status denied =
          absl::PermissionDeniedError(op != wire::kHello ? "store: first request must present the job secret"
                                                         : "store: wrong job secret; connection refused");
      (void)wire::WriteFrame(fd, ErrorResponse(denied), max, absl::Now() + absl::Seconds(1));
      absl::MutexLock l(&conn_mu_);
      conns_[conn_index]->Shutdown();
      return;
    }
    ns = *tenant;
    Encoder ok;
    ok.U8(0);
    if (!wire::WriteFrame(fd, ok.bytes(), max, absl::InfiniteFuture()).ok()) return;
  }
  while (true) {
    s = wire::ReadFrame(fd, &req, max, absl::InfiniteFuture());
    if (!s.ok()) {
      if (absl::IsResourceExhausted(s)) {
        (void)wire::WriteFrame(fd, ErrorResponse(s), max, absl::Now() + absl::Seconds(1));
      }
      break;
    }
    std::string resp = Handle(req, ns);
    if (!wire::WriteFrame(fd, resp, max, absl::InfiniteFuture()).ok()) break;
  }
  absl::MutexLock l(&conn_mu_);
  conns_[conn_index]->Shutdown();
}

std::string StoreServer::Handle(absl::string_view request, const std::string& ns) {
  Decoder d(request);
  uint8_t op = d.U8();
  switch (op) {
    case wire::kSet:
      return HandleSet(d, ns);
    case wire::kGet:
      return HandleGet(d, ns);
    case wire::kAdd:
      return HandleAdd(d, ns);
    case wire::kWait:
      return HandleWait(d, ns);
    case wire::kCompareAndSet:
      return HandleCompareAndSet(d, ns);
    case wire::kDelete:
      return HandleDelete(d, ns);
    case wire::kList:
      return HandleList(d, ns);
    case wire::kDeletePrefix:
      return HandleDeletePrefix(d, ns);
    default:
      return ErrorResponse(absl::InvalidArgumentError(absl::StrCat("store: unknown op ", op)));
  }
}

std::string StoreServer::HandleSet(Decoder& d, const std::string& ns) {
  std::string k = d.Str(), v = d.Str();
  if (!d.done() || !KeyOk(k)) return Malformed(wire::kSet);
  absl::MutexLock l(&mu_);
  data_[ns + k] = std::move(v);
  cv_.SignalAll();
  return OkResponse().bytes();
}

std::string StoreServer::HandleGet(Decoder& d, const std::string& ns) {
  std::string k = d.Str();
  if (!d.done()) return Malformed(wire::kGet);
  absl::MutexLock l(&mu_);
  auto it = data_.find(ns + k);
  if (it == data_.end()) return ErrorResponse(absl::NotFoundError(absl::StrCat("store: key '", k, "' not found")));
  return OkResponse().Str(it->second).bytes();
}

std::string StoreServer::HandleAdd(Decoder& d, const std::string& ns) {
  std::string k = d.Str();
  int64_t delta = d.I64();
  if (!d.done() || !KeyOk(k)) return Malformed(wire::kAdd);
  absl::MutexLock l(&mu_);
  int64_t cur = 0;
  auto it = data_.find(ns + k);
  if (it != data_.end() && !absl::SimpleAtoi(it->second, &cur)) {
    return ErrorResponse(absl::InvalidArgumentError(absl::StrCat("store: add: key '", k, "' does not hold an integer")));
  }
  cur += delta;
  data_[ns + k] = absl::StrCat(cur);
  cv_.SignalAll();
  return OkResponse().I64(cur).bytes();
}

std::string StoreServer::HandleWait(Decoder& d, const std::string& ns) {
  std::vector<std::string> keys = d.List();
  int64_t timeout_ms = d.I64();
  if (!d.done()) return Malformed(wire::kWait);
  absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
  absl::MutexLock l(&mu_);
  auto ready = [&]() {
    if (stopping_) return true;
    for (const auto& k : keys) if (!data_.contains(ns + k)) return false;
    return true;
  };
  while (!ready()) {
    cv_.WaitWithDeadline(&mu_, deadline);
    if (!ready() && absl::Now() >= deadline) {
      std::vector<std::string> missing;
      for (const auto& k : keys) if (!data_.contains(ns + k)) missing.push_back(k);
      return ErrorResponse(absl::DeadlineExceededError(absl::StrCat(
          "store: wait timed out after ", timeout_ms, " ms; missing keys: ", absl::StrJoin(missing, ", "))));
    }
  }
  if (stopping_) return ErrorResponse(absl::UnavailableError("store: server shutting down"));
  return OkResponse().bytes();
}

std::string StoreServer::HandleCompareAndSet(Decoder& d, const std::string& ns) {
  std::string k = d.Str(), expected = d.Str(), desired = d.Str();
  if (!d.done() || !KeyOk(k)) return Malformed(wire::kCompareAndSet);
  absl::MutexLock l(&mu_);
  auto it = data_.find(ns + k);
  std::string cur = it == data_.end() ? std::string() : it->second;
  if (cur == expected) {
    data_[ns + k] = desired;
    cur = desired;
    cv_.SignalAll();
  }
  return OkResponse().Str(cur).bytes();
}

std::string StoreServer::HandleDelete(Decoder& d, const std::string& ns) {
  std::string k = d.Str();
  if (!d.done()) return Malformed(wire::kDelete);
  absl::MutexLock l(&mu_);
  return OkResponse().I64(data_.erase(ns + k) ? 1 : 0).bytes();
}

std::string StoreServer::HandleList(Decoder& d, const std::string& ns) {
  std::string p = d.Str();
  if (!d.done()) return Malformed(wire::kList);
  std::vector<std::string> keys;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [k, v] : data_) {
      if (absl::StartsWith(k, ns + p)) keys.push_back(k.substr(ns.size()));
    }
  }
  std::sort(keys.begin(), keys.end());
  Encoder out = OkResponse();
  out.List(keys);
  if (out.bytes().size() > options_.max_message_bytes) {
    return ErrorResponse(absl::ResourceExhaustedError("store: list: reply exceeds the message limit"));
  }
  return out.bytes();
}

std::string StoreServer::HandleDeletePrefix(Decoder& d, const std::string& ns) {
  std::string p = d.Str();
  if (!d.done()) return Malformed(wire::kDeletePrefix);
  absl::MutexLock l(&mu_);
  int64_t n = 0;
  for (auto it = data_.begin(); it != data_.end();) {
    if (absl::StartsWith(it->first, ns + p)) {
      data_.erase(it++);
      ++n;
    } else {
      ++it;
    }
  }
  return OkResponse().I64(n).bytes();
}

}  // namespace loom::collectives::store
