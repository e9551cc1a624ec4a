// Reconciler against FakeApiServer over HTTPS (KubeClient) with a fake
// coordinator: idempotence (N reconciles == 1), 20 operator "kills" at every
// point of a reconcile then a restart converging to the same state, status
// mapping, suspend/resume, finalizer cleanup, TTL, gang timeout.
#include "deploy/operator/reconciler.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "deploy/operator/kube_client.h"
#include "deploy/operator/testing/fake_apiserver.h"

namespace loom::deploy::operator_ {
namespace {

// Calls left before the "operator process dies" (-1: unlimited). Shared by the
// API wrapper and the fake coordinator so a kill can land anywhere.
struct Budget {
  int left = -1;
  bool Take() {
    if (left == 0) return false;
    if (left > 0) --left;
    return true;
  }
};

absl::Status Killed() { return absl::UnavailableError("operator killed"); }

class FaultyApi : public KubeApi {
 public:
  FaultyApi(KubeApi* inner, Budget* b) : in_(inner), b_(b) {}
  absl::StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& n) override {
    if (!b_->Take()) return Killed();
    return in_->Get(r, ns, n);
  }
  absl::StatusOr<Json> List(const Resource& r, const std::string& ns, const ListOptions& o) override {
    if (!b_->Take()) return Killed();
    return in_->List(r, ns, o);
  }
  absl::StatusOr<Json> Create(const Resource& r, const std::string& ns, const Json& o) override {
    if (!b_->Take()) return Killed();
    return in_->Create(r, ns, o);
  }
  absl::StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& o) override {
    if (!b_->Take()) return Killed();
    return in_->Update(r, ns, o);
  }
  absl::StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns, const Json& o) override {
    if (!b_->Take()) return Killed();
    return in_->UpdateStatus(r, ns, o);
  }
  absl::StatusOr<Json> Patch(const Resource& r, const std::string& ns, const std::string& n, const Json& p) override {
    if (!b_->Take()) return Killed();
    return in_->Patch(r, ns, n, p);
  }
  absl::Status Delete(const Resource& r, const std::string& ns, const std::string& n) override {
    if (!b_->Take()) return Killed();
    return in_->Delete(r, ns, n);
  }

 private:
  KubeApi* in_;
  Budget* b_;
};

// The coordinator's job table, shared by every connection.
struct FakeCoordinatorState {
  std::map<std::string, std::string> by_key;  // idempotency key -> job id
  std::map<std::string, v1::JobStatus> jobs;
  std::map<std::string, v1::JobSpec> specs;
  int submits = 0, cancels = 0;
  bool reachable = true;
  std::string token_seen;
  std::string address_seen;
};

class FakeCoordinator : public CoordinatorClient {
 public:
  FakeCoordinator(FakeCoordinatorState* s, Budget* b) : s_(s), b_(b) {}
  absl::StatusOr<v1::JobStatus> Submit(const v1::JobSpec& spec, const std::string& key) override {
    if (!b_->Take()) return Killed();
    s_->submits++;
    auto it = s_->by_key.find(key);
    if (it != s_->by_key.end()) return s_->jobs[it->second];
    std::string id = absl::StrCat("job-", s_->jobs.size() + 1);
    s_->by_key[key] = id;
    v1::JobStatus st;
    st.set_job_id(id);
    st.set_state(v1::PENDING);
    st.set_last_checkpoint_step(-1);
    st.set_root_cause_rank(-1);
    s_->jobs[id] = st;
    s_->specs[id] = spec;
    return st;
  }
  absl::StatusOr<v1::JobStatus> Get(const std::string& id) override {
    if (!b_->Take()) return Killed();
    auto it = s_->jobs.find(id);
    if (it == s_->jobs.end()) return absl::NotFoundError(id);
    return it->second;
  }
  absl::Status Cancel(const std::string& id) override {
    if (!b_->Take()) return Killed();
    auto it = s_->jobs.find(id);
    if (it == s_->jobs.end()) return absl::NotFoundError(id);
    s_->cancels++;
    it->second.set_state(v1::CANCELLED);
    return absl::OkStatus();
  }

