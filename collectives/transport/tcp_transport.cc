#include "collectives/transport/tcp_transport.h"

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::collectives::transport {
namespace {

constexpr uint32_t kHelloMagic = 0x4c4f4f4d;  // "LOOM"
constexpr size_t kInlineFrame = 64 << 10;
// Unexpected frames this large wait up to kWaitForPost for their receive.
constexpr size_t kWaitForPostBytes = 256 << 10;
constexpr absl::Duration kWaitForPost = absl::Milliseconds(200);

class DoneRequest : public TransportRequest {
 public:
  absl::Status Wait(absl::Time) override { return absl::OkStatus(); }
};

void PutU64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint64_t GetU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

class TcpRecvRequest : public TransportRequest {
 public:
  TcpRecvRequest(TcpTransport* t, std::shared_ptr<TcpTransport::PostedRecv> r)
      : t_(t), r_(std::move(r)) {}
  ~TcpRecvRequest() override {
    // An abandoned, unmatched receive is withdrawn so no thread writes into it later.
    absl::MutexLock l(&t_->mu_);
    if (r_->done) return;
    auto& q = t_->peers_[r_->peer]->posted;
    for (auto it = q.begin(); it != q.end(); ++it) {
      if (it->get() == r_.get()) {
        q.erase(it);
        break;
      }
    }
  }
  absl::Status Wait(absl::Time deadline) override { return t_->WaitRecv(r_.get(), deadline); }

 private:
  TcpTransport* t_;
  std::shared_ptr<TcpTransport::PostedRecv> r_;
};

absl::StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::Connect(std::shared_ptr<store::Store> store, int rank,
                                                                    int size, Options o) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("TcpTransport: rank ", rank, " / size ", size));
  }
  if (o.socket_buffer_bytes != internal::kAutoSocketBuffer &&
      (o.socket_buffer_bytes < 0 || o.socket_buffer_bytes > internal::kMaxSocketBuffer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tcp_socket_buffer_bytes: expected ", internal::kAutoSocketBuffer,
                     " (automatic), 0 (the kernel's autotuning) or a byte count up to 1 GiB, got ",
                     o.socket_buffer_bytes));
  }
  std::unique_ptr<TcpTransport> t(new TcpTransport(rank, size));
  for (auto& p : t->peers_) p = std::make_unique<Peer>();
  absl::Time deadline = absl::Now() + o.timeout;
  int port = 0;
  LOOM_ASSIGN_OR_RETURN(internal::Fd listener, internal::Listen(o.host, 0, &port));
  LOOM_RETURN_IF_ERROR(store->Set(absl::StrCat("tcp/", rank), absl::StrCat(o.host, ":", port)));
  // Connect to lower ranks.
  for (int j = 0; j < rank; ++j) {
    auto addr = store->WaitGet(absl::StrCat("tcp/", j), deadline - absl::Now());
    if (!addr.ok()) return Annotate(addr.status(), absl::StrCat("tcp transport: address of rank ", j));
    std::string host;
    int p;
    LOOM_RETURN_IF_ERROR(internal::SplitHostPort(*addr, &host, &p));
    auto fd = internal::Connect(host, p, deadline, o.socket_buffer_bytes);
    if (!fd.ok()) return Annotate(fd.status(), absl::StrCat("tcp transport: connect to rank ", j));
    uint32_t hello[3] = {kHelloMagic, static_cast<uint32_t>(rank), static_cast<uint32_t>(size)};
    LOOM_RETURN_IF_ERROR(internal::SendAll(fd->get(), hello, sizeof(hello), deadline));
    t->peers_[j]->fd = std::move(*fd);
  }
  // Accept higher ranks.
  for (int k = rank + 1; k < size; ++k) {
    auto fd = internal::Accept(listener, deadline, o.socket_buffer_bytes);
    if (!fd.ok()) {
      return Annotate(fd.status(), absl::StrCat("tcp transport: rank ", rank, " waiting for ",
                                                size - k, " higher rank(s) to connect"));
    }
    uint32_t hello[3];
    LOOM_RETURN_IF_ERROR(internal::RecvAll(fd->get(), hello, sizeof(hello), deadline));
    int from = static_cast<int>(hello[1]);
    if (hello[0] != kHelloMagic || static_cast<int>(hello[2]) != size || from <= rank ||
        from >= size || t->peers_[from]->fd.valid()) {
      return absl::FailedPreconditionError(
          absl::StrCat("tcp transport: bad hello from a peer claiming rank ", from));
    }
    t->peers_[from]->fd = std::move(*fd);
  }
  for (int j = 0; j < size; ++j) {
    if (j == rank) continue;
    t->peers_[j]->receiver = std::thread([p = t.get(), j] { p->ReceiveLoop(j); });
  }
  return t;
}

