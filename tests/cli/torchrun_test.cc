// `loom run` with torchrun's multi-node flags, two processes on loopback as
// two nodes: node 0 hosts the coordinator at --rdzv-endpoint and an agent,
// node 1 an agent that joins it; a tp=2 x dp=2 job over both matches the
// single-node run's losses. Before these flags `loom run` refused --nnodes,
// --node-rank and --rdzv-endpoint as unknown flags.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/service/testing/daemons.h"
#include "tests/testing/loom_cli.h"

namespace {

using loom::tests::testing::CliResult;
using loom::tests::testing::RunLoom;
using loom::tests::testing::Shell;

std::string Tmp(const std::string& name) { return absl::StrCat(::testing::TempDir(), "/", name); }

std::string Read(const std::string& path) {
  std::stringstream ss;
  ss << std::ifstream(path).rdbuf();
  return ss.str();
}

// Losses at each logged step, from a run folder's metrics.jsonl.
std::map<int, double> Losses(const std::string& dir) {
  std::map<int, double> out;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    int step = 0;
    double loss = 0;
    if (std::sscanf(line.c_str(), "{\"step\": %d, \"loss\": %lf", &step, &loss) == 2) out[step] = loss;
  }
  return out;
}

std::string Spec(const std::string& name) {
  std::string path = Tmp(name + ".yaml");
  std::ofstream(path) << "name: " << name
                      << "\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n"
                         "train: {steps: 12, batch_size: 4, log_every: 3}\n"
                         "parallel: {tp: 2}\n";
  return path;
}

TEST(Torchrun, TwoNodesOnLoopbackMatchOneNode) {
  const std::string spec = Spec("tr");
  const std::string one = Tmp("one_node"), two = Tmp("two_nodes");
  CliResult r1 = RunLoom(absl::StrCat("run ", spec, " --nproc-per-node 4 --run-dir ", one), 300);
  ASSERT_EQ(r1.code, 0) << r1.output;

  const int port = loom::runtime::service::testing::FreeLoopbackPort();
  ASSERT_GT(port, 0);
  const std::string token = Tmp("join-token");
  std::ofstream(token) << "torchrun-test-join-token-5f0c2a9e";
  ASSERT_EQ(Shell("chmod 600 " + token).code, 0);
  const std::string common = absl::StrCat(" --nnodes 2 --rdzv-endpoint 127.0.0.1:", port,
                                          " --nproc-per-node=2 --join-token-file ", token, " ", spec);
  const std::string n1_log = Tmp("node1.log"), n1_rc = Tmp("node1.rc");
  // Node 1 first, in the background: its agent retries until node 0's
  // coordinator listens.
  CliResult r0 = Shell(absl::StrCat("( (timeout 300 runtime/loom run --node-rank 1", common, " >", n1_log,
                                    " 2>&1; echo $? >", n1_rc, ") & timeout 300 runtime/loom run --node-rank=0 --run-dir=",
                                    two, common, " 2>&1; rc=$?; wait; exit $rc )"));
  ASSERT_EQ(r0.code, 0) << r0.output << "\nnode 1:\n" << Read(n1_log);
  EXPECT_NE(r0.output.find("4 ranks on 2 nodes"), std::string::npos) << r0.output;
  EXPECT_NE(r0.output.find("SUCCEEDED"), std::string::npos) << r0.output;
  EXPECT_EQ(Read(n1_rc), "0\n") << Read(n1_log);  // 0: ranks ran on node 1
  EXPECT_NE(Read(n1_log).find("node 1 joined"), std::string::npos) << Read(n1_log);

  auto a = Losses(one), b = Losses(two);
  ASSERT_GE(a.size(), 4u);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [step, loss] : a) {
    ASSERT_TRUE(b.count(step)) << step;
    EXPECT_NEAR(b[step], loss, 1e-6 * std::abs(loss)) << "step " << step;
  }
}

TEST(Torchrun, BadMultiNodeFlagsExit2NamingTheFlag) {
  const std::string spec = Spec("bad");
  struct Case {
    std::string args, want;
  };
  for (const Case& c : std::vector<Case>{
           {"--nnodes 2 --nproc-per-node 2", "--rdzv-endpoint: --nnodes 2 needs HOST:PORT"},
           {"--nnodes 2 --node-rank 2 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:1", "--node-rank: 2 is not below"},
           {"--nnodes 2 --rdzv-endpoint 127.0.0.1:1", "--nproc-per-node: --nnodes > 1 needs"},
           {"--nnodes 2 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:1", "--join-token-file: --nnodes > 1 needs"},
           {"--nnodes 2 --nproc-per-node 3 --rdzv-endpoint 127.0.0.1:1 --join-token-file /nonexistent",
            "--join-token-file: "},
           {"--nnodes 0", "--nnodes: expected a positive integer, got '0'"},
       }) {
    CliResult r = RunLoom(absl::StrCat("run ", spec, " ", c.args), 30);
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.want), std::string::npos) << c.args << ": " << r.output;
  }
  // The ranks of all nodes make the world: 2 nodes x 1 rank do not hold tp 4.
  const std::string token = Tmp("bad-token");
  std::ofstream(token) << "torchrun-test-join-token-5f0c2a9e";
  ASSERT_EQ(Shell("chmod 600 " + token).code, 0);
  CliResult r = RunLoom(absl::StrCat("run ", spec, " --tp 4 --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:1",
                                     " --join-token-file ", token), 30);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--nproc-per-node: 2 nodes x 1 ranks do not divide into tp 4 groups"), std::string::npos)
      << r.output;
}

}  // namespace