 private:
  FakeCoordinatorState* s_;
  Budget* b_;
};

std::string ReadAll(const std::string& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

Json SampleJob(const std::string& name) {
  return Json::parse(R"({
    "apiVersion": "loom.dev/v1", "kind": "TrainingJob",
    "metadata": {"name": ")" +
                     name + R"("},
    "spec": {
      "numNodes": 2, "nprocPerNode": 2,
      "resources": {"requests": {"cpu": "2", "memory": "2Gi"}},
      "runPolicy": {"backoffLimit": 3, "cleanPodPolicy": "All"},
      "scheduling": {"priority": 5},
      "template": {"metadata": {"labels": {"team": "ml"}},
                   "spec": {"nodeSelector": {"pool": "cpu"},
                            "containers": [{"name": "agent", "env": [{"name": "X", "value": "1"}]}]}},
      "job": {"model": {"family": "gpt", "n_layer": 2, "n_head": 4, "d_model": 128, "seq_len": 64, "vocab": 256},
              "data": {"path": "/usr/share/games/fortunes"},
              "train": {"steps": 300, "batch_size": 8, "lr": 0.003},
              "parallel": {"dp": 2, "tp": 2},
              "checkpoint": {"every": 50, "dir": "/ckpt/x"},
              "device": "cpu"}
    }})");
}

class ReconcilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string dir = std::string(tmp ? tmp : "/tmp") + "/reconciler_test";
    std::system(("mkdir -p " + dir).c_str());
    std::string cert, key;
    ASSERT_TRUE(testing::MakeSelfSignedCert(dir, &cert, &key));
    server_ = std::make_unique<testing::FakeApiServer>(cert, key, "tok");
    auto port = server_->Start();
    ASSERT_TRUE(port.ok());
    KubeConfig cfg;
    cfg.host = "127.0.0.1";
    cfg.port = *port;
    cfg.ca_pem = ReadAll(cert);
    cfg.token = "tok";
    client_ = std::make_unique<KubeClient>(cfg);
  }
  void TearDown() override {
    client_.reset();  // close its keep-alive connection first
    server_->Stop();
  }

  ReconcilerOptions Opts() {
    ReconcilerOptions o;
    o.default_image = "loom:test";
    o.now = [this] { return now_; };
    return o;
  }
  CoordinatorConnector Connector(Budget* b) {
    return [this, b](const std::string& address, const std::string& token) -> std::unique_ptr<CoordinatorClient> {
      if (!coord_.reachable) return nullptr;
      coord_.token_seen = token;
      coord_.address_seen = address;
      return std::make_unique<FakeCoordinator>(&coord_, b);
    };
  }
  // Reconciles (a fresh operator) until a pass makes no write.
  void Converge(const std::string& ns, const std::string& name, int max_passes = 10) {
    Budget unlimited;
    Reconciler r(client_.get(), Connector(&unlimited), Opts());
    for (int i = 0; i < max_passes; ++i) {
      int64_t before = server_->resource_version();
      auto res = r.Reconcile(ns, name);
      ASSERT_TRUE(res.ok()) << res.status();
      if (server_->resource_version() == before) return;
    }
    FAIL() << "no convergence after " << max_passes << " passes";
  }
  std::string Col(const std::string& ns, const std::string& plural, const std::string& prefix = "/api/v1") {
    return absl::StrCat(prefix, "/namespaces/", ns, "/", plural);
  }
  Json Job(const std::string& ns, const std::string& name) {
    auto j = client_->Get(kTrainingJobs, ns, name);
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? *j : Json();
  }
  // Children with server- and run-specific fields removed, keyed by kind/name.
  std::map<std::string, Json> Children(const std::string& ns) {
    std::map<std::string, Json> out;
    auto add = [&](const std::string& kind, const std::string& col) {
      for (Json o : server_->Objects(col)) {
        Json& md = o["metadata"];
        for (const char* k : {"uid", "resourceVersion", "creationTimestamp", "namespace"}) md.erase(k);
        if (md.contains("ownerReferences"))
          for (Json& r : md["ownerReferences"]) r.erase("uid");
        o.erase("data");  // random token
        // The hash covers the owner's uid and the namespace: equal state in
        // another namespace has another hash. (Same-namespace idempotence
        // compares hashes too: NReconcilesEqualOne.)
        if (md.contains("annotations")) md["annotations"].erase(kHashAnnotation);
        std::string text = o.dump();
        for (size_t p; (p = text.find("." + ns + ".svc")) != std::string::npos;)
          text.replace(p, ns.size() + 5, ".NS.svc");
        out[kind + "/" + md["name"].get<std::string>()] = Json::parse(text);
      }
    };
    add("Secret", Col(ns, "secrets"));
    add("Service", Col(ns, "services"));
    add("Deployment", Col(ns, "deployments", "/apis/apps/v1"));
    add("Pod", Col(ns, "pods"));
    return out;
  }
  Json NormalStatus(Json st) {
    st.erase("jobId");
    for (Json& c : st["conditions"]) c.erase("lastTransitionTime");
    return st;
  }
  void SetJobState(const std::string& ns, const std::string& name, v1::JobState state) {
    std::string id = Job(ns, name)["status"]["jobId"];
    coord_.jobs[id].set_state(state);
  }

  std::unique_ptr<testing::FakeApiServer> server_;
  std::unique_ptr<KubeClient> client_;
  FakeCoordinatorState coord_;
  absl::Time now_ = absl::FromUnixSeconds(1800000000);
};

