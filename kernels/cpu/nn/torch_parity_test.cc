// Parity with PyTorch 1.13: writes fixed inputs to a temp file, runs
// kernels/cpu/nn/torch_parity.py under /usr/bin/python3 (float64 torch), and
// compares our f32 kernels (bound 2e-5) and f64 references (bound 1e-9),
// forward and gradients, as ||ours - torch|| / ||torch||. Covers layernorm,
// rmsnorm, cross_entropy (ignore_index -100 and 3), gelu (tanh, none), silu,
// softmax (two axes), log_softmax (two axes), embedding, rope (written out in
// torch) and AdamW + clip_grad_norm_ over 3 steps (multi-tensor entry point
// and ops); and the tensor ops of ONNX graphs: erf, sin, cos, reciprocal, pow,
// minimum, where, gather, stepped slices, sum/mean/max/min over axes
// (gradients too), comparisons, float -> int cast and integer division (exact).
// Fails, naming the cause, when /usr/bin/python3 cannot import torch.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/nn/adamw.h"
#include "kernels/cpu/nn/nn_test_util.h"
#include "kernels/registry.h"

namespace loom::kernels::cpu::nn::testing {
namespace {

using kernels::Attrs;
using kernels::Impl;
using TensorMap = std::map<std::string, Tensor>;

void WriteTensors(const std::string& path, const TensorMap& ts) {
  std::ofstream f(path);
  for (const auto& [name, t] : ts) {
    f << name << " " << t.ndim();
    for (int64_t d : t.shape()) f << " " << d;
    f << "\n";
    char buf[40];
    for (int64_t i = 0; i < t.numel(); ++i) {
      std::snprintf(buf, sizeof(buf), "%.17g", t.GetDouble(i));
      f << (i ? " " : "") << buf;
    }
    f << "\n";
  }
}

TensorMap ReadTensors(const std::string& path) {
  TensorMap out;
  std::ifstream f(path);
  std::string head, vals;
  while (std::getline(f, head) && std::getline(f, vals)) {
    std::istringstream h(head), v(vals);
    std::string name;
    int ndim;
    h >> name >> ndim;
    Shape shape(ndim);
    for (int i = 0; i < ndim; ++i) h >> shape[i];
    std::vector<double> data;
    double x;
    while (v >> x) data.push_back(x);
    out[name] = Tensor::FromVector(shape, data, DType::kF64);
  }
  return out;
}

std::string ScriptPath() {
  const char* src = std::getenv("TEST_SRCDIR");
  std::string rel = "kernels/cpu/nn/torch_parity.py";
  if (src != nullptr) {
    std::string p = absl::StrCat(src, "/loom/", rel);
    if (std::ifstream(p).good()) return p;
  }
  return rel;
}

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

Tensor R(Shape s, uint64_t seed, double lo = -1, double hi = 1) {
  return RandomTensor(s, DType::kF64, seed, lo, hi);
}
Tensor V(Shape s, std::vector<double> v) { return Tensor::FromVector(s, v, DType::kF64); }

std::vector<Tensor> As(const std::vector<Tensor>& in, DType dt) {
  std::vector<Tensor> out;
  for (const Tensor& t : in) out.push_back(t.defined() && IsFloating(t.dtype()) ? t.To(dt) : t);
  return out;
}

class TorchParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("test -x /usr/bin/python3") != 0) {
      failure_ = "/usr/bin/python3 is missing (scripts/setup.sh installs python3-torch)";
      return;
    }
    in_ = MakeInputs();
    std::string in_path = TempDir() + "/nn_torch_in.txt", out_path = TempDir() + "/nn_torch_out.txt";
    WriteTensors(in_path, in_);
    // Internal deadline: the script must not hang the test.
    std::string cmd = absl::StrCat("OMP_NUM_THREADS=1 timeout 150 /usr/bin/python3 ", ScriptPath(), " ", in_path, " ", out_path);
    int rc = std::system(cmd.c_str());
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 3) {
      failure_ = "/usr/bin/python3 cannot import torch (scripts/setup.sh installs python3-torch)";
      return;
    }
    if (rc != 0) {
      failure_ = absl::StrCat("'", cmd, "' exited with ", rc);
      return;
    }
    torch_ = ReadTensors(out_path);
  }

  static void AddTensorOpInputs(TensorMap& in) {
    in["un_x"] = R({5, 41}, 30, 0.3, 2.5);
    in["un_dy"] = R({5, 41}, 31);
    in["pow_a"] = R({3, 5, 7}, 32, 0.5, 2);
    in["pow_b"] = R({5, 1}, 33, -2, 2);
    in["pow_dy"] = R({3, 5, 7}, 34);
    in["min_a"] = R({4, 6}, 35);
    in["min_b"] = R({6}, 36);
    in["min_dy"] = R({4, 6}, 37);
    in["wh_c"] = V({4, 1}, {1, 0, 0, 1});
    in["wh_a"] = R({3, 1, 5}, 38);
    in["wh_b"] = R({5}, 39);
    in["wh_dy"] = R({3, 4, 5}, 40);
    in["ga_x"] = R({5, 6, 4}, 41);
    in["ga_i"] = V({2, 3}, {0, -1, 3, 3, 5, -6});
    in["ga_dy"] = R({5, 2, 3, 4}, 42);
    in["sl_x"] = R({7, 10}, 43);
    in["sl_neg_dy"] = R({7, 4}, 44);
    in["sl_3_dy"] = R({7, 3}, 45);
    in["red_x"] = R({4, 5, 6}, 46);
    in["red_dy"] = R({1, 5, 1}, 47);
    Tensor a = R({6, 7}, 48, -3, 3), b = R({7}, 49, -3, 3);  // whole numbers: ties
    for (Tensor* t : {&a, &b})
      for (int64_t i = 0; i < t->numel(); ++i) t->SetDouble(i, std::floor(t->GetDouble(i)));
    in["cmp_a"] = a;
    in["cmp_b"] = b;
    in["cast_x"] = R({4, 9}, 50, -50, 50);
    in["idiv_a"] = V({8}, {7, -7, 7, -7, 20, -20, 3, -1});
    in["idiv_b"] = V({8}, {2, 2, -2, -2, 3, 3, -5, 4});
  }

  static TensorMap MakeInputs() {
    TensorMap in;
    in["ln_x"] = R({7, 37}, 1, -2, 3);
    in["ln_w"] = R({37}, 2);
    in["ln_b"] = R({37}, 3);
    in["ln_dy"] = R({7, 37}, 4);
    in["rms_x"] = R({3, 5, 37}, 5);
    in["rms_w"] = R({37}, 6);
    in["rms_dy"] = R({3, 5, 37}, 7);
    in["ce_x"] = R({9, 11}, 8, -4, 4);
    in["ce_t"] = V({9}, {0, 10, -100, 3, 5, -100, 7, 1, 2});
    in["ce_dloss"] = V({}, {1.0});
    in["ce3_x"] = R({6, 37}, 9, -4, 4);
    in["ce3_t"] = V({6}, {3, 10, 36, 3, 0, 20});
    in["ce3_dloss"] = V({}, {0.7});
    in["act_x"] = R({5, 41}, 10, -5, 5);
    in["act_dy"] = R({5, 41}, 11);
    in["sm_x"] = R({7, 37}, 12, -5, 5);
    in["sm_dy"] = R({7, 37}, 13);
    in["sm3_x"] = R({3, 5, 7}, 14, -5, 5);
    in["sm3_dy"] = R({3, 5, 7}, 15);
    in["emb_w"] = R({11, 6}, 16);
    in["emb_ids"] = V({2, 5}, {0, 3, 3, 10, 7, 3, 1, 0, 9, 3});
    in["emb_dy"] = R({2, 5, 6}, 17);
    in["rope_x"] = R({2, 5, 3, 8}, 18);
    in["rope_dy"] = R({2, 5, 3, 8}, 19);
    AddTensorOpInputs(in);
    const Shape shapes[3] = {{7, 37}, {11}, {3, 5, 7}};
    for (int i = 0; i < 3; ++i) {
      in[absl::StrCat("adam_p", i)] = R(shapes[i], 20 + i);
      for (int s = 1; s <= 3; ++s) in[absl::StrCat("adam_g", s, "_", i)] = R(shapes[i], 100 * s + i, -0.3, 0.3);
    }
    return in;
  }

  void SetUp() override {
    ASSERT_TRUE(failure_.empty()) << failure_;
  }

  // Compares our f32 (kernel) and f64 (reference) results with torch's `key`.
  void Compare(const std::string& key, const Tensor& k32, const Tensor& r64, double b32 = 2e-5, double b64 = 1e-9) {
    ASSERT_TRUE(torch_.count(key)) << "torch produced no " << key;
    const Tensor& t = torch_.at(key);
    ASSERT_EQ(k32.numel(), t.numel()) << key;
    Tensor k = k32.To(DType::kF64), r = r64.To(DType::kF64);
    if (k.shape() != t.shape()) k = *k.Reshape(t.shape());
    if (r.shape() != t.shape()) r = *r.Reshape(t.shape());
    double e32 = RelativeError(k, t), e64 = RelativeError(r, t);
    std::printf("  %-16s kernel(f32) %.2e  reference(f64) %.2e\n", key.c_str(), e32, e64);
    EXPECT_LE(e32, b32) << key << " (f32 kernel vs torch)";
    EXPECT_LE(e64, b64) << key << " (f64 reference vs torch)";
  }

  // Forward outputs of `op` via the kernel (f32) and the reference (f64).
  std::pair<std::vector<Tensor>, std::vector<Tensor>> Run(const std::string& op, const std::vector<Tensor>& in,
                                                          const Attrs& a = {}) {
    auto k = kernels::RunOp(op, As(in, DType::kF32), a, Impl::kKernel);
    auto r = kernels::RunOp(op, in, a, Impl::kReference);
    EXPECT_TRUE(k.ok() && r.ok()) << op << ": " << k.status() << " / " << r.status();
    if (!k.ok() || !r.ok()) return {};
    return {*k, *r};
  }

  // Gradients of `op` through its grad rule, on the kernels (f32) and the reference (f64).
  std::pair<std::vector<Tensor>, std::vector<Tensor>> Grad(const std::string& op, const std::vector<Tensor>& in,
                                                           const std::vector<Tensor>& gout, const Attrs& a = {}) {
    auto k = kernels::EagerGradients(op, As(in, DType::kF32), As(gout, DType::kF32), a, Impl::kKernel);
    auto r = kernels::EagerGradients(op, in, gout, a, Impl::kReference);
    EXPECT_TRUE(k.ok() && r.ok()) << op << ": " << k.status() << " / " << r.status();
    if (!k.ok() || !r.ok()) return {};
    return {*k, *r};
  }

  static inline TensorMap in_, torch_;
  static inline std::string failure_;
};

