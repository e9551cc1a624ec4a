// End to end on loopback, every component a real process except the API
// server: FakeApiServer (HTTPS) + the `loom_operator` binary (kubeconfig) + a
// test kubelet (below) that runs each Pod's and each coordinator Deployment's
// container command as a local process group — `loom coordinator` and `loom
// agent` as the standalone loom_coordinator / loom_agent binaries — and
// reports Pod status back to the API server.
//
// The kubelet emulates what a node would provide: env from Secrets, the token
// file mount (subPath) of the coordinator, the Service (each job's coordinator
// listens on a loopback port the test picked and names in the
// loom.dev/coordinator-address annotation), and per-pod data folders. In the
// fast tests the ranks are shell scripts: a 2 nodes x 2 ranks job (dp=2 x
// tp=2) whose ranks print and exit. RealLoomTrainingJob (e2e_real_test) runs
// the `loom` binary in every pod instead, its agents starting `loom worker`
// ranks that train.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "deploy/operator/kube_client.h"
#include "deploy/operator/testing/fake_apiserver.h"
#include "runtime/service/testing/daemons.h"

namespace loom::deploy::operator_ {
namespace {

std::string ReadAll(const std::string& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

pid_t Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    FILE* f = freopen(log.c_str(), "a", stderr);
    f = freopen(log.c_str(), "a", stdout);
    (void)f;
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  setpgid(pid, pid);
  return pid;
}

// Stops a process group: SIGTERM, then SIGKILL after `grace_s`.
void StopGroup(pid_t pid, int grace_s = 5) {
  killpg(pid, SIGTERM);
  for (int i = 0; i < grace_s * 20; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) {
      killpg(pid, SIGKILL);  // stragglers in the group
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  killpg(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// A /proc file read with plain POSIX calls (the process may vanish meanwhile).
std::string ReadProc(const std::string& path) {
  std::string out;
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, n);
  close(fd);
  for (char& c : out)
    if (c == '\0') c = ' ';
  return out;
}

// Live (not zombie) processes whose command line contains `needle`.
int CountProcesses(const std::string& needle) {
  int n = 0;
  DIR* d = opendir("/proc");
  while (dirent* e = readdir(d)) {
    if (!isdigit(e->d_name[0])) continue;
    std::string cmd = ReadProc(std::string("/proc/") + e->d_name + "/cmdline");
    std::string stat = ReadProc(std::string("/proc/") + e->d_name + "/stat");
    bool zombie = stat.find(") Z ") != std::string::npos;
    if (!zombie && cmd.find(needle) != std::string::npos) ++n;
  }
  closedir(d);
  return n;
}

class TestKubelet {
 public:
  TestKubelet(testing::FakeApiServer* server, std::string ns, std::string root, std::map<std::string, int> ports)
      : server_(server), ns_(std::move(ns)), root_(std::move(root)), ports_(std::move(ports)) {}
  ~TestKubelet() { Stop(); }
  // Run pods with this `loom` binary (coordinator, agent, and the agents'
  // default `loom worker` ranks) instead of the standalone daemons + scripts.
  void UseLoomBinary(const std::string& path) { loom_binary_ = path; }

  void Start() {
    thread_ = std::thread([this] {
      while (!stop_) {
        Tick();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      for (auto& [uid, p] : procs_)
        if (p.pid > 0) StopGroup(p.pid);
      procs_.clear();
    });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::atomic<int> started{0};

 private:
  struct Proc {
    pid_t pid = 0;  // 0: exited (pods are not restarted in place)
    std::string kind, name;
  };

  std::string Col(const std::string& plural, const std::string& prefix = "/api/v1") {
    return absl::StrCat(prefix, "/namespaces/", ns_, "/", plural);
  }

  std::string SecretValue(const std::string& name, const std::string& key) {
    auto s = server_->GetObject(Col("secrets"), name);
    if (!s.ok()) return "";
    std::string out;
    absl::Base64Unescape((*s)["data"].value(key, ""), &out);
    return out;
  }

  // Translates a container into a local command; false when not ready (secret missing).
  bool Command(const Json& container, const std::string& job, const std::string& dir, std::vector<std::string>* argv,
               std::map<std::string, std::string>* env) {
    const Json& cmd = container["command"];
    if (cmd.size() < 2 || cmd[0] != "loom") return false;
    std::string sub = cmd[1];
    if (!loom_binary_.empty()) {  // the real `loom` binary; agents start `loom worker` ranks
      argv->push_back(loom_binary_);
      argv->push_back(sub);
    } else {
      argv->push_back(sub == "coordinator" ? "runtime/service/loom_coordinator" : "runtime/service/agent/loom_agent");
    }
    std::string addr = absl::StrCat("127.0.0.1:", ports_[job]);
    for (size_t i = 2; i < cmd.size(); ++i) {
      std::string a = cmd[i];
      argv->push_back(a);
      if (i + 1 >= cmd.size()) break;
      if (a == "--listen" || a == "--coordinator")
        argv->push_back(addr), ++i;
      else if (a == "--metrics-listen")
        argv->push_back("off"), ++i;
      else if (a == "--data-dir")
        argv->push_back(dir), ++i;
    }
    if (sub == "coordinator") {
      argv->insert(argv->end(), {"--heartbeat-ms", "500"});
      // The Secret's tokens mounted at <data-dir>/token and
      // <data-dir>/join-token (subPath, mode 0400).
      for (const char* key : {"token", "join-token"}) {
        std::string token = SecretValue(job + "-token", key);
        if (token.empty()) return false;
        std::ofstream(dir + "/" + key) << token;
        chmod((dir + "/" + key).c_str(), 0600);
      }
    } else if (loom_binary_.empty()) {
      argv->insert(argv->end(), {"--worker", "/bin/sh " + root_ + "/worker-" + job + ".sh"});
    }
    for (const Json& e : container.value("env", Json::array())) {
      if (e.contains("value")) {
        (*env)[e["name"]] = e["value"];
      } else if (e.contains("valueFrom") && e["valueFrom"].contains("secretKeyRef")) {
        const Json& ref = e["valueFrom"]["secretKeyRef"];
        std::string v = SecretValue(ref["name"], ref["key"]);
        if (v.empty()) return false;
        (*env)[e["name"]] = v;
      }
    }
    (*env)["HOME"] = dir;
    return true;
  }

  void Tick() {
    std::map<std::string, Json> want;  // uid -> (kind, object)
    for (Json p : server_->Objects(Col("pods")))
      if (!p["metadata"].contains("deletionTimestamp")) want[p["metadata"]["uid"]] = p;
    for (Json d : server_->Objects(Col("deployments", "/apis/apps/v1")))
      if (d["spec"].value("replicas", 1) > 0) want[d["metadata"]["uid"]] = d;
    // Gone or scaled down: kill.
    for (auto it = procs_.begin(); it != procs_.end();) {
      if (want.count(it->first)) {
        ++it;
        continue;
      }
      if (it->second.pid > 0) StopGroup(it->second.pid);
      it = procs_.erase(it);
    }
    // Exits: pods report their phase; a Deployment's pod is restarted.
    for (auto it = procs_.begin(); it != procs_.end();) {
      int st = 0;
      if (it->second.pid > 0 && waitpid(it->second.pid, &st, WNOHANG) == it->second.pid) {
        killpg(it->second.pid, SIGKILL);
        it->second.pid = 0;
        if (it->second.kind == "Deployment") {
          it = procs_.erase(it);
          continue;
        }
        bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        (void)server_->SetStatus(Col("pods"), it->second.name, {{"phase", ok ? "Succeeded" : "Failed"}});
      }
      ++it;
    }
    for (const auto& [uid, obj] : want) {
      if (procs_.count(uid)) continue;
      const std::string kind = obj["kind"];
      const std::string name = obj["metadata"]["name"];
      // A replacement pod (a name seen before) starts after 4 s, as a real
      // one would after scheduling and image checks (and after the
      // coordinator noticed the lost agent: 3 heartbeats of 500 ms).
      if (kind == "Pod" && seen_names_.count(name)) {
        auto first = first_seen_.emplace(uid, std::chrono::steady_clock::now()).first->second;
        if (std::chrono::steady_clock::now() - first < std::chrono::seconds(4)) continue;
      }
      seen_names_.insert(name);
      const std::string job = obj["metadata"]["labels"].value("loom.dev/job", "");
      const Json& container =
          kind == "Pod" ? obj["spec"]["containers"][0] : obj["spec"]["template"]["spec"]["containers"][0];
      std::string dir = root_ + "/" + name + "-" + uid;
      std::system(("mkdir -p " + dir).c_str());
      std::vector<std::string> argv;
      std::map<std::string, std::string> env;
      if (!Command(container, job, dir, &argv, &env)) continue;
      Proc p;
      p.kind = kind;
      p.name = name;
      p.pid = Spawn(argv, env, dir + "/log");
      procs_[uid] = p;
      started++;
      if (kind == "Pod")
        (void)server_->SetStatus(
            Col("pods"), name,
            {{"phase", "Running"}, {"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}});
    }
  }

  testing::FakeApiServer* server_;
  std::string ns_, root_, loom_binary_;
  std::map<std::string, int> ports_;
  std::map<std::string, Proc> procs_;  // by object uid
  std::set<std::string> seen_names_;
  std::map<std::string, std::chrono::steady_clock::time_point> first_seen_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

Json Job(const std::string& name, int port) {
  return Json::parse(R"({
    "apiVersion": "loom.dev/v1", "kind": "TrainingJob",
    "metadata": {"name": ")" +
                     name + R"(",
                 "annotations": {"loom.dev/coordinator-address": "127.0.0.1:)" +
                     std::to_string(port) + R"("}},
    "spec": {
      "numNodes": 2, "nprocPerNode": 2,
      "runPolicy": {"backoffLimit": 0, "cleanPodPolicy": "Running"},
      "job": {"model": {"family": "gpt", "n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 32},
              "parallel": {"dp": 2, "tp": 2}, "device": "cpu"}
    }})");
}

class OperatorE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root = std::string(tmp ? tmp : "/tmp") + "/operator_e2e_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::system(("rm -rf " + root + " && mkdir -p " + root).c_str());
    std::string cert, key;
    ASSERT_TRUE(testing::MakeSelfSignedCert(root, &cert, &key));
    server = std::make_unique<testing::FakeApiServer>(cert, key, "e2e-token");
    auto port = server->Start();
    ASSERT_TRUE(port.ok());
    std::string kubeconfig = root + "/kubeconfig";
    std::ofstream(kubeconfig) << "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
                              << "clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:" << *port
                              << "\n    certificate-authority-data: " << absl::Base64Escape(ReadAll(cert)) << "\n"
                              << "users:\n- name: u\n  user:\n    token: e2e-token\n"
                              << "contexts:\n- name: t\n  context: {cluster: c, user: u, namespace: e2e}\n";
    std::ofstream(root + "/worker-ok.sh") << "echo rank $LOOM_RANK of $LOOM_WORLD_SIZE; sleep 1\n";
    // Unique per test process: concurrent runs must not see each other's ranks.
    del_marker = "sleep 317." + std::to_string(getpid());
    rs_marker = "sleep 319." + std::to_string(getpid());
    std::ofstream(root + "/worker-del.sh") << del_marker << "\n";
    // Emulates checkpoint/resume: attempt 0 checkpoints step 20 (rank 0) and
    // hangs; a later attempt reads the checkpoint back, reports step 40, exits.
    std::ofstream(root + "/worker-rs.sh")
        << "ck=" << root << "/rs-ckpt\n"
        << "if [ \"$LOOM_ATTEMPT\" = 0 ]; then\n"
        << "  if [ \"$LOOM_RANK\" = 0 ]; then echo 20 > $ck; echo '20 20' > $LOOM_PROGRESS_FILE; fi\n"
        << "  " << rs_marker << "\n"
        << "fi\n"
        << "from=$(cat $ck)\n"
        << "if [ \"$LOOM_RANK\" = 0 ]; then echo \"resumed from $from\" > " << root << "/rs-resumed;"
        << " echo \"40 $from\" > $LOOM_PROGRESS_FILE; fi\n"
        << "sleep 1\n";
    using runtime::service::testing::FreeLoopbackPort;
    ports = {{"ok", FreeLoopbackPort()}, {"del", FreeLoopbackPort()}, {"rs", FreeLoopbackPort()}, {"real", FreeLoopbackPort()}};
    kubelet = std::make_unique<TestKubelet>(server.get(), "e2e", root, ports);
    const bool real = std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()).find("RealLoom") !=
                      std::string::npos;
    if (real) kubelet->UseLoomBinary("runtime/loom");
    kubelet->Start();
    // The real-binary test polls never and resyncs rarely: the job's status
    // must follow the coordinator's WatchJob stream.
    op = Spawn({"deploy/operator/loom_operator", "--kubeconfig", kubeconfig, "--poll-ms", real ? "600000" : "200",
                "--resync-s", real ? "600" : "2"},
               {}, root + "/operator.log");
    auto cfg = LoadKubeconfig(kubeconfig);
    ASSERT_TRUE(cfg.ok());
    api = std::make_unique<KubeClient>(*cfg);
  }
  void TearDown() override {
    if (op > 0) StopGroup(op);
    if (kubelet) kubelet->Stop();
    api.reset();
    if (server) server->Stop();
  }
  // Polls the job's status.state until one of `until` (or the timeout);
  // returns the distinct states seen, in order.
  std::vector<std::string> Follow(const std::string& name, const std::set<std::string>& until, int timeout_s) {
    std::vector<std::string> states;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      auto j = api->Get(kTrainingJobs, "e2e", name);
      if (!j.ok()) break;
      std::string s = (*j).value("status", Json::object()).value("state", "");
      if (!s.empty() && (states.empty() || states.back() != s)) states.push_back(s);
      if (until.count(s)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::cout << name << ": states";
    for (const auto& s : states) std::cout << " " << s;
    std::cout << std::endl;
    return states;
  }

  std::string root, del_marker, rs_marker;
  std::unique_ptr<testing::FakeApiServer> server;
  std::map<std::string, int> ports;
  std::unique_ptr<TestKubelet> kubelet;
  pid_t op = 0;
  std::unique_ptr<KubeClient> api;
};

TEST_F(OperatorE2E, CpuJobSucceedsAndDeletedJobLeavesNoProcess) {
  KubeClient& a = *api;
  // 1. Created -> Succeeded.
  Json ok = Job("ok", ports["ok"]);
  ok["spec"]["runPolicy"]["backoffLimit"] = 2;  // tolerate a spurious lost heartbeat on a loaded machine
  ASSERT_TRUE(a.Create(kTrainingJobs, "e2e", ok).ok());
  std::vector<std::string> states = Follow("ok", {"Succeeded", "Failed"}, 40);
  std::string seq;
  for (const auto& s : states) seq += s + " ";
  ASSERT_FALSE(states.empty());
  EXPECT_EQ(states.front(), "Created") << seq;
  EXPECT_EQ(states.back(), "Succeeded") << seq << "\n" << ReadAll(root + "/operator.log");
  // Ranks really ran: four "rank i of 4" lines across the agents' rank logs.
  int lines = 0;
  std::system(("cat " + root + "/ok-agent-*/logs/*/rank*.out > " + root + "/ranks.txt 2>/dev/null").c_str());
  std::ifstream ranks(root + "/ranks.txt");
  for (std::string l; std::getline(ranks, l);) lines += l.find(" of 4") != std::string::npos;
  EXPECT_EQ(lines, 4);

  // 2. Deleting a running job leaves no process behind.
  ASSERT_TRUE(a.Create(kTrainingJobs, "e2e", Job("del", ports["del"])).ok());
  bool running = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  while (std::chrono::steady_clock::now() < deadline && !running) {
    auto j = a.Get(kTrainingJobs, "e2e", "del");
    ASSERT_TRUE(j.ok());
    running = (*j).value("status", Json::object()).value("state", "") == "Running";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(running) << ReadAll(root + "/operator.log");
  for (int i = 0; i < 100 && CountProcesses(del_marker) < 4; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(CountProcesses(del_marker), 4);            // the four ranks
  EXPECT_EQ(CountProcesses(root + "/del-agent-"), 2);  // two agents
  ASSERT_TRUE(a.Delete(kTrainingJobs, "e2e", "del").ok());
  bool gone = false;
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline && !gone) {
    gone = absl::IsNotFound(a.Get(kTrainingJobs, "e2e", "del").status());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(gone);
  int left = -1;
  for (int i = 0; i < 200 && left != 0; ++i) {
    left = CountProcesses(del_marker) + CountProcesses(root + "/worker-del.sh") + CountProcesses(root + "/del-agent-") +
           CountProcesses(root + "/del-coordinator");
    if (left) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(left, 0) << "processes of the deleted job survive";
}

TEST_F(OperatorE2E, KilledAgentRestartsFromCheckpoint) {
  Json j = Job("rs", ports["rs"]);
  j["spec"]["runPolicy"]["backoffLimit"] = 2;
  ASSERT_TRUE(api->Create(kTrainingJobs, "e2e", j).ok());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  Json st;
  while (std::chrono::steady_clock::now() < deadline) {
    auto got = api->Get(kTrainingJobs, "e2e", "rs");
    ASSERT_TRUE(got.ok());
    st = (*got).value("status", Json::object());
    if (st.value("state", "") == "Running" && st.value("lastCheckpointStep", -1) == 20 &&
        CountProcesses(rs_marker) == 4)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(st.value("lastCheckpointStep", -1), 20) << st.dump() << ReadAll(root + "/operator.log");
  // Kill agent pod rs-agent-1's process (only the agent: its ranks die with it).
  int killed = 0;
  DIR* d = opendir("/proc");
  while (dirent* e = readdir(d)) {
    if (!isdigit(e->d_name[0])) continue;
    std::string cmd = ReadProc(std::string("/proc/") + e->d_name + "/cmdline");
    if (cmd.find("loom_agent") != std::string::npos && cmd.find(root + "/rs-agent-1-") != std::string::npos)
      killed += kill(atoi(e->d_name), SIGKILL) == 0;
  }
  closedir(d);
  ASSERT_EQ(killed, 1);
  std::vector<std::string> states = Follow("rs", {"Succeeded", "Failed"}, 45);
  std::string seq;
  for (const auto& s : states) seq += s + " ";
  ASSERT_GE(states.size(), 3u) << seq;
  EXPECT_EQ(states[states.size() - 3], "Restarting") << seq;
  EXPECT_EQ(states[states.size() - 2], "Running") << seq;
  EXPECT_EQ(states.back(), "Succeeded") << seq << ReadAll(root + "/operator.log");
  EXPECT_EQ(ReadAll(root + "/rs-resumed"), "resumed from 20\n");
  auto got = api->Get(kTrainingJobs, "e2e", "rs");
  ASSERT_TRUE(got.ok());
  EXPECT_GE((*got)["status"].value("restartCount", 0), 1);
}

// The real `loom` binary in every pod: a 2 nodes x 2 ranks, tp=2 x dp=2 CPU
// training job (a tiny GPT, 12 steps) goes Created -> Running -> Succeeded.
// Runs only in the :e2e_real_test target (which carries //runtime:loom).
TEST_F(OperatorE2E, RealLoomTrainingJob) {
  ASSERT_EQ(access("runtime/loom", X_OK), 0) << "runtime/loom is not in this target's data: run :e2e_real_test";
  Json j = Job("real", ports["real"]);
  j["spec"]["job"] = {{"name", "real"},
                      {"model", {{"family", "gpt"}, {"n_layer", 1}, {"n_head", 2}, {"d_model", 32}, {"seq_len", 16}}},
                      {"train", {{"steps", 12}, {"batch_size", 4}, {"log_every", 3}}},
                      {"parallel", {{"dp", 2}, {"tp", 2}}},
                      {"run_dir", root + "/real-run"},
                      {"device", "cpu"}};
  j["spec"]["runPolicy"]["backoffLimit"] = 1;
  ASSERT_TRUE(api->Create(kTrainingJobs, "e2e", j).ok());
  std::vector<std::string> states = Follow("real", {"Succeeded", "Failed"}, 200);
  std::string seq;
  for (const auto& s : states) seq += s + " ";
  ASSERT_FALSE(states.empty());
  EXPECT_EQ(states.front(), "Created") << seq;
  auto got = api->Get(kTrainingJobs, "e2e", "real");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(states.back(), "Succeeded") << seq << (*got)["status"].dump() << ReadAll(root + "/operator.log");
  EXPECT_EQ((*got)["status"].value("progress", ""), "12/12") << (*got)["status"].dump();
}

}  // namespace
}  // namespace loom::deploy::operator_