TEST_F(ReconcilerTest, CreatesOwnedLabelledChildrenAndSubmitsOnce) {
  ASSERT_TRUE(client_->Create(kTrainingJobs, "ns", SampleJob("tj")).ok());
  Converge("ns", "tj");
  auto kids = Children("ns");
  ASSERT_EQ(kids.size(), 5u);  // secret, service, deployment, 2 agent pods
  for (const auto& [k, o] : kids) {
    EXPECT_EQ(o["metadata"]["labels"][kJobLabel], "tj") << k;
    EXPECT_EQ(o["metadata"]["ownerReferences"][0]["kind"], "TrainingJob") << k;
    EXPECT_TRUE(o["metadata"]["ownerReferences"][0]["controller"].get<bool>()) << k;
  }
  const Json& pod = kids["Pod/tj-agent-1"];
  EXPECT_EQ(pod["spec"]["nodeSelector"]["pool"], "cpu");
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "ml");
  EXPECT_EQ(pod["spec"]["containers"][0]["env"].size(), 3u);  // join token, node rank, overlay X
  // Agents get the join token, never the user token.
  const Json& env0 = pod["spec"]["containers"][0]["env"][0];
  EXPECT_EQ(env0["name"], "LOOM_JOIN_TOKEN");
  EXPECT_EQ(env0["valueFrom"]["secretKeyRef"]["key"], "join-token");
  EXPECT_EQ(pod.dump().find("\"key\":\"token\""), std::string::npos) << pod.dump();
  auto secret = client_->Get(kSecrets, "ns", "tj-token");
  ASSERT_TRUE(secret.ok()) << secret.status();
  EXPECT_FALSE((*secret)["data"].value("join-token", "").empty());
  EXPECT_NE((*secret)["data"].value("join-token", ""), (*secret)["data"].value("token", ""));
  EXPECT_EQ(pod["spec"]["containers"][0]["image"], "loom:test");
  EXPECT_EQ(kids["Deployment/tj-coordinator"]["spec"]["replicas"], 1);
  // The Service selects the coordinator Deployment's pods.
  for (const auto& [k, v] : kids["Service/tj-coordinator"]["spec"]["selector"].items())
    EXPECT_EQ(kids["Deployment/tj-coordinator"]["spec"]["template"]["metadata"]["labels"][k], v);
  Json job = Job("ns", "tj");
  EXPECT_EQ(job["metadata"]["finalizers"][0], kFinalizer);
  EXPECT_EQ(job["status"]["state"], "Created");
  EXPECT_EQ(coord_.jobs.size(), 1u);
  const v1::JobSpec& spec = coord_.specs.begin()->second;
  EXPECT_EQ(spec.max_restarts(), 3);
  EXPECT_EQ(spec.priority(), 5);
  EXPECT_EQ(spec.parallel().tp(), 2);
  EXPECT_EQ(spec.name(), "tj");
  EXPECT_EQ(coord_.token_seen.size(), 64u);  // from the Secret
}

