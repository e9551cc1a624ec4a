// Inputs, f64 references and comparisons for the generated row-wise kernels
// (rowwise.h), shared by rowwise_host_exec_test (host memory) and
// rowwise_gpu_check (device copies of the same buffers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "kernels/cuda/codegen/rowwise.h"

namespace loom::kernels::cuda::codegen {

// A host buffer of f32 / bf16 / i32 / i64 storage.
struct HostBuf {
  DType dtype = DType::kF32;
  int64_t n = 0;
  std::vector<uint64_t> words;  // 8-byte aligned storage
  void Init(DType t, int64_t count);
  void* data() { return words.data(); }
  const void* data() const { return words.data(); }
  int64_t bytes() const;
  double Get(int64_t i) const;
  void Set(int64_t i, double v);  // rounds (RN) to the storage dtype
};

struct LnCase {
  LnSpec spec;
  int64_t rows = 0;
  std::vector<HostBuf> in;         // plain: {x}; else one per addend ([period or rows, C])
  HostBuf gamma, beta;             // f32
  HostBuf h, y, mean, rstd;        // outputs (filled with NaN by Make)
};
LnCase MakeLnCase(const LnSpec& s, int64_t rows, uint64_t seed);
LnParams LnParamsFor(LnCase& c);  // host pointers
// "" when every output is within tolerance of the f64 reference, else the first failure.
std::string CheckLn(const LnCase& c);

struct AdamWCase {
  AdamWSpec spec;
  std::vector<int64_t> numels;
  // param: f32, or with split[t] the SplitF32 planes (bf16 storage, 2 * numel
  // words); m, v: f32, or bf16 with states_bf16[t]; shadow.n == 0: none.
  std::vector<HostBuf> param, grad, m, v, shadow;
  std::vector<double> weight_decay;
  std::vector<bool> states_bf16, split;
  std::vector<double> param0, m0, v0;  // the inputs as values (param/m/v are updated in place)
  HostBuf lr, step, grad_norm;
  double ParamAt(size_t t, int64_t i) const;  // the stored parameter, joined when split
};
// lean: most tensors keep m and v in bf16 and the parameter split (no
// shadow), with one f32-state split tensor and one plain tensor among them.
AdamWCase MakeAdamWCase(const AdamWSpec& s, uint64_t seed, bool lean = false);
// The tensor table over the case's host buffers (or over `dev` pointers when given:
// param, grad, m, v, shadow per tensor, in that order).
std::vector<AdamWTensor> AdamWTensorsFor(AdamWCase& c, const std::vector<void*>* dev = nullptr);
std::string CheckAdamW(const AdamWCase& c);

}  // namespace loom::kernels::cuda::codegen
