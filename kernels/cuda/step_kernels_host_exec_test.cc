// Runs the hand-written RoPE, RMSNorm and cross-entropy kernels (rope.cu,
// rmsnorm.cu, cross_entropy.cu, with fill.cu which they call) on the host,
// so that their index math and paths are checked without a GPU. The sources
// are compiled unchanged by the host C++ compiler after two rewrites: each
// launch `K<<<grid, block, ...>>>(args)` becomes
// `loom_launch(grid, block, [&] { K(args); })`, and dynamic shared memory a
// static array. A shim supplies the
// CUDA execution model (kBlockThreadsShim: host threads, barriers, shuffles)
// and the CUDA types and intrinsics these files use (bf16 with
// round-to-nearest-even, uint4/float4, dim3, __fmaf_rn). Outputs are checked
// against f64 references, and RoPE's two paths against each other bitwise.
// gpu_check runs the same kernels on the GPU.
#include <dlfcn.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cuda/codegen/host_exec_util.h"

namespace loom::kernels::cuda {
namespace {

using codegen::FindHostCompiler;
using codegen::ReadWholeFile;

// After kBlockThreadsShim: what cuda_runtime.h and cuda_bf16.h give these
// kernels (both headers resolve to empty files).
constexpr char kCudaShim[] = R"(// Host shim: CUDA types and intrinsics.
#include <algorithm>
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
struct dim3 {
  unsigned int x, y, z;
  dim3(unsigned int a = 1, unsigned int b = 1, unsigned int c = 1) : x(a), y(b), z(c) {}
};
typedef void* cudaStream_t;
enum cudaError_t { cudaSuccess = 0 };
static inline cudaError_t cudaGetLastError() { return cudaSuccess; }
struct __nv_bfloat16 { unsigned short bits; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
static inline float __bfloat162float(__nv_bfloat16 h) {
  unsigned int u = ((unsigned int)h.bits) << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned int u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{(unsigned short)((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return __nv_bfloat16{(unsigned short)(u >> 16)};
}
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{__bfloat162float(h.x), __bfloat162float(h.y)}; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return __nv_bfloat162{__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
#define __expf(x) expf(x)
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <typename F> static inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
static inline float __fmul_rn(float a, float b) { return a * b; }
template <typename T> static inline T min(T a, T b) { return a < b ? a : b; }
template <typename T> static inline T max(T a, T b) { return a < b ? b : a; }
static inline void loom_launch(dim3 grid, dim3 block, const std::function<void()>& f) {
  loom_host_run(LoomDim3{grid.x, grid.y, 1}, block.x, f);
}
)";

// `src` with every `K<<<grid, block, ...>>>(args)` launch rewritten as
// `loom_launch(grid, block, [&] { K(args); })`. K is the name before `<<<`
// with its template arguments; the configuration's first two top-level
// items are the grid and the block.
std::string HostLaunches(const std::string& src) {
  std::string out;
  size_t from = 0;
  for (size_t at; (at = src.find("<<<", from)) != std::string::npos;) {
    size_t k = at;  // the kernel expression ends here
    if (k > 0 && src[k - 1] == '>') {
      int depth = 0;
      do {
        --k;
        depth += src[k] == '>' ? 1 : src[k] == '<' ? -1 : 0;
      } while (depth > 0 && k > 0);
    }
    while (k > 0 && (std::isalnum(static_cast<unsigned char>(src[k - 1])) || src[k - 1] == '_' || src[k - 1] == ':')) --k;
    const size_t cfg_end = src.find(">>>", at);
    const std::string cfg = src.substr(at + 3, cfg_end - at - 3);
    std::vector<std::string> items(1);
    int paren = 0;
    for (char c : cfg) {
      paren += c == '(' ? 1 : c == ')' ? -1 : 0;
      if (c == ',' && paren == 0) items.emplace_back();
      else items.back() += c;
    }
    size_t open = src.find('(', cfg_end + 3), close = open;
    for (int depth = 0;; ++close) {
      depth += src[close] == '(' ? 1 : src[close] == ')' ? -1 : 0;
      if (depth == 0) break;
    }
    out += src.substr(from, k - from);
    absl::StrAppend(&out, "loom_launch(", items[0], ", ", items.size() > 1 ? items[1] : "1", ", [&] { ",
                    src.substr(k, at - k), src.substr(open, close - open + 1), "; })");
    from = close + 1;
  }
  return out + src.substr(from);
}

// `src` with each `extern __shared__ T name[];` (dynamic shared memory) as a
// static array of 256 KiB, more than any launch here asks for.
std::string StaticDynamicShared(std::string src) {
  const std::string key = "extern __shared__ ";
  for (size_t at; (at = src.find(key)) != std::string::npos;) {
    const size_t end = src.find("[];", at);
    const std::string decl = src.substr(at + key.size(), end - at - key.size());  // "T name"
    const std::string type = decl.substr(0, decl.find(' '));
    src.replace(at, end + 3 - at, absl::StrCat("static ", decl, "[262144 / sizeof(", type, ")];"));
  }
  return src;
}

TEST(HostLaunches, RewritesEachLaunchForm) {
  EXPECT_EQ(HostLaunches("A<<<g(1, 2), 256, 0, s>>>(x, f(y));"), "loom_launch(g(1, 2),  256, [&] { A(x, f(y)); });");
  EXPECT_EQ(HostLaunches("if (p) B<T, 4><<<n, t>>>(a);"), "if (p) loom_launch(n,  t, [&] { B<T, 4>(a); });");
}

// The host-compiled kernels, through extern "C" wrappers of the kern API.
class StepKernels : public ::testing::Test {
 protected:
  using RopeTableFn = int (*)(int64_t, int64_t, double, int64_t, float*);
  using RopeFn = int (*)(int, int64_t, int64_t, int64_t, int64_t, int, const float*, const void*, void*);
  using RmsFwdFn = int (*)(int, int64_t, int64_t, const void*, const float*, double, void*, float*);
  using RmsWsFn = int64_t (*)(int64_t, int64_t);
  using RmsBwdFn = int (*)(int, int, int64_t, int64_t, const void*, const void*, const float*, const float*,
                           void*, void*, float*, float*, const void*);
  using CeFwdFn = int (*)(int, int64_t, int64_t, const void*, const int32_t*, float*, float*, float*);
  using CeBwdFn = int (*)(int, int64_t, int64_t, const float*, const void*, const int32_t*, const float*, void*,
                          float*);
  using CeFusedFn = int (*)(int, int64_t, int64_t, const float*, const void*, const int32_t*, float*, float*, void*,
                            float*);

  static void SetUpTestSuite() {
    const std::string cxx = FindHostCompiler();
    ASSERT_FALSE(cxx.empty()) << "no host C++ compiler at /usr/bin/{g++,c++,clang++}";
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/step_host_exec_", ::getpid());
    ASSERT_EQ(std::system(absl::StrCat("mkdir -p '", dir, "/inc'").c_str()), 0);
    std::ofstream(dir + "/inc/cuda_runtime.h") << "";
    std::ofstream(dir + "/inc/cuda_bf16.h") << "";
    std::string tu = std::string(codegen::kBlockThreadsShim) + kCudaShim;
    for (const char* f : {"kernels/cuda/fill.cu", "kernels/cuda/rope.cu", "kernels/cuda/rmsnorm.cu",
                          "kernels/cuda/cross_entropy.cu"}) {
      const std::string src = ReadWholeFile(f);
      ASSERT_FALSE(src.empty()) << "cannot read " << f;
      absl::StrAppend(&tu, "#line 1 \"", f, "\"\n", StaticDynamicShared(HostLaunches(src)));
    }
    tu += R"(
namespace k = loom::kernels::cuda::kern;
extern "C" int rope_table(int64_t T, int64_t D, double theta, int64_t off, float* t) {
  return k::RopeTable(T, D, theta, off, t, nullptr);
}
extern "C" int rope(int dt, int64_t B, int64_t T, int64_t H, int64_t D, int inv, const float* t, const void* x,
                    void* y) {
  return k::Rope(k::Dt(dt), B, T, H, D, inv != 0, t, x, y, nullptr);
}
extern "C" int rms_fwd(int dt, int64_t rows, int64_t cols, const void* x, const float* w, double eps, void* y,
                       float* rstd) {
  return k::RmsNormForward(k::Dt(dt), rows, cols, x, w, eps, y, rstd, nullptr);
}
extern "C" int64_t rms_ws(int64_t rows, int64_t cols) { return k::RmsNormBwdWorkspaceFloats(rows, cols); }
extern "C" int ce_fwd(int ldt, int64_t rows, int64_t vocab, const void* logits, const int32_t* t, float* lse,
                      float* row_loss, float* loss) {
  return k::CrossEntropyForward(k::Dt(ldt), k::kI32, rows, vocab, logits, t, -100, lse, row_loss, loss, nullptr);
}
extern "C" int ce_bwd(int ldt, int64_t rows, int64_t vocab, const float* dloss, const void* logits, const int32_t* t,
                      const float* lse, void* dlogits, float* ws) {
  return k::CrossEntropyBackward(k::Dt(ldt), k::kI32, rows, vocab, dloss, logits, t, lse, -100, dlogits, ws, nullptr);
}
extern "C" int ce_fused(int ldt, int64_t rows, int64_t vocab, const float* dloss, const void* logits,
                        const int32_t* t, float* lse, float* loss, void* dlogits, float* ws) {
  return k::CrossEntropyFused(k::Dt(ldt), k::kI32, rows, vocab, dloss, logits, t, -100, lse, loss, dlogits, ws,
                              nullptr);
}
extern "C" int rms_bwd(int dy_dt, int xdt, int64_t rows, int64_t cols, const void* dy, const void* x,
                       const float* w, const float* rstd, void* dx, void* dx16, float* dw, float* ws,
                       const void* dres) {
  k::RmsNormBwdArgs a;
  a.dy_dt = k::Dt(dy_dt);
  a.x_dt = a.dres_dt = a.dx_dt = k::Dt(xdt);
  a.rows = rows, a.cols = cols;
  a.dy = dy, a.x = x, a.w = w, a.rstd = rstd, a.dresidual = dres;
  a.dx = dx, a.dx_bf16 = dx16, a.dw = dw, a.workspace = ws;
  return k::RmsNormBackward(a);
}
)";
    const std::string src = dir + "/step_kernels.cc", so = dir + "/step_kernels.so", log = dir + "/cc.log";
    std::ofstream(src) << tu;
    const std::string cmd =
        absl::StrCat(cxx, " -std=c++17 -O1 -w -fPIC -shared -pthread -ffp-contract=off -fno-strict-aliasing -I'", dir,
                     "/inc' -I. -o '", so, "' '", src, "' > '", log, "' 2>&1");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "host compile failed:\n" << ReadWholeFile(log).substr(0, 8000);
    handle_ = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle_, nullptr) << ::dlerror();
  }
  static void TearDownTestSuite() {
    if (handle_) ::dlclose(handle_);
    handle_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(handle_, nullptr) << "the kernels did not compile"; }
  template <typename F>
  static F Fn(const char* name) {
    return reinterpret_cast<F>(::dlsym(handle_, name));
  }
  static void* handle_;
};
void* StepKernels::handle_ = nullptr;

// A 16-byte aligned buffer of n elements of `bytes` each, starting `shift`
// elements in (shift 1 misaligns it).
class Buffer {
 public:
  Buffer(int64_t n, int bytes, int shift = 0)
      : mem_(static_cast<char*>(std::aligned_alloc(16, ((n + shift) * bytes + 15) / 16 * 16 + 16))),
        bytes_(bytes),
        shift_(shift) {
    std::memset(mem_.get(), 0xFF, (n + shift) * bytes);
  }
  void* get() { return mem_.get() + shift_ * bytes_; }
  float* f32() { return static_cast<float*>(get()); }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> mem_;
  int bytes_, shift_;
};

constexpr int kF32 = 0, kBF16 = 1;

uint16_t ToBf16(double v) {
  float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
double FromBf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Values rounded to dt, written into b, and returned as doubles.
std::vector<double> Fill(Buffer& b, int dt, int64_t n, uint64_t seed, double scale, double shift = 0) {
  std::vector<double> v(n);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(s >> 11) / 9007199254740992.0;  // [0, 1)
    const double x = shift + scale * (2 * u - 1);
    if (dt == kBF16) {
      const uint16_t h = ToBf16(x);
      static_cast<uint16_t*>(b.get())[i] = h;
      v[i] = FromBf16(h);
    } else {
      static_cast<float*>(b.get())[i] = static_cast<float>(x);
      v[i] = static_cast<float>(x);
    }
  }
  return v;
}
std::vector<double> Read(Buffer& b, int dt, int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = dt == kBF16 ? FromBf16(static_cast<uint16_t*>(b.get())[i]) : static_cast<float*>(b.get())[i];
  return v;
}
// ||out - ref|| / ||ref|| (base/tensor.h's RelativeError).
double RelErr(const std::vector<double>& out, const std::vector<double>& ref) {
  const int64_t n = static_cast<int64_t>(ref.size());
  return RelativeError(Tensor::FromVector({n}, out, DType::kF64), Tensor::FromVector({n}, ref, DType::kF64));
}

struct RopeCase {
  int dt;
  int64_t B, T, H, D, offset;
};

TEST_F(StepKernels, RopeMatchesTheF64RotationOnBothPaths) {
  auto table_fn = Fn<RopeTableFn>("rope_table");
  auto rope_fn = Fn<RopeFn>("rope");
  ASSERT_TRUE(table_fn && rope_fn);
  for (const RopeCase& c : {RopeCase{kBF16, 2, 5, 3, 16, 0}, RopeCase{kF32, 1, 7, 2, 24, 3},
                            RopeCase{kBF16, 1, 3, 2, 12, 0}, RopeCase{kF32, 1, 4, 3, 6, 1}}) {
    const int64_t n = c.B * c.T * c.H * c.D, half = c.D / 2, es = c.dt == kBF16 ? 2 : 4;
    const std::string name = absl::StrCat(c.dt == kBF16 ? "bf16" : "f32", " B", c.B, " T", c.T, " H", c.H, " D", c.D);
    Buffer table(c.T * c.D, 4), x(n, es), xs(n, es, 1);
    ASSERT_EQ(table_fn(c.T, c.D, 10000.0, c.offset, table.f32()), 0);
    const std::vector<double> xv = Fill(x, c.dt, n, 11, 1.0);
    std::memcpy(xs.get(), x.get(), n * es);
    for (int inv : {0, 1}) {
      Buffer y(n, es), ys(n, es, 1);
      ASSERT_EQ(rope_fn(c.dt, c.B, c.T, c.H, c.D, inv, table.f32(), x.get(), y.get()), 0);
      ASSERT_EQ(rope_fn(c.dt, c.B, c.T, c.H, c.D, inv, table.f32(), xs.get(), ys.get()), 0);  // element path
      std::vector<double> ref(n);
      for (int64_t p = 0; p < n / 2; ++p) {
        const int64_t i = p % half, t = (p / (half * c.H)) % c.T;
        const double a = static_cast<double>(c.offset + t) * std::pow(10000.0, -2.0 * i / c.D);
        const double sn = inv ? -std::sin(a) : std::sin(a), cs = std::cos(a);
        ref[2 * p] = xv[2 * p] * cs - xv[2 * p + 1] * sn;
        ref[2 * p + 1] = xv[2 * p] * sn + xv[2 * p + 1] * cs;
      }
      EXPECT_LT(RelErr(Read(y, c.dt, n), ref), c.dt == kBF16 ? 1e-2 : 1e-6) << name << " inverse " << inv;
      EXPECT_EQ(std::memcmp(y.get(), ys.get(), n * es), 0) << name << ": the two paths differ (inverse " << inv << ")";
    }
  }
}

struct RmsCase {
  int dt;  // x, y, dx and dresidual
  int64_t rows, cols;
  int shift;      // 1: buffers off 16-byte alignment (the element path)
  int dy_dt = -1;  // -1: dt
  bool copy = false;  // dx rounded to bf16 as well
};

TEST_F(StepKernels, RmsNormForwardAndBackwardMatchF64OnEveryPath) {
  auto fwd = Fn<RmsFwdFn>("rms_fwd");
  auto ws_fn = Fn<RmsWsFn>("rms_ws");
  auto bwd = Fn<RmsBwdFn>("rms_bwd");
  ASSERT_TRUE(fwd && ws_fn && bwd);
  const double eps = 1e-6;
  // The vector path with 1 (768: 96 threads; 2048), 2 (4096) and 4 (5120)
  // vectors a thread and several rows a block (40 rows); the element path.
  // The f32 residual stream: bf16 dy with f32 x and dx (and its bf16 copy)
  // on both paths; everything f32 on the vector path.
  for (const RmsCase& c :
       {RmsCase{kBF16, 40, 768, 0}, RmsCase{kBF16, 3, 2048, 0}, RmsCase{kBF16, 20, 4096, 0},
        RmsCase{kBF16, 17, 5120, 0}, RmsCase{kBF16, 9, 768, 1}, RmsCase{kBF16, 5, 100, 0}, RmsCase{kF32, 7, 64, 0},
        RmsCase{kF32, 9, 64, 1}, RmsCase{kF32, 40, 768, 0, kBF16, true}, RmsCase{kF32, 17, 5120, 0, kBF16, true},
        RmsCase{kF32, 20, 4096, 0, kBF16, false}, RmsCase{kF32, 9, 768, 1, kBF16, true},
        RmsCase{kF32, 5, 100, 0, kBF16, true}}) {
    for (bool residual : {false, true}) {
      const int ddt = c.dy_dt < 0 ? c.dt : c.dy_dt;
      const int64_t R = c.rows, C = c.cols, n = R * C, es = c.dt == kBF16 ? 2 : 4, ds = ddt == kBF16 ? 2 : 4;
      const std::string name =
          absl::StrCat(c.dt == kBF16 ? "bf16 " : "f32 ", ddt != c.dt ? "(bf16 dy) " : "", R, "x", C,
                       c.shift ? " unaligned" : "", residual ? " + residual" : "", c.copy ? " + bf16 copy" : "");
      Buffer x(n, es, c.shift), dy(n, ds, c.shift), dres(n, es, c.shift), y(n, es, c.shift), dx(n, es, c.shift);
      Buffer dx16(n, 2, c.shift), w(C, 4), rstd(R, 4), dw(C, 4), ws(ws_fn(R, C), 4);
      const std::vector<double> xv = Fill(x, c.dt, n, 1, 1.0, 0.1), dyv = Fill(dy, ddt, n, 2, 1.0);
      const std::vector<double> rv = Fill(dres, c.dt, n, 3, 0.5), wv = Fill(w, kF32, C, 4, 0.2, 1.0);
      ASSERT_EQ(fwd(c.dt, R, C, x.get(), w.f32(), eps, y.get(), rstd.f32()), 0);
      ASSERT_EQ(bwd(ddt, c.dt, R, C, dy.get(), x.get(), w.f32(), rstd.f32(), dx.get(), c.copy ? dx16.get() : nullptr,
                    dw.f32(), ws.f32(), residual ? dres.get() : nullptr),
                0);
      std::vector<double> ry(n), rrs(R), rdx(n), rdw(C, 0.0);
      for (int64_t r = 0; r < R; ++r) {
        double ss = 0, s = 0;
        for (int64_t j = 0; j < C; ++j) ss += xv[r * C + j] * xv[r * C + j];
        const double rs = 1.0 / std::sqrt(ss / C + eps);
        rrs[r] = rs;
        for (int64_t j = 0; j < C; ++j) {
          const int64_t i = r * C + j;
          ry[i] = xv[i] * rs * wv[j];
          s += dyv[i] * wv[j] * xv[i] * rs;
          rdw[j] += dyv[i] * xv[i] * rs;
        }
        for (int64_t j = 0; j < C; ++j) {
          const int64_t i = r * C + j;
          rdx[i] = rs * (dyv[i] * wv[j] - xv[i] * rs * s / C) + (residual ? rv[i] : 0.0);
        }
      }
      const double tol = c.dt == kBF16 ? 1e-2 : 1e-5;
      EXPECT_LT(RelErr(Read(y, c.dt, n), ry), tol) << name << ": y";
      EXPECT_LT(RelErr(Read(rstd, kF32, R), rrs), 1e-5) << name << ": rstd";
      const std::vector<double> got = Read(dx, c.dt, n);
      EXPECT_LT(RelErr(got, rdx), tol) << name << ": dx";
      EXPECT_LT(RelErr(Read(dw, kF32, C), rdw), 1e-5) << name << ": dw";
      if (!c.copy) continue;
      // The copy is dx itself rounded to nearest even, bit for bit.
      const std::vector<double> copy = Read(dx16, kBF16, n);
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i) differ += copy[i] != FromBf16(ToBf16(got[i]));
      EXPECT_EQ(differ, 0) << name << ": the bf16 copy is not dx rounded";
    }
  }
}

struct CeCase {
  int dt;
  int64_t rows, vocab;
  int shift;  // 1: logits and dlogits off 16-byte alignment (the element kernels)
};

// Forward, backward and fused on each path: bf16 with vocab % 8 == 0 takes
// the vector kernels (the fused one keeping rows in shared memory up to
// vocab 102400, re-reading them beyond); the rest the element kernels. Row 1
// is ignored (-100) and row 2's target is out of range (ignored too).
TEST_F(StepKernels, CrossEntropyMatchesF64OnEveryPath) {
  auto fwd = Fn<CeFwdFn>("ce_fwd");
  auto bwd = Fn<CeBwdFn>("ce_bwd");
  auto fused = Fn<CeFusedFn>("ce_fused");
  ASSERT_TRUE(fwd && bwd && fused);
  for (const CeCase& c : {CeCase{kBF16, 5, 64, 0}, CeCase{kBF16, 4, 102408, 0}, CeCase{kBF16, 4, 64, 1},
                          CeCase{kBF16, 3, 100, 0}, CeCase{kF32, 4, 37, 0}}) {
    const int64_t R = c.rows, V = c.vocab, n = R * V, es = c.dt == kBF16 ? 2 : 4;
    const std::string name =
        absl::StrCat(c.dt == kBF16 ? "bf16 " : "f32 ", R, "x", V, c.shift ? " unaligned" : "");
    Buffer logits(n, es, c.shift), dl(n, es, c.shift), dl2(n, es, c.shift);
    const std::vector<double> x = Fill(logits, c.dt, n, 5, 4.0);
    std::vector<int32_t> t(R);
    for (int64_t r = 0; r < R; ++r) t[r] = r == 1 ? -100 : r == 2 ? static_cast<int32_t>(V) : static_cast<int32_t>((r * 7919) % V);
    Buffer lse(R, 4), lse2(R, 4), rl(R + 1, 4), loss(1, 4), loss2(1, 4), ws(R + 1, 4), dloss(1, 4);
    dloss.f32()[0] = 1.5f;
    ASSERT_EQ(fwd(c.dt, R, V, logits.get(), t.data(), lse.f32(), rl.f32(), loss.f32()), 0);
    ASSERT_EQ(bwd(c.dt, R, V, dloss.f32(), logits.get(), t.data(), lse.f32(), dl.get(), ws.f32()), 0);
    ASSERT_EQ(fused(c.dt, R, V, dloss.f32(), logits.get(), t.data(), lse2.f32(), loss2.f32(), dl2.get(), ws.f32()), 0);
    std::vector<double> rlse(R), rdl(n, 0.0);
    double rloss = 0;
    int valid = 0;
    for (int64_t r = 0; r < R; ++r) valid += t[r] >= 0 && t[r] < V;
    for (int64_t r = 0; r < R; ++r) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < V; ++j) mx = std::max(mx, x[r * V + j]);
      for (int64_t j = 0; j < V; ++j) sum += std::exp(x[r * V + j] - mx);
      rlse[r] = mx + std::log(sum);
      if (t[r] < 0 || t[r] >= V) continue;
      rloss += rlse[r] - x[r * V + t[r]];
      for (int64_t j = 0; j < V; ++j)
        rdl[r * V + j] = 1.5 / valid * (std::exp(x[r * V + j] - rlse[r]) - (j == t[r] ? 1.0 : 0.0));
    }
    rloss /= std::max(1, valid);
    const double tol = c.dt == kBF16 ? 1e-2 : 1e-5;
    EXPECT_LT(RelErr(Read(lse, kF32, R), rlse), 1e-5) << name << ": lse";
    EXPECT_LT(RelErr(Read(loss, kF32, 1), {rloss}), 1e-5) << name << ": loss";
    EXPECT_LT(RelErr(Read(dl, c.dt, n), rdl), tol) << name << ": dlogits";
    EXPECT_LT(RelErr(Read(lse2, kF32, R), rlse), 1e-5) << name << ": fused lse";
    EXPECT_LT(RelErr(Read(loss2, kF32, 1), {rloss}), 1e-5) << name << ": fused loss";
    EXPECT_LT(RelErr(Read(dl2, c.dt, n), rdl), tol) << name << ": fused dlogits";
  }
}

}  // namespace
}  // namespace loom::kernels::cuda