TEST_F(ReconcilerTest, NReconcilesEqualOne) {
  ASSERT_TRUE(client_->Create(kTrainingJobs, "ns", SampleJob("tj")).ok());
  Converge("ns", "tj");
  auto once = Children("ns");
  Json status_once = Job("ns", "tj")["status"];
  int64_t rv = server_->resource_version();
  Budget unlimited;
  Reconciler r(client_.get(), Connector(&unlimited), Opts());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(r.Reconcile("ns", "tj").ok());
  EXPECT_EQ(server_->resource_version(), rv) << "a no-change reconcile wrote";
  EXPECT_EQ(Children("ns"), once);
  EXPECT_EQ(Job("ns", "tj")["status"], status_once);
  EXPECT_EQ(coord_.jobs.size(), 1u);
}

TEST_F(ReconcilerTest, KilledMidReconcile20TimesConverges) {
  ASSERT_TRUE(client_->Create(kTrainingJobs, "ref", SampleJob("tj")).ok());
  Converge("ref", "tj");
  auto want = Children("ref");
  Json want_status = NormalStatus(Job("ref", "tj")["status"]);
  for (int k = 0; k < 20; ++k) {
    std::string ns = absl::StrCat("kill", k);
    ASSERT_TRUE(client_->Create(kTrainingJobs, ns, SampleJob("tj")).ok());
    // Several operator lives, each killed after k API/coordinator calls...
    for (int life = 0; life < 3; ++life) {
      Budget b;
      b.left = k;
      FaultyApi faulty(client_.get(), &b);
      Reconciler r(&faulty, Connector(&b), Opts());
      (void)r.Reconcile(ns, "tj");
    }
    // ...then one that lives.
    Converge(ns, "tj");
    EXPECT_EQ(Children(ns), want) << "after kill at call " << k;
    EXPECT_EQ(NormalStatus(Job(ns, "tj")["status"]), want_status) << "after kill at call " << k;
  }
  // One Loom job per TrainingJob: retried submissions reuse the key.
  EXPECT_EQ(coord_.jobs.size(), 21u);
}

