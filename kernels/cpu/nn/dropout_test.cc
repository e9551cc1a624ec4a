// dropout: the keep rule (Philox(seed, offset).Uniform(i) >= float(p)), mask
// statistics within binomial bounds, determinism (threads, repeated runs),
// masks that change with the step offset and the seed, p = 0 as a bit-exact
// identity, the gradient regenerating the mask, and bad input.
#include <cmath>
#include <cstring>

#include "base/rng.h"
#include "base/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/cpu/nn/nn_test_util.h"
#include "kernels/registry.h"

namespace loom::kernels::cpu::nn::testing {
namespace {

using kernels::Attrs;
using kernels::Impl;

Tensor RunDropout(const std::vector<Tensor>& in, const Attrs& a, Impl impl = Impl::kKernel) {
  auto out = kernels::RunOp("dropout", in, a, impl);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[0] : Tensor();
}

Tensor Step(int64_t s) { return Tensor::FromVector({}, {static_cast<double>(s)}, DType::kI64); }

TEST(Dropout, KeepsExactlyThePhiloxDrawsAboveP) {
  Tensor x = RandomTensor({3, 5, 7}, DType::kF32, 1, 0.5, 2);  // nonzero, so kept <=> y != 0
  const Attrs a{{"p", 0.3}, {"seed", int64_t{11}}};
  for (Impl impl : {Impl::kKernel, Impl::kReference}) {
    Tensor y = RunDropout({x, Step(4)}, a, impl);
    const Philox rng(11, 4);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const bool keep = rng.Uniform(i) >= 0.3f;
      const float got = y.data<float>()[i];
      EXPECT_EQ(got != 0.0f, keep) << i;
      // The kernel scales in f32; the reference in double, rounded once.
      if (impl == Impl::kKernel) EXPECT_EQ(got, keep ? x.data<float>()[i] * static_cast<float>(1.0 / 0.7) : 0.0f);
      else EXPECT_FLOAT_EQ(got, keep ? static_cast<float>(x.data<float>()[i] / 0.7) : 0.0f);
    }
  }
  // Without the offset input the offset is 0.
  EXPECT_EQ(RunDropout({x}, a).ToVector(), RunDropout({x, Step(0)}, a).ToVector());
}

TEST(Dropout, MaskFrequencyIsWithinBinomialBounds) {
  const int64_t n = 1 << 20;
  Tensor x = Tensor::MustEmpty({n}, DType::kF32);
  x.Fill(1.0);
  for (double p : {0.1, 0.5, 0.9}) {
    Tensor y = RunDropout({x, Step(3)}, {{"p", p}, {"seed", int64_t{1}}});
    int64_t kept = 0;
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      kept += y.data<float>()[i] != 0;
      sum += y.data<float>()[i];
    }
    // 5 sigma of Binomial(n, 1 - p): a correct generator fails with p < 1e-6.
    const double sigma = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(static_cast<double>(kept), n * (1 - p), 5 * sigma) << "p=" << p;
    EXPECT_NEAR(sum / n, 1.0, 5 * sigma / (n * (1 - p))) << "p=" << p << ": the scale keeps the mean";
  }
}

TEST(Dropout, DeterministicAcrossThreadsAndRuns) {
  Tensor x = RandomTensor({300, 257}, DType::kF32, 2);
  const Attrs a{{"p", 0.25}, {"seed", int64_t{9}}};
  Tensor first = RunDropout({x, Step(17)}, a).Clone();
  const int threads = NumThreads();
  SetNumThreads(1);
  Tensor serial = RunDropout({x, Step(17)}, a).Clone();
  SetNumThreads(threads);
  EXPECT_EQ(std::memcmp(first.raw_data(), serial.raw_data(), first.nbytes()), 0);
  EXPECT_EQ(std::memcmp(first.raw_data(), RunDropout({x, Step(17)}, a).raw_data(), first.nbytes()), 0);
  // The same (seed, offset) from an f32 step (what the trainer feeds) gives the same mask.
  Tensor f32_step = Tensor::FromVector({}, {17.0}, DType::kF32);
  EXPECT_EQ(std::memcmp(first.raw_data(), RunDropout({x, f32_step}, a).raw_data(), first.nbytes()), 0);
}

