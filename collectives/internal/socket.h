// Blocking TCP socket helpers shared by the store and the TCP transport.
//
// Every call that can wait takes an absolute deadline (absl::InfiniteFuture()
// for none) and returns DeadlineExceeded when it passes. Errors name the peer
// address where one is known. Sockets are plain file descriptors wrapped in
// an owning `Fd`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace loom::collectives::internal {

// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) { Reset(); fd_ = o.fd_; o.fd_ = -1; }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset();
  // shutdown(2) both directions: wakes up threads blocked on the socket.
  void Shutdown() const;

 private:
  int fd_ = -1;
};

// Listens on host:port (port 0 = ephemeral). Returns the socket and the bound port.
absl::StatusOr<Fd> Listen(absl::string_view host, int port, int* bound_port);
// SO_SNDBUF/SO_RCVBUF of a connection: kAutoSocketBuffer = 4 MiB where
// net.core.{w,r}mem_max allow it, else the kernel's autotuning; 0 = the
// kernel's autotuning; else that many bytes (up to kMaxSocketBuffer).
inline constexpr int64_t kAutoSocketBuffer = -1;
inline constexpr int64_t kMaxSocketBuffer = int64_t{1} << 30;

// Accepts one connection, waiting until `deadline`.
absl::StatusOr<Fd> Accept(const Fd& listener, absl::Time deadline,
                          int64_t buffer_bytes = kAutoSocketBuffer);
// Connects to host:port, retrying refused connections until `deadline`.
absl::StatusOr<Fd> Connect(absl::string_view host, int port, absl::Time deadline,
                           int64_t buffer_bytes = kAutoSocketBuffer);
// Splits "host:port".
absl::Status SplitHostPort(absl::string_view addr, std::string* host, int* port);

// Sets TCP_NODELAY and the socket buffers (`buffer_bytes` as above; Accept and
// Connect call it).
void TuneSocket(int fd, int64_t buffer_bytes);

// Writes/reads exactly n bytes. Unavailable on a closed/broken connection.
absl::Status SendAll(int fd, const void* data, size_t n, absl::Time deadline);
absl::Status RecvAll(int fd, void* data, size_t n, absl::Time deadline);

}  // namespace loom::collectives::internal
