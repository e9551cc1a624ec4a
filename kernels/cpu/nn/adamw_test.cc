// AdamW: the op against a hand-written one-step formula, the multi-tensor entry
// point against the per-tensor ops, and bad inputs of the entry point.
#include <cmath>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/cpu/nn/adamw.h"
#include "kernels/cpu/nn/nn_test_util.h"
#include "kernels/registry.h"

namespace loom::kernels::cpu::nn::testing {
namespace {

using kernels::Attrs;
using kernels::Impl;

Tensor Scalar(double v, DType dt = DType::kF32) { return Tensor::FromVector({}, {v}, dt); }

TEST(AdamW, OneStepByHand) {
  // p = [1, -2], g = [0.5, 0.1], m = v = 0, step 1, lr 0.1, wd 0.01.
  // With max_norm 0.1: norm = sqrt(0.26), clip = 0.1 / (norm + 1e-6).
  const double lr = 0.1, wd = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  const double norm = std::sqrt(0.26), clip = 0.1 / (norm + 1e-6);
  for (Impl impl : {Impl::kKernel, Impl::kReference}) {
    std::vector<Tensor> in = {Tensor::FromVector({2}, {1, -2}), Tensor::FromVector({2}, {0.5, 0.1}),
                              Tensor::Zeros({2}, DType::kF32), Tensor::Zeros({2}, DType::kF32),
                              Scalar(norm), Scalar(lr), Scalar(1, DType::kI64)};
    auto out = kernels::RunOp("adamw", in, Attrs{{"weight_decay", wd}, {"max_norm", 0.1}}, impl);
    ASSERT_TRUE(out.ok()) << out.status();
    const double g[2] = {0.5 * clip, 0.1 * clip}, p[2] = {1, -2};
    for (int i = 0; i < 2; ++i) {
      double m = (1 - b1) * g[i], v = (1 - b2) * g[i] * g[i];
      double mhat = m / (1 - b1), vhat = v / (1 - b2);
      double want = p[i] * (1 - lr * wd) - lr * mhat / (std::sqrt(vhat) + eps);
      EXPECT_NEAR((*out)[0].GetDouble(i), want, 1e-6) << i;
      EXPECT_NEAR((*out)[1].GetDouble(i), m, 1e-8) << i;
      EXPECT_NEAR((*out)[2].GetDouble(i), v, 1e-10) << i;
    }
  }
  // f64 scalars with f32 tensors take the fast kernel and agree with the reference.
  std::vector<Tensor> in = {RandomTensor({7, 37}, DType::kF32, 1), RandomTensor({7, 37}, DType::kF32, 2),
                            RandomTensor({7, 37}, DType::kF32, 3, -0.1, 0.1),
                            RandomTensor({7, 37}, DType::kF32, 4, 0, 0.01), Scalar(3, DType::kF64),
                            Scalar(1e-2, DType::kF64), Scalar(4, DType::kF64)};
  auto k = kernels::RunOp("adamw", in, Attrs{{"max_norm", 1.0}}, Impl::kKernel);
  auto r = kernels::RunOp("adamw", in, Attrs{{"max_norm", 1.0}}, Impl::kReference);
  ASSERT_TRUE(k.ok() && r.ok());
  for (int j = 0; j < 3; ++j) EXPECT_LE(RelativeError((*k)[j], (*r)[j]), 1e-6) << j;
  EXPECT_DOUBLE_EQ(nn::ClipCoefficient(0.5, 0), 1.0);
  EXPECT_DOUBLE_EQ(nn::ClipCoefficient(0.5, 2.0), 1.0);
  EXPECT_NEAR(nn::ClipCoefficient(4.0, 2.0), 0.5, 1e-6);
}

std::vector<Tensor> RandomList(const std::vector<Shape>& shapes, uint64_t seed, double lo, double hi) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < shapes.size(); ++i) out.push_back(RandomTensor(shapes[i], DType::kF32, seed + i, lo, hi));
  return out;
}

std::vector<Tensor> Clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.Clone());
  return out;
}

