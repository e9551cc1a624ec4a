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
#include "runtime/jobspec/jobspec.h"

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
  EXPECT_EQ(spec["resources"]["requests"]["cpu"], "8");  // quoted: a string
  EXPECT_EQ(spec["resources"]["requests"]["nvidia.com/gpu"], 4);
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
  EXPECT_EQ(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], 4);
  EXPECT_EQ(pod["spec"]["tolerations"][0]["key"], "nvidia.com/gpu");
  const Json& cmd = pod["spec"]["containers"][0]["command"];
  std::string joined;
  for (const Json& c : cmd) joined += c.get<std::string>() + " ";
  EXPECT_NE(joined.find("--cpu-slots 4 --gpus 4 "), std::string::npos) << joined;
  EXPECT_NE(joined.find("llama-small-gpu-coordinator.loom.svc:7070"), std::string::npos) << joined;
}

// The GPU sample is a job Loom accepts (as `loom submit` would read spec.job)
// whose pods ask for the GPUs its ranks need.
TEST(OperatorCommand, TheGpuSampleIsAValidCudaJob) {
  auto j = YamlToJson(ReadAll("deploy/overlays/gpu/trainingjob-gpu.yaml"));
  ASSERT_TRUE(j.ok()) << j.status();
  const Json& spec = (*j)["spec"];
  auto job = runtime::jobspec::ParseJobSpecYaml(spec["job"].dump());
  ASSERT_TRUE(job.ok()) << job.status();
  runtime::jobspec::ApplyDefaults(*job);
  EXPECT_EQ(job->device(), "cuda");
  // data.path lies on the cluster's volume: a local text file stands in.
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string text = std::string(tmp ? tmp : "/tmp") + "/gpu_sample_data.txt";
  std::ofstream(text) << "a fortune\n";
  job->mutable_data()->set_path(text);
  absl::Status valid = runtime::jobspec::ValidateJobSpec(*job);
  EXPECT_TRUE(valid.ok()) << valid;
  EXPECT_EQ(job->parallel().dp() * job->parallel().tp(),
            spec["numNodes"].get<int>() * spec["nprocPerNode"].get<int>());
  EXPECT_TRUE(CheckPodGpus(spec, *job, 8).ok()) << CheckPodGpus(spec, *job, 8);
}

// A job whose pods cannot hold its ranks' GPUs is refused naming parallel.tp
// and nvidia.com/gpu: too few per pod for tp x ranks per pod, or more than a
// node offers.
TEST(OperatorCommand, CheckPodGpusRefusesGpusTheClusterCannotProvide) {
  Json spec = Json::parse(R"({"numNodes": 2, "nprocPerNode": 4,
                              "resources": {"limits": {"nvidia.com/gpu": 2}}})");
  v1::JobSpec job;
  job.set_device("cuda");
  job.mutable_parallel()->set_dp(2);
  job.mutable_parallel()->set_tp(4);
  absl::Status s = CheckPodGpus(spec, job, 0);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(),
            "parallel.tp: dp 2 x tp 4 ranks over numNodes 2 agent pod(s) put 4 on each, 1 per GPU "
            "(resources.ranks_per_gpu): each pod needs 4 GPUs, but spec.resources asks for nvidia.com/gpu: 2");
  job.mutable_resources()->set_ranks_per_gpu(2);
  EXPECT_TRUE(CheckPodGpus(spec, job, 0).ok()) << CheckPodGpus(spec, job, 0);
  EXPECT_TRUE(CheckPodGpus(spec, job, 2).ok());
  s = CheckPodGpus(spec, job, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("parallel.tp: "), std::string::npos) << s;
  EXPECT_NE(s.message().find("each pod asks for nvidia.com/gpu: 2, more than any node offers (1"), std::string::npos)
      << s;
  spec["resources"] = Json::object();  // no GPUs asked for at all
  EXPECT_NE(CheckPodGpus(spec, job, 0).message().find("nvidia.com/gpu: 0"), std::string::npos);
  job.set_device("cpu");
  EXPECT_TRUE(CheckPodGpus(spec, job, 0).ok());
}

TEST(OperatorCommand, BadFlags) {
  EXPECT_EQ(RunOperatorCommand({"--bogus"}), 2);
  EXPECT_EQ(RunOperatorCommand({"--resync-s", "0"}), 2);
  EXPECT_EQ(RunOperatorCommand({"--max-gpus-per-node", "0"}), 2);
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
