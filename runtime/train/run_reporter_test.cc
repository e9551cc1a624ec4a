// metrics.jsonl while a run is in progress and across a restart: every logged
// step is in the file as soon as Step returns (a reader, `tail -f`, a crash
// right after, all see it), and a run that opens the same folder again appends
// to what the earlier attempt logged.
#include "runtime/train/run_reporter.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace loom::runtime::train {
namespace {

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

v1::JobSpec Spec() {
  v1::JobSpec s;
  s.set_name("reporter");
  s.mutable_model()->set_seq_len(8);
  s.mutable_model()->set_vocab(256);  // the run folder records the tokenizer, checked against model.vocab
  s.mutable_train()->set_steps(10);
  s.mutable_train()->set_batch_size(2);
  s.mutable_train()->set_log_every(2);
  return s;
}

TEST(RunReporter, MetricsAreOnDiskAfterEachLoggedStepAndAppendedOnRestart) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/reporter_run";
  std::filesystem::remove_all(dir);
  {
    auto r = RunReporter::Open(Spec(), dir, "");
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE((*r)->Step(1, 5.5, 1e-3, 0.01).ok());
    ASSERT_TRUE((*r)->Step(2, 5.0, 1e-3, 0.01).ok());
    // Before Finish and with the reporter still open.
    auto lines = Lines(dir + "/metrics.jsonl");
    ASSERT_EQ(lines.size(), 2u) << "logged steps not flushed";
    EXPECT_EQ(lines[1].rfind("{\"step\": 2, \"loss\": 5, ", 0), 0u) << lines[1];
    ASSERT_TRUE((*r)->Validation(2, 4.9, 5.2).ok());
    EXPECT_EQ(Lines(dir + "/metrics.jsonl").size(), 3u);
  }  // the process dies here without Finish
  auto again = RunReporter::Open(Spec(), dir, "");
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE((*again)->Step(3, 4.8, 1e-3, 0.01).ok());  // not a logged step: log_every 2
  ASSERT_TRUE((*again)->Step(4, 4.5, 1e-3, 0.01).ok());
  auto lines = Lines(dir + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].rfind("{\"step\": 1,", 0), 0u) << "the earlier attempt's metrics were truncated";
  EXPECT_EQ(lines[3].rfind("{\"step\": 4,", 0), 0u) << lines[3];
  ASSERT_TRUE((*again)->Finish().ok());
}

// Validation lines carry the perplexity exp(loss) where the loss is a token
// cross-entropy, and only there.
TEST(RunReporter, ValidationReportsPerplexityOfCrossEntropyLosses) {
  v1::JobSpec s = Spec();
  s.mutable_data()->set_kind("causal");
  EXPECT_EQ(LossAndPerplexity(s, 2.0), "2.0000, perplexity 7.389");
  s.mutable_data()->set_kind("mlm");
  EXPECT_EQ(LossAndPerplexity(s, std::log(50.0)), "3.9120, perplexity 50");
  s.mutable_data()->set_kind("pairs");  // a classification loss
  EXPECT_EQ(LossAndPerplexity(s, 2.0), "2.0000");
  s.mutable_data()->set_kind("causal");
  s.mutable_model()->set_family("onnx");  // the model's own loss: unknown kind
  EXPECT_EQ(LossAndPerplexity(s, 2.0), "2.0000");
  s.mutable_model()->mutable_loss()->set_kind("cross_entropy");
  EXPECT_EQ(LossAndPerplexity(s, 2.0), "2.0000, perplexity 7.389");

  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/reporter_ppl";
  std::filesystem::remove_all(dir);
  auto r = RunReporter::Open(s, dir, "");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*r)->Validation(4, 2.0, 2.5).ok());
  auto lines = Lines(dir + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "{\"step\": 4, \"val_loss\": 2.000000, \"val_perplexity\": 7.38906}");
  ASSERT_TRUE((*r)->Finish().ok());
}

// Without a run_dir the run folder is runs/<name>-<time>: a name that is a
// path is refused before anything is created (`loom train` never meets the
// coordinator's check).
TEST(RunReporter, JobNameThatIsAPathIsRefused) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string base = std::string(tmp ? tmp : "/tmp") + "/reporter_names";
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base + "/cwd");
  ASSERT_EQ(chdir((base + "/cwd").c_str()), 0);
  v1::JobSpec s = Spec();
  s.set_name("../../escaped");
  auto r = RunReporter::Open(s, RunFolder(s), "");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("name: must match"), std::string::npos) << r.status();
  // runs/../../escaped-<time> from base/cwd would be base/escaped-<time>.
  for (const auto& e : std::filesystem::directory_iterator(base)) EXPECT_EQ(e.path().filename(), "cwd") << e.path();
  EXPECT_TRUE(std::filesystem::is_empty(base + "/cwd"));
  s.set_run_dir(base + "/explicit");  // a run_dir names the folder itself
  EXPECT_TRUE(RunReporter::Open(s, RunFolder(s), "").ok());
}

}  // namespace
}  // namespace loom::runtime::train

namespace loom::runtime::train {
namespace {

// Under an agent every step (logged or not) and every validation is one JSON
// line in LOOM_METRICS_FILE, flushed before Step returns.
TEST(RunReporter, EveryStepGoesToTheAgentsMetricsFile) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/reporter_agent";
  std::filesystem::remove_all(dir);
  const std::string file = dir + ".metrics.jsonl";
  std::filesystem::remove(file);
  setenv("LOOM_METRICS_FILE", file.c_str(), 1);
  auto r = RunReporter::Open(Spec(), dir, "");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*r)->Step(1, 5.5, 1e-3, 0.02).ok());
  ASSERT_TRUE((*r)->Step(3, 5.25, 2e-3, 0.5).ok());  // not a logged step (log_every 2)
  auto lines = Lines(file);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("{\"step\": 1, \"loss\": 5.5, \"lr\": 0.001, \"tokens_per_s\": ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("\"step_time_ms\": 20.000}"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1].rfind("{\"step\": 3, \"loss\": 5.25, \"lr\": 0.002,", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("\"step_time_ms\": 500.000}"), std::string::npos) << lines[1];
  ASSERT_TRUE((*r)->Validation(3, 4.75, NAN).ok());
  lines = Lines(file);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2], "{\"step\": 3, \"val_loss\": 4.75}");
  unsetenv("LOOM_METRICS_FILE");
  ASSERT_TRUE((*r)->Step(4, 5.0, 1e-3, 0.01).ok());
  EXPECT_EQ(Lines(file).size(), 3u) << "no file named: nothing written";
  ASSERT_TRUE((*r)->Finish().ok());
}

}  // namespace
}  // namespace loom::runtime::train
