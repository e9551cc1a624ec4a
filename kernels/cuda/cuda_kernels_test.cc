// Runs every CUDA kernel check (checks.h) on the GPU and prints the table; with
// no GPU it skips with the reason. LOOM_FULL=1 runs the larger shapes.
#include <cstdio>
#include <cstdlib>

#include "base/testing/full_sweep.h"
#include "gtest/gtest.h"
#include "kernels/cuda/checks.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/device_runtime.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/layernorm.h"

namespace loom::kernels::cuda {
namespace {

TEST(CudaKernels, AllChecksPassOrSkip) {
  absl::Status avail = CudaAvailable();
  if (!avail.ok()) GTEST_SKIP() << "needs a GPU: " << avail.message();
  CheckOptions opts;
  opts.full = loom::testing::FullSweep();
  auto rows = RunKernelChecks(opts);
  ASSERT_TRUE(rows.ok()) << rows.status();
  std::string table = FormatCheckTable(*rows);
  std::printf("%s", table.c_str());
  for (const CheckResult& r : *rows) EXPECT_TRUE(r.pass) << r.name << " " << r.dtype << " " << r.detail;
}

TEST(CudaKernels, BadArgumentsAreInvalidArgument) {
  // Validation happens before any CUDA call, so this runs without a GPU too
  // (but not in a build without the toolkit, where every entry is a stub).
#ifndef LOOM_HAVE_CUDA
  GTEST_SKIP() << "needs a GPU: built without CUDA";
#endif
  GemmArgs g;
  g.dtype = DType::kF16;
  g.m = g.n = g.k = 8;
  absl::Status s = Gemm(g);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("dtype"), std::string::npos) << s;
  g.dtype = DType::kBF16;
  g.m = 0;
  EXPECT_EQ(Gemm(g).code(), absl::StatusCode::kInvalidArgument);
  g.m = 8;
  s = Gemm(g);
  EXPECT_NE(std::string(s.message()).find("gemm: a"), std::string::npos) << s;
  LayerNormBwdArgs lb;
  lb.rows = 4;
  lb.cols = 1 << 20;
  s = LayerNormBackward(lb);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("cols"), std::string::npos) << s;
  lb.cols = 768;
  lb.dtype = DType::kI32;
  s = LayerNormBackward(lb);
  EXPECT_NE(std::string(s.message()).find("dtype"), std::string::npos) << s;
  lb.dtype = DType::kBF16;
  s = LayerNormBackward(lb);
  EXPECT_NE(std::string(s.message()).find("layernorm_backward: dy: null"), std::string::npos) << s;
}

}  // namespace
}  // namespace loom::kernels::cuda
