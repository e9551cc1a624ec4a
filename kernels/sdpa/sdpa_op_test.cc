// The registered ops: consistency cases (kernel vs reference in f32/f64, grad
// rule vs central differences in f64), the grad rule wiring, impl overrides and
// errors through RunOp.
#include <gtest/gtest.h>

#include "kernels/registry.h"
#include "kernels/sdpa/sdpa.h"
#include "kernels/sdpa/sdpa_test_util.h"

namespace loom::kernels::sdpa {
namespace {

std::vector<Tensor> MakeCaseInputs(const kernels::ConsistencyCase& c, DType float_dt) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const kernels::InputSpec& s = c.inputs[i];
    DType dt = IsFloating(s.meta.dtype) && i < 3 ? float_dt : s.meta.dtype;
    Tensor t = Tensor::MustEmpty(s.meta.shape, dt);
    Philox rng(100 + i, 0);
    if (s.fill) {
      s.fill(t, rng);
    } else {
      for (int64_t j = 0; j < t.numel(); ++j) t.SetDouble(j, s.lo + (s.hi - s.lo) * rng.Uniform(j));
    }
    in.push_back(t);
  }
  return in;
}

TEST(SdpaOp, Registered) {
  const kernels::OpDef* f = kernels::OpRegistry::Global().Find("sdpa");
  const kernels::OpDef* b = kernels::OpRegistry::Global().Find("sdpa_backward");
  ASSERT_NE(f, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(static_cast<bool>(f->grad));
  EXPECT_FALSE(static_cast<bool>(b->grad));
  EXPECT_FALSE(b->no_grad_reason.empty());
  EXPECT_GE(f->cases.size(), 2u);
}

TEST(SdpaOp, ConsistencyCases) {
  const kernels::OpDef* def = kernels::OpRegistry::Global().Find("sdpa");
  ASSERT_NE(def, nullptr);
  for (const kernels::ConsistencyCase& c : def->cases) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> in64 = MakeCaseInputs(c, DType::kF64);
    auto ref = kernels::RunOp("sdpa", in64, c.attrs, kernels::Impl::kReference);
    ASSERT_TRUE(ref.ok()) << ref.status();
    for (DType dt : {DType::kF64, DType::kF32}) {
      std::vector<Tensor> in = MakeCaseInputs(c, dt);
      for (std::string impl : {"auto", "memeff", "math", "flash"}) {
        if (impl == "flash" && in.size() == 4) continue;
        kernels::Attrs attrs = c.attrs;
        attrs.Set("impl", impl);
        auto out = kernels::RunOp("sdpa", in, attrs, kernels::Impl::kKernel);
        ASSERT_TRUE(out.ok()) << out.status();
        EXPECT_LT(RelativeError((*out)[0], (*ref)[0]), dt == DType::kF64 ? 1e-12 : 1e-5) << impl;
        EXPECT_LT(RelativeError((*out)[1], (*ref)[1]), 1e-6) << impl;
      }
    }
    // Gradient rule vs central differences of L = sum(out * w), f64 reference.
    Tensor w = Tensor::MustEmpty((*ref)[0].shape(), DType::kF64);
    Philox rng(7, 0);
    for (int64_t i = 0; i < w.numel(); ++i) w.SetDouble(i, rng.Uniform(i) - 0.5);
    std::vector<Tensor> gouts = {w, Tensor()};
    for (kernels::Impl impl : {kernels::Impl::kReference, kernels::Impl::kKernel}) {
      auto grads = kernels::EagerGradients("sdpa", in64, gouts, c.attrs, impl);
      ASSERT_TRUE(grads.ok()) << grads.status();
      ASSERT_EQ(grads->size(), in64.size());
      if (in64.size() == 4) {
        EXPECT_FALSE((*grads)[3].defined());
      }
      for (int x = 0; x < 3; ++x) {
        Tensor num = Tensor::Zeros(in64[x].shape(), DType::kF64);
        for (int64_t i = 0; i < in64[x].numel(); ++i) {
          const double x0 = in64[x].GetDouble(i), h = c.fd_step;
          double l[2];
          for (int sgn = 0; sgn < 2; ++sgn) {
            in64[x].SetDouble(i, x0 + (sgn == 0 ? h : -h));
            auto o = kernels::RunOp("sdpa", in64, c.attrs, kernels::Impl::kReference);
            ASSERT_TRUE(o.ok());
            double acc = 0;
            for (int64_t j = 0; j < w.numel(); ++j) acc += (*o)[0].GetDouble(j) * w.GetDouble(j);
            l[sgn] = acc;
          }
          in64[x].SetDouble(i, x0);
          num.SetDouble(i, (l[0] - l[1]) / (2 * c.fd_step));
        }
        EXPECT_LT(RelativeError((*grads)[x], num), 1e-6) << "input " << x;
      }
    }
  }
}

TEST(SdpaOp, LseGradientIsUnimplemented) {
  std::vector<Tensor> in = {testing::Random({1, 1, 3, 4}, DType::kF64, 1), testing::Random({1, 1, 3, 4}, DType::kF64, 2),
                            testing::Random({1, 1, 3, 4}, DType::kF64, 3)};
  std::vector<Tensor> g = {Tensor(), testing::Random({1, 1, 3}, DType::kF32, 4)};
  auto r = kernels::EagerGradients("sdpa", in, g, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(SdpaOp, ErrorsNameTheOpAndArgument) {
  std::vector<Tensor> in = {testing::Random({1, 4, 64, 8}, DType::kF32, 1),
                            testing::Random({1, 3, 64, 8}, DType::kF32, 2),
                            testing::Random({1, 3, 64, 8}, DType::kF32, 3)};
  auto r = kernels::RunOp("sdpa", in, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(r.status().message()).rfind("sdpa: k: q heads H=4", 0), 0u) << r.status();

  std::vector<Tensor> masked = {testing::Random({1, 2, 64, 8}, DType::kF32, 1),
                                testing::Random({1, 2, 64, 8}, DType::kF32, 2),
                                testing::Random({1, 2, 64, 8}, DType::kF32, 3), testing::RandomBoolMask({64, 64}, 4)};
  auto f = kernels::RunOp("sdpa", masked, {{"impl", std::string("flash")}});
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(f.status().message()).find("flash takes no mask"), std::string::npos) << f.status();

  // sdpa_backward checks its extra inputs.
  auto fwd = kernels::RunOp("sdpa", {masked[0], masked[1], masked[2]}, {});
  ASSERT_TRUE(fwd.ok());
  std::vector<Tensor> bin = {testing::Random({1, 2, 64, 7}, DType::kF32, 5), masked[0], masked[1], masked[2],
                             (*fwd)[0], (*fwd)[1]};
  auto b = kernels::RunOp("sdpa_backward", bin, {});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(std::string(b.status().message()).rfind("sdpa_backward: dout: expected f32[1, 2, 64, 8]", 0), 0u)
      << b.status();
  bin[0] = testing::Random({1, 2, 64, 8}, DType::kF32, 5);
  auto ok = kernels::RunOp("sdpa_backward", bin, {});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->size(), 3u);
}

}  // namespace
}  // namespace loom::kernels::sdpa