TEST(AdamW, MultiTensorMatchesPerTensorOps) {
  const std::vector<Shape> shapes = {{7, 37}, {5}, {3, 5, 7}, {70001}};
  nn::AdamWOptions opt;
  opt.lr = 3e-3;
  opt.weight_decay = 0.05;
  opt.max_norm = 2.0;
  std::vector<Tensor> p = RandomList(shapes, 10, -1, 1);
  std::vector<Tensor> m = RandomList(shapes, 20, 0, 0), v = RandomList(shapes, 30, 0, 0);
  std::vector<Tensor> p2 = Clones(p), m2 = Clones(m), v2 = Clones(v);
  Attrs attrs{{"beta1", opt.beta1}, {"beta2", opt.beta2}, {"eps", opt.eps},
              {"weight_decay", opt.weight_decay}, {"max_norm", opt.max_norm}};
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<Tensor> g = RandomList(shapes, 100 * step, -0.5, 0.5);
    auto norm = nn::AdamWStepMulti(p, g, m, v, step, opt);
    ASSERT_TRUE(norm.ok()) << norm.status();
    auto gn = kernels::RunOp("grad_norm", g);
    ASSERT_TRUE(gn.ok()) << gn.status();
    EXPECT_NEAR((*gn)[0].GetDouble(0), *norm, 1e-5 * *norm);
    for (size_t i = 0; i < shapes.size(); ++i) {
      auto o = kernels::RunOp("adamw", {p2[i], g[i], m2[i], v2[i], (*gn)[0], Scalar(opt.lr), Scalar(step, DType::kI64)},
                              attrs);
      ASSERT_TRUE(o.ok()) << o.status();
      p2[i] = (*o)[0];
      m2[i] = (*o)[1];
      v2[i] = (*o)[2];
    }
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_LE(RelativeError(p[i], p2[i]), 1e-6) << i;
    EXPECT_LE(RelativeError(m[i], m2[i]), 1e-6) << i;
    EXPECT_LE(RelativeError(v[i], v2[i]), 1e-6) << i;
  }
}

TEST(AdamW, MultiTensorIsDeterministicAcrossThreads) {
  const std::vector<Shape> shapes = {{100003}, {3, 77}};
  std::vector<std::vector<double>> results;
  for (int threads : {1, 3}) {
    SetNumThreads(threads);
    std::vector<Tensor> p = RandomList(shapes, 1, -1, 1), m = RandomList(shapes, 2, 0, 0),
                        v = RandomList(shapes, 3, 0, 0), g = RandomList(shapes, 4, -1, 1);
    nn::AdamWOptions opt;
    opt.max_norm = 1;
    ASSERT_TRUE(nn::AdamWStepMulti(p, g, m, v, 1, opt).ok());
    results.push_back(p[0].ToVector());
  }
  SetNumThreads(2);
  EXPECT_EQ(results[0], results[1]);
}

TEST(AdamW, MultiTensorBadInputs) {
  nn::AdamWOptions opt;
  std::vector<Tensor> p = {Tensor::Zeros({3}, DType::kF32), Tensor::Zeros({5}, DType::kF32)};
  std::vector<Tensor> g = {Tensor::Zeros({3}, DType::kF32), Tensor::Zeros({4}, DType::kF32)};
  auto err = [](const absl::StatusOr<double>& r) { return r.ok() ? std::string() : std::string(r.status().message()); };
  EXPECT_NE(err(nn::AdamWStepMulti(p, g, Clones(p), Clones(p), 1, opt)).find("grads[1]: shape [4]"), std::string::npos);
  EXPECT_NE(err(nn::AdamWStepMulti(p, {g[0]}, p, p, 1, opt)).find("params: 2 tensors but grads has 1"),
            std::string::npos);
  EXPECT_NE(err(nn::AdamWStepMulti(p, p, p, p, 0, opt)).find("step: expected >= 1"), std::string::npos);
  std::vector<Tensor> p64 = {Tensor::Zeros({3}, DType::kF64)};
  EXPECT_NE(err(nn::AdamWStepMulti(p64, p64, p64, p64, 1, opt)).find("params[0]: expected a contiguous f32"),
            std::string::npos);
  nn::AdamWOptions bad = opt;
  bad.beta2 = 1.5;
  EXPECT_NE(err(nn::AdamWStepMulti(p, p, p, p, 1, bad)).find("beta2"), std::string::npos);
  EXPECT_TRUE(nn::AdamWStepMulti({}, {}, {}, {}, 1, opt).ok());  // nothing to update
}

}  // namespace
}  // namespace loom::kernels::cpu::nn::testing
