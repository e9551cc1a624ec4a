// The basic run across "machines": two agents live in two network namespaces
// joined by a bridge, each with its own address, listening off loopback; the
// coordinator listens on the bridge with TLS; the 2D GPT job (tp=2 x dp=2)
// spans both namespaces (its store on rank 0's agent, collectives between the
// namespaces). The test needs root and iproute2 (scripts/setup.sh installs
// it; CI runs as root) and fails, saying why, when it cannot make the
// namespaces; tests/service/basic_run_test runs the same job on loopback.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/service/testing/daemons.h"
#include "tests/testing/loom_cli.h"

namespace loom::tests::service::testing {
namespace {

int Sh(const std::string& cmd, std::string* out = nullptr) {
  tests::testing::CliResult r = loom::tests::testing::Shell(cmd);
  if (out) *out = r.output;
  return r.code;
}

// Whether process `pid` is gone (names below carry their maker's pid).
bool Dead(long pid) { return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

// Deletes what runs of this test that were killed before their cleanup left
// behind: namespaces loomA<pid> / loomB<pid> and bridges lbr<pid> of dead
// pids. A stale bridge keeps its 10.213.x.1/24 route, and a later run that
// picks the same x then has its replies routed to the stale bridge: its
// agents' connections time out while the root namespace's own succeed.
void ReapStale() {
  std::string out;
  const std::regex ns_re("^loom[AB]([0-9]+)\\b"), br_re("^[0-9]+: (lbr([0-9]+)):");
  Sh("ip netns list", &out);
  std::istringstream ns_lines(out);
  for (std::string line; std::getline(ns_lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, ns_re) && Dead(std::stol(m[1]))) Sh("ip netns del " + line.substr(0, line.find(' ')));
  }
  Sh("ip -o link show type bridge", &out);
  std::istringstream br_lines(out);
  for (std::string line; std::getline(br_lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, br_re) && Dead(std::stol(m[2]))) Sh("ip link del " + m[1].str());
  }
}

// Two namespaces A (10.213.x.2) and B (10.213.x.3) on a bridge (10.213.x.1).
// x is a subnet no interface holds, claimed by a lock file so that two runs
// at once cannot pick the same one (the lock goes with the process).
class Netns {
 public:
  Netns() {
    a_ = absl::StrCat("loomA", getpid());
    b_ = absl::StrCat("loomB", getpid());
    br_ = absl::StrCat("lbr", getpid());
  }
  ~Netns() {
    Sh("ip netns del " + a_);
    Sh("ip netns del " + b_);
    Sh("ip link del " + br_);
    if (lock_fd_ >= 0) close(lock_fd_);
  }
  std::string Ip(int host) const { return absl::StrCat("10.213.", id_, ".", host); }
  // Empty on success, else why the namespaces could not be made.
  std::string Setup() {
    if (geteuid() != 0) return "not running as root";
    ReapStale();
    if (!ClaimSubnet()) return "no free 10.213.x.0/24 subnet (x in 20..219)";
    std::string out;
    const std::string cmds[] = {
        "ip link add " + br_ + " type bridge",
        "ip addr add " + Ip(1) + "/24 dev " + br_,
        "ip link set " + br_ + " up",
    };
    for (const auto& c : cmds)
      if (Sh(c, &out) != 0) return c + ": " + out;
    int host = 2;
    for (const std::string& ns : {a_, b_}) {
      std::string v = absl::StrCat("lv", getpid(), host), peer = v + "p";
      const std::string steps[] = {
          "ip netns add " + ns,
          "ip link add " + v + " type veth peer name " + peer,
          "ip link set " + peer + " netns " + ns,
          "ip link set " + v + " master " + br_ + " up",
          "ip netns exec " + ns + " ip addr add " + Ip(host) + "/24 dev " + peer,
          "ip netns exec " + ns + " ip link set " + peer + " up",
          "ip netns exec " + ns + " ip link set lo up",
      };
      for (const auto& c : steps)
        if (Sh(c, &out) != 0) return c + ": " + out;
      ++host;
    }
    if (Sh("ip netns exec " + a_ + " ping -c 1 -W 2 " + Ip(3), &out) != 0 &&
        Sh("ip netns exec " + a_ + " ip route get " + Ip(3), &out) != 0)
      return "namespace A cannot reach B: " + out;
    return "";
  }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }

