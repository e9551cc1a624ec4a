// Each SDPA implementation forced and compared with math (f64 and f32, forward
// and backward), f64 gradients against central finite differences, dropout
// reproducibility/statistics, fully masked rows, strided inputs and bad inputs.
// LOOM_FULL=1 runs larger shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <thread>

#include "base/testing/full_sweep.h"
#include "kernels/sdpa/sdpa.h"
#include "kernels/sdpa/sdpa_internal.h"
#include "kernels/sdpa/sdpa_test_util.h"

namespace loom::kernels::sdpa {
namespace {

using testing::Bwd;
using testing::Fwd;
using testing::ParamsFor;
using testing::Random;
using testing::RandomBoolMask;
using testing::RunBwd;
using testing::RunFwd;

enum class M { kNone, kBool, kAdd };

struct Case {
  const char* name;
  int64_t B, H, Hkv, T, S, D, Dv;
  bool causal;
  M mask;
  double scale;    // 0: default
  double dropout;
};

std::vector<Case> Cases() {
  std::vector<Case> c = {
      {"tiny_odd", 1, 2, 2, 5, 7, 8, 8, false, M::kNone, 0, 0},
      {"gqa_causal", 2, 4, 2, 5, 7, 8, 8, true, M::kNone, 0, 0},
      {"multi_tile", 1, 2, 1, 130, 77, 24, 40, false, M::kNone, 0.3, 0},
      {"causal_T_gt_S", 1, 2, 2, 150, 70, 16, 16, true, M::kNone, 0, 0},
      {"causal_T_lt_S", 1, 3, 1, 70, 150, 72, 8, true, M::kNone, 0, 0},
      {"dropout", 1, 2, 1, 67, 90, 16, 16, true, M::kNone, 0, 0.3},
      {"bool_mask", 2, 2, 1, 33, 45, 8, 8, false, M::kBool, 0, 0},
      {"additive_mask_causal_dropout", 1, 4, 2, 40, 40, 16, 16, true, M::kAdd, 0.5, 0.2},
  };
  if (loom::testing::FullSweep()) {
    c.push_back({"full_big", 2, 8, 2, 300, 260, 64, 64, true, M::kNone, 0, 0.1});
    c.push_back({"full_mask", 1, 4, 4, 257, 311, 64, 32, false, M::kAdd, 0, 0});
  }
  return c;
}

struct Inputs {
  Tensor q, k, v, dout, mask;
  kernels::Attrs attrs;
  const Tensor* maskp() const { return mask.defined() ? &mask : nullptr; }
};

Inputs MakeInputs(const Case& c, DType dt) {
  Inputs in;
  in.q = Random({c.B, c.H, c.T, c.D}, dt, 1, -2, 2);
  in.k = Random({c.B, c.Hkv, c.S, c.D}, dt, 2, -2, 2);
  in.v = Random({c.B, c.Hkv, c.S, c.Dv}, dt, 3);
  in.dout = Random({c.B, c.H, c.T, c.Dv}, dt, 4);
  if (c.mask == M::kBool) {
    in.mask = RandomBoolMask({c.B, 1, c.T, c.S}, 5, 0.7f);
  } else if (c.mask == M::kAdd) {
    in.mask = Random({c.T, c.S}, DType::kF32, 6, -3, 1);
  }
  in.attrs.Set("is_causal", c.causal);
  if (c.scale != 0) in.attrs.Set("scale", c.scale);
  if (c.dropout > 0) {
    in.attrs.Set("dropout_p", c.dropout);
    in.attrs.Set("seed", int64_t{1234});
  }
  return in;
}

std::vector<SdpaImpl> ImplsFor(const Case& c) {
  if (c.mask != M::kNone) return {SdpaImpl::kMemEff, SdpaImpl::kMath};
  return {SdpaImpl::kFlash, SdpaImpl::kMemEff, SdpaImpl::kMath};
}

// Every impl against math in f64 (tight) and f32 (vs the f64 math result).
TEST(SdpaImpl, MatchesMath) {
  for (const Case& c : Cases()) {
    Inputs ref_in = MakeInputs(c, DType::kF64);
    SdpaParams p64 = ParamsFor(ref_in.q, ref_in.k, ref_in.v, ref_in.maskp(), ref_in.attrs);
    Fwd ref = RunFwd(SdpaImpl::kMath, p64, ref_in.q, ref_in.k, ref_in.v, ref_in.maskp());
    Bwd gref = RunBwd(SdpaImpl::kMath, p64, ref_in.dout, ref_in.q, ref_in.k, ref_in.v, ref, ref_in.maskp());
    for (DType dt : {DType::kF64, DType::kF32}) {
      Inputs in = MakeInputs(c, dt);
      SdpaParams p = ParamsFor(in.q, in.k, in.v, in.maskp(), in.attrs);
      const double tol = dt == DType::kF64 ? 1e-12 : 2e-5;
      for (SdpaImpl impl : ImplsFor(c)) {
        SCOPED_TRACE(absl::StrCat(c.name, " ", DTypeName(dt), " ", SdpaImplName(impl)));
        Fwd f = RunFwd(impl, p, in.q, in.k, in.v, in.maskp());
        EXPECT_LT(RelativeError(f.out, ref.out), tol);
        EXPECT_LT(RelativeError(f.lse, ref.lse), 2e-6);  // lse is f32
        Bwd g = RunBwd(impl, p, in.dout, in.q, in.k, in.v, f, in.maskp());
        EXPECT_LT(RelativeError(g.dq, gref.dq), tol);
        EXPECT_LT(RelativeError(g.dk, gref.dk), tol);
        EXPECT_LT(RelativeError(g.dv, gref.dv), tol);
      }
    }
  }
}

// f64 analytic gradients of L = sum(out * dout) against central differences.
TEST(SdpaImpl, FiniteDifferences) {
  std::vector<Case> cases = {
      {"fd_plain", 1, 2, 1, 3, 5, 4, 3, false, M::kNone, 0, 0},
      {"fd_causal_gqa", 1, 4, 2, 4, 3, 4, 4, true, M::kNone, 0.7, 0},
      {"fd_dropout", 1, 2, 2, 3, 4, 4, 4, false, M::kNone, 0, 0.4},
      {"fd_mask", 1, 2, 1, 3, 5, 4, 4, true, M::kAdd, 0, 0},
      {"fd_bool", 1, 2, 1, 3, 5, 4, 4, false, M::kBool, 0, 0},
  };
  for (const Case& c : cases) {
    Inputs in = MakeInputs(c, DType::kF64);
    SdpaParams p = ParamsFor(in.q, in.k, in.v, in.maskp(), in.attrs);
    for (SdpaImpl impl : ImplsFor(c)) {
      SCOPED_TRACE(absl::StrCat(c.name, " ", SdpaImplName(impl)));
      auto loss = [&]() {
        Fwd f = RunFwd(impl, p, in.q, in.k, in.v, in.maskp());
        double l = 0;
        for (int64_t i = 0; i < f.out.numel(); ++i) l += f.out.GetDouble(i) * in.dout.GetDouble(i);
        return l;
      };
      Fwd f = RunFwd(impl, p, in.q, in.k, in.v, in.maskp());
      Bwd g = RunBwd(impl, p, in.dout, in.q, in.k, in.v, f, in.maskp());
      Tensor* xs[3] = {&in.q, &in.k, &in.v};
      Tensor* gs[3] = {&g.dq, &g.dk, &g.dv};
      for (int w = 0; w < 3; ++w) {
        Tensor num = Tensor::Zeros(xs[w]->shape(), DType::kF64);
        const double h = 1e-6;
        for (int64_t i = 0; i < xs[w]->numel(); ++i) {
          const double x0 = xs[w]->GetDouble(i);
          xs[w]->SetDouble(i, x0 + h);
          const double lp = loss();
          xs[w]->SetDouble(i, x0 - h);
          const double lm = loss();
          xs[w]->SetDouble(i, x0);
          num.SetDouble(i, (lp - lm) / (2 * h));
        }
        EXPECT_LT(RelativeError(*gs[w], num), 1e-6) << "input " << w;
      }
    }
  }
}

TEST(SdpaImpl, DropoutReproducibleAndSharedAcrossImpls) {
  Case c{"drop", 1, 2, 2, 70, 90, 16, 16, false, M::kNone, 0, 0.25};
  Inputs in = MakeInputs(c, DType::kF64);
  SdpaParams p = ParamsFor(in.q, in.k, in.v, nullptr, in.attrs);
  Fwd a = RunFwd(SdpaImpl::kFlash, p, in.q, in.k, in.v, nullptr);
  Fwd b = RunFwd(SdpaImpl::kFlash, p, in.q, in.k, in.v, nullptr);
  EXPECT_EQ(RelativeError(a.out, b.out), 0.0);  // same seed: bitwise identical
  for (SdpaImpl impl : {SdpaImpl::kMemEff, SdpaImpl::kMath}) {
    Fwd o = RunFwd(impl, p, in.q, in.k, in.v, nullptr);
    EXPECT_LT(RelativeError(o.out, a.out), 1e-12) << SdpaImplName(impl);
  }
  SdpaParams p2 = p;
  p2.seed = 99;
  Fwd d = RunFwd(SdpaImpl::kFlash, p2, in.q, in.k, in.v, nullptr);
  EXPECT_GT(RelativeError(d.out, a.out), 1e-2);  // another seed: another mask
  SdpaParams p0 = p;
  p0.dropout_p = 0;
  Fwd nod = RunFwd(SdpaImpl::kFlash, p0, in.q, in.k, in.v, nullptr);
  EXPECT_LT(RelativeError(a.lse, nod.lse), 1e-7);  // lse is taken before dropout
}

TEST(SdpaImpl, DropoutStatistics) {
  // q = 0 gives P = 1/S; with v = 1 each output is (kept count / S) / (1 - p).
  const int64_t T = 256, S = 256;
  const double drop = 0.25;
  Tensor q = Tensor::Zeros({1, 2, T, 8}, DType::kF32);
  Tensor k = Random({1, 2, S, 8}, DType::kF32, 7);
  Tensor v = Tensor::Zeros({1, 2, S, 1}, DType::kF32);
  v.Fill(1.0);
  kernels::Attrs attrs{{"dropout_p", drop}, {"seed", int64_t{42}}};
  SdpaParams p = ParamsFor(q, k, v, nullptr, attrs);
  for (SdpaImpl impl : {SdpaImpl::kFlash, SdpaImpl::kMemEff, SdpaImpl::kMath}) {
    Fwd f = RunFwd(impl, p, q, k, v, nullptr);
    double mean = 0, kept = 0;
    for (int64_t i = 0; i < f.out.numel(); ++i) {
      mean += f.out.GetDouble(i);
      kept += f.out.GetDouble(i) * (1 - drop) * S;
    }
    mean /= f.out.numel();
    const double frac = kept / (f.out.numel() * S);
    EXPECT_NEAR(mean, 1.0, 0.01) << SdpaImplName(impl);
    EXPECT_NEAR(frac, 1 - drop, 0.01) << SdpaImplName(impl);
  }
}

TEST(SdpaImpl, FullyMaskedRowGivesZeros) {
  Tensor q = Random({1, 1, 4, 8}, DType::kF64, 1), k = Random({1, 1, 6, 8}, DType::kF64, 2),
         v = Random({1, 1, 6, 8}, DType::kF64, 3), dout = Random({1, 1, 4, 8}, DType::kF64, 4);
  Tensor mask = Tensor::Zeros({4, 6}, DType::kBool);
  for (int64_t i = 0; i < 24; ++i) mask.SetDouble(i, i / 6 == 2 ? 0.0 : 1.0);  // row 2 sees nothing
  SdpaParams p = ParamsFor(q, k, v, &mask, {});
  for (SdpaImpl impl : {SdpaImpl::kMemEff, SdpaImpl::kMath}) {
    SCOPED_TRACE(SdpaImplName(impl));
    Fwd f = RunFwd(impl, p, q, k, v, &mask);
    EXPECT_TRUE(std::isinf(f.lse.GetDouble(2)) && f.lse.GetDouble(2) < 0);
    for (int d = 0; d < 8; ++d) EXPECT_EQ(f.out.GetDouble(2 * 8 + d), 0.0);
    Bwd g = RunBwd(impl, p, dout, q, k, v, f, &mask);
    for (int d = 0; d < 8; ++d) EXPECT_EQ(g.dq.GetDouble(2 * 8 + d), 0.0);
    for (int64_t i = 0; i < g.dk.numel(); ++i) EXPECT_TRUE(std::isfinite(g.dk.GetDouble(i)));
  }
}

TEST(SdpaImpl, StridedInputs) {
  // q, k, v given as [B, T, H, D] permuted to [B, H, T, D] views.
  Tensor qb = Random({1, 70, 2, 16}, DType::kF32, 1), kb = Random({1, 80, 2, 16}, DType::kF32, 2),
         vb = Random({1, 80, 2, 16}, DType::kF32, 3);
  Tensor q = qb.Transpose(1, 2), k = kb.Transpose(1, 2), v = vb.Transpose(1, 2);
  SdpaParams p = ParamsFor(q, k, v, nullptr, {{"is_causal", true}});
  Fwd ref = RunFwd(SdpaImpl::kMath, p, q.Contiguous(), k.Contiguous(), v.Contiguous(), nullptr);
  Fwd f = RunFwd(SdpaImpl::kFlash, p, q, k, v, nullptr);
  EXPECT_LT(RelativeError(f.out, ref.out), 1e-5);
}

// The f32 tile GEMM has an AVX-512 path (runtime-detected) and an AVX2 path;
// both must agree with math (D = 48: N % 32 == 16 mixes the two in one call).
TEST(SdpaImpl, Avx2AndAvx512PathsAgree) {
  Case c{"paths", 1, 4, 2, 100, 130, 48, 40, true, M::kNone, 0, 0.1};
  Inputs r = MakeInputs(c, DType::kF64);
  SdpaParams p64 = ParamsFor(r.q, r.k, r.v, nullptr, r.attrs);
  Fwd ref = RunFwd(SdpaImpl::kMath, p64, r.q, r.k, r.v, nullptr);
  Bwd gref = RunBwd(SdpaImpl::kMath, p64, r.dout, r.q, r.k, r.v, ref, nullptr);
  Inputs in = MakeInputs(c, DType::kF32);
  SdpaParams p = ParamsFor(in.q, in.k, in.v, nullptr, in.attrs);
  for (int mode : {0, 1}) {
    internal::SetAvx512ForTesting(mode);
    for (SdpaImpl impl : {SdpaImpl::kFlash, SdpaImpl::kMemEff}) {
      SCOPED_TRACE(absl::StrCat("avx512=", mode, " ", SdpaImplName(impl)));
      Fwd f = RunFwd(impl, p, in.q, in.k, in.v, nullptr);
      Bwd g = RunBwd(impl, p, in.dout, in.q, in.k, in.v, f, nullptr);
      EXPECT_LT(RelativeError(f.out, ref.out), 2e-5);
      EXPECT_LT(RelativeError(g.dq, gref.dq), 2e-5);
      EXPECT_LT(RelativeError(g.dk, gref.dk), 2e-5);
      EXPECT_LT(RelativeError(g.dv, gref.dv), 2e-5);
    }
  }
  internal::SetAvx512ForTesting(-1);
}

// Concurrent calls share the scratch cache: results must match sequential ones.
TEST(SdpaImpl, ConcurrentCallsAgree) {
  Case c{"conc", 1, 2, 2, 130, 130, 32, 32, true, M::kNone, 0, 0};
  Inputs a = MakeInputs(c, DType::kF32);
  SdpaParams p = ParamsFor(a.q, a.k, a.v, nullptr, a.attrs);
  Fwd ref = RunFwd(SdpaImpl::kFlash, p, a.q, a.k, a.v, nullptr);
  Bwd gref = RunBwd(SdpaImpl::kFlash, p, a.dout, a.q, a.k, a.v, ref, nullptr);
  std::vector<double> errs(4, 1.0);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      double worst = 0;
      for (int rep = 0; rep < 5; ++rep) {
        Fwd f = RunFwd(SdpaImpl::kFlash, p, a.q, a.k, a.v, nullptr);
        Bwd g = RunBwd(SdpaImpl::kFlash, p, a.dout, a.q, a.k, a.v, f, nullptr);
        worst = std::max({worst, RelativeError(f.out, ref.out), RelativeError(g.dq, gref.dq),
                          RelativeError(g.dk, gref.dk), RelativeError(g.dv, gref.dv)});
      }
      errs[i] = worst;
    });
  }
  for (auto& t : threads) t.join();
  for (double e : errs) EXPECT_EQ(e, 0.0);
}

