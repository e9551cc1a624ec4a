// `loom_operator`: flags, YAML->JSON, --render of the sample TrainingJobs, and
// --once against the fake API server through a kubeconfig over HTTPS.
#include "deploy/operator/operator_command.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "deploy/operator/kube_client.h"
#include "deploy/operator/reconciler.h"
#include "deploy/operator/testing/fake_apiserver.h"

namespace loom::deploy::operator_ {
namespace {

std::string ReadAll(const std::string& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(OperatorCommand, YamlToJsonKeepsTypes) {
  auto j = YamlToJson(ReadAll("deploy/overlays/gpu/trainingjob-gpu.yaml"));
  ASSERT_TRUE(j.ok()) << j.status();
  const Json& spec = (*j)["spec"];
  EXPECT_EQ(spec["numNodes"], 2);
  EXPECT_EQ(spec["resources"]["requests"]["cpu"], "16");  // quoted: a string
  EXPECT_EQ(spec["resources"]["requests"]["nvidia.com/gpu"], 8);
  EXPECT_EQ(spec["job"]["train"]["lr"], 0.003);
  EXPECT_EQ(spec["scheduling"]["gang"]["podGroup"], true);
  EXPECT_FALSE(YamlToJson("a: [").ok());
}

TEST(OperatorCommand, DesiredChildrenOfTheGpuSample) {
  auto j = YamlToJson(ReadAll("deploy/overlays/gpu/trainingjob-gpu.yaml"));
  ASSERT_TRUE(j.ok());
  (*j)["metadata"]["namespace"] = "loom";
  (*j)["metadata"]["uid"] = "u1";
  Json kids = Reconciler::DesiredChildren(*j, {});
  std::map<std::string, Json> by;
  for (const Json& k : kids) by[k["kind"].get<std::string>() + "/" + k["metadata"]["name"].get<std::string>()] = k;
  ASSERT_TRUE(by.count("PodGroup/llama-small-gpu"));
  EXPECT_EQ(by["PodGroup/llama-small-gpu"]["spec"]["minMember"], 2);
  const Json& pod = by["Pod/llama-small-gpu-agent-1"];
  EXPECT_EQ(pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "llama-small-gpu");
  EXPECT_EQ(pod["spec"]["schedulerName"], "scheduler-plugins-scheduler");
  EXPECT_EQ(pod["spec"]["containers"][0]["image"], "ghcr.io/loom-dev/loom:cuda");
  EXPECT_EQ(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], 8);
  EXPECT_EQ(pod["spec"]["tolerations"][0]["key"], "nvidia.com/gpu");
  const Json& cmd = pod["spec"]["containers"][0]["command"];
  std::string joined;
  for (const Json& c : cmd) joined += c.get<std::string>() + " ";
  EXPECT_NE(joined.find("--gpus 8"), std::string::npos) << joined;
  EXPECT_NE(joined.find("llama-small-gpu-coordinator.loom.svc:7070"), std::string::npos) << joined;
}

TEST(OperatorCommand, BadFlags) {
  EXPECT_EQ(RunOperatorCommand({"--bogus"}), 2);
  EXPECT_EQ(RunOperatorCommand({"--resync-s", "0"}), 2);
  EXPECT_EQ(RunOperatorCommand({"--render", "/nonexistent.yaml"}), 2);
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBECONFIG");
  EXPECT_EQ(RunOperatorCommand({}), 1);  // no credentials
}

TEST(OperatorCommand, OnceAgainstTheFakeApiServer) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/operator_command_test";
  std::system(("mkdir -p " + dir).c_str());
  std::string cert, key;
  ASSERT_TRUE(testing::MakeSelfSignedCert(dir, &cert, &key));
  testing::FakeApiServer server(cert, key, "t0k");
  auto port = server.Start();
  ASSERT_TRUE(port.ok());
  std::string kubeconfig = dir + "/kubeconfig";
  std::ofstream(kubeconfig) << "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
                            << "clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:" << *port
                            << "\n    certificate-authority-data: " << absl::Base64Escape(ReadAll(cert)) << "\n"
                            << "users:\n- name: u\n  user:\n    token: t0k\n"
                            << "contexts:\n- name: t\n  context: {cluster: c, user: u, namespace: jobs}\n";
  auto cfg = LoadKubeconfig(kubeconfig);
  ASSERT_TRUE(cfg.ok());
  {
    KubeClient c(*cfg);
    auto j = YamlToJson(ReadAll("deploy/overlays/cpu/trainingjob-cpu.yaml"));
    ASSERT_TRUE(j.ok());
    // No coordinator listens here: submission fails fast and is retried later.
    (*j)["metadata"]["annotations"]["loom.dev/coordinator-address"] = "127.0.0.1:1";
    ASSERT_TRUE(c.Create(kTrainingJobs, "jobs", *j).ok());
  }
  EXPECT_EQ(RunOperatorCommand({"--kubeconfig", kubeconfig, "--once", "--image=loom:e2e"}), 0);
  auto pods = server.Objects("/api/v1/namespaces/jobs/pods");
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_EQ(pods[0]["spec"]["containers"][0]["image"], "loom:e2e");
  auto job = server.GetObject("/apis/loom.dev/v1/namespaces/jobs/trainingjobs", "gpt-small-cpu");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["status"]["state"], "Created");
  server.Stop();
}

}  // namespace
}  // namespace loom::deploy::operator_
