// Gradient rules vs central finite differences in f64, for the ops whose
// rules are most involved: matmul with broadcast batches and trans flags,
// broadcasting add/div/maximum, sum/mean/max, reshape, permute, slice, concat,
// broadcast_to/sum_to. L = sum_j W_j * out_j for a fixed random W; every input
// element is probed. The rule is run on the references and on the fast
// kernels (both in f64).
#include <cmath>

#include "gtest/gtest.h"
#include "kernels/cpu/test_util.h"

namespace loom::kernels::cpu {
namespace {

using testing::Rand;
using Ints = std::vector<int64_t>;

double Loss(const std::string& op, const std::vector<Tensor>& in, const kernels::Attrs& attrs, const Tensor& w) {
  auto out = kernels::RunOp(op, in, attrs, kernels::Impl::kReference);
  EXPECT_TRUE(out.ok()) << out.status();
  double s = 0;
  for (int64_t i = 0; i < w.numel(); ++i) s += w.GetDouble(i) * (*out)[0].GetDouble(i);
  return s;
}

void CheckGrad(const std::string& op, std::vector<Tensor> in, const kernels::Attrs& attrs = {}) {
  SCOPED_TRACE(op + " " + attrs.ToString());
  auto out = kernels::RunOp(op, in, attrs, kernels::Impl::kReference);
  ASSERT_TRUE(out.ok()) << out.status();
  Tensor w = Rand(std::vector<int64_t>((*out)[0].shape().begin(), (*out)[0].shape().end()), DType::kF64, 99);
  for (kernels::Impl impl : {kernels::Impl::kReference, kernels::Impl::kKernel}) {
    auto grads = kernels::EagerGradients(op, in, {w}, attrs, impl);
    ASSERT_TRUE(grads.ok()) << grads.status();
    ASSERT_EQ(grads->size(), in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      const Tensor& g = (*grads)[i];
      ASSERT_TRUE(g.defined()) << "input " << i;
      ASSERT_EQ(g.shape(), in[i].shape()) << "input " << i;
      ASSERT_EQ(g.dtype(), DType::kF64);
      const double h = 1e-6;
      double num = 0, den = 0;
      for (int64_t e = 0; e < in[i].numel(); ++e) {
        std::vector<Tensor> plus = in, minus = in;
        plus[i] = in[i].Clone();
        minus[i] = in[i].Clone();
        plus[i].SetDouble(e, in[i].GetDouble(e) + h);
        minus[i].SetDouble(e, in[i].GetDouble(e) - h);
        double fd = (Loss(op, plus, attrs, w) - Loss(op, minus, attrs, w)) / (2 * h);
        num += (fd - g.GetDouble(e)) * (fd - g.GetDouble(e));
        den += fd * fd;
      }
      double err = den == 0 ? std::sqrt(num) : std::sqrt(num / den);
      EXPECT_LE(err, 1e-7) << "input " << i << (impl == kernels::Impl::kKernel ? " (kernels)" : " (reference)");
    }
  }
}

Tensor R(std::vector<int64_t> shape, uint64_t seed = 1, double lo = -1, double hi = 1) {
  return Rand(shape, DType::kF64, seed, lo, hi);
}

kernels::Attrs Trans(bool ta, bool tb) { return {{"trans_a", ta}, {"trans_b", tb}}; }

TEST(Grad, MatMulBroadcastBatch) {
  CheckGrad("matmul", {R({3, 5}), R({5, 4}, 2)});
  CheckGrad("matmul", {R({2, 3, 5}), R({5, 4}, 2)});              // b broadcast over the batch
  CheckGrad("matmul", {R({3, 5}), R({2, 5, 4}, 2)});              // a broadcast over the batch
  CheckGrad("matmul", {R({2, 1, 3, 5}), R({3, 5, 4}, 2)});        // both broadcast
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      CheckGrad("matmul", {R(ta ? Ints{2, 1, 5, 3} : Ints{2, 1, 3, 5}), R(tb ? Ints{3, 4, 5} : Ints{3, 5, 4}, 2)},
                Trans(ta, tb));
}

TEST(Grad, BroadcastingBinary) {
  CheckGrad("add", {R({3, 4, 5}), R({4, 1}, 2)});
  CheckGrad("add", {R({}), R({2, 3}, 2)});
  CheckGrad("sub", {R({3, 1, 5}), R({4, 1}, 2)});
  CheckGrad("mul", {R({3, 4, 5}), R({5}, 2)});
  CheckGrad("div", {R({3, 4, 5}), R({4, 5}, 2, 0.5, 2)});
  CheckGrad("div", {R({3, 1}), R({1, 4}, 2, -2, -0.5)});
  CheckGrad("maximum", {R({3, 4}), R({4}, 2)});
}

TEST(Grad, Reductions) {
  for (const char* op : {"sum", "mean", "max"}) {
    CheckGrad(op, {R({3, 4, 5})});
    CheckGrad(op, {R({3, 4, 5})}, {{"axes", Ints{1}}});
    CheckGrad(op, {R({3, 4, 5})}, {{"axes", Ints{-1, 0}}, {"keepdim", true}});
    CheckGrad(op, {R({2, 3, 4, 5})}, {{"axes", Ints{1, 3}}});
  }
  CheckGrad("sum_to", {R({3, 4, 5})}, {{"shape", Ints{4, 1}}});
  CheckGrad("broadcast_to", {R({4, 1})}, {{"shape", Ints{3, 4, 5}}});
}

TEST(Grad, ShapeOps) {
  CheckGrad("reshape", {R({3, 4, 5})}, {{"shape", Ints{-1, 10}}});
  CheckGrad("permute", {R({2, 3, 4, 5})}, {{"dims", Ints{3, 0, -2, 1}}});
  CheckGrad("slice", {R({3, 7, 2})}, {{"axis", int64_t{1}}, {"start", int64_t{-5}}, {"length", int64_t{3}}});
  CheckGrad("slice_backward", {R({3, 2})}, {{"axis", int64_t{-1}}, {"start", int64_t{1}}, {"full_len", int64_t{4}}});
  CheckGrad("concat", {R({3, 2, 4}), R({3, 5, 4}, 2), R({3, 1, 4}, 3)}, {{"axis", int64_t{1}}});
  CheckGrad("concat", {R({2, 3}), R({2, 3}, 2)}, {{"axis", int64_t{-1}}});
  CheckGrad("cast", {R({3, 4})}, {{"dtype", std::string("f64")}});
}

TEST(Grad, Unary) {
  for (const char* op : {"neg", "exp", "tanh", "sigmoid", "relu", "abs"}) CheckGrad(op, {R({3, 5})});
  for (const char* op : {"log", "sqrt", "rsqrt"}) CheckGrad(op, {R({3, 5}, 1, 0.5, 2)});
  CheckGrad("scale", {R({3, 5})}, {{"s", -2.5}});
  CheckGrad("add_scalar", {R({3, 5})}, {{"s", 1.0}});
  CheckGrad("pow_scalar", {R({3, 5}, 1, 0.5, 2)}, {{"p", -1.5}});
}

}  // namespace
}  // namespace loom::kernels::cpu