TEST_F(ReconcilerTest, StatusFollowsTheLoomJob) {
  ASSERT_TRUE(client_->Create(kTrainingJobs, "ns", SampleJob("tj")).ok());
  Converge("ns", "tj");
  std::string id = Job("ns", "tj")["status"]["jobId"];
  coord_.jobs[id].set_state(v1::RUNNING);
  coord_.jobs[id].set_current_step(40);
  Converge("ns", "tj");
  Json st = Job("ns", "tj")["status"];
  EXPECT_EQ(st["state"], "Running");
  EXPECT_EQ(st["progress"], "40/300");
  EXPECT_TRUE(st.contains("startTime"));
  now_ += absl::Seconds(10);
  coord_.jobs[id].set_state(v1::RESTARTING);
  coord_.jobs[id].set_restart_count(1);
  coord_.jobs[id].set_last_checkpoint_step(50);
  coord_.jobs[id].set_root_cause_rank(3);
  coord_.jobs[id].set_root_cause("rank 3 killed");
  Converge("ns", "tj");
  st = Job("ns", "tj")["status"];
  EXPECT_EQ(st["state"], "Restarting");
  EXPECT_EQ(st["restartCount"], 1);
  EXPECT_EQ(st["lastCheckpointStep"], 50);
  EXPECT_EQ(st["rootCauseRank"], 3);
  std::map<std::string, Json> conds;
  for (const Json& c : st["conditions"]) conds[c["type"]] = c;
  EXPECT_EQ(conds["Restarting"]["status"], "True");
  EXPECT_EQ(conds["Running"]["status"], "False");
  EXPECT_EQ(conds["Running"]["lastTransitionTime"], "2027-01-15T08:00:10Z");
  EXPECT_EQ(conds["Created"]["status"], "True");
  EXPECT_EQ(conds["Restarting"]["observedGeneration"], 1);
  coord_.jobs[id].set_state(v1::RUNNING);
  Converge("ns", "tj");
  coord_.jobs[id].set_state(v1::SUCCEEDED);
  Converge("ns", "tj");
  st = Job("ns", "tj")["status"];
  EXPECT_EQ(st["state"], "Succeeded");
  EXPECT_TRUE(st.contains("completionTime"));
  // cleanPodPolicy All: agent pods gone once finished; coordinator stays.
  EXPECT_TRUE(server_->Objects(Col("ns", "pods")).empty());
  EXPECT_EQ(server_->Objects(Col("ns", "deployments", "/apis/apps/v1")).size(), 1u);
}

TEST_F(ReconcilerTest, DeadAgentPodIsReplaced) {
  ASSERT_TRUE(client_->Create(kTrainingJobs, "ns", SampleJob("tj")).ok());
  Converge("ns", "tj");
  std::string uid_before = server_->GetObject(Col("ns", "pods"), "tj-agent-0")->at("metadata")["uid"];
  ASSERT_TRUE(server_->SetStatus(Col("ns", "pods"), "tj-agent-0", {{"phase", "Failed"}}).ok());
  Converge("ns", "tj");
  auto pod = server_->GetObject(Col("ns", "pods"), "tj-agent-0");
  ASSERT_TRUE(pod.ok());
  EXPECT_NE((*pod)["metadata"]["uid"], uid_before);
}

TEST_F(ReconcilerTest, SuspendScalesToZeroAndResumeResubmits) {
  ASSERT_TRUE(client_->Create(kTrainingJobs, "ns", SampleJob("tj")).ok());
  Converge("ns", "tj");
  SetJobState("ns", "tj", v1::RUNNING);
  Converge("ns", "tj");
  std::string first = Job("ns", "tj")["status"]["jobId"];
  ASSERT_TRUE(client_->Patch(kTrainingJobs, "ns", "tj", {{"spec", {{"runPolicy", {{"suspend", true}}}}}}).ok());
  Converge("ns", "tj");
  Json st = Job("ns", "tj")["status"];
  EXPECT_EQ(st["state"], "Suspended");
  EXPECT_EQ(st["observedGeneration"], 2);
  EXPECT_EQ(coord_.jobs[first].state(), v1::CANCELLED);
  EXPECT_TRUE(server_->Objects(Col("ns", "pods")).empty());
  auto dep = server_->GetObject(Col("ns", "deployments", "/apis/apps/v1"), "tj-coordinator");
  EXPECT_EQ((*dep)["spec"]["replicas"], 0);
  ASSERT_TRUE(client_->Patch(kTrainingJobs, "ns", "tj", {{"spec", {{"runPolicy", {{"suspend", false}}}}}}).ok());
  Converge("ns", "tj");
  st = Job("ns", "tj")["status"];
  EXPECT_NE(st["jobId"], first);
  EXPECT_EQ(st["state"], "Created");
  EXPECT_EQ(server_->Objects(Col("ns", "pods")).size(), 2u);
  EXPECT_EQ(coord_.jobs.size(), 2u);
  // Same checkpoint dir: the new attempt resumes from the latest checkpoint.
  EXPECT_EQ(coord_.specs[st["jobId"]].checkpoint().dir(), "/ckpt/x");
}

