// TcpTransport: the Transport over one TCP connection per pair of ranks.
//
// Setup (Connect): each rank listens on an ephemeral port of `host`, publishes
// "tcp/<rank>" = "host:port" in the store, connects to every lower rank and
// accepts every higher one (a hello frame carries the connecting rank).
//
// Data path: a frame is {u64 tag, u64 length, bytes}. ISend writes the frame
// inline on the caller's thread (under a per-peer lock), so it is complete when
// it returns. One receiver thread per peer reads frames: a frame that matches a
// posted receive is read straight into the user's buffer, otherwise it is kept
// as an unexpected message until a matching IRecv copies it out. A frame of
// at least kWaitForPostBytes with no receive posted yet is first held for up
// to kWaitForPost, waiting for its IRecv, so large payloads land in place
// (the sender is held back by the socket meanwhile). Because receivers drain
// their sockets after at most that pause, a ring of blocking sends cannot
// deadlock. Cost per message: one syscall pair per frame plus, for unexpected
// messages, one extra copy.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "collectives/internal/socket.h"
#include "collectives/store/store.h"
#include "collectives/transport/transport.h"

namespace loom::collectives::transport {

class TcpTransport : public Transport {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // interface to listen on and advertise
    absl::Duration timeout = absl::Seconds(60);  // for setup
    // Socket buffers (internal::TuneSocket; ProcessGroupOptions::
    // tcp_socket_buffer_bytes): kAutoSocketBuffer, 0 (the kernel's
    // autotuning) or bytes up to 1 GiB; anything else fails Connect.
    int64_t socket_buffer_bytes = internal::kAutoSocketBuffer;
  };
  static absl::StatusOr<std::unique_ptr<TcpTransport>> Connect(std::shared_ptr<store::Store> store, int rank, int size,
                                                               Options o);
  ~TcpTransport() override;

  absl::string_view name() const override { return "tcp"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::StatusOr<std::unique_ptr<TransportRequest>> ISend(int peer, uint64_t tag, const void* data,
                                                          size_t n, absl::Time deadline) override;
  absl::StatusOr<std::unique_ptr<TransportRequest>> IRecv(int peer, uint64_t tag, void* data,
                                                          size_t n) override;
  void Abort(const absl::Status& reason) override;

  // Shared state of one posted receive (public for the request type).
  struct PostedRecv {
    uint64_t tag;
    void* data;
    size_t n;
    int peer;
    bool done = false;  // guarded by the transport's mutex
    absl::Status status;
  };

 private:
  struct Peer {
    internal::Fd fd;
    absl::Mutex send_mu;
    std::thread receiver;
    // Guarded by TcpTransport::mu_.
    std::deque<std::shared_ptr<PostedRecv>> posted;
    std::deque<std::pair<uint64_t, std::string>> unexpected;
    absl::Status broken;  // non-OK once the connection failed
  };
  TcpTransport(int rank, int size) : rank_(rank), size_(size), peers_(size) {}
  void ReceiveLoop(int peer);
  void FailPeer(int peer, const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WaitRecv(PostedRecv* r, absl::Time deadline);
  friend class TcpRecvRequest;

  int rank_, size_;
  std::vector<std::unique_ptr<Peer>> peers_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  bool joined_ = false;
  absl::Mutex join_mu_;
};

}  // namespace loom::collectives::transport