 private:
  // Picks x, starting from this pid's, whose subnet no address uses, and
  // holds /tmp/loom-netns-x.lock.
  bool ClaimSubnet() {
    std::string addrs;
    Sh("ip -o addr show", &addrs);
    for (int i = 0; i < 200; ++i) {
      const int id = (getpid() + i) % 200 + 20;
      if (addrs.find(absl::StrCat(" 10.213.", id, ".")) != std::string::npos) continue;
      const int fd = open(absl::StrCat("/tmp/loom-netns-", id, ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
      if (fd < 0) continue;
      if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        id_ = id, lock_fd_ = fd;
        return true;
      }
      close(fd);
    }
    return false;
  }

  int id_ = 0, lock_fd_ = -1;
  std::string a_, b_, br_;
};

TEST(NetnsTls, TwoDimensionalJobAcrossTwoNamespacesWithTls) {
  Netns net;
  std::string why = net.Setup();
  ASSERT_TRUE(why.empty()) << "cannot make network namespaces here (" << why
                           << "); the test needs root and iproute2 (scripts/setup.sh installs it)";
  const std::string root = runtime::service::testing::TestDir("netns_tls");
  // A CA and a server certificate for the bridge address.
  std::string out;
  const std::string ssl = absl::StrCat(
      "cd ", root, " && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=loom-test-ca",
      " && openssl req -newkey rsa:2048 -nodes -keyout coord.key -out coord.csr -subj /CN=coordinator",
      " && printf 'subjectAltName=IP:", net.Ip(1), "' > san.ext",
      " && openssl x509 -req -in coord.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out coord.pem -days 1 -extfile san.ext");
  ASSERT_EQ(Sh(ssl, &out), 0) << out;
  const std::string data = root + "/coord", port_file = root + "/port";
  pid_t coord = runtime::service::testing::Spawn(
      {"runtime/loom", "coordinator", "--data-dir", data, "--listen", net.Ip(1) + ":0", "--metrics-listen", "off",
       "--port-file", port_file, "--heartbeat-ms", "200", "--data-roots", root, "--tls-cert", root + "/coord.pem",
       "--tls-key", root + "/coord.key"},
      root + "/coord.log");
  const int port = runtime::service::testing::ReadPort(port_file, 20);
  ASSERT_GT(port, 0) << "coordinator did not start";
  const std::string addr = absl::StrCat(net.Ip(1), ":", port);
  std::vector<pid_t> agents;
  int host = 2;
  for (const std::string& ns : {net.a(), net.b()}) {
    std::string node = absl::StrCat("node", host);
    agents.push_back(
        runtime::service::testing::Spawn({"/usr/sbin/ip",      "netns",      "exec",          ns,
                                          "runtime/loom",      "agent",      "--coordinator", addr,
                                          "--token-dir",       data,         "--data-dir",    root + "/" + node,
                                          "--cpu-slots",       "2",          "--hostname",    node,
                                          "--rendezvous-host", net.Ip(host), "--tls-ca",      root + "/ca.pem"},
                                         root + "/" + node + ".log"));
    ++host;
  }
  std::ofstream(root + "/job.yaml") << "name: netns-2d\n"
                                       "model: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n"
                                       "train: {steps: 8, batch_size: 4, log_every: 4}\n"
                                       "parallel: {dp: 2, tp: 2, backend: 'cpu:gloo'}\nrun_dir: "
                                    << root << "/run\n";
  int rc = Sh(absl::StrCat("timeout 240 runtime/loom submit ", root, "/job.yaml --coordinator ", addr, " --data-dir ",
                           data, " --tls-ca ", root, "/ca.pem --wait-for-capacity --watch"),
              &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("SUCCEEDED"), std::string::npos) << out;
  if (rc != 0) {  // what the daemons said, to tell a network problem from a service one
    for (const char* log : {"coord.log", "node2.log", "node3.log"}) {
      std::string tail;
      Sh(absl::StrCat("tail -n 30 ", root, "/", log), &tail);
      ADD_FAILURE() << log << ":\n" << tail;
    }
  }
  // Two ranks ran in each namespace: the store (on rank 0's agent) and the
  // collectives crossed the bridge, as each namespace's loopback is its own.
  for (int h : {2, 3}) {
    int ranks = 0;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(absl::StrCat(root, "/node", h, "/logs/job-1"), ec), end;
         !ec && it != end; it.increment(ec))
      ranks += it->path().extension() == ".out";
    EXPECT_EQ(ranks, 2) << "node" << h << (ec ? ": " + ec.message() : "");
  }
  // Without the CA the client cannot talk to the TLS coordinator.
  rc = Sh(absl::StrCat("runtime/loom jobs --timeout-s 3 --coordinator ", addr, " --data-dir ", data), &out);
  EXPECT_NE(rc, 0) << out;
  for (pid_t a : agents) kill(a, SIGTERM);
  for (pid_t a : agents) runtime::service::testing::WaitExit(a, 10);
  kill(coord, SIGTERM);
  runtime::service::testing::WaitExit(coord, 10);
}

}  // namespace
}  // namespace loom::tests::service::testing
