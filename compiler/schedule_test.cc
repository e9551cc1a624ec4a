// The learning-rate schedule: closed-form values, PyTorch's schedulers step by
// step (compiler/schedule_torch.py under Debian's /usr/bin/python3, in
// float64), and the validation of its fields.
#include "compiler/schedule.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace loom::compiler {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

v1::TrainSpec Spec(const std::string& kind, float lr, float min_lr, int warmup, int steps, int decay = 0) {
  v1::TrainSpec tr;
  tr.set_lr_schedule(kind);
  tr.set_lr(lr);
  tr.set_min_lr(min_lr);
  tr.set_warmup_steps(warmup);
  tr.set_steps(steps);
  tr.set_decay_steps(decay);
  return tr;
}

TEST(ScheduledLearningRate, WarmsUpLinearlyThenHolds) {
  v1::TrainSpec tr = Spec("", 0.5f, 0, 4, 100);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(tr, 1), 0.125);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(tr, 2), 0.25);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(tr, 4), 0.5);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(tr, 9), 0.5);
  tr.set_warmup_steps(0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(tr, 1), 0.5);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(tr, 1000), 0.5);
}

TEST(ScheduledLearningRate, DecaysFromLrAfterWarmupToMinAtTheLastStep) {
  // lr 1, min 0.25 (both exact in float), warmup 2, 7 steps: the decay phase
  // is steps 3..7, p = 0, 1/4, 1/2, 3/4, 1.
  const v1::TrainSpec cos = Spec("cosine", 1.0f, 0.25f, 2, 7);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(cos, 2), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(cos, 3), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(cos, 5), 0.625);  // p = 1/2: halfway
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(cos, 7), 0.25);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(cos, 9), 0.25);  // past train.steps: min
  const v1::TrainSpec lin = Spec("linear", 1.0f, 0.25f, 2, 7);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(lin, 4), 0.8125);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(lin, 7), 0.25);
  // wsd: warmup 2, stable to step 6, decay over steps 7..10.
  const v1::TrainSpec wsd = Spec("wsd", 1.0f, 0.25f, 2, 10, 4);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(wsd, 1), 0.5);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(wsd, 6), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(wsd, 7), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(wsd, 8), 0.75);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(wsd, 10), 0.25);
}

bool TorchAvailable() {
  const std::string cmd = std::string(kPython) + " -c 'import torch' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// Each step's lr of each schedule from one run of schedule_torch.py:
// {chained schedulers, LambdaLR}, the schedules one after another.
std::vector<std::pair<double, double>> TorchSchedules(const std::vector<v1::TrainSpec>& cases) {
  std::string cmd = std::string(kPython) + " compiler/schedule_torch.py";
  for (const v1::TrainSpec& tr : cases) {
    char args[256];
    std::snprintf(args, sizeof args, " %s %.17g %.17g %d %d %d", tr.lr_schedule().c_str(),
                  static_cast<double>(tr.lr()), static_cast<double>(tr.min_lr()), tr.warmup_steps(), tr.steps(),
                  tr.decay_steps());
    cmd += args;
  }
  std::vector<std::pair<double, double>> out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  double a, b;
  while (std::fscanf(p, "%lf %lf", &a, &b) == 2) out.emplace_back(a, b);
  EXPECT_EQ(pclose(p), 0) << cmd;
  return out;
}

TEST(ScheduledLearningRate, MatchesPyTorchStepByStep) {
  ASSERT_TRUE(TorchAvailable()) << kPython << " cannot import torch (scripts/setup.sh installs python3-torch)";
  const std::vector<v1::TrainSpec> cases = {
      Spec("constant", 3e-3f, 0, 0, 20),      Spec("constant", 3e-3f, 0, 7, 20),
      Spec("cosine", 6e-4f, 6e-5f, 10, 100),  Spec("cosine", 1.0f, 0, 0, 37),
      Spec("cosine", 2e-3f, 1e-4f, 1, 12),    Spec("cosine", 1e-3f, 0, 4, 5),
      Spec("linear", 3e-3f, 3e-4f, 5, 60),    Spec("linear", 1.0f, 0, 0, 25),
      Spec("wsd", 3e-3f, 3e-5f, 10, 100, 20), Spec("wsd", 1.0f, 0, 0, 30, 30),
      Spec("wsd", 1e-3f, 1e-4f, 3, 9, 6),     Spec("wsd", 5e-4f, 0, 0, 40, 2),
  };
  size_t total = 0;
  for (const v1::TrainSpec& tr : cases) {
    ASSERT_TRUE(ValidateSchedule(tr).ok()) << ValidateSchedule(tr);
    total += static_cast<size_t>(tr.steps());
  }
  const auto torch = TorchSchedules(cases);
  ASSERT_EQ(torch.size(), total);
  size_t row = 0;
  for (const v1::TrainSpec& tr : cases) {
    SCOPED_TRACE(tr.ShortDebugString());
    double worst = 0;
    for (int s = 1; s <= tr.steps(); ++s) {
      const double loom = ScheduledLearningRate(tr, s);
      const auto [chained, lambda] = torch[row++];
      // Relative to train.lr, the scale of every value in the schedule.
      const double err = std::max(std::abs(loom - chained), std::abs(loom - lambda)) / tr.lr();
      worst = std::max(worst, err);
      EXPECT_LE(err, 1e-7) << "step " << s << ": loom " << loom << ", torch " << chained << " / " << lambda;
    }
    std::printf("%-8s warmup %3d steps %3d: worst gap %.3g x lr\n", tr.lr_schedule().c_str(), tr.warmup_steps(),
                tr.steps(), worst);
  }
}

void ExpectInvalid(const v1::TrainSpec& tr, const std::string& field) {
  absl::Status s = ValidateSchedule(tr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << tr.ShortDebugString();
  EXPECT_EQ(s.message().rfind(field + ":", 0), 0u) << s;
}

TEST(ValidateSchedule, NamesTheField) {
  EXPECT_TRUE(ValidateSchedule(Spec("", 1e-3f, 0, 10, 5)).ok());  // constant: warmup may outlast the run
  ExpectInvalid(Spec("exponential", 1e-3f, 0, 0, 10), "train.lr_schedule");
  ExpectInvalid(Spec("cosine", 1e-3f, 0, -1, 10), "train.warmup_steps");
  ExpectInvalid(Spec("cosine", 1e-3f, 0, 10, 10), "train.warmup_steps");
  ExpectInvalid(Spec("cosine", 1e-3f, 2e-3f, 0, 10), "train.min_lr");
  ExpectInvalid(Spec("linear", 1e-3f, -1e-4f, 0, 10), "train.min_lr");
  ExpectInvalid(Spec("linear", 1e-3f, std::nanf(""), 0, 10), "train.min_lr");
  ExpectInvalid(Spec("constant", 1e-3f, 1e-4f, 0, 10), "train.min_lr");
  ExpectInvalid(Spec("cosine", 1e-3f, 0, 0, 10, 5), "train.decay_steps");
  ExpectInvalid(Spec("wsd", 1e-3f, 0, 0, 10), "train.decay_steps");
  ExpectInvalid(Spec("wsd", 1e-3f, 0, 0, 10, 1), "train.decay_steps");
  ExpectInvalid(Spec("wsd", 1e-3f, 0, 4, 10, 7), "train.decay_steps");
}

}  // namespace
}  // namespace loom::compiler
