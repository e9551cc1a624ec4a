#include "runtime/train/train_metrics.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/time/time.h"
#include "collectives/metrics.h"
#include "gtest/gtest.h"

namespace loom::runtime::train {
namespace {

std::string Check(const std::string& src) {
  std::string cmd = "/usr/bin/python3 runtime/train/prom_check.py '" + src + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  EXPECT_EQ(p ? pclose(p) : -1, 0) << out;
  return out;
}

TEST(TrainMetrics, FileAndEndpointParseWithPrometheusClient) {
  collectives::GlobalCollectiveMetrics().Reset();
  collectives::GlobalCollectiveMetrics().Record("gloo", "all_reduce", 4096, absl::Microseconds(30), true);
  collectives::GlobalCollectiveMetrics().Record("gloo", "all_reduce", 4096, absl::Microseconds(3000), true);
  TrainMetrics m;
  for (int i = 0; i < 3; ++i) m.OnStep(0.01 * (i + 1), 2.5 - i * 0.1, 1000, 3e-3);
  m.OnValidation(2.25);
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string path = std::string(tmp ? tmp : "/tmp") + "/metrics.prom";
  ASSERT_TRUE(m.WriteTextFile(path).ok());
  std::string out = Check(path);
  EXPECT_NE(out.find("loom_train_steps_total - 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("loom_train_step_seconds_count - 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("loom_train_val_loss - 2.25\n"), std::string::npos) << out;
  EXPECT_NE(out.find("loom_collective_ops_total backend=gloo,op=all_reduce 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("loom_collective_bytes_total backend=gloo,op=all_reduce 8192\n"), std::string::npos) << out;
  EXPECT_NE(out.find("loom_collective_latency_seconds_count backend=gloo,op=all_reduce 2\n"), std::string::npos)
      << out;
  // 30 us falls under the 32 us bound, 3000 us does not.
  EXPECT_NE(out.find("loom_collective_latency_seconds_bucket backend=gloo,le=3.2e-05,op=all_reduce 1\n"),
            std::string::npos)
      << out;

  auto port = m.Serve("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  std::string live = Check("http://127.0.0.1:" + std::to_string(*port) + "/metrics");
  EXPECT_NE(live.find("loom_train_steps_total - 3\n"), std::string::npos) << live;
  EXPECT_FALSE(m.Serve("nohostport").ok());
}

}  // namespace
}  // namespace loom::runtime::train
