// Unit tests for the NN ops: bad inputs give InvalidArgument naming the
// argument (kernel and reference, never a crash); kernels match the f64
// reference on larger shapes, multi-threaded and with strided inputs; the
// scatter-add and reductions are deterministic across thread counts.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/cpu/nn/nn_test_util.h"
#include "kernels/registry.h"

namespace loom::kernels::cpu::nn::testing {
namespace {

using kernels::Attrs;
using kernels::Impl;
using kernels::RunOp;

Tensor R(Shape s, uint64_t seed, double lo = -1, double hi = 1, DType dt = DType::kF32) {
  return RandomTensor(s, dt, seed, lo, hi);
}
Tensor Ids(Shape s, std::vector<double> v, DType dt = DType::kI64) { return Tensor::FromVector(s, v, dt); }
Tensor Scalar(double v, DType dt = DType::kF32) { return Tensor::FromVector({}, {v}, dt); }

struct BadCase {
  std::string op;
  std::vector<Tensor> in;
  Attrs attrs;
  std::string expect;  // substring of the error message
};

TEST(NnBadInputs, ErrorsNameTheArgument) {
  Tensor x = R({7, 37}, 1), w = R({37}, 2), b = R({37}, 3);
  Tensor i32 = Tensor::Zeros({7, 37}, DType::kI32);
  std::vector<BadCase> cases = {
      {"gelu", {i32}, {}, "x: expected a floating dtype, got i32"},
      {"gelu", {x}, {{"approximate", std::string("fast")}}, "approximate: expected"},
      {"gelu_backward", {R({7, 36}, 1), x}, {}, "dy: shape [7, 36] does not match x"},
      {"silu_backward", {x, R({7, 37}, 1, -1, 1, DType::kF64)}, {}, "dy: dtype f32 does not match x"},
      {"softmax", {x}, {{"axis", int64_t{2}}}, "axis: 2 out of range"},
      {"softmax", {Scalar(1)}, {}, "x: expected at least 1 dims"},
      {"log_softmax_backward", {x, R({37, 7}, 1)}, {}, "dy: shape"},
      {"layernorm", {x, R({36}, 2), b}, {}, "w: expected shape [37]"},
      {"layernorm", {x, w, R({37}, 2, -1, 1, DType::kF64)}, {}, "b: dtype f64 does not match x"},
      {"layernorm", {Scalar(1), w, b}, {}, "x: expected at least 1 dims"},
      {"layernorm", {x, w, b}, {{"eps", -1.0}}, "eps: expected >= 0"},
      {"layernorm_backward", {x, x, w, R({6}, 1), R({7}, 1)}, {}, "mean: expected shape [7]"},
      {"rmsnorm", {x, R({1, 37}, 2)}, {}, "w: expected shape [37]"},
      {"rmsnorm_backward", {x, x, w, R({7, 1}, 1)}, {}, "rstd: expected shape [7]"},
      {"embedding", {R({11, 5}, 1), Ids({3}, {0, 11, 2})}, {}, "ids: id 11 at position 1 is outside [0, 11)"},
      {"embedding", {R({11, 5}, 1), Ids({2}, {-1, 2}, DType::kI32)}, {}, "ids: id -1 at position 0"},
      {"embedding", {R({11, 5}, 1), R({3}, 1)}, {}, "ids: expected dtype i32 or i64, got f32"},
      {"embedding", {R({11, 5, 2}, 1), Ids({1}, {0})}, {}, "weight: expected 2 dims"},
      {"embedding_backward", {R({3, 5}, 1), Ids({3}, {0, 1, 2})}, {}, "num_embeddings: expected > 0"},
      {"embedding_backward", {R({3, 5}, 1), Ids({3}, {0, 1, 4})}, {{"num_embeddings", int64_t{4}}},
       "ids: id 4 at position 2"},
      {"embedding_backward", {R({3, 5}, 1), Ids({2}, {0, 1})}, {{"num_embeddings", int64_t{4}}},
       "ids: shape [2] does not match dy"},
      {"cross_entropy", {R({3, 11}, 1), Ids({3}, {0, 11, -100})}, {}, "targets: target 11 at row 1"},
      {"cross_entropy", {R({3, 11}, 1), Ids({3}, {0, -100, 3})}, {{"ignore_index", int64_t{3}}},
       "targets: target -100 at row 1"},
      {"cross_entropy", {R({3, 11}, 1), Ids({4}, {0, 1, 2, 3})}, {}, "targets: 4 rows but logits has 3"},
      {"cross_entropy", {R({3, 11, 2}, 1), Ids({3}, {0, 1, 2})}, {}, "logits: expected 2 dims"},
      {"cross_entropy", {R({3, 11}, 1), R({3}, 1)}, {}, "targets: expected dtype i32 or i64"},
      {"cross_entropy_backward", {R({2}, 1), R({3, 11}, 1), Ids({3}, {0, 1, 2}), R({3}, 1)}, {},
       "dloss: expected a scalar"},
      {"cross_entropy_backward", {Scalar(1), R({3, 11}, 1), Ids({3}, {0, 1, 2}), R({4}, 1)}, {},
       "lse: expected shape [3]"},
      {"rope", {R({5, 3, 8}, 1)}, {}, "x: expected 4 dims [B, T, H, D]"},
      {"rope", {R({1, 5, 3, 7}, 1)}, {}, "x: head dim D = 7 must be even"},
      {"rope", {R({1, 5, 3, 8}, 1)}, {{"theta", 0.0}}, "theta: expected > 0"},
      {"grad_norm", {x, i32}, {}, "g[1]: expected a floating dtype"},
      {"adamw", {x, R({7, 36}, 1), x, x, Scalar(1), Scalar(1e-3), Scalar(1, DType::kI64)}, {}, "grad: shape [7, 36]"},
      {"adamw", {x, x, x, x, Scalar(1), R({2}, 1), Scalar(1, DType::kI64)}, {}, "lr: expected a scalar"},
      {"adamw", {x, x, x, x, Scalar(1), Scalar(1e-3), Scalar(0, DType::kI64)}, {}, "step: expected an integer >= 1"},
      {"adamw", {x, x, x, x, Scalar(1), Scalar(1e-3), Scalar(1, DType::kI64)}, {{"beta1", 1.0}}, "beta1: expected"},
      {"adamw", {x, x, x, x, Scalar(-1), Scalar(1e-3), Scalar(1, DType::kI64)}, {}, "grad_norm: expected >= 0"},
      {"adamw", {x, x, x, R({7, 37}, 1, -1, 1, DType::kF64), Scalar(1), Scalar(1e-3), Scalar(1)}, {}, "v: dtype f64"},
      {"layernorm", {x, w}, {}, "expected 3 inputs, got 2"},
      {"rope", {R({1, 5, 3, 8}, 1)}, {{"offset", 3.0}}, "offset: expected an integer attribute"},
      {"softmax", {x}, {{"axis", std::string("last")}}, "axis: expected an integer attribute"},
      {"gelu", {x}, {{"approximate", true}}, "approximate: expected a string attribute"},
      {"adamw", {x, x, x, x, Scalar(1), Scalar(1e-3), Scalar(1)}, {{"max_norm", std::string("1")}},
       "max_norm: expected a number attribute"},
      {"cross_entropy", {R({3, 11}, 1), Ids({3}, {0, 1, 2})}, {{"ignore_index", -1.0}},
       "ignore_index: expected an integer attribute"},
  };
  for (const BadCase& c : cases) {
    for (Impl impl : {Impl::kKernel, Impl::kReference}) {
      auto r = RunOp(c.op, c.in, c.attrs, impl);
      ASSERT_FALSE(r.ok()) << c.op << " accepted bad input (expected '" << c.expect << "')";
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
      std::string msg(r.status().message());
      EXPECT_NE(msg.find(c.expect), std::string::npos) << c.op << ": '" << msg << "' lacks '" << c.expect << "'";
      EXPECT_EQ(msg.rfind(c.op, 0), 0u) << "message does not start with the op name: " << msg;
    }
  }
}

// Kernel (f32) vs reference (f64) on shapes large enough to split across threads.
struct BigCase {
  std::string op;
  std::vector<Tensor> in;  // f64 (ids stay integer)
  Attrs attrs;
  double bound = 2e-5;
};

std::vector<Tensor> To32(const std::vector<Tensor>& in, bool strided = false) {
  std::vector<Tensor> out;
  for (const Tensor& t : in) {
    Tensor c = IsFloating(t.dtype()) ? t.To(DType::kF32) : t;
    if (strided && c.ndim() == 2) {
      // Same logical values through a transposed view of a transposed copy.
      c = c.Transpose(0, 1).Contiguous().Transpose(0, 1);
    }
    out.push_back(c);
  }
  return out;
}

TEST(NnKernels, MatchReferenceOnLargerShapes) {
  SetNumThreads(4);
  const int64_t N = 96, V = 3001, C = 771;
  std::vector<double> tg(N);
  for (int64_t i = 0; i < N; ++i) tg[i] = i % 7 == 0 ? -100 : (i * 131) % V;
  std::vector<double> ids(300);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (i * 7) % 13;
  std::vector<BigCase> cases = {
      {"gelu", {R({301, 333}, 1, -6, 6, DType::kF64)}, {{"approximate", std::string("tanh")}}},
      {"gelu", {R({301, 333}, 1, -6, 6, DType::kF64)}, {}},
      {"gelu_backward", {R({300, 333}, 2, -1, 1, DType::kF64), R({300, 333}, 1, -6, 6, DType::kF64)}, {}},
      {"silu", {R({100001}, 3, -20, 20, DType::kF64)}, {}},
      {"softmax", {R({N, V}, 4, -30, 30, DType::kF64)}, {}},
      {"softmax", {R({33, 170, 9}, 4, -5, 5, DType::kF64)}, {{"axis", int64_t{1}}}},
      {"log_softmax", {R({N, V}, 5, -30, 30, DType::kF64)}, {}},
      {"log_softmax", {R({33, 17, 90}, 5, -5, 5, DType::kF64)}, {{"axis", int64_t{0}}}},
      {"softmax_backward", {R({N, C}, 6, -1, 1, DType::kF64), R({N, C}, 7, 0, 0.01, DType::kF64)}, {}},
      {"layernorm", {R({N, C}, 8, 10, 12, DType::kF64), R({C}, 9, -1, 1, DType::kF64), R({C}, 10, -1, 1, DType::kF64)}, {}},
      {"layernorm_backward",
       {R({300, C}, 11, -1, 1, DType::kF64), R({300, C}, 12, -2, 2, DType::kF64), R({C}, 13, -1, 1, DType::kF64),
        R({300}, 14, -0.1, 0.1, DType::kF64), R({300}, 15, 0.5, 1.5, DType::kF64)},
       {}},
      {"rmsnorm", {R({N, C}, 16, -3, 3, DType::kF64), R({C}, 17, -1, 1, DType::kF64)}, {}},
      {"rmsnorm_backward",
       {R({300, C}, 18, -1, 1, DType::kF64), R({300, C}, 19, -2, 2, DType::kF64), R({C}, 20, -1, 1, DType::kF64),
        R({300}, 21, 0.5, 1.5, DType::kF64)},
       {}},
      {"cross_entropy", {R({N, V}, 22, -10, 10, DType::kF64), Ids({N}, tg)}, {}},
      {"cross_entropy_backward",
       {Scalar(0.7, DType::kF64), R({N, V}, 23, -10, 10, DType::kF64), Ids({N}, tg), R({N}, 24, 9, 11, DType::kF64)},
       {}},
      {"embedding_backward", {R({300, C}, 25, -1, 1, DType::kF64), Ids({300}, ids)}, {{"num_embeddings", int64_t{13}}}},
      {"rope", {R({2, 67, 3, 64}, 26, -1, 1, DType::kF64)}, {{"offset", int64_t{4000}}}},
      {"adamw",
       {R({100003}, 27, -1, 1, DType::kF64), R({100003}, 28, -1, 1, DType::kF64), R({100003}, 29, -0.1, 0.1, DType::kF64),
        R({100003}, 30, 0, 0.01, DType::kF64), Scalar(3, DType::kF64), Scalar(1e-3, DType::kF64),
        Scalar(5, DType::kI64)},
       {{"max_norm", 1.0}}},
      {"grad_norm", {R({100003}, 31, -1, 1, DType::kF64), R({7, 3}, 32, -1, 1, DType::kF64)}, {}},
  };
  for (const BigCase& c : cases) {
    auto ref = RunOp(c.op, c.in, c.attrs, Impl::kReference);
    ASSERT_TRUE(ref.ok()) << c.op << ": " << ref.status();
    for (bool strided : {false, true}) {
      auto out = RunOp(c.op, To32(c.in, strided), c.attrs, Impl::kKernel);
      ASSERT_TRUE(out.ok()) << c.op << ": " << out.status();
      for (size_t j = 0; j < out->size(); ++j) {
        double err = RelativeError((*out)[j], (*ref)[j]);
        EXPECT_LE(err, c.bound) << c.op << " output " << j << (strided ? " (strided)" : "");
      }
    }
  }
  SetNumThreads(2);
}

bool BitwiseEqual(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (a.GetDouble(i) != b.GetDouble(i)) return false;
  return true;
}

TEST(NnKernels, DeterministicAcrossThreadCounts) {
  std::vector<double> ids(5000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (i * 37) % 17;
  std::vector<std::pair<std::string, std::vector<Tensor>>> runs = {
      {"embedding_backward", {R({5000, 33}, 1), Ids({5000}, ids)}},
      {"layernorm_backward", {R({700, 65}, 2), R({700, 65}, 3), R({65}, 4), R({700}, 5), R({700}, 6, 0.5, 1)}},
      {"rmsnorm_backward", {R({700, 65}, 2), R({700, 65}, 3), R({65}, 4), R({700}, 6, 0.5, 1)}},
      {"grad_norm", {R({300000}, 7), R({3}, 8)}},
      {"cross_entropy", {R({300, 301}, 9), Ids({300}, std::vector<double>(300, 5))}},
  };
  for (const auto& [op, in] : runs) {
    Attrs a;
    if (op == "embedding_backward") a.Set("num_embeddings", int64_t{17});
    std::vector<std::vector<Tensor>> outs;
    for (int threads : {1, 2, 5}) {
      SetNumThreads(threads);
      auto o = RunOp(op, in, a, Impl::kKernel);
      ASSERT_TRUE(o.ok()) << op << ": " << o.status();
      outs.push_back(*o);
    }
    for (size_t k = 1; k < outs.size(); ++k)
      for (size_t j = 0; j < outs[0].size(); ++j)
        EXPECT_TRUE(BitwiseEqual(outs[0][j], outs[k][j])) << op << " output " << j << " run " << k;
  }
  SetNumThreads(2);
}

TEST(NnKernels, NonF32DTypesFallBackToTheReference) {
  Tensor x = R({5, 9}, 1);
  for (DType dt : {DType::kF64, DType::kBF16}) {
    auto y = RunOp("softmax", {x.To(dt)}, {}, Impl::kKernel);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ((*y)[0].dtype(), dt);
    auto ref = RunOp("softmax", {x.To(DType::kF64)}, {}, Impl::kReference);
    EXPECT_LE(RelativeError((*y)[0], (*ref)[0]), dt == DType::kF64 ? 1e-12 : 2e-2);
  }
  // The gather copies bf16 rows bytewise.
  Tensor w = R({4, 3}, 2).To(DType::kBF16);
  auto e = RunOp("embedding", {w, Ids({2}, {3, 1})}, {}, Impl::kKernel);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)[0].GetDouble(0), w.GetDouble(9));
}

TEST(NnKernels, SoftmaxHandlesInfinities) {
  Tensor x = Tensor::FromVector({2, 3}, {-INFINITY, 0, 0, 1000, -INFINITY, 1000});
  auto y = RunOp("softmax", {x}, {}, Impl::kKernel);
  ASSERT_TRUE(y.ok());
  std::vector<double> v = (*y)[0].ToVector();
  EXPECT_NEAR(v[0], 0, 1e-30);
  EXPECT_NEAR(v[1], 0.5, 1e-7);
  EXPECT_NEAR(v[3], 0.5, 1e-7);
  EXPECT_NEAR(v[4], 0, 1e-30);
}

TEST(NnKernels, ZeroSizedInputsDoNotCrash) {
  struct Z {
    std::string op;
    std::vector<Tensor> in;
    Attrs attrs;
  };
  std::vector<Z> zs = {
      {"gelu", {R({0, 5}, 1)}, {}},
      {"softmax", {R({0, 5}, 1)}, {}},
      {"log_softmax", {R({3, 0}, 1)}, {}},
      {"layernorm", {R({0, 5}, 1), R({5}, 2), R({5}, 3)}, {}},
      {"rmsnorm", {R({0, 5}, 1), R({5}, 2)}, {}},
      {"embedding", {R({4, 5}, 1), Ids({0}, {})}, {}},
      {"embedding_backward", {R({0, 5}, 1), Ids({0}, {})}, {{"num_embeddings", int64_t{4}}}},
      {"cross_entropy", {R({0, 5}, 1), Ids({0}, {})}, {}},
      {"rope", {R({1, 0, 2, 4}, 1)}, {}},
      {"grad_norm", {}, {}},
  };
  for (const Z& z : zs) {
    for (Impl impl : {Impl::kKernel, Impl::kReference}) {
      auto r = RunOp(z.op, z.in, z.attrs, impl);
      EXPECT_TRUE(r.ok()) << z.op << ": " << r.status();
    }
  }
  auto ce = RunOp("cross_entropy", {R({0, 5}, 1), Ids({0}, {})});
  ASSERT_TRUE(ce.ok());
  EXPECT_EQ((*ce)[0].GetDouble(0), 0.0);
  auto gn = RunOp("grad_norm", {});
  ASSERT_TRUE(gn.ok());
  EXPECT_EQ((*gn)[0].GetDouble(0), 0.0);
}

TEST(NnGrad, BackwardOpsHaveNoGradAndSayWhy) {
  auto r = kernels::EagerGradients("gelu_backward", {R({3}, 1), R({3}, 2)}, {R({3}, 3)});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("backward op of gelu"), std::string::npos);
}

TEST(NnGrad, CrossEntropyLossGradientIsMeanOverValidRows) {
  // Two valid rows out of three: dlogits of the valid rows sum to zero per row,
  // the ignored row gets nothing.
  Tensor logits = R({3, 4}, 1);
  Tensor t = Ids({3}, {1, -100, 2});
  auto g = kernels::EagerGradients("cross_entropy", {logits, t}, {Scalar(1), Tensor()}, {}, Impl::kKernel);
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<double> d = (*g)[0].ToVector();
  for (int j = 0; j < 4; ++j) EXPECT_EQ(d[4 + j], 0);
  double s0 = d[0] + d[1] + d[2] + d[3];
  EXPECT_NEAR(s0, 0, 1e-6);
  EXPECT_LT(d[1], 0);
  EXPECT_FALSE((*g)[1].defined());
}

}  // namespace
}  // namespace loom::kernels::cpu::nn::testing
