// Built without the CUDA toolkit: the nccl backend exists and says why it
// cannot run.
#include "collectives/nccl/nccl_backend.h"
#include "gtest/gtest.h"

namespace loom::collectives::nccl {
namespace {

TEST(NcclWithoutCuda, ReportsUnavailableWithTheReason) {
  auto b = NcclBackend::Create(BackendContext{});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(b.status().message()).find("without the CUDA toolkit"), std::string::npos);
}

}  // namespace
}  // namespace loom::collectives::nccl
