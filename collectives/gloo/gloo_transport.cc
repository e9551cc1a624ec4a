#include "collectives/gloo/gloo_transport.h"

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gloo/context.h"
#include "gloo/transport/unbound_buffer.h"

namespace loom::collectives::gloo {
namespace {

std::chrono::milliseconds Remaining(absl::Time deadline) {
  int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return std::chrono::milliseconds(ms < 1 ? 1 : ms);
}

class GlooRequest : public transport::TransportRequest {
 public:
  GlooRequest(std::unique_ptr<::gloo::transport::UnboundBuffer> buf, bool is_send, int peer, uint64_t tag)
      : buf_(std::move(buf)), is_send_(is_send), peer_(peer), tag_(tag) {}
  char* scratch() { return &scratch_; }
  void set_buffer(std::unique_ptr<::gloo::transport::UnboundBuffer> b) { buf_ = std::move(b); }
  absl::Status Wait(absl::Time deadline) override {
    std::string what = absl::StrCat("gloo transport: ", is_send_ ? "send to" : "receive from", " rank ",
                                    peer_, " (tag ", tag_, ")");
    try {
      bool ok = is_send_ ? buf_->waitSend(nullptr, Remaining(deadline))
                         : buf_->waitRecv(nullptr, Remaining(deadline));
      if (!ok) return absl::CancelledError(absl::StrCat(what, ": aborted"));
    } catch (const std::exception& e) {
      return GlooError(what, e);
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<::gloo::transport::UnboundBuffer> buf_;
  bool is_send_;
  int peer_;
  uint64_t tag_;
  char scratch_ = 0;  // landing place of a zero-byte message's dummy byte
};

}  // namespace

absl::Status GlooError(absl::string_view what, const std::exception& e) {
  std::string msg = e.what();
  if (absl::StrContains(msg, "Timed out") || absl::StrContains(msg, "timed out")) {
    return absl::DeadlineExceededError(absl::StrCat(what, ": ", msg));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", msg));
}

GlooTransport::GlooTransport(std::shared_ptr<::gloo::Context> context)
    : context_(std::move(context)), rank_(context_->rank), size_(context_->size) {}

absl::Status GlooTransport::aborted() {
  absl::MutexLock l(&mu_);
  return aborted_;
}

void GlooTransport::Abort(const absl::Status& reason) {
  absl::MutexLock l(&mu_);
  if (aborted_.ok()) aborted_ = reason.ok() ? absl::CancelledError("aborted") : reason;
}

absl::StatusOr<std::unique_ptr<transport::TransportRequest>> GlooTransport::ISend(int peer, uint64_t tag,
                                                                                  const void* data, size_t n,
                                                                                  absl::Time) {
  if (absl::Status a = aborted(); !a.ok()) return a;
  // Gloo's pairs do not complete zero-byte messages: carry one dummy byte.
  static char kZero = 0;
  if (n == 0) data = &kZero;
  try {
    auto buf = context_->createUnboundBuffer(const_cast<void*>(data), n ? n : 1);
    buf->send(peer, tag, 0, n ? n : 1);
    return std::unique_ptr<transport::TransportRequest>(new GlooRequest(std::move(buf), true, peer, tag));
  } catch (const std::exception& e) {
    return GlooError(absl::StrCat("gloo transport: send to rank ", peer), e);
  }
}

absl::StatusOr<std::unique_ptr<transport::TransportRequest>> GlooTransport::IRecv(int peer, uint64_t tag, void* data,
                                                                                  size_t n) {
  if (absl::Status a = aborted(); !a.ok()) return a;
  try {
    auto req = std::make_unique<GlooRequest>(nullptr, false, peer, tag);
    if (n == 0) data = req->scratch();
    auto buf = context_->createUnboundBuffer(data, n ? n : 1);
    buf->recv(peer, tag, 0, n ? n : 1);
    req->set_buffer(std::move(buf));
    return std::unique_ptr<transport::TransportRequest>(std::move(req));
  } catch (const std::exception& e) {
    return GlooError(absl::StrCat("gloo transport: receive from rank ", peer), e);
  }
}

}  // namespace loom::collectives::gloo
