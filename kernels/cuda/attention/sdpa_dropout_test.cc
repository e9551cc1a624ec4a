// Attention dropout's keep mask (sdpa_dropout.h), which the CUDA kernel and the
// fp64 reference share: the kept fraction is 1 - p, draws are independent of
// each other (neighbours, seeds, offsets), and the reference applies it as
// PyTorch's dropout: E[o] over seeds equals the dropout-free output.
#include "kernels/cuda/attention/sdpa_dropout.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/attention/attention_reference.h"

namespace loom::kernels::cuda::attention {
namespace {

TEST(SdpaDropout, KeptFractionIsOneMinusP) {
  const int n = 1 << 20;
  for (float p : {0.f, 0.1f, 0.5f, 0.9f}) {
    int kept = 0;
    for (int i = 0; i < n; ++i) kept += DropoutKeep(1234, 0, i, p);
    const double frac = static_cast<double>(kept) / n, sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(frac, 1 - p, 5 * sigma + 1e-9) << "p " << p;
  }
}

TEST(SdpaDropout, DrawsAreIndependent) {
  // Neighbouring counters, two seeds and shifted offsets agree about half the
  // time at p = 0.5, as independent coins do.
  const int n = 1 << 18;
  int same_next = 0, same_seed = 0, same_offset = 0;
  for (int i = 0; i < n; ++i) {
    const bool a = DropoutKeep(7, 0, i, 0.5f);
    same_next += a == DropoutKeep(7, 0, i + 1, 0.5f);
    same_seed += a == DropoutKeep(8, 0, i, 0.5f);
    same_offset += a == DropoutKeep(7, 1000003, i, 0.5f);
  }
  const double sigma = 0.5 / std::sqrt(static_cast<double>(n));
  for (int same : {same_next, same_seed, same_offset}) EXPECT_NEAR(static_cast<double>(same) / n, 0.5, 5 * sigma);
  // The same (seed, offset, index) always gives the same decision.
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(DropoutKeep(3, 5, i, 0.3f), DropoutKeep(3, 5, i, 0.3f));
}

TEST(SdpaDropout, ReferenceIsUnbiased) {
  ref::SdpaShape s;
  s.batch = 1, s.heads = 1, s.kv_heads = 1, s.seq_q = 4, s.seq_k = 6, s.head_dim = 3;
  s.scale = 0.5;
  std::vector<double> q(12), k(18), v(18);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(1.0 + i);
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(2.0 + i), v[i] = std::sin(3.0 * i);
  std::vector<double> o0, lse0, o, lse, mean(12, 0.0);
  ref::SdpaForward(s, q, k, v, &o0, &lse0);
  s.dropout_p = 0.25;
  const int seeds = 20000;
  for (int seed = 0; seed < seeds; ++seed) {
    s.dropout_seed = seed;
    ref::SdpaForward(s, q, k, v, &o, &lse);
    for (int i = 0; i < 12; ++i) mean[i] += o[i] / seeds;
    for (int i = 0; i < 4; ++i) ASSERT_EQ(lse[i], lse0[i]);  // dropout leaves the softmax statistics alone
  }
  double num = 0, den = 0;
  for (int i = 0; i < 12; ++i) num += (mean[i] - o0[i]) * (mean[i] - o0[i]), den += o0[i] * o0[i];
  EXPECT_LT(std::sqrt(num / den), 0.02);
}

}  // namespace
}  // namespace loom::kernels::cuda::attention
