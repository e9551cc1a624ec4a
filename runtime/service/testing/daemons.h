// Helpers for end-to-end tests that run the service's real daemons as child
// processes: spawn with stderr to a log, wait with a deadline, read the port
// a daemon wrote to its --port-file, pick a free loopback port.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace loom::runtime::service::testing {

// A loopback port nothing listened on at the time of the call (bound, then
// closed); 0 when none could be bound.
inline int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  return ok ? ntohs(a.sin_port) : 0;
}

// fork + execv(argv) with stderr appended to `log`; returns the child's pid.
inline pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE* f = freopen(log.c_str(), "a", stderr);
    (void)f;
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  return pid;
}

// The child's wait status, or -1 after SIGKILL when it outlives `seconds`.
inline int WaitExit(pid_t pid, int seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

// The port written to `port_file`, or 0 after `seconds`.
inline int ReadPort(const std::string& port_file, int seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(port_file);
    int port = 0;
    if (in >> port && port > 0) return port;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

// Starts loom_coordinator on `listen` with its data in `data_dir`.
inline pid_t StartCoordinator(const std::string& data_dir, const std::string& listen, const std::string& port_file,
                              const std::vector<std::string>& extra = {}) {
  std::filesystem::remove(port_file);
  std::vector<std::string> argv = {"runtime/service/loom_coordinator", "--data-dir", data_dir, "--listen", listen,
                                   "--metrics-listen", "off", "--port-file", port_file};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return Spawn(argv, data_dir + ".log");
}

inline std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string root = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  return root;
}

}  // namespace loom::runtime::service::testing