TEST_F(TorchParity, LayerNorm) {
  std::vector<Tensor> in = {in_["ln_x"], in_["ln_w"], in_["ln_b"]};
  Attrs a{{"eps", 1e-5}};
  auto [k, r] = Run("layernorm", in, a);
  ASSERT_EQ(k.size(), 3u);
  Compare("ln_y", k[0], r[0]);
  Compare("ln_mean", k[1], r[1]);
  Compare("ln_rstd", k[2], r[2]);
  auto [gk, gr] = Grad("layernorm", in, {in_["ln_dy"], Tensor(), Tensor()}, a);
  ASSERT_EQ(gk.size(), 3u);
  Compare("ln_dx", gk[0], gr[0]);
  Compare("ln_dw", gk[1], gr[1]);
  Compare("ln_db", gk[2], gr[2]);
}

TEST_F(TorchParity, RmsNorm) {
  std::vector<Tensor> in = {in_["rms_x"], in_["rms_w"]};
  auto [k, r] = Run("rmsnorm", in);
  ASSERT_EQ(k.size(), 2u);
  Compare("rms_y", k[0], r[0]);
  auto [gk, gr] = Grad("rmsnorm", in, {in_["rms_dy"], Tensor()});
  ASSERT_EQ(gk.size(), 2u);
  Compare("rms_dx", gk[0], gr[0]);
  Compare("rms_dw", gk[1], gr[1]);
}

