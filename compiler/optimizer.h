// Appends the optimizer update to a joint graph: AdamW with global-norm
// clipping, as the catalogue's `grad_norm` and `adamw` ops define it.
//
// For each differentiated parameter %p the graph gains state inputs %p.m and
// %p.v (kState), and the scalar inputs %lr and %step (f32[], step 1-based) are
// added once; a forward graph that already reads an f32[] input %step (the
// offset of dropout's mask) shares it. Then
//   %gn = grad_norm(grads...)
//   %p', %m', %v' = adamw(%p, d%p, %p.m, %p.v, %gn, %lr, %step) {beta1, beta2, eps, weight_decay, max_norm}
// and the outputs become: the forward outputs, (the gradients if
// keep_gradients), then for each parameter p' -> %p, m' -> %p.m, v' -> %p.v.
// Executor::ApplyUpdates writes them back after a step.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "compiler/autodiff.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::compiler {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // Which parameters weight decay applies to (by input name); null: all of them.
  // Models decay matrices only (models::ParamInfo::weight_decay).
  std::function<bool(const std::string& param)> decays;
  double max_norm = 0.0;  // 0 = no clipping
  bool keep_gradients = false;
  std::string grad_norm_op = "grad_norm";
  std::string adamw_op = "adamw";
};

absl::Status AppendAdamW(JointGraph& j, const AdamWOptions& options = {});

}  // namespace loom::compiler
