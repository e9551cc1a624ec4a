#include "collectives/store/tcp_store.h"

#include <algorithm>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::collectives::store {

using wire::Decoder;
using wire::Encoder;

absl::StatusOr<std::shared_ptr<TcpStore>> TcpStore::Connect(absl::string_view address,
                                                            absl::string_view secret,
                                                            Options options) {
  std::string host;
  int port;
  absl::Status s = internal::SplitHostPort(address, &host, &port);
  if (!s.ok()) return s;
  absl::Time deadline = absl::Now() + options.connect_timeout;
  absl::Duration backoff = absl::Milliseconds(20);
  while (true) {
    auto fd = internal::Connect(host, port, deadline);
    if (!fd.ok()) return Annotate(fd.status(), address);
    std::shared_ptr<TcpStore> store(new TcpStore(std::move(*fd), options));
    store->address_ = std::string(address);
    Encoder hello;
    hello.U8(wire::kHello).Str(secret);
    auto r = store->Call(hello.bytes(), deadline);
    if (r.ok()) return store;
    if (!options.retry_refused_secret || !absl::IsPermissionDenied(r.status()) ||
        absl::Now() + backoff >= deadline) {
      return r.status();
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(500));
  }
}

absl::StatusOr<std::shared_ptr<TcpStore>> TcpStore::FromEnv(Options options) {
  const char* addr = std::getenv("LOOM_STORE_ADDR");
  const char* secret = std::getenv("LOOM_STORE_SECRET");
  if (addr == nullptr || secret == nullptr) {
    return absl::FailedPreconditionError("TcpStore::FromEnv: LOOM_STORE_ADDR and LOOM_STORE_SECRET must be set");
  }
  return Connect(addr, secret, options);
}

absl::StatusOr<std::string> TcpStore::Call(const std::string& request, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  if (!fd_.valid()) return absl::UnavailableError(absl::StrCat("store ", address_, ": connection closed"));
  absl::Status s = wire::WriteFrame(fd_.get(), request, options_.max_message_bytes, deadline);
  if (absl::IsResourceExhausted(s)) return s;  // nothing was sent: the connection is still good
  std::string resp;
  if (s.ok()) s = wire::ReadFrame(fd_.get(), &resp, options_.max_message_bytes, deadline);
  if (!s.ok()) {
    fd_.Reset();  // a half-done exchange leaves the stream out of step
    return Annotate(s, absl::StrCat("store ", address_));
  }
  if (resp.empty()) return absl::InternalError("store: empty response");
  auto code = static_cast<absl::StatusCode>(static_cast<uint8_t>(resp[0]));
  if (code != absl::StatusCode::kOk) {
    Decoder d(absl::string_view(resp).substr(1));
    std::string msg = d.Str();
    if (code == absl::StatusCode::kPermissionDenied || code == absl::StatusCode::kResourceExhausted) {
      fd_.Reset();  // the server closes the connection after these
    }
    return absl::Status(code, msg);
  }
  return resp.substr(1);
}

absl::Status TcpStore::Set(absl::string_view key, absl::string_view value) {
  Encoder e;
  e.U8(wire::kSet).Str(key).Str(value);
  return Call(e.bytes(), absl::Now() + options_.request_timeout).status();
}

absl::StatusOr<std::string> TcpStore::Get(absl::string_view key) {
  Encoder e;
  e.U8(wire::kGet).Str(key);
  auto r = Call(e.bytes(), absl::Now() + options_.request_timeout);
  if (!r.ok()) return r.status();
  Decoder d(*r);
  std::string v = d.Str();
  if (!d.done()) return absl::InternalError("store: malformed get response");
  return v;
}

absl::StatusOr<int64_t> TcpStore::Add(absl::string_view key, int64_t delta) {
  Encoder e;
  e.U8(wire::kAdd).Str(key).I64(delta);
  auto r = Call(e.bytes(), absl::Now() + options_.request_timeout);
  if (!r.ok()) return r.status();
  Decoder d(*r);
  int64_t v = d.I64();
  if (!d.done()) return absl::InternalError("store: malformed add response");
  return v;
}

absl::Status TcpStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  Encoder e;
  e.U8(wire::kWait).List(std::vector<std::string>(keys.begin(), keys.end()));
  e.I64(absl::ToInt64Milliseconds(timeout));
  return Call(e.bytes(), absl::Now() + timeout + absl::Seconds(5)).status();
}

absl::StatusOr<std::string> TcpStore::CompareAndSet(absl::string_view key, absl::string_view expected,
                                                    absl::string_view desired) {
  Encoder e;
  e.U8(wire::kCompareAndSet).Str(key).Str(expected).Str(desired);
  auto r = Call(e.bytes(), absl::Now() + options_.request_timeout);
  if (!r.ok()) return r.status();
  Decoder d(*r);
  std::string v = d.Str();
  if (!d.done()) return absl::InternalError("store: malformed compare_and_set response");
  return v;
}

absl::StatusOr<bool> TcpStore::Delete(absl::string_view key) {
  Encoder e;
  e.U8(wire::kDelete).Str(key);
  auto r = Call(e.bytes(), absl::Now() + options_.request_timeout);
  if (!r.ok()) return r.status();
  Decoder d(*r);
  int64_t v = d.I64();
  if (!d.done()) return absl::InternalError("store: malformed delete response");
  return v != 0;
}

absl::StatusOr<std::vector<std::string>> TcpStore::List(absl::string_view prefix) {
  Encoder e;
  e.U8(wire::kList).Str(prefix);
  auto r = Call(e.bytes(), absl::Now() + options_.request_timeout);
  if (!r.ok()) return r.status();
  Decoder d(*r);
  std::vector<std::string> v = d.List();
  if (!d.done()) return absl::InternalError("store: malformed list response");
  return v;
}

absl::StatusOr<int64_t> TcpStore::DeletePrefix(absl::string_view prefix) {
  Encoder e;
  e.U8(wire::kDeletePrefix).Str(prefix);
  auto r = Call(e.bytes(), absl::Now() + options_.request_timeout);
  if (!r.ok()) return r.status();
  Decoder d(*r);
  int64_t v = d.I64();
  if (!d.done()) return absl::InternalError("store: malformed delete_prefix response");
  return v;
}

}  // namespace loom::collectives::store
