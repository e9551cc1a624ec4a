// reshape / permute / slice / slice_backward / concat / broadcast_to / cast /
// fill / zeros_like / ones_like: kernels vs references on odd and strided
// inputs in several dtypes (including integers), and bad input.
#include "kernels/cpu/shape_ops.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "kernels/cpu/test_util.h"

namespace loom::kernels::cpu {
namespace {

using testing::Eval;
using testing::FakeCuda;
using testing::KernelVsReference;
using testing::Rand;
using Ints = std::vector<int64_t>;

Tensor Iota(std::vector<int64_t> shape, DType dt) {
  Tensor t = Tensor::MustEmpty(shape, dt);
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, static_cast<double>(i % 100));
  return t;
}

TEST(ShapeOps, MovementOpsAllDTypesAndStrides) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64, DType::kBool, DType::kF16}) {
    Tensor x = Iota({3, 5, 7}, dt);
    Tensor xt = Iota({7, 5, 3}, dt).Permute(std::vector<int>{2, 1, 0});  // [3, 5, 7], strided
    for (const Tensor& in : {x, xt}) {
      EXPECT_EQ(KernelVsReference("reshape", {in}, {{"shape", Ints{5, -1}}}), 0) << DTypeName(dt);
      EXPECT_EQ(KernelVsReference("permute", {in}, {{"dims", Ints{2, 0, 1}}}), 0);
      EXPECT_EQ(KernelVsReference("permute", {in}, {{"dims", Ints{-1, -2, -3}}}), 0);
      EXPECT_EQ(KernelVsReference("slice", {in}, {{"axis", int64_t{1}}, {"start", int64_t{1}}, {"length", int64_t{3}}}), 0);
      EXPECT_EQ(KernelVsReference("slice", {in}, {{"axis", int64_t{-1}}, {"start", int64_t{-2}}, {"length", int64_t{2}}}), 0);
      EXPECT_EQ(KernelVsReference("slice_backward", {in}, {{"axis", int64_t{0}}, {"start", int64_t{2}}, {"full_len", int64_t{6}}}), 0);
      EXPECT_EQ(KernelVsReference("concat", {in, Iota({3, 2, 7}, dt), in}, {{"axis", int64_t{1}}}), 0);
      EXPECT_EQ(KernelVsReference("concat", {in, in}, {{"axis", int64_t{-1}}}), 0);
      EXPECT_EQ(KernelVsReference("broadcast_to", {in.Narrow(1, 0, 1)}, {{"shape", Ints{2, 3, 4, 7}}}), 0);
      EXPECT_EQ(KernelVsReference("zeros_like", {in}), 0);
      EXPECT_EQ(KernelVsReference("ones_like", {in}), 0);
      for (const char* to : {"f64", "f32", "bf16", "f16", "i32", "i64", "bool"})
        EXPECT_EQ(KernelVsReference("cast", {in}, {{"dtype", std::string(to)}}), 0) << DTypeName(dt) << "->" << to;
    }
  }
}