TEST(SdpaImpl, ConvenienceApiReportsSelection) {
  Tensor q = Random({1, 2, 128, 32}, DType::kF32, 1), k = Random({1, 2, 128, 32}, DType::kF32, 2),
         v = Random({1, 2, 128, 32}, DType::kF32, 3), dout = Random({1, 2, 128, 32}, DType::kF32, 4);
  SdpaSelection sel;
  auto out = Sdpa(q, k, v, nullptr, {{"is_causal", true}}, &sel);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(sel.impl, SdpaImpl::kFlash);
  EXPECT_EQ(sel.ToString().rfind("sdpa: picked flash because f32 without a mask tensor", 0), 0u) << sel.ToString();
  auto grads = SdpaGrad(dout, q, k, v, (*out)[0], (*out)[1], nullptr, {{"is_causal", true}}, &sel);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ(grads->size(), 3u);
  ReleaseSdpaWorkspace();  // the cache refills on the next call
  auto again = Sdpa(q, k, v, nullptr, {{"is_causal", true}});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(RelativeError((*again)[0], (*out)[0]), 0.0);
}

void ExpectBad(std::vector<kernels::TensorMeta> m, kernels::Attrs attrs, const std::string& prefix) {
  auto p = MakeSdpaParams(m, attrs);
  ASSERT_FALSE(p.ok()) << prefix;
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(p.status().message()).rfind(prefix, 0), 0u) << p.status();
}