TEST_F(TorchParity, CrossEntropyWithIgnoreIndex) {
  for (auto [tag, ignore] : {std::pair<std::string, int64_t>{"ce", -100}, {"ce3", 3}}) {
    Tensor t = in_[tag + "_t"].To(DType::kI64);
    Attrs a{{"ignore_index", ignore}};
    auto [k, r] = Run("cross_entropy", {in_[tag + "_x"], t}, a);
    ASSERT_EQ(k.size(), 2u);
    Compare(tag + "_loss", k[0], r[0]);
    Compare(tag + "_lse", k[1], r[1]);
    auto [gk, gr] = Grad("cross_entropy", {in_[tag + "_x"], t}, {in_[tag + "_dloss"], Tensor()}, a);
    ASSERT_EQ(gk.size(), 2u);
    Compare(tag + "_dx", gk[0], gr[0]);
  }
}

TEST_F(TorchParity, ActivationsGeluTanhNoneAndSilu) {
  for (auto [tag, approx] : {std::pair<std::string, std::string>{"gelu_tanh", "tanh"}, {"gelu_none", "none"}}) {
    Attrs a{{"approximate", approx}};
    auto [k, r] = Run("gelu", {in_["act_x"]}, a);
    ASSERT_EQ(k.size(), 1u);
    Compare(tag + "_y", k[0], r[0]);
    auto [gk, gr] = Grad("gelu", {in_["act_x"]}, {in_["act_dy"]}, a);
    ASSERT_EQ(gk.size(), 1u);
    Compare(tag + "_dx", gk[0], gr[0]);
  }
  auto [k, r] = Run("silu", {in_["act_x"]});
  ASSERT_EQ(k.size(), 1u);
  Compare("silu_y", k[0], r[0]);
  auto [gk, gr] = Grad("silu", {in_["act_x"]}, {in_["act_dy"]});
  ASSERT_EQ(gk.size(), 1u);
  Compare("silu_dx", gk[0], gr[0]);
}

