// Flash attention: the GPU checks against the fp64 reference (skipped with the
// reason when there is no GPU), argument validation (no GPU needed), and the
// fp64 reference's own backward against finite differences (CPU).
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/testing/full_sweep.h"
#include "gtest/gtest.h"
#include "kernels/cuda/attention/attention_checks.h"
#include "kernels/cuda/attention/attention_reference.h"
#include "kernels/cuda/attention/flash_attention.h"
#include "kernels/cuda/cuda_device.h"

namespace loom::kernels::cuda::attention {
namespace {

TEST(FlashAttention, ChecksPassOrSkip) {
  absl::Status avail = CudaAvailable();
  if (!avail.ok()) GTEST_SKIP() << "needs a GPU: " << avail.message();
  CheckOptions opts;
  opts.full = loom::testing::FullSweep();
  auto rows = RunAttentionChecks(opts);
  ASSERT_TRUE(rows.ok()) << rows.status();
  std::printf("attention source hash %s\n%s", AttentionSourceHash(), FormatCheckTable(*rows).c_str());
  for (const CheckResult& r : *rows) EXPECT_TRUE(r.pass) << r.name << " " << r.shape << " " << r.detail;
}

FlashAttnArgs ValidArgs() {
  alignas(16) static char dummy[16];
  FlashAttnArgs a;
  a.dtype = DType::kBF16;
  a.batch = 1, a.heads = 4, a.kv_heads = 2, a.seq_q = 8, a.seq_k = 8, a.head_dim = 64;
  a.q = a.k = a.v = dummy;
  a.o = dummy;
  a.lse = reinterpret_cast<float*>(dummy);
  return a;
}

void ExpectInvalid(const FlashAttnArgs& a, const char* word, bool backward = false) {
  absl::Status s = backward ? FlashAttentionBackward(a) : FlashAttentionForward(a);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find(word), std::string::npos) << s;
}

TEST(FlashAttention, BadArgumentsAreInvalidArgument) {
  FlashAttnArgs a = ValidArgs();
  a.dtype = DType::kF32;
  ExpectInvalid(a, "dtype");
  a = ValidArgs();
  a.head_dim = 96;
  ExpectInvalid(a, "head_dim");
  a = ValidArgs();
  a.kv_heads = 3;
  ExpectInvalid(a, "kv_heads");
  a = ValidArgs();
  a.seq_k = 0;
  ExpectInvalid(a, "seq_k");
  a = ValidArgs();
  a.scale = -1.f;
  ExpectInvalid(a, "scale");
  a = ValidArgs();
  a.scale = NAN;
  ExpectInvalid(a, "scale");
  a = ValidArgs();
  a.v = nullptr;
  ExpectInvalid(a, "flash_attention: v");
  a = ValidArgs();
  ExpectInvalid(a, "dout", /*backward=*/true);
  // A forward's lse may be null (inference); the backward's may not.
  a = ValidArgs();
  a.lse = nullptr;
  EXPECT_TRUE(FlashAttentionValidate(a, false).ok()) << FlashAttentionValidate(a, false);
  a.dout = a.q, a.dq = a.dk = a.dv = a.o, a.workspace = a.o;
  ExpectInvalid(a, "lse: null", /*backward=*/true);
  // Both atomic-dQ variants are refused when deterministic, naming the field.
  for (int v : {kFlashBwdAtomicVariant, kFlashBwdWsAtomicVariant}) {
    a = ValidArgs();
    a.deterministic = true, a.bwd_variant = v;
    ExpectInvalid(a, "bwd_variant");
  }
  a = ValidArgs();
  a.bwd_variant = FlashBackwardVariants() + 1;
  ExpectInvalid(a, "bwd_variant");
  // The tensor-map check validates first; with no compute-capability-9.0
  // device (this machine) it is Unavailable, never OK.
  EXPECT_EQ(FlashWsMapsStatus(a, false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FlashWsMapsStatus(ValidArgs(), false).code(), absl::StatusCode::kUnavailable);
  // f32 dQ accumulator and delta, rounded up to 256 bytes; the stored-dS
  // variant (the default while dS fits ds_limit_bytes) adds dS^T padded
  // to 64 keys x 128 queries per head.
  const int64_t base = (1 * 4 * 8 * 65 * 4 + 255) / 256 * 256, ds = 1 * 4 * 64 * 128 * 2;
  a = ValidArgs();
  a.bwd_variant = 2;
  EXPECT_EQ(FlashAttentionBwdWorkspaceBytes(a), base);
  a.bwd_variant = kFlashBwdWsAtomicVariant;  // the one-pass kernel: the accumulator only, no dS
  EXPECT_EQ(FlashAttentionBwdWorkspaceBytes(a), base);
  a.bwd_variant = kFlashBwdDsVariant;
  EXPECT_EQ(FlashDsWorkspaceBytes(a), ds);
  EXPECT_EQ(FlashAttentionBwdWorkspaceBytes(a), base + ds);
  ASSERT_GE(ValidArgs().ds_limit_bytes, ds);
  EXPECT_EQ(ValidArgs().ds_limit_bytes, kFlashDefaultDsLimitBytes);
  EXPECT_EQ(FlashResolvedBackwardVariant(ValidArgs()), kFlashBwdWsDs1Variant);
  a = ValidArgs();  // a limit below this dS: the two-pass default
  a.ds_limit_bytes = ds - 1;
  EXPECT_EQ(FlashResolvedBackwardVariant(a), FlashDefaultBackwardVariant(64));
  EXPECT_EQ(FlashAttentionBwdWorkspaceBytes(a), base);
  a.ds_limit_bytes = -1;
  ExpectInvalid(a, "ds_limit_bytes");
  a = ValidArgs();
  a.bwd_variant = kFlashBwdDsVariant;
  a.bwd_variant = kFlashBwdWgmmaDsVariant;  // the wgmma dK/dV passes: the same workspace
  EXPECT_EQ(FlashAttentionBwdWorkspaceBytes(a), base + ds);
  EXPECT_EQ(FlashAttentionBwdWorkspaceBytes(ValidArgs()), base + ds);
  a = ValidArgs();  // dS past the limit: the two-pass default, no dS workspace
  a.heads = 64, a.kv_heads = 64, a.seq_q = a.seq_k = 65536;
  ASSERT_GT(FlashDsWorkspaceBytes(a), a.ds_limit_bytes);
  EXPECT_EQ(FlashResolvedBackwardVariant(a), FlashDefaultBackwardVariant(64));
  EXPECT_EQ(FlashAttentionBwdWorkspaceBytes(a), (int64_t{64} * 65536 * 65 * 4 + 255) / 256 * 256);
}

// d/dx of sum(o * dout) by central differences against SdpaBackward.
TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  for (bool causal : {false, true}) {
    ref::SdpaShape s;
    s.batch = 1, s.heads = 4, s.kv_heads = 2, s.seq_q = 5, s.seq_k = 6, s.head_dim = 3;
    s.causal = causal;
    s.scale = 0.7;
    auto fill = [](size_t n, double f) {
      std::vector<double> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = std::sin(f * (i + 1));
      return v;
    };
    std::vector<double> q = fill(4 * 5 * 3, 1.3), k = fill(2 * 6 * 3, 0.7), v = fill(2 * 6 * 3, 2.1),
                        dout = fill(4 * 5 * 3, 0.9);
    auto loss = [&](const std::vector<double>& qq, const std::vector<double>& kk, const std::vector<double>& vv) {
      std::vector<double> o, lse;
      ref::SdpaForward(s, qq, kk, vv, &o, &lse);
      double l = 0;
      for (size_t i = 0; i < o.size(); ++i) l += o[i] * dout[i];
      return l;
    };
    std::vector<double> dq, dk, dv;
    ref::SdpaBackward(s, q, k, v, dout, &dq, &dk, &dv);
    const double eps = 1e-6;
    auto check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* name) {
      for (size_t i = 0; i < x.size(); ++i) {
        const double keep = x[i];
        x[i] = keep + eps;
        const double up = loss(q, k, v);
        x[i] = keep - eps;
        const double down = loss(q, k, v);
        x[i] = keep;
        EXPECT_NEAR(grad[i], (up - down) / (2 * eps), 1e-6) << name << "[" << i << "] causal=" << causal;
      }
    };
    check(q, dq, "dq");
    check(k, dk, "dk");
    check(v, dv, "dv");
    // lse is the log of the softmax denominator: row 0 causal sees only key 0.
    std::vector<double> o, lse;
    ref::SdpaForward(s, q, k, v, &o, &lse);
    if (causal) {
      double dot = 0;
      for (int d = 0; d < 3; ++d) dot += q[d] * k[d];
      EXPECT_NEAR(lse[0], dot * s.scale, 1e-12);
      for (int d = 0; d < 3; ++d) EXPECT_NEAR(o[d], v[d], 1e-12);
    }
  }
}

}  // namespace
}  // namespace loom::kernels::cuda::attention
