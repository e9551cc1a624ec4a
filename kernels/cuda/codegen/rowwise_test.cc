// Row-wise generator: specialisation, validation, and NVRTC compilation of
// every kind (skipped in a build without the CUDA toolkit; a build with it
// must open NVRTC).
#include "kernels/cuda/codegen/rowwise.h"

#include <unistd.h>

#include <cstdlib>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace loom::kernels::cuda::codegen {
namespace {

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

TEST(Rowwise, LayerNormIsSpecialisedPerRegion) {
  LnSpec s;
  s.cols = 768;
  s.dtype = DType::kBF16;
  s.addends = {{DType::kBF16, 0}, {DType::kF32, 1}, {DType::kBF16, 0}};  // mm + bias + residual
  auto g = GenerateLayerNorm(s);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->vec, 8);       // 16-byte accesses of bf16
  EXPECT_EQ(g->threads, 96);  // 768 / 8 vectors, one per thread
  EXPECT_TRUE(Has(g->source, "row * 768LL")) << g->source;
  EXPECT_TRUE(Has(g->source, "p.h + base + c")) << "residual sum stored";
  EXPECT_TRUE(Has(g->source, "p.in[1] + 0LL + c")) << "the bias is read per column";
  EXPECT_TRUE(Has(g->source, "loom_block_sum<3>"));
  s.addends = {{DType::kBF16, 0}, {DType::kF32, 1024}};
  auto pos = GenerateLayerNorm(s);
  ASSERT_TRUE(pos.ok());
  EXPECT_TRUE(Has(pos->source, "(row % 1024LL) * 768LL")) << pos->source;
  s.addends.clear();
  auto plain = GenerateLayerNorm(s);
  ASSERT_TRUE(plain.ok());
  EXPECT_NE(plain->kernels[0], g->kernels[0]);
  EXPECT_FALSE(Has(plain->source, "p.h + base"));
  s.dtype = DType::kF32;
  s.cols = 37;  // odd: scalar accesses, a guarded tail
  auto odd = GenerateLayerNorm(s);
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->vec, 1);
  EXPECT_TRUE(Has(odd->source, "c < 37"));
}

TEST(Rowwise, ErrorsNameTheField) {
  LnSpec s;
  s.cols = 0;
  EXPECT_TRUE(Has(std::string(GenerateLayerNorm(s).status().message()), "cols"));
  s.cols = 64;
  s.dtype = DType::kI32;
  EXPECT_TRUE(Has(std::string(GenerateLayerNorm(s).status().message()), "dtype"));
  s.dtype = DType::kF32;
  s.threads = 48;
  EXPECT_TRUE(Has(std::string(GenerateLayerNorm(s).status().message()), "threads"));
  s.threads = 0;
  s.addends = {{DType::kF32, 0}};
  EXPECT_TRUE(Has(std::string(GenerateLayerNorm(s).status().message()), "addends"));
  s.addends = {{DType::kF32, 0}, {DType::kI64, 0}};
  EXPECT_TRUE(Has(std::string(GenerateLayerNorm(s).status().message()), "addends[1].dtype"));
  s.addends.clear();
  s.cols = 1 << 20;
  EXPECT_TRUE(Has(std::string(GenerateLayerNorm(s).status().message()), "too wide"));
  AdamWSpec a;
  a.step_dtype = DType::kBF16;
  EXPECT_TRUE(Has(std::string(GenerateAdamW(a).status().message()), "step_dtype"));
  a.step_dtype = DType::kF32;
  a.beta1 = 1.0;
  EXPECT_TRUE(Has(std::string(GenerateAdamW(a).status().message()), "beta1"));
}

TEST(Rowwise, AdamWTableChunksAndVectorFlags) {
  alignas(16) static float buf[64];
  std::vector<AdamWTensor> t(2);
  t[0].param = t[0].m = t[0].v = buf;
  t[0].grad = buf;
  t[0].numel = 2 * kAdamWChunk + 3;
  t[1] = t[0];
  t[1].numel = 8;
  t[1].m = buf + 1;  // misaligned: scalar path
  auto chunks = AdamWTable(t);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[2].start, 2 * kAdamWChunk);
  EXPECT_EQ(chunks[3].tensor, 1);
  EXPECT_EQ(t[0].vec4, 0);  // numel % 4 != 0
  EXPECT_EQ(t[1].vec4, 0);
  t[1].m = buf;
  AdamWTable(t);
  EXPECT_EQ(t[1].vec4, 1);
}

// The split layout gives back every bit pattern, and hi is the bf16 nearest
// the value (ties away from zero, where round-to-nearest-even may differ).
TEST(Rowwise, SplitF32JoinsExactlyAndHiIsTheNearestBf16) {
  std::vector<uint32_t> bits = {0u, 0x80000000u, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x7f7fffffu,
                                0xff7fffffu, 0x7f800000u, 0x7fc00001u, 0x00000001u, 0x807f8000u, 0xffffffffu};
  for (uint32_t k = 0; k < 200000; ++k) bits.push_back(k * 2654435761u);
  const int64_t n = static_cast<int64_t>(bits.size());
  std::vector<float> x(n), back(n);
  std::memcpy(x.data(), bits.data(), 4 * n);
  std::vector<uint16_t> planes(2 * n);
  SplitF32(x.data(), n, planes.data());
  JoinF32(planes.data(), n, back.data());
  ASSERT_EQ(std::memcmp(x.data(), back.data(), 4 * n), 0);
  int ties = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i]) || std::fabs(x[i]) >= 3.38e38f) continue;
    const bool tie = (bits[i] & 0xffffu) == 0x8000u;
    ties += tie;
    if (!tie) {
      EXPECT_EQ(planes[i], BF16::FromFloat(x[i])) << std::hex << bits[i];
    } else {  // away from zero
      EXPECT_EQ(planes[i], static_cast<uint16_t>((bits[i] >> 16) + 1)) << std::hex << bits[i];
    }
  }
  EXPECT_GE(ties, 3);
}

TEST(Rowwise, EveryKindCompilesWithNvrtc) {
  if (!BuiltWithCuda()) GTEST_SKIP() << "needs a GPU: built without the CUDA toolkit (no NVRTC)";
  ASSERT_TRUE(NvrtcAvailable()) << NvrtcInfo();
  CodegenOptions o;
  const char* tmp = std::getenv("TEST_TMPDIR");
  o.cache_dir = absl::StrCat(tmp ? tmp : "/tmp", "/rowwise_cache_", ::getpid());
  LnSpec ln;
  ln.cols = 768;
  ln.dtype = DType::kBF16;
  ln.addends = {{DType::kBF16, 0}, {DType::kBF16, 0}};
  auto k = RowwiseKernel::LayerNorm(ln, o);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_FALSE((*k)->from_cache());
  auto again = RowwiseKernel::LayerNorm(ln, o);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)->from_cache());
  ln.dtype = DType::kF32;
  ln.cols = 1001;  // odd: scalar accesses
  ln.addends.clear();
  ASSERT_TRUE(RowwiseKernel::LayerNorm(ln, o).ok());
  AdamWSpec a;
  a.max_norm = 1.0;
  auto w = RowwiseKernel::AdamW(a, o);
  ASSERT_TRUE(w.ok()) << w.status();
  // Parameters of another kind are refused before anything touches a GPU.
  LnParams p;
  EXPECT_EQ((*w)->Launch(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::kernels::cuda::codegen