TcpTransport::~TcpTransport() { Abort(absl::CancelledError("tcp transport destroyed")); }

void TcpTransport::FailPeer(int peer, const absl::Status& s) {
  Peer& p = *peers_[peer];
  if (p.broken.ok()) p.broken = s;
  for (auto& r : p.posted) {
    r->done = true;
    r->status = s;
  }
  p.posted.clear();
  cv_.SignalAll();
}

void TcpTransport::Abort(const absl::Status& reason) {
  {
    absl::MutexLock l(&mu_);
    if (aborted_.ok()) {
      aborted_ = reason.ok() ? absl::CancelledError("aborted") : reason;
      for (int j = 0; j < size_; ++j) {
        if (j != rank_) FailPeer(j, aborted_);
      }
    }
  }
  absl::MutexLock jl(&join_mu_);
  if (joined_) return;
  for (auto& p : peers_) p->fd.Shutdown();
  for (auto& p : peers_) {
    if (p->receiver.joinable()) p->receiver.join();
  }
  joined_ = true;
}

void TcpTransport::ReceiveLoop(int peer) {
  Peer& p = *peers_[peer];
  const int fd = p.fd.get();
  auto lost = [&](const absl::Status& s) {
    absl::MutexLock l(&mu_);
    FailPeer(peer, absl::UnavailableError(absl::StrCat("tcp transport: connection to rank ", peer,
                                                       " lost (peer died or aborted): ", s.message())));
  };
  while (true) {
    char hdr[16];
    absl::Status s = internal::RecvAll(fd, hdr, 16, absl::InfiniteFuture());
    if (!s.ok()) return lost(s);
    uint64_t tag = GetU64(hdr), len = GetU64(hdr + 8);
    std::shared_ptr<PostedRecv> match;
    {
      absl::MutexLock l(&mu_);
      for (auto it = p.posted.begin(); it != p.posted.end(); ++it) {
        if ((*it)->tag == tag) {
          match = *it;
          p.posted.erase(it);
          break;
        }
      }
    }
    if (match && match->n == len) {
      s = internal::RecvAll(fd, match->data, len, absl::InfiniteFuture());
      absl::MutexLock l(&mu_);
      match->done = true;
      match->status = s.ok() ? s : absl::UnavailableError(absl::StrCat(
          "tcp transport: connection to rank ", peer, " lost mid-message: ", s.message()));
      cv_.SignalAll();
      if (!s.ok()) {
        FailPeer(peer, match->status);
        return;
      }
      continue;
    }
    if (!match && len >= kWaitForPostBytes) {
      // A large message ahead of its receive: give the receiver a moment to
      // post it (the sender is held back by the socket meanwhile), so the
      // payload lands in place instead of being buffered and copied again.
      absl::MutexLock l(&mu_);
      absl::Time until = absl::Now() + kWaitForPost;
      while (!match && aborted_.ok() && absl::Now() < until) {
        for (auto it = p.posted.begin(); it != p.posted.end(); ++it) {
          if ((*it)->tag == tag) {
            match = *it;
            p.posted.erase(it);
            break;
          }
        }
        if (!match) cv_.WaitWithDeadline(&mu_, until);
      }
    }
    if (match && match->n == len) {
      s = internal::RecvAll(fd, match->data, len, absl::InfiniteFuture());
      absl::MutexLock l(&mu_);
      match->done = true;
      match->status = s.ok() ? s : absl::UnavailableError(absl::StrCat(
          "tcp transport: connection to rank ", peer, " lost mid-message: ", s.message()));
      cv_.SignalAll();
      if (!s.ok()) {
        FailPeer(peer, match->status);
        return;
      }
      continue;
    }
    std::string buf(len, '\0');
    s = internal::RecvAll(fd, buf.data(), len, absl::InfiniteFuture());
    if (!s.ok()) {
      if (match) {
        absl::MutexLock l(&mu_);
        match->done = true;
        match->status = absl::UnavailableError("tcp transport: connection lost");
      }
      return lost(s);
    }
    absl::MutexLock l(&mu_);
    if (match) {  // size mismatch: a protocol error between the ranks
      match->done = true;
      match->status = absl::InternalError(absl::StrCat("tcp transport: rank ", peer, " sent ", len,
                                                       " bytes with tag ", tag, ", receiver expected ",
                                                       match->n));
      cv_.SignalAll();
      continue;
    }
    // A receive may have been posted while the payload was read.
    for (auto it = p.posted.begin(); it != p.posted.end(); ++it) {
      if ((*it)->tag == tag) {
        match = *it;
        p.posted.erase(it);
        break;
      }
    }
    if (match) {
      match->done = true;
      if (match->n == len) {
        if (len) std::memcpy(match->data, buf.data(), len);
      } else {
        match->status = absl::InternalError(absl::StrCat("tcp transport: rank ", peer, " sent ", len,
                                                         " bytes, receiver expected ", match->n));
      }
      cv_.SignalAll();
    } else {
      p.unexpected.emplace_back(tag, std::move(buf));
    }
  }
}