TEST(Dropout, MasksDifferAcrossStepsAndSeeds) {
  const int64_t n = 1 << 16;
  Tensor x = Tensor::MustEmpty({n}, DType::kF32);
  x.Fill(1.0);
  auto differ = [&](const Tensor& a, const Tensor& b) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; ++i) d += (a.data<float>()[i] != 0) != (b.data<float>()[i] != 0);
    return static_cast<double>(d) / n;
  };
  const Attrs a{{"p", 0.5}, {"seed", int64_t{3}}}, b{{"p", 0.5}, {"seed", int64_t{4}}};
  Tensor s1 = RunDropout({x, Step(1)}, a).Clone(), s2 = RunDropout({x, Step(2)}, a).Clone();
  Tensor t1 = RunDropout({x, Step(1)}, b).Clone();
  // Independent masks disagree on 2 p (1 - p) = half of the positions.
  EXPECT_NEAR(differ(s1, s2), 0.5, 0.02);
  EXPECT_NEAR(differ(s1, t1), 0.5, 0.02);
}

TEST(Dropout, PZeroIsTheIdentityBitForBit) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF64}) {
    Tensor base = RandomTensor({37, 7}, dt, 5, -3, 3);
    base.SetDouble(3, -0.0);
    base.SetDouble(4, NAN);
    for (const Tensor& x : {base, base.Transpose(0, 1)}) {
      const Tensor want = x.Contiguous();
      for (Impl impl : {Impl::kKernel, Impl::kReference}) {
        Tensor y = RunDropout({x, Step(8)}, {{"p", 0.0}, {"seed", int64_t{1}}}, impl);
        ASSERT_EQ(y.nbytes(), want.nbytes());
        EXPECT_EQ(std::memcmp(y.raw_data(), want.raw_data(), want.nbytes()), 0) << DTypeName(dt);
      }
    }
  }
}

TEST(Dropout, GradientRegeneratesTheMask) {
  Tensor x = RandomTensor({4, 9}, DType::kF64, 6), dy = RandomTensor({4, 9}, DType::kF64, 7);
  const Attrs a{{"p", 0.4}, {"seed", int64_t{2}}};
  for (Impl impl : {Impl::kKernel, Impl::kReference}) {
    auto g = kernels::EagerGradients("dropout", {x, Step(5)}, {dy}, a, impl);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_FALSE((*g)[1].defined()) << "the offset takes no gradient";
    const Philox rng(2, 5);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double want = rng.Uniform(i) >= 0.4f ? dy.GetDouble(i) / 0.6 : 0.0;
      EXPECT_NEAR((*g)[0].GetDouble(i), want, 1e-15) << i;
    }
  }
}

TEST(Dropout, BadInputNamesTheField) {
  Tensor x = RandomTensor({4}, DType::kF32, 1);
  auto err = [&](std::vector<Tensor> in, Attrs a) { return ErrorOf(kernels::RunOp("dropout", in, a).status()); };
  EXPECT_NE(err({x}, {{"p", 1.0}}).find("dropout: p: must be in [0, 1), got 1"), std::string::npos);
  EXPECT_NE(err({x}, {{"p", -0.5}}).find("p: must be in [0, 1)"), std::string::npos);
  EXPECT_NE(err({x}, {{"p", 0.5}, {"seed", 1.5}}).find("seed: expected an integer"), std::string::npos);
  EXPECT_NE(err({x, Step(-1)}, {{"p", 0.5}}).find("offset: expected a whole number >= 0, got -1"), std::string::npos);
  EXPECT_NE(err({x, Tensor::FromVector({}, {2.5}, DType::kF32)}, {{"p", 0.5}}).find("offset: expected a whole number"),
            std::string::npos);
  EXPECT_NE(err({x, Tensor::FromVector({2}, {1, 2}, DType::kI64)}, {{"p", 0.5}}).find("offset: expected a scalar"),
            std::string::npos);
  EXPECT_NE(err({x, Tensor::Zeros({}, DType::kBool)}, {{"p", 0.5}}).find("offset: expected dtype i32, i64, f32 or f64"),
            std::string::npos);
  EXPECT_NE(err({x, Step(1), Step(2)}, {{"p", 0.5}}).find("expected 1 or 2 inputs"), std::string::npos);
  EXPECT_NE(err({Tensor::Zeros({4}, DType::kI64)}, {{"p", 0.5}}).find("x: expected a floating dtype"),
            std::string::npos);
}

}  // namespace
}  // namespace loom::kernels::cpu::nn::testing
