// Executes the generated row-wise kernels on the host: every kernel of the
// matrix below is generated, all are compiled as one C++ translation unit with
// a shim (each CUDA thread of a block is a host thread; __syncthreads is a
// barrier; warp shuffles exchange through a shared array between two barriers;
// __shared__ is a function-local static, blocks run one after another), loaded
// with dlopen, and run with a grid smaller than the row count (so grid-stride
// loops, the last-block reduction of the cross-entropy forward and the
// multi-warp block reductions all run). Outputs are checked against the f64
// references of rowwise_check.h. Needs no GPU and no NVRTC; fails without a host
// C++ compiler (scripts/setup.sh installs build-essential).
#include <dlfcn.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "kernels/cuda/codegen/host_exec_util.h"
#include "kernels/cuda/codegen/rowwise.h"
#include "kernels/cuda/codegen/rowwise_check.h"
#include "gtest/gtest.h"

namespace loom::kernels::cuda::codegen {
namespace {

// After kBlockThreadsShim (host_exec_util.h): the bit casts, atomics and
// bf16 conversions the generated row-wise kernels use.
constexpr char kShim[] = R"(// Host shim for generated row-wise kernels.
#define LOOM_ROW_HOST 1
static inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline float __uint_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned int __float_as_uint(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static inline float loom_rbf2f(unsigned short h) { return __uint_as_float(((unsigned int)h) << 16); }
static inline unsigned short loom_rf2bf(float f) {
  unsigned int u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
#define __expf(x) expf(x)
)";


// extern "C" run_<kernel>(params, grid, block) for a kernel taking `params_type`.
std::string Wrapper(const std::string& kernel, const std::string& params_type) {
  return absl::StrCat("extern \"C\" void run_", kernel, "(const void* p, unsigned g, unsigned b) {\n  loom_host_run(g, b, [p] { ",
                      kernel, "(*(const ", params_type, "*)p); });\n}\n");
}

using RunFn = void (*)(const void*, unsigned, unsigned);

class HostExec : public ::testing::Test {
 protected:
  // Adds a generated source (once per distinct kernel) and its wrappers.
  void Add(const RowSource& s, const std::string& params_type) {
    if (!names_.insert(s.kernels[0]).second) return;
    tu_ += s.source;
    tu_ += Wrapper(s.kernels[0], params_type);
    if (s.kernels.size() > 1) tu_ += Wrapper(s.kernels[1], params_type);
  }
  void CompileAll() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/row_host_exec_", ::getpid());
    ASSERT_EQ(std::system(absl::StrCat("mkdir -p '", dir, "'").c_str()), 0);
    const std::string src = dir + "/kernels.cc", so = dir + "/kernels.so", log = dir + "/cc.log";
    std::ofstream(src) << kBlockThreadsShim << kShim << tu_;
    const std::string cmd = absl::StrCat(cxx_, " -std=c++17 -O1 -w -fPIC -shared -pthread -o '", so, "' '", src,
                                         "' > '", log, "' 2>&1");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "host compile failed:\n" << ReadWholeFile(log).substr(0, 6000);
    h_ = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(h_, nullptr) << ::dlerror();
  }
  RunFn Fn(const std::string& kernel) {
    return reinterpret_cast<RunFn>(::dlsym(h_, ("run_" + kernel).c_str()));
  }
  void SetUp() override {
    cxx_ = FindHostCompiler();
    ASSERT_FALSE(cxx_.empty()) << "no host C++ compiler at /usr/bin/{g++,c++,clang++}";
  }
  void TearDown() override {
    if (h_) ::dlclose(h_);
  }
  void RunLn(const std::vector<LnSpec>& specs, uint64_t seed);
  std::string cxx_, tu_;
  std::set<std::string> names_;
  void* h_ = nullptr;
};

// Generates each spec's norm, compiles them all on the host, runs each on a
// case of 5 rows and checks it against the f64 reference.
void HostExec::RunLn(const std::vector<LnSpec>& specs, uint64_t seed) {
  std::vector<RowSource> gens;
  for (const LnSpec& s : specs) {
    auto gen = GenerateLayerNorm(s);
    ASSERT_TRUE(gen.ok()) << gen.status();
    EXPECT_EQ(gen->y_dtype, s.y_dtype.value_or(s.dtype));
    Add(*gen, "LoomLnParams");
    gens.push_back(*gen);
  }
  CompileAll();
  for (size_t k = 0; k < specs.size(); ++k) {
    const LnSpec& s = specs[k];
    LnCase c = MakeLnCase(s, 5, seed + k);
    ASSERT_EQ(c.y.dtype, s.y_dtype.value_or(s.dtype));
    LnParams p = LnParamsFor(c);
    RunFn f = Fn(gens[k].kernels[0]);
    ASSERT_NE(f, nullptr);
    f(&p, 2, gens[k].threads);
    EXPECT_EQ(CheckLn(c), "") << gens[k].kernels[0] << (s.rms ? " rms" : "") << " cols " << s.cols << " "
                              << DTypeName(s.dtype) << " -> " << DTypeName(s.y_dtype.value_or(s.dtype))
                              << " addends " << s.addends.size() << " threads " << gens[k].threads;
  }
}

TEST_F(HostExec, LayerNormMatchesTheF64Reference) {
  std::vector<LnSpec> specs;
  const DType other[] = {DType::kBF16, DType::kF32};
  for (DType dt : {DType::kF32, DType::kBF16})
    for (int prologue : {0, 1, 2, 3})
      for (int64_t cols : {768, 100, 37, 2048})
        for (int threads : {0, 64})
          for (bool rms : {false, true}) {
            LnSpec s;
            s.rms = rms;
            s.cols = cols;
            s.dtype = dt;
            // 0 plain; 1 x + residual; 2 mm + bias[C] (other dtype) + residual; 3 x + pos[3, C]
            if (prologue == 1) s.addends = {{dt, 0}, {dt, 0}};
            if (prologue == 2) s.addends = {{dt, 0}, {other[dt == DType::kBF16 ? 1 : 0], 1}, {dt, 0}};
            if (prologue == 3) s.addends = {{dt, 0}, {other[dt == DType::kBF16 ? 1 : 0], 3}};
            s.has_bias = cols != 37 && !rms;
            s.threads = threads;
            specs.push_back(s);
          }
  RunLn(specs, 8);
}

// y stored in another dtype than x and h: an f32 residual stream (plain, or
// the sum of an f32 stream and a bf16 branch) normalised into bf16, and the
// reverse; h keeps the stream's exact f32 sum. The f32 side bounds the
// vector width.
TEST_F(HostExec, LayerNormWithItsOwnOutputDTypeMatchesTheF64Reference) {
  std::vector<LnSpec> specs;
  for (DType dt : {DType::kF32, DType::kBF16})
    for (bool fused : {false, true})
      for (int64_t cols : {768, 100, 37})
        for (bool rms : {false, true}) {
          LnSpec s;
          s.rms = rms;
          s.cols = cols;
          s.dtype = dt;
          s.y_dtype = dt == DType::kF32 ? DType::kBF16 : DType::kF32;
          if (fused) s.addends = {{dt, 0}, {DType::kBF16, 0}};
          s.has_bias = !rms;
          auto gen = GenerateLayerNorm(s);
          ASSERT_TRUE(gen.ok()) << gen.status();
          EXPECT_EQ(gen->vec, cols % 4 == 0 ? 4 : 1);
          specs.push_back(s);
        }
  RunLn(specs, 71);
}

TEST_F(HostExec, AdamWMatchesTheF64Reference) {
  std::vector<AdamWSpec> specs(3);
  specs[0].max_norm = 1.0;
  specs[1].step_dtype = DType::kI64;
  specs[1].beta2 = 0.95;
  specs[2].step_dtype = DType::kI32;
  specs[2].max_norm = 10.0;
  specs[2].eps = 1e-6;
  std::vector<RowSource> gens;
  for (AdamWSpec& s : specs) {
    s.threads = 64;
    auto g = GenerateAdamW(s);
    ASSERT_TRUE(g.ok()) << g.status();
    Add(*g, "LoomAdamWParams");
    gens.push_back(*g);
  }
  CompileAll();
  int vec_tensors = 0;
  for (size_t k = 0; k < 2 * specs.size(); ++k) {  // each spec plain, then with the lean layouts
    const bool lean = k >= specs.size();
    AdamWCase c = MakeAdamWCase(specs[k % specs.size()], 100 + k, lean);
    std::vector<AdamWTensor> tensors = AdamWTensorsFor(c);
    std::vector<AdamWChunk> chunks = AdamWTable(tensors);
    for (const AdamWTensor& t : tensors) vec_tensors += t.vec4;
    AdamWParams p;
    p.tensors = tensors.data();
    p.chunks = chunks.data();
    p.lr = static_cast<const float*>(c.lr.data());
    p.step = c.step.data();
    p.grad_norm = static_cast<const float*>(c.grad_norm.data());
    p.num_chunks = static_cast<int64_t>(chunks.size());
    Fn(gens[k % specs.size()].kernels[0])(&p, 2, gens[k % specs.size()].threads);
    EXPECT_EQ(CheckAdamW(c), "") << gens[k % specs.size()].kernels[0] << (lean ? " lean" : "");
  }
  EXPECT_GT(vec_tensors, 6);  // both the float4 and the scalar path ran, plain and lean
}

// bf16 states are rounded stochastically: with g = 0, v = b2^n exactly.
// Round to nearest would leave v at 1 for ever (1 - b2 = 1e-3 is under half
// a bf16 ulp below 1) and truncation would pull it down by half an ulp a
// step; the stochastic rounding keeps the mean of 8192 elements on b2^n. The
// parameter (split, lr 0) must come back bit for bit every step, and the
// float4 (tensor 0) and scalar (tensor 1) paths must agree.
TEST_F(HostExec, BF16StatesRoundStochasticallyAndSplitParamsAreExact) {
  AdamWSpec s;
  s.beta2 = 0.999;
  s.threads = 64;
  auto gen = GenerateAdamW(s);
  ASSERT_TRUE(gen.ok()) << gen.status();
  Add(*gen, "LoomAdamWParams");
  CompileAll();
  const int64_t n = 8192;
  std::vector<float> p0(n);
  for (int64_t i = 0; i < n; ++i) p0[i] = std::ldexp(1.0f + static_cast<float>(i) / n, static_cast<int>(i % 40) - 20);
  std::vector<std::vector<uint16_t>> planes(2, std::vector<uint16_t>(2 * n)), m(2, std::vector<uint16_t>(n, 0)),
      v(2, std::vector<uint16_t>(n, BF16::FromFloat(1.0f)));
  std::vector<float> grad(n + 1, 0.0f);
  std::vector<AdamWTensor> tensors(2);
  for (int t = 0; t < 2; ++t) {
    SplitF32(p0.data(), n, planes[t].data());
    AdamWTensor& e = tensors[t];
    e.param = planes[t].data();
    e.grad = t == 0 ? grad.data() : grad.data() + 1;  // tensor 1: misaligned grad, the scalar path
    e.m = m[t].data();
    e.v = v[t].data();
    e.numel = n;
    e.states_bf16 = e.split = 1;
    e.seed = t;
  }
  std::vector<AdamWChunk> chunks = AdamWTable(tensors);
  ASSERT_EQ(tensors[0].vec4, 1);
  ASSERT_EQ(tensors[1].vec4, 0);
  float lr = 0.0f, step = 0.0f;
  AdamWParams p{tensors.data(), chunks.data(), &lr, &step, nullptr, static_cast<int64_t>(chunks.size())};
  const int steps = 200;
  for (int k = 1; k <= steps; ++k) {
    step = static_cast<float>(k);
    Fn(gen->kernels[0])(&p, 2, gen->threads);
  }
  const double want = std::pow(0.999, steps);
  for (int t = 0; t < 2; ++t) {
    double mean = 0;
    for (int64_t i = 0; i < n; ++i) {
      BF16 b;
      b.bits = v[t][i];
      mean += static_cast<float>(b);
    }
    mean /= n;
    EXPECT_NEAR(mean, want, 0.01 * want) << "tensor " << t;
    std::vector<float> back(n);
    JoinF32(planes[t].data(), n, back.data());
    EXPECT_EQ(std::memcmp(back.data(), p0.data(), 4 * n), 0) << "tensor " << t;
  }
}

}  // namespace
}  // namespace loom::kernels::cuda::codegen
