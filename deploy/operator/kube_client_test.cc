// KubeClient against FakeApiServer over real HTTPS on loopback (self-signed
// certificate made with openssl here), bearer auth, chunked watch streams.
#include "deploy/operator/kube_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>

#include "absl/strings/escaping.h"
#include "deploy/operator/testing/fake_apiserver.h"

namespace loom::deploy::operator_ {
namespace {

std::string ReadAll(const std::string& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class KubeClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp ? tmp : "/tmp") + "/kube_client_test";
    std::system(("mkdir -p " + dir_).c_str());
    ASSERT_TRUE(testing::MakeSelfSignedCert(dir_, &cert_, &key_));
    server_ = std::make_unique<testing::FakeApiServer>(cert_, key_, "s3cret");
    auto port = server_->Start();
    ASSERT_TRUE(port.ok()) << port.status();
    cfg_.host = "127.0.0.1";
    cfg_.port = *port;
    cfg_.ca_pem = ReadAll(cert_);
    cfg_.token = "s3cret";
    cfg_.timeout_s = 10;
  }
  void TearDown() override { server_->Stop(); }

  Json Pod(const std::string& name, const std::string& job = "a") {
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}, {"labels", {{"loom.dev/job", job}}}}},
            {"spec", {{"containers", {{{"name", "c"}, {"image", "loom"}}}}}}};
  }

  std::string dir_, cert_, key_;
  std::unique_ptr<testing::FakeApiServer> server_;
  KubeConfig cfg_;
};

TEST_F(KubeClientTest, AuthAndTls) {
  KubeConfig bad = cfg_;
  bad.token = "wrong";
  EXPECT_TRUE(absl::IsUnauthenticated(KubeClient(bad).Get(kPods, "ns", "x").status()));
  // A CA that did not sign the server's certificate: the TLS handshake fails.
  std::string other_cert, other_key;
  ASSERT_TRUE(testing::MakeSelfSignedCert(dir_ + "/..", &other_cert, &other_key));
  KubeConfig wrong_ca = cfg_;
  wrong_ca.ca_pem = ReadAll(other_cert);
  auto r = KubeClient(wrong_ca).Get(kPods, "ns", "x");
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_TRUE(absl::IsNotFound(KubeClient(cfg_).Get(kPods, "ns", "x").status()));
}

TEST_F(KubeClientTest, CrudConflictsAndStatus) {
  KubeClient c(cfg_);
  auto created = c.Create(kPods, "ns", Pod("p1"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["metadata"]["namespace"], "ns");
  EXPECT_TRUE(absl::IsAlreadyExists(c.Create(kPods, "ns", Pod("p1")).status()));
  ASSERT_TRUE(c.Create(kPods, "ns", Pod("p2", "b")).ok());
  auto list = c.List(kPods, "ns", {"loom.dev/job=a"});
  ASSERT_TRUE(list.ok());
  ASSERT_EQ((*list)["items"].size(), 1u);
  // Update with the current resourceVersion works; with a stale one, 409.
  Json obj = *created;
  obj["metadata"]["labels"]["x"] = "1";
  auto updated = c.Update(kPods, "ns", obj);
  ASSERT_TRUE(updated.ok()) << updated.status();
  obj["metadata"]["labels"]["x"] = "2";
  EXPECT_TRUE(absl::IsAborted(c.Update(kPods, "ns", obj).status()));
  auto patched = c.Patch(kPods, "ns", "p1", {{"metadata", {{"labels", {{"y", "3"}}}}}});
  ASSERT_TRUE(patched.ok());
  EXPECT_EQ((*patched)["metadata"]["labels"]["x"], "1");
  EXPECT_EQ((*patched)["metadata"]["labels"]["y"], "3");

  // Status subresource: the main resource ignores status, /status only status.
  Json tj = {{"apiVersion", "loom.dev/v1"},
             {"kind", "TrainingJob"},
             {"metadata", {{"name", "j"}}},
             {"spec", {{"numNodes", 1}}},
             {"status", {{"state", "Bogus"}}}};
  auto j = c.Create(kTrainingJobs, "ns", tj);
  ASSERT_TRUE(j.ok());
  EXPECT_FALSE(j->contains("status"));
  Json js = *j;
  js["status"] = {{"state", "Running"}};
  js["spec"]["numNodes"] = 5;  // ignored by /status
  auto s = c.UpdateStatus(kTrainingJobs, "ns", js);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)["status"]["state"], "Running");
  EXPECT_EQ((*s)["spec"]["numNodes"], 1);
  Json spec_change = *s;
  spec_change["spec"]["numNodes"] = 2;
  spec_change["status"] = {{"state", "Other"}};  // ignored by the main resource
  auto u = c.Update(kTrainingJobs, "ns", spec_change);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ((*u)["status"]["state"], "Running");
  EXPECT_EQ((*u)["metadata"]["generation"], 2);
}

