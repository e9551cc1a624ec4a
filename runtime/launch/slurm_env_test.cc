#include "runtime/launch/slurm_env.h"

#include <map>

#include "gtest/gtest.h"

namespace loom::runtime::launch {
namespace {

using Strings = std::vector<std::string>;

TEST(ExpandHostlist, NamesRangesAndPadding) {
  EXPECT_EQ(*ExpandHostlist("n1"), Strings({"n1"}));
  EXPECT_EQ(*ExpandHostlist("n[1-3]"), Strings({"n1", "n2", "n3"}));
  EXPECT_EQ(*ExpandHostlist("gpu[08-10,3],login"), Strings({"gpu08", "gpu09", "gpu10", "gpu3", "login"}));
  EXPECT_EQ(*ExpandHostlist("a[1-2]-ib,b"), Strings({"a1-ib", "a2-ib", "b"}));
}

TEST(ExpandHostlist, MalformedListsNameTheVariable) {
  for (const char* bad : {"", "n[1-2", "n1-2]", "n[2-1]", "n[a-b]", "n[1-]", "n[]", "n[1-2][3]", "n1,,n2", "n[[1]]",
                          "n[1-2-3]", "n[-1]"}) {
    auto got = ExpandHostlist(bad);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(got.status().message().find("SLURM_NODELIST"), std::string::npos) << got.status();
  }
}

GetEnv Env(const std::map<std::string, std::string>& m) {
  return [m](const char* name) -> const char* {
    auto it = m.find(name);
    return it == m.end() ? nullptr : it->second.c_str();
  };
}

std::map<std::string, std::string> Step() {
  return {{"SLURM_JOB_ID", "42"},       {"SLURM_STEP_ID", "0"},           {"SLURM_NODELIST", "n[1-2]"},
          {"SLURM_NNODES", "2"},        {"SLURM_NODEID", "1"},            {"SLURM_NTASKS", "2"},
          {"SLURM_PROCID", "1"},        {"SLURM_LOCALID", "0"},           {"SLURM_CPUS_ON_NODE", "4"},
          {"SLURM_SUBMIT_DIR", "/shared/me"},
          {"SLURM_CLUSTER_NAME", "c1"}, {"SLURM_SRUN_COMM_HOST", "10.0.0.9"}, {"SLURM_SRUN_COMM_PORT", "40363"}};
}

TEST(SlurmFromEnv, OutsideSlurmIsNothing) {
  auto a = SlurmFromEnv(Env({}));
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->has_value());
}

TEST(SlurmFromEnv, MapsAStepOntoOneNodePerTask) {
  auto a = SlurmFromEnv(Env(Step()));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->has_value());
  EXPECT_EQ((*a)->nodes, Strings({"n1", "n2"}));
  EXPECT_EQ((*a)->cpus_on_node, 4);
  EXPECT_EQ((*a)->gpus_on_node, -1);
  auto g = NodeGroupFromSlurm(**a);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->nnodes, 2);
  EXPECT_EQ(g->node_rank, 1);
  EXPECT_EQ(g->node_name, "n2");
  EXPECT_EQ(g->rdzv_dir, "/shared/me/.loom-slurm/c1.42.0.0.10.0.0.9-40363");
  EXPECT_EQ(g->local_cpus, 4);
}

TEST(SlurmFromEnv, StepVariablesWinOverTheJobs) {
  auto m = Step();
  m["SLURM_STEP_NODELIST"] = "n2";
  m["SLURM_STEP_NUM_NODES"] = "1";
  m["SLURM_STEP_NUM_TASKS"] = "1";
  m["SLURM_NODEID"] = "0";
  m["SLURM_RESTART_COUNT"] = "3";
  m.erase("SLURM_CLUSTER_NAME");
  m.erase("SLURM_SRUN_COMM_PORT");
  m["SLURM_GPUS_ON_NODE"] = "8";
  auto a = SlurmFromEnv(Env(m));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->nodes, Strings({"n2"}));
  EXPECT_EQ((*a)->gpus_on_node, 8);
  auto g = NodeGroupFromSlurm(**a);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->node_name, "n2");
  EXPECT_EQ(g->rdzv_dir, "/shared/me/.loom-slurm/slurm.42.0.3");
}

TEST(SlurmFromEnv, BadValuesNameTheVariable) {
  const std::vector<std::pair<std::pair<std::string, std::string>, std::string>> cases = {
      {{"SLURM_NODELIST", "n[1-2"}, "SLURM_NODELIST"},
      {{"SLURM_NODELIST", "n[1-3]"}, "SLURM_NNODES is 2"},
      {{"SLURM_NNODES", "two"}, "SLURM_NNODES"},
      {{"SLURM_NODEID", "2"}, "SLURM_NODEID"},
      {{"SLURM_NODEID", "-1"}, "SLURM_NODEID"},
      {{"SLURM_CPUS_ON_NODE", "x"}, "SLURM_CPUS_ON_NODE"},
      {{"SLURM_GPUS_ON_NODE", "-2"}, "SLURM_GPUS_ON_NODE"},
  };
  for (const auto& [kv, want] : cases) {
    auto m = Step();
    m[kv.first] = kv.second;
    auto a = SlurmFromEnv(Env(m));
    ASSERT_FALSE(a.ok()) << kv.first << "=" << kv.second;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(a.status().message().find(want), std::string::npos) << a.status();
  }
  auto m = Step();
  m.erase("SLURM_NODEID");
  EXPECT_NE(SlurmFromEnv(Env(m)).status().message().find("SLURM_NODEID: not set"), std::string::npos);
}

TEST(NodeGroupFromSlurm, RefusesSeveralTasksPerNode) {
  auto m = Step();
  m["SLURM_NTASKS"] = "4";
  auto a = SlurmFromEnv(Env(m));
  ASSERT_TRUE(a.ok()) << a.status();
  auto g = NodeGroupFromSlurm(**a);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("--ntasks-per-node=1"), std::string::npos) << g.status();
}

}  // namespace
}  // namespace loom::runtime::launch
