#include "kernels/cuda/cuda_device.h"

#include "gtest/gtest.h"

namespace loom::kernels::cuda {
namespace {

TEST(CudaDevice, SaxpyRunsOrSkipsWithReason) {
  absl::Status avail = CudaAvailable();
  if (!avail.ok()) {
    EXPECT_EQ(avail.code(), absl::StatusCode::kUnavailable);
    EXPECT_FALSE(avail.message().empty());
    GTEST_SKIP() << "needs a GPU: " << avail.message();
  }
  auto name = DeviceName(0);
  ASSERT_TRUE(name.ok()) << name.status();
  std::printf("device 0: %s\n", name->c_str());
  auto err = SaxpySmokeTest(1 << 20);
  ASSERT_TRUE(err.ok()) << err.status();
  EXPECT_EQ(*err, 0.0);
}

}  // namespace
}  // namespace loom::kernels::cuda
