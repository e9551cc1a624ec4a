#include "collectives/internal/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace loom::collectives::internal {
namespace {

int PollMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return 1000;
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  int64_t ms = absl::ToInt64Milliseconds(left) + 1;
  return static_cast<int>(ms > 1000 ? 1000 : ms);
}

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", strerror(errno)));
}

absl::StatusOr<sockaddr_in> Resolve(absl::string_view host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::string h(host.empty() ? "127.0.0.1" : std::string(host));
  if (h == "localhost") h = "127.0.0.1";
  if (inet_pton(AF_INET, h.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo(h.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve host '", h, "'"));
  }
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return addr;
}

}  // namespace

void Fd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Fd::Shutdown() const {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

absl::Status SplitHostPort(absl::string_view addr, std::string* host, int* port) {
  size_t colon = addr.rfind(':');
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(addr.substr(colon + 1), port) ||
      *port <= 0 || *port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("address: expected host:port, got '", addr, "'"));
  }
  *host = std::string(addr.substr(0, colon));
  return absl::OkStatus();
}

namespace {

// /proc/sys/net/core/<name> as a number (0 if unreadable).
int64_t SysctlCore(const char* name) {
  std::string path = absl::StrCat("/proc/sys/net/core/", name);
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return 0;
  long long v = 0;
  if (std::fscanf(f, "%lld", &v) != 1) v = 0;
  std::fclose(f);
  return v;
}

// The automatic socket buffer size: 4 MiB, or 0 to leave the kernel's
// autotuning on. Forcing SO_SNDBUF/SO_RCVBUF turns autotuning off and is
// silently capped at net.core.{w,r}mem_max (often 208 KiB), which would leave
// a large transfer with a small fixed window; so the size is forced only where
// both maxima allow it.
int AutoSocketBuffer() {
  static const int bytes = [] {
    const int64_t want = 4 << 20;
    if (SysctlCore("wmem_max") < want || SysctlCore("rmem_max") < want) return 0;
    return static_cast<int>(want);
  }();
  return bytes;
}

}  // namespace

void TuneSocket(int fd, int64_t buffer_bytes) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int buf = buffer_bytes == kAutoSocketBuffer
                ? AutoSocketBuffer()
                : static_cast<int>(std::clamp<int64_t>(buffer_bytes, 0, kMaxSocketBuffer));
  if (buf > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  }
}

absl::StatusOr<Fd> Listen(absl::string_view host, int port, int* bound_port) {
  auto addr = Resolve(host, port);
  if (!addr.ok()) return addr.status();
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Errno("socket");
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    return Errno(absl::StrCat("bind ", host, ":", port));
  }
  if (::listen(fd.get(), 1024) != 0) return Errno("listen");
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
  if (bound_port) *bound_port = ntohs(bound.sin_port);
  return fd;
}

absl::StatusOr<Fd> Accept(const Fd& listener, absl::Time deadline, int64_t buffer_bytes) {
  while (true) {
    pollfd p{listener.get(), POLLIN, 0};
    int ms = PollMs(deadline);
    int r = ::poll(&p, 1, ms);
    if (r < 0 && errno != EINTR) return Errno("poll(accept)");
    if (r > 0) {
      if (p.revents & (POLLERR | POLLNVAL)) return absl::CancelledError("listener closed");
      int c = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        TuneSocket(c, buffer_bytes);
        return Fd(c);
      }
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) return Errno("accept");
    }
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("accept: deadline passed");
  }
}

absl::StatusOr<Fd> Connect(absl::string_view host, int port, absl::Time deadline, int64_t buffer_bytes) {
  auto addr = Resolve(host, port);
  if (!addr.ok()) return addr.status();
  absl::Duration backoff = absl::Milliseconds(5);
  while (true) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return Errno("socket");
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) == 0) {
      TuneSocket(fd.get(), buffer_bytes);
      return fd;
    }
    int err = errno;
    if (err != ECONNREFUSED && err != EINTR && err != ETIMEDOUT && err != EAGAIN) {
      return absl::UnavailableError(absl::StrCat("connect ", host, ":", port, ": ", strerror(err)));
    }
    if (absl::Now() + backoff >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("connect ", host, ":", port, ": ", strerror(err), " until the deadline"));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(100));
  }
}

absl::Status SendAll(int fd, const void* data, size_t n, absl::Time deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      int r = ::poll(&pf, 1, PollMs(deadline));
      if (r == 0 && absl::Now() >= deadline) return absl::DeadlineExceededError("send: deadline passed");
      continue;
    }
    return Errno("send");
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, void* data, size_t n, absl::Time deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return absl::UnavailableError("connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd pf{fd, POLLIN, 0};
      int rc = ::poll(&pf, 1, PollMs(deadline));
      if (rc == 0 && absl::Now() >= deadline) return absl::DeadlineExceededError("recv: deadline passed");
      continue;
    }
    return Errno("recv");
  }
  return absl::OkStatus();
}

}  // namespace loom::collectives::internal
