#include "runtime/service/agent/agent_command.h"

#include <map>

#include "gtest/gtest.h"

namespace loom::runtime::service::agent {
namespace {

absl::StatusOr<AgentFlags> Parse(const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
  return ParseAgentFlags(args, [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(AgentFlags, DefaultsEnvAndFlags) {
  auto f = Parse({}, {{"HOME", "/h"}});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->agent.coordinator, "127.0.0.1:7070");
  EXPECT_EQ(f->agent.data_dir, "/h/.loom/agent");
  EXPECT_EQ(f->token_dir, "/h/.loom");
  EXPECT_EQ(f->join_token_file, "/h/.loom/join-token");
  EXPECT_FALSE(f->help);
  EXPECT_TRUE(Parse({"--cpu-slots=1", "--help"}, {})->help);
  EXPECT_EQ(Parse({"--token-dir", "/t"}, {})->join_token_file, "/t/join-token");
  EXPECT_EQ(Parse({"--token-dir", "/t"}, {{"LOOM_JOIN_TOKEN_FILE", "/j"}})->join_token_file, "/j");
  EXPECT_GT(f->agent.cpu_slots, 0);
  EXPECT_EQ(f->agent.worker_argv, (std::vector<std::string>{"/proc/self/exe", "worker"}));
  f = Parse({"--cpu-slots=2", "--gpus", "8", "--worker", "/bin/sh -c true", "--hostname=n1"},
            {{"LOOM_COORDINATOR", "10.0.0.1:7070"}, {"LOOM_CPU_SLOTS", "64"}});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->agent.coordinator, "10.0.0.1:7070");
  EXPECT_EQ(f->agent.cpu_slots, 2);
  EXPECT_EQ(f->agent.gpus, 8);
  EXPECT_EQ(f->agent.hostname, "n1");
  EXPECT_EQ(f->agent.worker_argv, (std::vector<std::string>{"/bin/sh", "-c", "true"}));
  EXPECT_EQ(f->register_timeout_s, 0);  // keep trying until signalled
  EXPECT_EQ(Parse({"--register-timeout-s=30"}, {})->register_timeout_s, 30);
  EXPECT_EQ(Parse({}, {{"LOOM_REGISTER_TIMEOUT_S", "7"}})->register_timeout_s, 7);
}

TEST(AgentFlags, BadFlagsNameTheFlag) {
  EXPECT_NE(std::string(Parse({"--cpu-slots=x"}, {}).status().message()).find("--cpu-slots"), std::string::npos);
  EXPECT_NE(std::string(Parse({"--gpus=-1"}, {}).status().message()).find("--gpus"), std::string::npos);
  EXPECT_NE(std::string(Parse({"--cpu-slots=0"}, {}).status().message()).find("offers nothing"), std::string::npos);
  EXPECT_NE(std::string(Parse({"--nope=1"}, {}).status().message()).find("--nope"), std::string::npos);
  EXPECT_FALSE(Parse({"--worker="}, {}).ok());
  for (const char* bad : {"--register-timeout-s=-1", "--register-timeout-s=soon"})
    EXPECT_NE(std::string(Parse({bad}, {}).status().message()).find("--register-timeout-s"), std::string::npos)
        << bad;
  EXPECT_FALSE(Parse({"stray"}, {}).ok());
}

// torchrun's flags: --rdzv-endpoint is the coordinator, --nproc-per-node the
// rank slots (the old parser refused both as unknown flags).
TEST(AgentFlags, TorchrunNames) {
  auto f = Parse({"--rdzv-endpoint=10.0.0.2:29500", "--nproc-per-node", "3"}, {});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->agent.coordinator, "10.0.0.2:29500");
  EXPECT_EQ(f->agent.cpu_slots, 3);
  f = Parse({"--gpus", "8", "--nproc-per-node", "4"}, {});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->agent.gpus, 4);
  EXPECT_NE(std::string(Parse({"--gpus", "2", "--nproc-per-node", "4"}, {}).status().message())
                .find("--nproc-per-node: 4 ranks, but --gpus offers 2"),
            std::string::npos);
  EXPECT_NE(std::string(Parse({"--cpu-slots", "2", "--nproc-per-node", "4"}, {}).status().message())
                .find("not both"),
            std::string::npos);
  EXPECT_NE(std::string(Parse({"--nproc-per-node=0"}, {}).status().message()).find("--nproc-per-node"),
            std::string::npos);
}

TEST(AgentFlags, HelpIsGeneratedAndUnknownFlagsSuggest) {
  auto f = Parse({"--help"}, {});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->help);
  for (const char* s : {"usage: loom agent", "--rdzv-endpoint HOST:PORT", "--nproc-per-node N", "[env LOOM_CPU_SLOTS]"})
    EXPECT_NE(f->usage.find(s), std::string::npos) << s << "\n" << f->usage;
  EXPECT_EQ(f.status().message(), "");
  EXPECT_NE(std::string(Parse({"--cordinator", "h:1"}, {}).status().message())
                .find("unknown flag --cordinator (did you mean --coordinator?)"),
            std::string::npos);
}

}  // namespace
}  // namespace loom::runtime::service::agent
