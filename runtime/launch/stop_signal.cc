#include "runtime/launch/stop_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

namespace loom::runtime::launch {
namespace {

int g_stop_pipe[2] = {-1, -1};

// Async-signal-safe: one write(2).
void OnStopSignal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  (void)!::write(g_stop_pipe[1], &b, 1);
  errno = saved;
}

}  // namespace

void StopOnSignals(checkpoint::CommitGate* gate) {
  if (::pipe2(g_stop_pipe, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "loom worker: cannot make the stop pipe (%s); SIGTERM ends the process as it comes\n",
                 std::strerror(errno));
    return;
  }
  std::thread([gate] {
    unsigned char sig = 0;
    while (::read(g_stop_pipe[0], &sig, 1) != 1) {
    }
    const long long last = static_cast<long long>(gate->Close());
    std::fprintf(stderr,
                 "loom worker: %s: stopping; no checkpoint is committed after this line (last committed by this "
                 "process: step %lld)\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", last);
    std::fflush(stderr);
    _exit(128 + sig);
  }).detach();
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

}  // namespace loom::runtime::launch
