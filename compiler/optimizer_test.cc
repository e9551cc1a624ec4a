// The learning-rate schedule fed to the AdamW update's %lr input.
#include "compiler/optimizer.h"

#include "gtest/gtest.h"

namespace loom::compiler {
namespace {

TEST(ScheduledLearningRate, WarmsUpLinearlyThenHolds) {
  v1::TrainSpec tr;
  tr.set_lr(0.5);
  tr.set_warmup_steps(4);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(tr, 1), 0.125);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(tr, 2), 0.25);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(tr, 4), 0.5);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(tr, 9), 0.5);
}

TEST(ScheduledLearningRate, NoWarmupIsConstant) {
  v1::TrainSpec tr;
  tr.set_lr(0.25);  // train.lr is a float: a value it holds exactly
  tr.set_warmup_steps(0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(tr, 1), 0.25);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(tr, 1000), 0.25);
}

}  // namespace
}  // namespace loom::compiler