TEST_F(ReconcilerTest, DeletionCancelsAndCleansUpBeforeTheJobGoes) {
  ASSERT_TRUE(client_->Create(kTrainingJobs, "ns", SampleJob("tj")).ok());
  Converge("ns", "tj");
  SetJobState("ns", "tj", v1::RUNNING);
  Converge("ns", "tj");
  std::string id = Job("ns", "tj")["status"]["jobId"];
  ASSERT_TRUE(client_->Delete(kTrainingJobs, "ns", "tj").ok());
  EXPECT_EQ(server_->Objects(Col("ns", "pods")).size(), 2u);  // held by the finalizer
  Converge("ns", "tj");
  EXPECT_TRUE(absl::IsNotFound(client_->Get(kTrainingJobs, "ns", "tj").status()));
  EXPECT_TRUE(Children("ns").empty());
  EXPECT_EQ(coord_.jobs[id].state(), v1::CANCELLED);
}

TEST_F(ReconcilerTest, DeletionCancelsAtTheAnnotatedCoordinatorAddress) {
  Json j = SampleJob("tj");
  j["metadata"]["annotations"] = {{"loom.dev/coordinator-address", "10.1.2.3:7070"}};
  ASSERT_TRUE(client_->Create(kTrainingJobs, "ns", j).ok());
  Converge("ns", "tj");
  SetJobState("ns", "tj", v1::RUNNING);
  Converge("ns", "tj");
  std::string id = Job("ns", "tj")["status"]["jobId"];
  coord_.address_seen.clear();
  ASSERT_TRUE(client_->Delete(kTrainingJobs, "ns", "tj").ok());
  Converge("ns", "tj");
  EXPECT_TRUE(absl::IsNotFound(client_->Get(kTrainingJobs, "ns", "tj").status()));
  EXPECT_EQ(coord_.address_seen, "10.1.2.3:7070");
  EXPECT_EQ(coord_.jobs[id].state(), v1::CANCELLED);
}

// A token Secret without data.token (edited by hand) leaves the cancel out;
// the children still go.
TEST_F(ReconcilerTest, DeletionWithoutATokenStillCleansUp) {
  ASSERT_TRUE(client_->Create(kTrainingJobs, "ns", SampleJob("tj")).ok());
  Converge("ns", "tj");
  SetJobState("ns", "tj", v1::RUNNING);
  Converge("ns", "tj");
  std::string id = Job("ns", "tj")["status"]["jobId"];
  auto secret = client_->Get(kSecrets, "ns", "tj-token");
  ASSERT_TRUE(secret.ok()) << secret.status();
  secret->erase("data");
  ASSERT_TRUE(client_->Update(kSecrets, "ns", *secret).ok());
  ASSERT_TRUE(client_->Delete(kTrainingJobs, "ns", "tj").ok());
  Converge("ns", "tj");
  EXPECT_TRUE(absl::IsNotFound(client_->Get(kTrainingJobs, "ns", "tj").status()));
  EXPECT_TRUE(Children("ns").empty());
  EXPECT_EQ(coord_.jobs[id].state(), v1::RUNNING);  // nobody could cancel it
}