TEST_F(TorchParity, SoftmaxAndLogSoftmax) {
  struct C {
    std::string tag, op, key;
    int64_t axis;
  };
  for (const C& c : {C{"lsm", "log_softmax", "sm", -1}, C{"lsm1", "log_softmax", "sm3", 1},
                     C{"sm", "softmax", "sm", -1}, C{"sm0", "softmax", "sm3", -3}}) {
    Attrs a{{"axis", c.axis}};
    auto [k, r] = Run(c.op, {in_[c.key + "_x"]}, a);
    ASSERT_EQ(k.size(), 1u);
    Compare(c.tag + "_y", k[0], r[0]);
    auto [gk, gr] = Grad(c.op, {in_[c.key + "_x"]}, {in_[c.key + "_dy"]}, a);
    ASSERT_EQ(gk.size(), 1u);
    Compare(c.tag + "_dx", gk[0], gr[0]);
  }
}

TEST_F(TorchParity, ElementwiseMathAndGradients) {
  for (auto [op, tag] : {std::pair<std::string, std::string>{"erf", "erf"}, {"sin", "sin"}, {"cos", "cos"},
                         {"reciprocal", "recip"}}) {
    auto [k, r] = Run(op, {in_["un_x"]});
    ASSERT_EQ(k.size(), 1u) << op;
    Compare(tag + "_y", k[0], r[0]);
    auto [gk, gr] = Grad(op, {in_["un_x"]}, {in_["un_dy"]});
    ASSERT_EQ(gk.size(), 1u) << op;
    Compare(tag + "_dx", gk[0], gr[0]);
  }
  for (auto [op, tag] : {std::pair<std::string, std::string>{"pow", "pow"}, {"minimum", "min"}}) {
    std::vector<Tensor> in = {in_[tag + "_a"], in_[tag + "_b"]};
    auto [k, r] = Run(op, in);
    ASSERT_EQ(k.size(), 1u) << op;
    Compare(tag + "_y", k[0], r[0]);
    auto [gk, gr] = Grad(op, in, {in_[tag + "_dy"]});
    ASSERT_EQ(gk.size(), 2u) << op;
    Compare(tag + "_da", gk[0], gr[0]);
    Compare(tag + "_db", gk[1], gr[1]);
  }
}

