// The learning-rate schedule: the value fed to the optimizer's %lr input at
// each step (compiler/optimizer.h), from the job's train section.
//
// With lr = train.lr, min = train.min_lr, W = train.warmup_steps and
// N = train.steps, optimizer step s (1-based) runs at
//   s <= W (warmup):  lr * s / W
// and after the warmup, by train.lr_schedule:
//   constant:  lr
//   cosine:    min + (lr - min) * (1 + cos(pi * p)) / 2
//   linear:    lr + (min - lr) * p
//   wsd:       (warmup-stable-decay) lr while s <= N - D, D = train.decay_steps,
//              then the linear formula
// where p = (s - a - 1) / (n - 1), clamped to [0, 1], over the decay phase of
// n steps after step a (cosine, linear: a = W, n = N - W; wsd: a = N - D,
// n = D); a one-step phase has p = 0. The first step after the warmup (or the
// stable phase) runs at lr and step N at min. In PyTorch terms: LinearLR(1/W,
// 1, W - 1) for the warmup, then CosineAnnealingLR(T_max = n - 1, eta_min =
// min) or LinearLR(1, min / lr, n - 1), chained by SequentialLR
// (compiler/schedule_test runs both through Debian's torch).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::compiler {

// The learning rate of optimizer step `step` (1-based), in double.
double ScheduledLearningRate(const v1::TrainSpec& train, int64_t step);

// train.lr_schedule, min_lr, decay_steps and warmup_steps against each other
// and against train.steps and train.lr: InvalidArgument naming the field
// ("train.min_lr: ..."). Expects train.lr > 0 and train.steps > 0.
absl::Status ValidateSchedule(const v1::TrainSpec& train);

}  // namespace loom::compiler
