// Fused AdamW for many parameters at once (the C++ multi-tensor entry point),
// plus the global gradient norm. The registry ops "grad_norm" and "adamw"
// (kernels/cpu/nn/optim.cc) use the same per-element update.
//
// One step, for each parameter p with gradient g and moments m, v (PyTorch's
// torch.optim.AdamW after torch.nn.utils.clip_grad_norm_):
//   norm = sqrt(sum over all grads of g^2)             (computed once, f64)
//   clip = max_norm > 0 ? min(1, max_norm / (norm + 1e-6)) : 1
//   g'   = clip * g
//   m    = beta1 m + (1 - beta1) g'
//   v    = beta2 v + (1 - beta2) g'^2
//   p    = p (1 - lr wd) - lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// `step` is 1-based.
//
//   AdamWOptions opt;  opt.lr = 3e-4;  opt.max_norm = 1.0;
//   LOOM_ASSIGN_OR_RETURN(double norm, AdamWStepMulti(params, grads, m, v, step, opt));
//
// Tensors must be contiguous f32 on the CPU; params/m/v are updated in place
// (Tensor handles share storage). Errors name the argument and its index:
// "grads[3]: shape [4] does not match params[3] [5]". Results are
// deterministic (fixed chunking, independent of the thread count).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/tensor.h"

namespace loom::kernels::cpu::nn {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  double max_norm = 0;  // 0: no clipping
};

// sqrt(sum_i sum g_i^2) over floating tensors of any dtype (f64 accumulation).
absl::StatusOr<double> GlobalGradNorm(absl::Span<const Tensor> grads);

// The clip coefficient applied to gradients for a given global norm.
double ClipCoefficient(double grad_norm, double max_norm);

// One fused AdamW step over all parameters; returns the pre-clip global norm.
absl::StatusOr<double> AdamWStepMulti(absl::Span<const Tensor> params, absl::Span<const Tensor> grads,
                                      absl::Span<const Tensor> m, absl::Span<const Tensor> v, int64_t step,
                                      const AdamWOptions& opt);

// Validates the options (names the bad field) and step >= 1.
absl::Status ValidateAdamW(const AdamWOptions& opt, int64_t step);

}  // namespace loom::kernels::cpu::nn
