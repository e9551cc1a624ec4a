// cudnn_sdpa without a GPU: argument validation (InvalidArgument naming the
// field, Unimplemented for what cuDNN's fused attention does not take) and a
// clean error, never a crash, where cuDNN or the device is missing.
#include "kernels/cuda/attention/cudnn_sdpa.h"

#include <string>

#include "gtest/gtest.h"

namespace loom::kernels::cuda::attention {
namespace {

CudnnSdpaArgs Valid() {
  alignas(16) static char dummy[64];
  CudnnSdpaArgs a;
  a.batch = 2, a.heads = 8, a.kv_heads = 2, a.seq_q = 100, a.seq_k = 130, a.head_dim = 64;
  a.q = a.k = a.v = dummy;
  a.o = dummy;
  a.lse = reinterpret_cast<float*>(dummy);
  a.dout = dummy, a.dq = dummy, a.dk = dummy, a.dv = dummy;
  return a;
}

void Expect(const CudnnSdpaArgs& a, absl::StatusCode code, const char* word, bool backward = false) {
  absl::Status s = CudnnSdpaValidate(a, backward);
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(std::string(s.message()).find(word), std::string::npos) << s;
}

TEST(CudnnSdpa, Validation) {
  EXPECT_TRUE(CudnnSdpaValidate(Valid(), true).ok());
  CudnnSdpaArgs a = Valid();
  a.dtype = DType::kF32;
  Expect(a, absl::StatusCode::kUnimplemented, "dtype");
  a = Valid();
  a.head_dim = 96 + 4;
  Expect(a, absl::StatusCode::kUnimplemented, "head_dim");
  a.head_dim = 256;
  Expect(a, absl::StatusCode::kUnimplemented, "head_dim");
  a = Valid();
  a.kv_heads = 3;
  Expect(a, absl::StatusCode::kInvalidArgument, "kv_heads");
  a = Valid();
  a.seq_k = 0;
  Expect(a, absl::StatusCode::kInvalidArgument, "seq_k");
  a = Valid();
  a.scale = -1;
  Expect(a, absl::StatusCode::kInvalidArgument, "scale");
  a = Valid();
  a.dv = nullptr;
  EXPECT_TRUE(CudnnSdpaValidate(a, false).ok());
  Expect(a, absl::StatusCode::kInvalidArgument, "dv", true);
  a = Valid();
  a.lse = nullptr;  // an inference forward; the backward reads lse
  EXPECT_TRUE(CudnnSdpaValidate(a, false).ok());
  Expect(a, absl::StatusCode::kInvalidArgument, "lse", true);
  a = Valid();
  a.lse = reinterpret_cast<float*>(reinterpret_cast<char*>(a.o) + 4);
  Expect(a, absl::StatusCode::kInvalidArgument, "lse");
  a = Valid();
  a.q = static_cast<const char*>(a.q) + 2;
  Expect(a, absl::StatusCode::kInvalidArgument, "q");
  // Strides: all 0 (contiguous) or all positive multiples of 8, rows >= D.
  a = Valid();
  a.k_strides = {1024, 0, 64};
  Expect(a, absl::StatusCode::kInvalidArgument, "k_strides");
  a.k_strides = {8 * 130 * 64, 130 * 64, 60};
  Expect(a, absl::StatusCode::kInvalidArgument, "k_strides");
  a.k_strides = {2 * 130 * 128, 128, 2 * 128};  // BSHD-style interleaving: fine
  EXPECT_TRUE(CudnnSdpaValidate(a, false).ok());
  a = Valid();
  a.dq_strides = {8, 8, 32};
  EXPECT_TRUE(CudnnSdpaValidate(a, false).ok());
  Expect(a, absl::StatusCode::kInvalidArgument, "dq_strides", true);
}

TEST(CudnnSdpa, NoCrashWithoutDevice) {
  // Here (CI) there is no GPU and maybe no cuDNN: a Status, never a crash.
  const std::string v = CudnnVersionString();
  EXPECT_FALSE(v.empty());
  absl::Status av = CudnnAvailable();
  if (!av.ok()) {
    EXPECT_EQ(av.code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(std::string(av.message()).find("cuDNN not found"), std::string::npos) << av;
  }
  CudnnSdpaArgs a = Valid();
  a.dtype = DType::kF32;
  EXPECT_EQ(CudnnSdpaForward(a).code(), absl::StatusCode::kUnimplemented);  // validation first
}

TEST(CudnnSdpa, OptionsAreCheckedAndKept) {
  const CudnnSdpaOptions before = GetCudnnSdpaOptions();
  EXPECT_EQ(before.max_engine_configs, 4);
  EXPECT_FALSE(before.verbose);
  CudnnSdpaOptions o;
  o.max_engine_configs = 0;
  absl::Status s = SetCudnnSdpaOptions(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("max_engine_configs"), std::string::npos) << s;
  o.max_engine_configs = 17;
  EXPECT_EQ(SetCudnnSdpaOptions(o).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetCudnnSdpaOptions().max_engine_configs, 4) << "a refused setting changes nothing";
  o.max_engine_configs = 1;
  o.verbose = true;
  ASSERT_TRUE(SetCudnnSdpaOptions(o).ok());
  EXPECT_EQ(GetCudnnSdpaOptions().max_engine_configs, 1);
  EXPECT_TRUE(GetCudnnSdpaOptions().verbose);
  ASSERT_TRUE(SetCudnnSdpaOptions(before).ok());
}

}  // namespace
}  // namespace loom::kernels::cuda::attention
