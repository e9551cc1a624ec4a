// The flash-attention kernels (flash_attention.h) against the fp64 CPU
// reference (attention_reference.h), as rows of the CUDA check table
// (kernels/cuda/checks.h: CheckResult, FormatCheckTable).
//
// Each case draws fresh random q, k, v and dout (Philox, seeded, normal),
// rounds them to the dtype, poisons every output with 0xFF bytes (NaN in bf16,
// f16 and f32), runs forward and backward and compares o, lse, dq, dk and dv by
// ||out - ref|| / ||ref||: a row passes when all are finite and under 1e-2.
// Shapes cover D 64 and 128, bf16 and f16, causal and not, GQA, T not a
// multiple of any tile, and Tq != Tk. Inference forwards (no lse) get rows of
// their own (RunInferenceCheck).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "base/rng.h"
#include "base/tensor.h"
#include "kernels/cuda/checks.h"

namespace loom::kernels::cuda {
class DeviceRuntime;
}  // namespace loom::kernels::cuda

namespace loom::kernels::cuda::attention {

// Unavailable without a device; otherwise one row per case.
absl::StatusOr<std::vector<CheckResult>> RunAttentionChecks(const CheckOptions& opts);
// Packed variable-length flash attention (flash_varlen.h): one row comparing
// every sequence with the fp64 reference (attention_varlen_check.cc).
absl::StatusOr<CheckResult> RunVarlenCheck(DeviceRuntime* rt, uint64_t seed, DType dt, int64_t heads,
                                           int64_t kv_heads, int64_t d, bool causal,
                                           const std::vector<int64_t>& lens_q, const std::vector<int64_t>& lens_k);
// An inference forward (lse null) of one path: Loom's flash kernels with a
// forward variant (its o must equal the training forward's bit for bit),
// cuDNN's graph with its stats virtual, or the dispatcher (tuned under the
// inference key); o is compared with the fp64 reference
// (attention_inference_check.cc).
enum class InferencePath { kFlash, kCudnn, kDispatch };
struct InferenceCase {
  InferencePath path = InferencePath::kFlash;
  int fwd_variant = 0;  // kFlash: 0 is the default for head_dim
  DType dtype = DType::kBF16;
  int64_t batch = 1, heads = 1, kv_heads = 1, seq_q = 1, seq_k = 1, head_dim = 64;
  bool causal = false;
};
absl::StatusOr<CheckResult> RunInferenceCheck(DeviceRuntime* rt, uint64_t seed, const InferenceCase& c);
// Inputs and outputs of the check rows. CheckRandom: normal values drawn
// from `rng` at counters *ctr, *ctr + 1, ... (*ctr advances past them),
// rounded to dt, on rt's device; `values` gets the rounded values.
// CheckPoisoned: every byte 0xFF (NaN in bf16, f16 and f32), so an output
// element no kernel writes shows.
absl::StatusOr<Tensor> CheckRandom(DeviceRuntime* rt, Philox& rng, uint64_t* ctr, const std::vector<int64_t>& shape,
                                   DType dt, std::vector<double>* values);
absl::StatusOr<Tensor> CheckPoisoned(DeviceRuntime* rt, const std::vector<int64_t>& shape, DType dt);
// sha256 prefix of kernels/cuda/attention's sources.
const char* AttentionSourceHash();

}  // namespace loom::kernels::cuda::attention