TEST(SdpaImpl, BadInputs) {
  const DType f = DType::kF32;
  kernels::TensorMeta q{f, {2, 4, 5, 8}}, k{f, {2, 2, 7, 8}}, v{f, {2, 2, 7, 6}};
  ExpectBad({{f, {4, 5, 8}}, k, v}, {}, "q: expected 4 dims");
  ExpectBad({q, {f, {2, 2, 7}}, v}, {}, "k: expected 4 dims");
  ExpectBad({q, k, {f, {2, 1, 7, 6}}}, {}, "v: heads 1 != k heads 2");
  ExpectBad({q, {f, {2, 3, 7, 8}}, {f, {2, 3, 7, 6}}}, {}, "k: q heads H=4 is not a multiple of k heads Hkv=3");
  ExpectBad({q, {f, {2, 2, 7, 9}}, v}, {}, "k: head dim 9 != q head dim 8");
  ExpectBad({q, k, {f, {2, 2, 6, 6}}}, {}, "v: length 6 != k length 7");
  ExpectBad({q, {f, {3, 2, 7, 8}}, v}, {}, "k: batch 3 != q batch 2");
  ExpectBad({q, {DType::kF64, {2, 2, 7, 8}}, v}, {}, "k: dtype f64 != q dtype f32");
  ExpectBad({q, k, v, {DType::kBool, {5, 6}}}, {}, "mask: shape [5, 6] is not broadcastable");
  ExpectBad({q, k, v, {DType::kBool, {3, 4, 5, 7}}}, {}, "mask: shape [3, 4, 5, 7] is not broadcastable");
  ExpectBad({q, k, v, {DType::kI32, {5, 7}}}, {}, "mask: dtype i32");
  ExpectBad({q, k, v}, {{"dropout_p", 1.0}}, "dropout_p: must be in [0, 1)");
  ExpectBad({q, k}, {}, "inputs: expected q, k, v");
  // Forcing flash with a mask through the direct entry point.
  Tensor tq = Random({1, 1, 4, 8}, f, 1), tk = Random({1, 1, 4, 8}, f, 2), tv = Random({1, 1, 4, 8}, f, 3);
  Tensor mask = RandomBoolMask({4, 4}, 4);
  SdpaParams p = ParamsFor(tq, tk, tv, &mask, {});
  Fwd out{Tensor::MustEmpty({1, 1, 4, 8}, f), Tensor::MustEmpty({1, 1, 4}, DType::kF32)};
  absl::Status s = SdpaForward(SdpaImpl::kFlash, p, tq, tk, tv, &mask, out.out, out.lse);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("flash takes no mask"), std::string::npos) << s;
  // Wrong output shape.
  SdpaParams p2 = ParamsFor(tq, tk, tv, nullptr, {});
  Tensor bad_out = Tensor::MustEmpty({1, 1, 4, 7}, f);
  s = SdpaForward(SdpaImpl::kFlash, p2, tq, tk, tv, nullptr, bad_out, out.lse);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()).rfind("out: shape", 0), 0u) << s;
}

}  // namespace
}  // namespace loom::kernels::sdpa