TEST(ShapeOps, ExactValues) {
  Tensor x = Tensor::FromVector({2, 3}, {0, 1, 2, 3, 4, 5});
  Tensor p = Eval("permute", {x}, {{"dims", Ints{1, 0}}});
  EXPECT_EQ(p.shape(), (Shape{3, 2}));
  EXPECT_EQ(p.ToVector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(Eval("slice", {x}, {{"axis", int64_t{1}}, {"start", int64_t{1}}, {"length", int64_t{2}}}).ToVector(),
            (std::vector<double>{1, 2, 4, 5}));
  EXPECT_EQ(Eval("slice_backward", {Tensor::FromVector({1, 2}, {7, 8})},
                 {{"axis", int64_t{1}}, {"start", int64_t{1}}, {"full_len", int64_t{4}}})
                .ToVector(),
            (std::vector<double>{0, 7, 8, 0}));
  EXPECT_EQ(Eval("concat", {x, Tensor::FromVector({1, 3}, {9, 9, 9})}, {{"axis", int64_t{0}}}).ToVector(),
            (std::vector<double>{0, 1, 2, 3, 4, 5, 9, 9, 9}));
  EXPECT_EQ(Eval("broadcast_to", {Tensor::FromVector({2, 1}, {1, 2})}, {{"shape", Ints{2, 3}}}).ToVector(),
            (std::vector<double>{1, 1, 1, 2, 2, 2}));
  Tensor c = Eval("cast", {Tensor::FromVector({3}, {1.0 + 1.0 / 256, -2.5, 3.999})}, {{"dtype", std::string("bf16")}});
  EXPECT_EQ(c.dtype(), DType::kBF16);
  EXPECT_EQ(c.ToVector(), (std::vector<double>{1.0, -2.5, 4.0}));  // round to nearest even
  Tensor f = Eval("fill", {}, {{"shape", Ints{2, 2}}, {"dtype", std::string("i64")}, {"value", 3.0}});
  EXPECT_EQ(f.dtype(), DType::kI64);
  EXPECT_EQ(f.ToVector(), (std::vector<double>{3, 3, 3, 3}));
  EXPECT_EQ(KernelVsReference("fill", {}, {{"shape", Ints{4, 3}}, {"value", -1.5}}), 0);
}

// Loom's conversion rules (convert.h), kernel and reference alike.
TEST(ShapeOps, CastFollowsTheConversionRules) {
  const double kMax32 = std::numeric_limits<int32_t>::max(), kMin32 = std::numeric_limits<int32_t>::min();
  Tensor f = Tensor::FromVector({7}, {2.75, -2.75, 1e10, -1e10, NAN, 0.5, -0.0});
  Tensor w = Tensor::MustEmpty({3}, DType::kI64);
  w.data<int64_t>()[0] = (int64_t{1} << 32) + 5;
  w.data<int64_t>()[1] = int64_t{1} << 31;
  w.data<int64_t>()[2] = -(int64_t{1} << 33) - 7;
  for (auto impl : {kernels::Impl::kKernel, kernels::Impl::kReference}) {
    auto cast = [&](const Tensor& x, const char* to) { return Eval("cast", {x}, {{"dtype", std::string(to)}}, impl); };
    EXPECT_EQ(cast(f, "i32").ToVector(), (std::vector<double>{2, -2, kMax32, kMin32, 0, 0, 0}));
    EXPECT_EQ(cast(f, "bool").ToVector(), (std::vector<double>{1, 1, 1, 1, 1, 1, 0}));
    // f16 holds 2.75, -2.75, inf, -inf, NaN, 0.5, -0: infinities saturate.
    const double kMax64 = static_cast<double>(std::numeric_limits<int64_t>::max());
    EXPECT_EQ(cast(f.To(DType::kF16), "i64").ToVector(), (std::vector<double>{2, -2, kMax64, -kMax64, 0, 0, 0}));
    Tensor i32 = cast(w, "i32");
    EXPECT_EQ(i32.ToVector(), (std::vector<double>{5, kMin32, -7}));
    EXPECT_EQ(cast(i32, "bool").ToVector(), (std::vector<double>{1, 1, 1}));
    EXPECT_EQ(cast(cast(f, "bool"), "f32").ToVector(), (std::vector<double>{1, 1, 1, 1, 1, 1, 0}));
  }
}

TEST(ShapeOps, I64ElementsStayExactBeyondDoublePrecision) {
  Tensor x = Tensor::MustEmpty({2, 3}, DType::kI64);
  for (int64_t i = 0; i < 6; ++i) x.data<int64_t>()[i] = (int64_t{1} << 60) + 2 * i + 1;  // odd: not doubles
  auto same = [](const Tensor& t, std::vector<int64_t> idx) {
    std::vector<int64_t> got;
    for (int64_t i = 0; i < t.numel(); ++i) got.push_back(t.data<int64_t>()[i]);
    for (int64_t& v : idx) v = (int64_t{1} << 60) + 2 * v + 1;
    return got == idx;
  };
  for (auto impl : {kernels::Impl::kKernel, kernels::Impl::kReference}) {
    EXPECT_TRUE(same(Eval("reshape", {x}, {{"shape", Ints{3, 2}}}, impl), {0, 1, 2, 3, 4, 5}));
    EXPECT_TRUE(same(Eval("permute", {x}, {{"dims", Ints{1, 0}}}, impl), {0, 3, 1, 4, 2, 5}));
    EXPECT_TRUE(same(Eval("slice", {x}, {{"axis", int64_t{1}}, {"start", int64_t{1}}, {"length", int64_t{2}}}, impl),
                     {1, 2, 4, 5}));
    EXPECT_TRUE(same(Eval("concat", {x, x}, {{"axis", int64_t{0}}}, impl), {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}));
    EXPECT_TRUE(same(Eval("broadcast_to", {x.Narrow(0, 1, 1)}, {{"shape", Ints{2, 3}}}, impl), {3, 4, 5, 3, 4, 5}));
    EXPECT_TRUE(same(Eval("cast", {x}, {{"dtype", std::string("i64")}}, impl), {0, 1, 2, 3, 4, 5}));
  }
}

kernels::Attrs SliceAttrs(int64_t axis, int64_t start, int64_t length, int64_t step) {
  return {{"axis", axis}, {"start", start}, {"length", length}, {"step", step}};
}

TEST(ShapeOps, SliceStepsTakeTheIndicesNumpyWould) {
  Tensor x = Iota({10}, DType::kF32);
  struct C {
    int64_t start, length, step;
    std::vector<double> want;
  };
  const C cases[] = {{1, 5, 2, {1, 3, 5, 7, 9}},         {-1, 10, -1, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
                     {8, 3, -3, {8, 5, 2}},               {-2, 1, -7, {8}},
                     {0, 2, 9, {0, 9}},                   {3, 0, -2, {}}};
  for (const C& c : cases)
    for (auto impl : {kernels::Impl::kKernel, kernels::Impl::kReference})
      EXPECT_EQ(Eval("slice", {x}, SliceAttrs(0, c.start, c.length, c.step), impl).ToVector(), c.want)
          << c.start << " " << c.length << " " << c.step;
  // Strided inputs, every dtype, steps on an inner and an outer axis.
  for (DType dt : {DType::kF32, DType::kBF16, DType::kI64, DType::kBool}) {
    Tensor xt = Iota({9, 6, 4}, dt).Permute(std::vector<int>{1, 0, 2});  // [6, 9, 4]
    EXPECT_EQ(KernelVsReference("slice", {xt}, SliceAttrs(1, -1, 5, -2)), 0) << DTypeName(dt);
    EXPECT_EQ(KernelVsReference("slice", {xt}, SliceAttrs(0, 1, 2, 3)), 0) << DTypeName(dt);
  }
}

TEST(ShapeOps, SliceBackwardHonoursTheStep) {
  Tensor dy = Tensor::FromVector({2, 3}, {1, 2, 3, 4, 5, 6});
  kernels::Attrs a{{"axis", int64_t{1}}, {"start", int64_t{5}}, {"full_len", int64_t{7}}, {"step", int64_t{-2}}};
  for (auto impl : {kernels::Impl::kKernel, kernels::Impl::kReference})
    EXPECT_EQ(Eval("slice_backward", {dy}, a, impl).ToVector(),
              (std::vector<double>{0, 3, 0, 2, 0, 1, 0, 0, 6, 0, 5, 0, 4, 0}));
  // The gradient of a stepped slice is the stepped slice_backward, and back.
  Tensor x = Rand({3, 8}, DType::kF64), g = Rand({3, 3}, DType::kF64, 2);
  auto gx = kernels::EagerGradients("slice", {x}, {g}, SliceAttrs(1, 7, 3, -3));
  ASSERT_TRUE(gx.ok()) << gx.status();
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 8; ++c) {
      const double want = c == 7 ? g.GetDouble(r * 3) : c == 4 ? g.GetDouble(r * 3 + 1) : c == 1 ? g.GetDouble(r * 3 + 2) : 0;
      EXPECT_EQ((*gx)[0].GetDouble(r * 8 + c), want) << r << " " << c;
    }
}

// A GradBuilder that records what a rule emits (values are never computed).
class RecordingBuilder : public kernels::GradBuilder {
 public:
  absl::StatusOr<std::vector<Value>> Emit(absl::string_view op, std::vector<Value>, kernels::Attrs attrs) override {
    emitted.push_back({std::string(op), attrs});
    metas.push_back({DType::kF32, {}});
    return std::vector<Value>{static_cast<Value>(metas.size() - 1)};
  }
  kernels::TensorMeta Meta(Value v) const override { return metas[v]; }
  std::vector<std::pair<std::string, kernels::Attrs>> emitted;
  std::vector<kernels::TensorMeta> metas;
};

// Graphs without steps keep their exact form: no step attribute appears.
TEST(ShapeOps, UnsteppedSliceGradientsCarryNoStepAttr) {
  const kernels::OpDef* slice = kernels::OpRegistry::Global().Find("slice");
  const kernels::OpDef* back = kernels::OpRegistry::Global().Find("slice_backward");
  ASSERT_TRUE(slice && back);
  RecordingBuilder b;
  b.metas = {{DType::kF32, {3, 8}}, {DType::kF32, {3, 2}}};  // x, g
  kernels::GradContext ctx{
      {0}, {1}, {1}, kernels::Attrs{{"axis", int64_t{1}}, {"start", int64_t{2}}, {"length", int64_t{2}}}};
  ASSERT_TRUE(slice->grad(b, ctx).ok());
  ASSERT_EQ(b.emitted.size(), 1u);
  EXPECT_EQ(b.emitted[0].second.ToString(), "{axis=1, full_len=8, start=2}");
  ctx.attrs = b.emitted[0].second;
  b.metas = {{DType::kF32, {3, 2}}, {DType::kF32, {3, 8}}};  // dy, g
  b.emitted.clear();
  ASSERT_TRUE(back->grad(b, ctx).ok());
  ASSERT_EQ(b.emitted.size(), 1u);
  EXPECT_EQ(b.emitted[0].second.ToString(), "{axis=1, length=2, start=2}");
}

TEST(ShapeOps, BadSliceStepsNameTheAttribute) {
  Tensor x = Rand({4, 10});
  EXPECT_INVALID(kernels::RunOp("slice", {x}, SliceAttrs(1, 0, 2, 0)).status(), "slice: step: must not be 0");
  EXPECT_INVALID(kernels::RunOp("slice", {x}, SliceAttrs(1, 1, 6, 2)).status(),
                 "slice: length: 6 elements from start 1 with step 2 leave dim 1 of size 10");
  EXPECT_INVALID(kernels::RunOp("slice", {x}, SliceAttrs(1, 2, 4, -1)).status(),
                 "slice: length: 4 elements from start 2");
  EXPECT_INVALID(kernels::RunOp("slice", {x}, SliceAttrs(1, 10, 1, -1)).status(), "slice: start: 10 out of range");
  EXPECT_INVALID(
      kernels::RunOp("slice", {x}, SliceAttrs(1, 9, std::numeric_limits<int64_t>::max(), -(int64_t{1} << 62))).status(),
      "slice: length:");
  EXPECT_INVALID(
      kernels::RunOp("slice_backward", {x},
                     {{"axis", int64_t{1}}, {"start", int64_t{0}}, {"full_len", int64_t{20}}, {"step", int64_t{3}}})
          .status(),
      "slice_backward: full_len: dy of length 10 at start 0 with step 3 does not fit in full_len 20");
}

TEST(ShapeOps, LargeCopiesTakeTheParallelPath) {
  Tensor x = Rand({64, 96, 33});
  EXPECT_EQ(KernelVsReference("permute", {x}, {{"dims", Ints{2, 0, 1}}}), 0);
  // Transpose-like copies take the tiled path (odd sizes leave partial tiles).
  EXPECT_EQ(KernelVsReference("permute", {Rand({3, 67, 45})}, {{"dims", Ints{0, 2, 1}}}), 0);
  EXPECT_EQ(KernelVsReference("permute", {Rand({300, 129})}, {{"dims", Ints{1, 0}}}), 0);
  EXPECT_EQ(KernelVsReference("cast", {Rand({129, 300}).Transpose(0, 1)}, {{"dtype", std::string("f64")}}), 0);
  EXPECT_EQ(KernelVsReference("permute", {Rand({5, 40, 3, 9}, DType::kF64)}, {{"dims", Ints{2, 3, 0, 1}}}), 0);
  EXPECT_EQ(KernelVsReference("cast", {x}, {{"dtype", std::string("bf16")}}), 0);
  EXPECT_EQ(KernelVsReference("broadcast_to", {Rand({96, 1})}, {{"shape", Ints{8, 96, 300}}}), 0);
}

TEST(ShapeOps, BadInputNamesTheArgument) {
  Tensor x = Rand({2, 3});
  EXPECT_INVALID(kernels::RunOp("reshape", {x}, {{"shape", Ints{4, 2}}}).status(),
                 "reshape: shape: [4, 2] has 8 elements");
  EXPECT_INVALID(kernels::RunOp("reshape", {x}, {{"shape", Ints{-1, -1}}}).status(),
                 "reshape: shape: more than one -1");
  EXPECT_INVALID(kernels::RunOp("reshape", {x}).status(), "reshape: shape: missing attribute");
  EXPECT_INVALID(kernels::RunOp("permute", {x}, {{"dims", Ints{0, 0}}}).status(),
                 "permute: dims: [0, 0] is not a permutation");
  EXPECT_INVALID(kernels::RunOp("permute", {x}, {{"dims", Ints{0}}}).status(), "permute: dims:");
  EXPECT_INVALID(kernels::RunOp("permute", {x}, {{"dims", Ints{0, 2}}}).status(), "permute: dims: axis 2 out of range");
  EXPECT_INVALID(
      kernels::RunOp("slice", {x}, {{"axis", int64_t{1}}, {"start", int64_t{4}}, {"length", int64_t{1}}}).status(),
      "slice: start:");
  EXPECT_INVALID(
      kernels::RunOp("slice", {x}, {{"axis", int64_t{1}}, {"start", int64_t{1}}, {"length", int64_t{3}}}).status(),
      "slice: length:");
  EXPECT_INVALID(
      kernels::RunOp("slice", {x}, {{"axis", int64_t{2}}, {"start", int64_t{0}}, {"length", int64_t{1}}}).status(),
      "slice: axis:");
  EXPECT_INVALID(
      kernels::RunOp("slice_backward", {x}, {{"axis", int64_t{0}}, {"start", int64_t{1}}, {"full_len", int64_t{2}}})
          .status(),
      "slice_backward: full_len:");
  EXPECT_INVALID(kernels::RunOp("concat", {x, Rand({3, 3})}, {{"axis", int64_t{1}}}).status(),
                 "concat: input 1: shape [3, 3] does not match input 0 [2, 3]");
  EXPECT_INVALID(kernels::RunOp("concat", {x, x, Rand({2, 3}, DType::kF64)}).status(), "concat: input 2: dtype f64");
  EXPECT_INVALID(kernels::RunOp("concat", {}).status(), "concat: inputs:");
  EXPECT_INVALID(kernels::RunOp("broadcast_to", {x}, {{"shape", Ints{3, 3}}}).status(),
                 "broadcast_to: x: shape [2, 3] does not broadcast to [3, 3]");
  EXPECT_INVALID(kernels::RunOp("cast", {x}, {{"dtype", std::string("f8")}}).status(),
                 "cast: dtype: unknown dtype 'f8'");
  EXPECT_INVALID(kernels::RunOp("fill", {}, {{"shape", Ints{-1}}}).status(), "fill: shape: negative size");
  Tensor out = Tensor::MustEmpty({3, 2}, DType::kF32);
  EXPECT_INVALID(PermuteKernel(FakeCuda({2, 3}), {1, 0}, out), "permute: x: expected a cpu tensor");
  EXPECT_INVALID(PermuteKernel(x, {1, 0, 2}, out), "permute: dims:");
  Tensor cat_out = Tensor::MustEmpty({4, 3}, DType::kF32);
  EXPECT_INVALID(ConcatKernel({x, FakeCuda({2, 3})}, 0, cat_out), "concat: input 1: expected a cpu tensor");
}

}  // namespace
}  // namespace loom::kernels::cpu