TEST_F(ReconcilerTest, TtlDeletesFinishedJob) {
  Json j = SampleJob("tj");
  j["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 60;
  ASSERT_TRUE(client_->Create(kTrainingJobs, "ns", j).ok());
  Converge("ns", "tj");
  SetJobState("ns", "tj", v1::FAILED);
  Converge("ns", "tj");
  EXPECT_EQ(Job("ns", "tj")["status"]["state"], "Failed");
  now_ += absl::Seconds(61);
  Converge("ns", "tj");
  EXPECT_TRUE(absl::IsNotFound(client_->Get(kTrainingJobs, "ns", "tj").status()));
  EXPECT_TRUE(Children("ns").empty());
}

TEST_F(ReconcilerTest, GangTimeoutRecreatesAgentPods) {
  Json j = SampleJob("tj");
  j["spec"]["scheduling"]["gang"] = {{"enabled", true}, {"timeoutSeconds", 30}};
  ASSERT_TRUE(client_->Create(kTrainingJobs, "ns", j).ok());
  Converge("ns", "tj");
  std::string uid0 = server_->GetObject(Col("ns", "pods"), "tj-agent-0")->at("metadata")["uid"];
  ASSERT_TRUE(server_
                  ->SetStatus(Col("ns", "pods"), "tj-agent-0",
                              {{"phase", "Running"}, {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}})
                  .ok());
  now_ += absl::Seconds(31);  // tj-agent-1 never became ready
  Converge("ns", "tj");
  EXPECT_NE(server_->GetObject(Col("ns", "pods"), "tj-agent-0")->at("metadata")["uid"], uid0);
  bool gang_timeout = false;
  Json st = Job("ns", "tj")["status"];
  for (const Json& c : st["conditions"]) gang_timeout |= c["reason"] == "GangTimeout";
  EXPECT_TRUE(gang_timeout) << Job("ns", "tj")["status"].dump();
}

TEST_F(ReconcilerTest, UnreachableCoordinatorRequeuesWithoutFailing) {
  coord_.reachable = false;
  ASSERT_TRUE(client_->Create(kTrainingJobs, "ns", SampleJob("tj")).ok());
  Converge("ns", "tj");
  Json st = Job("ns", "tj")["status"];
  EXPECT_EQ(st["state"], "Created");
  EXPECT_FALSE(st.contains("jobId"));
  coord_.reachable = true;
  Converge("ns", "tj");
  EXPECT_EQ(coord_.jobs.size(), 1u);
}

TEST_F(ReconcilerTest, InvalidLoomSpecFailsTheJob) {
  Json j = SampleJob("tj");
  j["spec"]["job"]["model"]["n_head"] = "four";
  ASSERT_TRUE(client_->Create(kTrainingJobs, "ns", j).ok());
  Converge("ns", "tj");
  Json st = Job("ns", "tj")["status"];
  EXPECT_EQ(st["state"], "Failed");
  bool invalid = false;
  for (const Json& c : st["conditions"]) invalid |= c["reason"] == "InvalidSpec";
  EXPECT_TRUE(invalid) << st.dump();
  EXPECT_TRUE(coord_.jobs.empty());
}

TEST_F(ReconcilerTest, CudaJobWithoutItsGpusFailsBeforeSubmit) {
  Json j = SampleJob("tj");
  j["spec"]["job"]["device"] = "cuda";
  j["spec"]["resources"] = Json::parse(R"({"limits": {"nvidia.com/gpu": 1}})");
  ASSERT_TRUE(client_->Create(kTrainingJobs, "ns", j).ok());
  Converge("ns", "tj");
  Json st = Job("ns", "tj")["status"];
  EXPECT_EQ(st["state"], "Failed");
  std::string message;
  for (const Json& c : st["conditions"])
    if (c["reason"] == "GpusUnavailable") message = c["message"];
  EXPECT_EQ(message.rfind("parallel.tp: dp 2 x tp 2 ranks over numNodes ", 0), 0u) << st.dump();
  EXPECT_NE(message.find("but spec.resources asks for nvidia.com/gpu: 1"), std::string::npos) << st.dump();
  EXPECT_TRUE(coord_.jobs.empty());
}

}  // namespace
}  // namespace loom::deploy::operator_
