#include "collectives/ucx/ucx_transport.h"

#include <sched.h>
#include <ucp/api/ucp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::collectives::ucx {

struct UcxTransport::Impl {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::vector<ucp_ep_h> eps;
  struct PeerState {
    Impl* impl;
    int rank;
    absl::Status broken;  // guarded by mu
  };
  std::vector<std::unique_ptr<PeerState>> peers;
  absl::Mutex mu;
  absl::Status aborted ABSL_GUARDED_BY(mu);
  int rank = 0;

  // Progresses until `req` completes. Returns the UCX status.
  ucs_status_t Progress(void* req, absl::Time deadline, bool* timed_out,
                        absl::Status* aborted_out = nullptr) {
    int idle = 0;
    uint64_t spins = 0;
    *timed_out = false;
    while (true) {
      ucs_status_t st;
      {
        absl::MutexLock l(&mu);
        unsigned n = ucp_worker_progress(worker);
        st = ucp_request_check_status(req);
        if (st != UCS_INPROGRESS) return st;
        // Aborted (e.g. by another channel of the same op): stop waiting; the
        // request's owner cancels it. Cleanup passes no `aborted_out`.
        if (aborted_out != nullptr && !aborted.ok()) {
          *aborted_out = aborted;
          return UCS_INPROGRESS;
        }
        idle = n ? 0 : idle + 1;
      }
      // The deadline is checked even while progress keeps finding events.
      if ((++spins & 255) == 0 && absl::Now() >= deadline) {
        *timed_out = true;
        return UCS_INPROGRESS;
      }
      if (idle > 64) {
        if (absl::Now() >= deadline) {
          *timed_out = true;
          return UCS_INPROGRESS;
        }
        if (idle > 4096) {
          absl::SleepFor(absl::Microseconds(20));
        } else {
          sched_yield();
        }
      }
    }
  }

  // Cancels a pending request and waits (bounded) until UCX lets go of its
  // buffer. Sends cannot be cancelled in UCP: they are released to complete on
  // their own (UCX may still read the buffer until the endpoint closes).
  void CancelAndFree(void* req, bool is_send) {
    if (is_send) {
      absl::MutexLock l(&mu);
      ucp_request_free(req);
      return;
    }
    {
      absl::MutexLock l(&mu);
      if (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_request_cancel(worker, req);
    }
    bool timed_out;
    Progress(req, absl::Now() + absl::Seconds(2), &timed_out);
    absl::MutexLock l(&mu);
    ucp_request_free(req);
  }
};

namespace {

void ErrorHandler(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* p = static_cast<UcxTransport::Impl::PeerState*>(arg);
  // Called from inside ucp_worker_progress, i.e. with impl->mu held.
  if (p->broken.ok()) {
    p->broken = absl::UnavailableError(absl::StrCat("ucx transport: connection to rank ", p->rank,
                                                    " failed (peer died?): ", ucs_status_string(status)));
  }
}

class UcxRequest : public transport::TransportRequest {
 public:
  UcxRequest(UcxTransport::Impl* impl, void* req, bool is_send, int peer, uint64_t tag, size_t n)
      : impl_(impl), req_(req), is_send_(is_send), peer_(peer), tag_(tag), n_(n) {}
  ~UcxRequest() override {
    if (req_ != nullptr) impl_->CancelAndFree(req_, is_send_);
  }
  absl::Status Wait(absl::Time deadline) override {
    if (req_ == nullptr) return done_;
    bool timed_out;
    absl::Status aborted;
    ucs_status_t st = impl_->Progress(req_, deadline, &timed_out, &aborted);
    std::string what = absl::StrCat("ucx transport: ", is_send_ ? "send to" : "receive from", " rank ",
                                    peer_, " (tag ", tag_, ", ", n_, " bytes)");
    if (!aborted.ok()) return aborted;  // the request stays pending; ~UcxRequest cancels it
    if (timed_out) return absl::DeadlineExceededError(absl::StrCat(what, " timed out"));
    absl::Status s;
    {
      absl::MutexLock l(&impl_->mu);
      if (st == UCS_OK && !is_send_) {
        ucp_tag_recv_info_t info;
        ucp_tag_recv_request_test(req_, &info);
        if (info.length != n_) {
          s = absl::InternalError(absl::StrCat(what, ": peer sent ", info.length, " bytes"));
        }
      } else if (st != UCS_OK) {
        absl::Status broken = impl_->peers[peer_]->broken;
        s = !broken.ok() ? broken
                         : absl::UnavailableError(absl::StrCat(what, " failed: ", ucs_status_string(st)));
      }
      ucp_request_free(req_);
    }
    req_ = nullptr;
    done_ = s;
    return s;
  }