TEST_F(TorchParity, WhereGatherAndSteppedSlices) {
  std::vector<Tensor> wh = {in_["wh_c"].To(DType::kBool), in_["wh_a"], in_["wh_b"]};
  auto [k, r] = Run("where", wh);
  ASSERT_EQ(k.size(), 1u);
  Compare("wh_y", k[0], r[0]);
  auto [gk, gr] = Grad("where", wh, {in_["wh_dy"]});
  ASSERT_EQ(gk.size(), 3u);
  Compare("wh_da", gk[1], gr[1]);
  Compare("wh_db", gk[2], gr[2]);

  std::vector<Tensor> ga = {in_["ga_x"], in_["ga_i"].To(DType::kI64)};
  const Attrs axis1{{"axis", int64_t{1}}};
  auto [gak, gar] = Run("gather", ga, axis1);
  ASSERT_EQ(gak.size(), 1u);
  Compare("ga_y", gak[0], gar[0]);
  auto [gagk, gagr] = Grad("gather", ga, {in_["ga_dy"]}, axis1);
  ASSERT_EQ(gagk.size(), 2u);
  Compare("ga_dx", gagk[0], gagr[0]);

  struct S {
    std::string tag;
    int64_t start, length, step;
  };
  for (const S& s : {S{"sl_neg", 8, 4, -2}, S{"sl_3", 1, 3, 3}}) {
    const Attrs a{{"axis", int64_t{1}}, {"start", s.start}, {"length", s.length}, {"step", s.step}};
    auto [sk, sr] = Run("slice", {in_["sl_x"]}, a);
    ASSERT_EQ(sk.size(), 1u);
    Compare(s.tag + "_y", sk[0], sr[0]);
    auto [sgk, sgr] = Grad("slice", {in_["sl_x"]}, {in_[s.tag + "_dy"]}, a);
    ASSERT_EQ(sgk.size(), 1u);
    Compare(s.tag + "_dx", sgk[0], sgr[0]);
  }
}

TEST_F(TorchParity, ReductionsOverSeveralAxesWithKeepdim) {
  const Attrs a{{"axes", std::vector<int64_t>{0, -1}}, {"keepdim", true}};
  for (auto [op, tag] : {std::pair<std::string, std::string>{"sum", "rsum"}, {"mean", "rmean"}, {"max", "rmax"},
                         {"min", "rmin"}}) {
    auto [k, r] = Run(op, {in_["red_x"]}, a);
    ASSERT_EQ(k.size(), 1u) << op;
    Compare(tag + "_y", k[0], r[0]);
    auto [gk, gr] = Grad(op, {in_["red_x"]}, {in_["red_dy"]}, a);
    ASSERT_EQ(gk.size(), 1u) << op;
    Compare(tag + "_dx", gk[0], gr[0]);
  }
}

// Bool and integer results must match exactly.
TEST_F(TorchParity, ComparisonsCastsAndIntegerDivisionExactly) {
  for (auto [op, tag] : {std::pair<std::string, std::string>{"less", "lt"}, {"equal", "eq"}, {"greater_equal", "ge"}}) {
    auto [k, r] = Run(op, {in_["cmp_a"], in_["cmp_b"]});
    ASSERT_EQ(k.size(), 1u) << op;
    Compare(tag, k[0], r[0], 0, 0);
  }
  auto [ck, cr] = Run("cast", {in_["cast_x"]}, {{"dtype", std::string("i32")}});
  ASSERT_EQ(ck.size(), 1u);
  Compare("cast_i32", ck[0], cr[0], 0, 0);
  auto [dk, dr] = Run("div", {in_["idiv_a"].To(DType::kI64), in_["idiv_b"].To(DType::kI64)});
  ASSERT_EQ(dk.size(), 1u);
  Compare("idiv", dk[0], dr[0], 0, 0);
}

