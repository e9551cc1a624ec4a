// The check matrix shared by the GPU check (pointwise_gpu_check) and the host
// execution test (pointwise_host_exec_test): every supported op plus a copy, a
// fill, a fused chain and a mixed-dtype add, x {f32, bf16} x {contiguous,
// broadcast, permuted, sliced, offset}.
//
// An instance holds the PwSpec, the inputs' host storage (contiguous; the spec's
// strides and offsets index into it), the output buffer's shape, and the f64
// reference (the registry references run on the same dtype-rounded inputs).
// The runner poisons the output buffer with 0xFF bytes, runs the kernel and
// hands the buffer (as a host tensor) to Evaluate:
// ||out - ref|| / ||ref|| < 1e-5 (f32) or 1e-2 (bf16), every value finite, and
// for "sliced" (a strided output at an offset) no byte outside the window written.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "kernels/cuda/codegen/pointwise.h"

namespace loom::kernels::cuda::codegen {

struct PwCheckCase {
  std::string label;
  PwBody body;
  int nin = 1;
  double lo = -2, hi = 2;        // input range (div's denominator: lo..hi, numerator -2..2)
  std::vector<DType> in_dtypes;  // empty: the row's dtype for every input
  unsigned bool_inputs = 0;      // bit k: input k is bool whatever the row's dtype
  bool bool_output = false;      // the body writes bool (comparisons, logical ops)
};
std::vector<PwCheckCase> AllCheckCases();

// "offset": contiguous inputs at element offset 8 (the vector path with offsets).
inline constexpr const char* kCheckLayouts[] = {"contiguous", "broadcast", "permuted", "sliced", "offset"};

struct PwCheckInstance {
  std::string label, dtype, layout;
  PwSpec spec;                     // spec.body points into the case
  std::vector<Tensor> in_storage;  // host, contiguous, one per input
  std::vector<int64_t> out_storage_shape;
  DType out_dtype = DType::kF32;
  Tensor ref;  // f64, shape spec.out_shape
  double tol = 0;
};

// False for layouts that do not apply (a fill has no input to permute).
bool LayoutApplies(const PwCheckCase& c, const std::string& layout);
absl::StatusOr<PwCheckInstance> MakeCheckInstance(const PwCheckCase& c, DType dt, const std::string& layout,
                                                  uint64_t seed);

struct PwCheckResult {
  double err = 0;
  bool pass = false;
  std::string detail;
};
// `out_storage` is the whole output buffer copied to the host.
PwCheckResult EvaluateCheck(const PwCheckInstance& inst, const Tensor& out_storage);

}  // namespace loom::kernels::cuda::codegen