absl::StatusOr<std::unique_ptr<TransportRequest>> TcpTransport::ISend(int peer, uint64_t tag,
                                                                      const void* data, size_t n,
                                                                      absl::Time deadline) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat("tcp transport: send: bad peer ", peer));
  }
  Peer& p = *peers_[peer];
  {
    absl::MutexLock l(&mu_);
    if (!aborted_.ok()) return aborted_;
    if (!p.broken.ok()) return p.broken;
  }
  absl::MutexLock sl(&p.send_mu);
  char hdr[16];
  PutU64(hdr, tag);
  PutU64(hdr + 8, n);
  absl::Status s;
  if (n <= kInlineFrame) {
    char frame[16 + kInlineFrame];
    std::memcpy(frame, hdr, 16);
    if (n) std::memcpy(frame + 16, data, n);
    s = internal::SendAll(p.fd.get(), frame, 16 + n, deadline);
  } else {
    s = internal::SendAll(p.fd.get(), hdr, 16, deadline);
    if (s.ok()) s = internal::SendAll(p.fd.get(), data, n, deadline);
  }
  if (!s.ok()) {
    absl::Status e = absl::IsDeadlineExceeded(s)
                         ? absl::DeadlineExceededError(absl::StrCat(
                               "tcp transport: send of ", n, " bytes to rank ", peer, " timed out"))
                         : absl::UnavailableError(absl::StrCat("tcp transport: send to rank ", peer,
                                                               " failed (peer died?): ", s.message()));
    absl::MutexLock l(&mu_);
    FailPeer(peer, e);  // a partial frame leaves the stream unusable
    return e;
  }
  return std::unique_ptr<TransportRequest>(new DoneRequest());
}

absl::StatusOr<std::unique_ptr<TransportRequest>> TcpTransport::IRecv(int peer, uint64_t tag,
                                                                      void* data, size_t n) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat("tcp transport: recv: bad peer ", peer));
  }
  Peer& p = *peers_[peer];
  absl::MutexLock l(&mu_);
  if (!aborted_.ok()) return aborted_;
  for (auto it = p.unexpected.begin(); it != p.unexpected.end(); ++it) {
    if (it->first != tag) continue;
    if (it->second.size() != n) {
      return absl::InternalError(absl::StrCat("tcp transport: rank ", peer, " sent ",
                                              it->second.size(), " bytes with tag ", tag,
                                              ", receiver expected ", n));
    }
    if (n) std::memcpy(data, it->second.data(), n);
    p.unexpected.erase(it);
    return std::unique_ptr<TransportRequest>(new DoneRequest());
  }
  if (!p.broken.ok()) return p.broken;
  auto r = std::make_shared<PostedRecv>();
  r->tag = tag;
  r->data = data;
  r->n = n;
  r->peer = peer;
  p.posted.push_back(r);
  cv_.SignalAll();  // a receiver thread may be holding a large message for it
  return std::unique_ptr<TransportRequest>(new TcpRecvRequest(this, std::move(r)));
}

absl::Status TcpTransport::WaitRecv(PostedRecv* r, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  while (!r->done) {
    if (cv_.WaitWithDeadline(&mu_, deadline) && !r->done && absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("tcp transport: receive from rank ", r->peer,
                                                      " (tag ", r->tag, ", ", r->n,
                                                      " bytes) timed out"));
    }
  }
  return r->status;
}

}  // namespace loom::collectives::transport