TEST_F(TorchParity, Embedding) {
  std::vector<Tensor> in = {in_["emb_w"], in_["emb_ids"].To(DType::kI32)};
  auto [k, r] = Run("embedding", in);
  ASSERT_EQ(k.size(), 1u);
  Compare("emb_y", k[0], r[0]);
  auto [gk, gr] = Grad("embedding", in, {in_["emb_dy"]});
  ASSERT_EQ(gk.size(), 2u);
  Compare("emb_dw", gk[0], gr[0]);
}

TEST_F(TorchParity, Rope) {
  for (auto [tag, inverse] : {std::pair<std::string, bool>{"rope", false}, {"rope_inv", true}}) {
    Attrs a{{"theta", 500.0}, {"offset", int64_t{3}}, {"inverse", inverse}};
    auto [k, r] = Run("rope", {in_["rope_x"]}, a);
    ASSERT_EQ(k.size(), 1u);
    Compare(tag + "_y", k[0], r[0]);
    auto [gk, gr] = Grad("rope", {in_["rope_x"]}, {in_["rope_dy"]}, a);
    ASSERT_EQ(gk.size(), 1u);
    Compare(tag + "_dx", gk[0], gr[0]);
  }
}

TEST_F(TorchParity, AdamWWithClipGradNormThreeSteps) {
  nn::AdamWOptions opt;
  opt.lr = 1e-2;
  opt.beta1 = 0.9;
  opt.beta2 = 0.95;
  opt.eps = 1e-8;
  opt.weight_decay = 0.1;
  opt.max_norm = 0.5;
  Attrs attrs{{"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}, {"max_norm", 0.5}};
  // (a) the multi-tensor entry point in f32; (b) grad_norm + adamw reference ops in f64.
  std::vector<Tensor> p, m, v, p64, m64, v64;
  for (int i = 0; i < 3; ++i) {
    const Tensor& p0 = in_[absl::StrCat("adam_p", i)];
    p.push_back(p0.To(DType::kF32).Clone());
    m.push_back(Tensor::Zeros(p0.shape(), DType::kF32));
    v.push_back(Tensor::Zeros(p0.shape(), DType::kF32));
    p64.push_back(p0.Clone());
    m64.push_back(Tensor::Zeros(p0.shape(), DType::kF64));
    v64.push_back(Tensor::Zeros(p0.shape(), DType::kF64));
  }
  for (int step = 1; step <= 3; ++step) {
    std::vector<Tensor> g, g64;
    for (int i = 0; i < 3; ++i) {
      g64.push_back(in_[absl::StrCat("adam_g", step, "_", i)]);
      g.push_back(g64.back().To(DType::kF32));
    }
    auto norm = nn::AdamWStepMulti(p, g, m, v, step, opt);
    ASSERT_TRUE(norm.ok()) << norm.status();
    auto gn = kernels::RunOp("grad_norm", g64, {}, Impl::kReference);
    ASSERT_TRUE(gn.ok()) << gn.status();
    Compare(absl::StrCat("adam_norm_", step), Tensor::FromVector({}, {*norm}), (*gn)[0]);
    for (int i = 0; i < 3; ++i) {
      auto o = kernels::RunOp("adamw",
                              {p64[i], g64[i], m64[i], v64[i], (*gn)[0], Tensor::FromVector({}, {opt.lr}, DType::kF64),
                               Tensor::FromVector({}, {double(step)}, DType::kI64)},
                              attrs, Impl::kReference);
      ASSERT_TRUE(o.ok()) << o.status();
      p64[i] = (*o)[0];
      m64[i] = (*o)[1];
      v64[i] = (*o)[2];
    }
  }
  for (int i = 0; i < 3; ++i) {
    Compare(absl::StrCat("adam_p", i), p[i], p64[i], 1e-6);
    Compare(absl::StrCat("adam_m", i), m[i], m64[i]);
    Compare(absl::StrCat("adam_v", i), v[i], v64[i]);
  }
}

}  // namespace
}  // namespace loom::kernels::cpu::nn::testing