 private:
  UcxTransport::Impl* impl_;
  void* req_;
  bool is_send_;
  int peer_;
  uint64_t tag_;
  size_t n_;
  absl::Status done_;
};

class DoneRequest : public transport::TransportRequest {
 public:
  absl::Status Wait(absl::Time) override { return absl::OkStatus(); }
};

uint64_t UcpTag(int src, uint64_t tag) { return (static_cast<uint64_t>(src) << 48) | tag; }

}  // namespace

UcxTransport::UcxTransport(int rank, int size) : rank_(rank), size_(size), impl_(new Impl) {}

absl::StatusOr<std::unique_ptr<UcxTransport>> UcxTransport::Connect(std::shared_ptr<store::Store> store, int rank,
                                                                    int size, absl::Duration timeout) {
  std::unique_ptr<UcxTransport> t(new UcxTransport(rank, size));
  Impl& im = *t->impl_;
  im.rank = rank;
  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) {
    return absl::UnavailableError("ucx transport: ucp_config_read failed");
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucs_status_t st = ucp_init(&params, config, &im.context);
  ucp_config_release(config);
  if (st != UCS_OK) return absl::UnavailableError(absl::StrCat("ucx transport: ucp_init: ", ucs_status_string(st)));
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // every call is serialised by Impl::mu
  st = ucp_worker_create(im.context, &wp, &im.worker);
  if (st != UCS_OK) return absl::UnavailableError(absl::StrCat("ucx transport: ucp_worker_create: ", ucs_status_string(st)));
  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  st = ucp_worker_get_address(im.worker, &addr, &addr_len);
  if (st != UCS_OK) return absl::UnavailableError("ucx transport: ucp_worker_get_address failed");
  absl::Status s = store->Set(absl::StrCat("ucx/", rank),
                              absl::string_view(reinterpret_cast<const char*>(addr), addr_len));
  ucp_worker_release_address(im.worker, addr);
  LOOM_RETURN_IF_ERROR(s);
  im.eps.assign(size, nullptr);
  for (int j = 0; j < size; ++j) {
    im.peers.push_back(std::make_unique<Impl::PeerState>(Impl::PeerState{&im, j, absl::OkStatus()}));
  }
  for (int j = 0; j < size; ++j) {
    if (j == rank) continue;
    auto remote = store->WaitGet(absl::StrCat("ucx/", j), timeout);
    if (!remote.ok()) return Annotate(remote.status(), absl::StrCat("ucx transport: address of rank ", j));
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(remote->data());
    // PEER mode would exclude UCX's shared-memory transports ("no peer failure
    // handler"): keep NONE and let op deadlines detect dead peers.
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    ep.err_handler.cb = ErrorHandler;
    ep.err_handler.arg = im.peers[j].get();
    st = ucp_ep_create(im.worker, &ep, &im.eps[j]);
    if (st != UCS_OK) {
      return absl::UnavailableError(absl::StrCat("ucx transport: endpoint to rank ", j, ": ", ucs_status_string(st)));
    }
    // LOOM_UCX_PRINT_EP=1: print the wire UCX chose (lanes, eager/rendezvous
    // thresholds) for each endpoint to stderr, to check that peers of one
    // host really use shared memory and CMA zero-copy.
    if (const char* print = std::getenv("LOOM_UCX_PRINT_EP"); print != nullptr && *print == '1') {
      fprintf(stderr, "ucx transport: rank %d -> rank %d endpoint:\n", rank, j);
      ucp_ep_print_info(im.eps[j], stderr);
    }
  }
  return t;
}

UcxTransport::~UcxTransport() {
  Impl& im = *impl_;
  for (ucp_ep_h ep : im.eps) {
    if (ep == nullptr) continue;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req;
    {
      absl::MutexLock l(&im.mu);
      req = ucp_ep_close_nbx(ep, &p);
    }
    if (UCS_PTR_IS_PTR(req)) {
      bool timed_out;
      im.Progress(req, absl::Now() + absl::Seconds(2), &timed_out);
      absl::MutexLock l(&im.mu);
      ucp_request_free(req);
    }
  }
  if (im.worker) ucp_worker_destroy(im.worker);
  if (im.context) ucp_cleanup(im.context);
}

void UcxTransport::Abort(const absl::Status& reason) {
  absl::MutexLock l(&impl_->mu);
  if (impl_->aborted.ok()) impl_->aborted = reason.ok() ? absl::CancelledError("aborted") : reason;
}

absl::StatusOr<std::unique_ptr<transport::TransportRequest>> UcxTransport::ISend(int peer, uint64_t tag,
                                                                                 const void* data, size_t n,
                                                                                 absl::Time) {
  if (peer < 0 || peer >= size_ || peer == rank_ || tag > transport::kMaxTransportTag) {
    return absl::InvalidArgumentError(absl::StrCat("ucx transport: send: bad peer ", peer, " or tag ", tag));
  }
  absl::MutexLock l(&impl_->mu);
  if (!impl_->aborted.ok()) return impl_->aborted;
  if (!impl_->peers[peer]->broken.ok()) return impl_->peers[peer]->broken;
  ucp_request_param_t p{};
  void* req = ucp_tag_send_nbx(impl_->eps[peer], data, n, UcpTag(rank_, tag), &p);
  if (req == nullptr) return std::unique_ptr<transport::TransportRequest>(new DoneRequest());
  if (UCS_PTR_IS_ERR(req)) {
    return absl::UnavailableError(absl::StrCat("ucx transport: send to rank ", peer, ": ",
                                               ucs_status_string(UCS_PTR_STATUS(req))));
  }
  return std::unique_ptr<transport::TransportRequest>(new UcxRequest(impl_.get(), req, true, peer, tag, n));
}

absl::StatusOr<std::unique_ptr<transport::TransportRequest>> UcxTransport::IRecv(int peer, uint64_t tag, void* data,
                                                                                 size_t n) {
  if (peer < 0 || peer >= size_ || peer == rank_ || tag > transport::kMaxTransportTag) {
    return absl::InvalidArgumentError(absl::StrCat("ucx transport: recv: bad peer ", peer, " or tag ", tag));
  }
  absl::MutexLock l(&impl_->mu);
  if (!impl_->aborted.ok()) return impl_->aborted;
  if (!impl_->peers[peer]->broken.ok()) return impl_->peers[peer]->broken;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  void* req = ucp_tag_recv_nbx(impl_->worker, data, n, UcpTag(peer, tag), ~uint64_t{0}, &p);
  if (UCS_PTR_IS_ERR(req)) {
    return absl::UnavailableError(absl::StrCat("ucx transport: receive from rank ", peer, ": ",
                                               ucs_status_string(UCS_PTR_STATUS(req))));
  }
  return std::unique_ptr<transport::TransportRequest>(new UcxRequest(impl_.get(), req, false, peer, tag, n));
}

}  // namespace loom::collectives::ucx