TEST_F(KubeClientTest, FinalizersAndOwnerGc) {
  KubeClient c(cfg_);
  Json tj = {{"apiVersion", "loom.dev/v1"},
             {"kind", "TrainingJob"},
             {"metadata", {{"name", "j"}, {"finalizers", {"loom.dev/cleanup"}}}},
             {"spec", Json::object()}};
  auto j = c.Create(kTrainingJobs, "ns", tj);
  ASSERT_TRUE(j.ok());
  Json child = Pod("child");
  child["metadata"]["ownerReferences"] = {{{"apiVersion", "loom.dev/v1"},
                                           {"kind", "TrainingJob"},
                                           {"name", "j"},
                                           {"uid", (*j)["metadata"]["uid"]},
                                           {"controller", true}}};
  ASSERT_TRUE(c.Create(kPods, "ns", child).ok());
  ASSERT_TRUE(c.Delete(kTrainingJobs, "ns", "j").ok());
  auto pending = c.Get(kTrainingJobs, "ns", "j");
  ASSERT_TRUE(pending.ok());  // held by the finalizer
  EXPECT_TRUE((*pending)["metadata"].contains("deletionTimestamp"));
  EXPECT_TRUE(c.Get(kPods, "ns", "child").ok());
  Json done = *pending;
  done["metadata"]["finalizers"] = Json::array();
  ASSERT_TRUE(c.Update(kTrainingJobs, "ns", done).ok());
  EXPECT_TRUE(absl::IsNotFound(c.Get(kTrainingJobs, "ns", "j").status()));
  EXPECT_TRUE(absl::IsNotFound(c.Get(kPods, "ns", "child").status()));  // garbage-collected
}

TEST_F(KubeClientTest, WatchReplaysAfterDisconnectAndRelistsAfterGone) {
  KubeClient c(cfg_);
  ASSERT_TRUE(c.Create(kPods, "ns", Pod("before")).ok());
  std::mutex mu;
  std::set<std::string> seen;  // names from lists and ADDED events
  std::atomic<bool> stop{false};
  std::thread t([&] {
    c.ListWatch(
        kPods, "ns", {"loom.dev/job=a"},
        [&](const Json& list) {
          std::lock_guard<std::mutex> l(mu);
          for (const Json& o : list["items"]) seen.insert(o["metadata"]["name"]);
        },
        [&](const std::string& type, const Json& obj) {
          std::lock_guard<std::mutex> l(mu);
          if (type == "ADDED") seen.insert(obj["metadata"]["name"]);
          return true;
        },
        &stop, /*watch_timeout_s=*/5);
  });
  auto wait_for = [&](const std::string& name) {
    for (int i = 0; i < 200; ++i) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (seen.count(name)) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return false;
  };
  EXPECT_TRUE(wait_for("before"));
  ASSERT_TRUE(c.Create(kPods, "ns", Pod("live")).ok());
  EXPECT_TRUE(wait_for("live"));
  // Disconnect, and create while the client reconnects: replay from its rv.
  server_->DropWatches();
  ASSERT_TRUE(c.Create(kPods, "ns", Pod("during-disconnect")).ok());
  ASSERT_TRUE(c.Create(kPods, "ns", Pod("other-label", "b")).ok());
  EXPECT_TRUE(wait_for("during-disconnect"));
  EXPECT_GE(c.watch_restarts(), 1);
  EXPECT_EQ(c.relists(), 1);
  // Compaction + disconnect: the next watch gets 410 and the client relists.
  server_->Compact();
  server_->DropWatches();
  ASSERT_TRUE(c.Create(kPods, "ns", Pod("after-compaction")).ok());
  EXPECT_TRUE(wait_for("after-compaction"));
  for (int i = 0; i < 200 && c.relists() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  EXPECT_GE(c.relists(), 2);
  stop = true;
  server_->DropWatches();
  t.join();
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(seen.count("other-label"), 0u);
}

TEST_F(KubeClientTest, Kubeconfig) {
  std::string ca64 = absl::Base64Escape(cfg_.ca_pem);
  std::string path = dir_ + "/kubeconfig";
  std::ofstream(path) << "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
                      << "clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:" << cfg_.port
                      << "\n    certificate-authority-data: " << ca64 << "\n"
                      << "users:\n- name: u\n  user:\n    token: s3cret\n"
                      << "contexts:\n- name: test\n  context: {cluster: c, user: u, namespace: ml}\n";
  auto cfg = LoadKubeconfig(path);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->ns, "ml");
  EXPECT_EQ(cfg->port, cfg_.port);
  KubeClient c(*cfg);
  ASSERT_TRUE(c.Create(kPods, cfg->ns, Pod("via-kubeconfig")).ok());
  EXPECT_FALSE(LoadKubeconfig(path, "missing").ok());
  KubeConfig parsed;
  EXPECT_FALSE(ParseServerUrl("http://x", &parsed).ok());
  ASSERT_TRUE(ParseServerUrl("https://[::1]:6443", &parsed).ok());
  EXPECT_EQ(parsed.host, "::1");
  EXPECT_EQ(parsed.port, 6443);
}

TEST_F(KubeClientTest, InClusterConfig) {
  std::string root = dir_ + "/pod";
  std::string sa = root + "/var/run/secrets/kubernetes.io/serviceaccount";
  std::system(("mkdir -p " + sa).c_str());
  std::ofstream(sa + "/token") << "s3cret\n";
  std::ofstream(sa + "/ca.crt") << cfg_.ca_pem;
  std::ofstream(sa + "/namespace") << "jobs";
  setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", std::to_string(cfg_.port).c_str(), 1);
  auto cfg = LoadInClusterConfig(root);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->ns, "jobs");
  EXPECT_TRUE(KubeClient(*cfg).Create(kPods, "jobs", Pod("in-cluster")).ok());
  unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_TRUE(absl::IsFailedPrecondition(LoadInClusterConfig(root).status()));
}

}  // namespace
}  // namespace loom::deploy::operator_
