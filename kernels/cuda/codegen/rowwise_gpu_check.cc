// GPU check and timing of the generated row-wise kernels (rowwise.h).
//
// 1. Checks: every kind on the GPU against the f64 references of
//    rowwise_check.h (the same cases as the host execution test plus the
//    GPT-2 shapes), one line per case.
// 2. Timing at GPT-2 124M shapes (rows 16384, C 768, bf16; AdamW over the
//    124M parameters), median of 20 timed launches (CUDA events) after 3
//    warm-ups, with the bandwidth each reaches.
// Exits 1 on a failed check, 2 without a GPU.
//
//   bazel build //kernels/cuda/codegen:rowwise_gpu_check
//   bazel-bin/kernels/cuda/codegen/rowwise_gpu_check [--no-timing]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "kernels/cuda/codegen/rowwise.h"
#include "kernels/cuda/codegen/rowwise_check.h"

namespace loom::kernels::cuda::codegen {
namespace {

int g_failures = 0;

#define CK(expr)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (expr);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

void OkOrDie(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, std::string(s.message()).c_str());
    std::exit(1);
  }
}

// Device mirror of a HostBuf.
struct Dev {
  void* p = nullptr;
  int64_t bytes = 0;
  HostBuf* h = nullptr;
  explicit Dev(HostBuf& host) : bytes(host.bytes()), h(&host) {
    CK(cudaMalloc(&p, std::max<int64_t>(bytes, 16)));
    if (bytes > 0) CK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
  }
  Dev(const Dev&) = delete;
  ~Dev() { cudaFree(p); }
  void Back() {
    if (bytes > 0) CK(cudaMemcpy(h->data(), p, bytes, cudaMemcpyDeviceToHost));
  }
  template <typename T> T* as() const { return static_cast<T*>(p); }
};

void Report(const std::string& label, const std::string& err) {
  std::printf("  %-58s %s\n", label.c_str(), err.empty() ? "ok" : ("FAIL " + err).c_str());
  if (!err.empty()) ++g_failures;
}

void CheckLnCase(const LnSpec& s, int64_t rows, const char* what) {
  LnCase c = MakeLnCase(s, rows, 1234 + s.cols);
  auto k = RowwiseKernel::LayerNorm(s);
  OkOrDie(k.status(), "compile layernorm");
  std::vector<std::unique_ptr<Dev>> in;
  for (HostBuf& b : c.in) in.push_back(std::make_unique<Dev>(b));
  Dev g(c.gamma), be(c.beta), h(c.h), y(c.y), mean(c.mean), rstd(c.rstd);
  LnParams p;
  for (size_t q = 0; q < in.size(); ++q) p.in[q] = in[q]->p;
  p.gamma = g.as<float>();
  p.beta = s.has_bias ? be.as<float>() : nullptr;
  p.h = s.addends.empty() ? nullptr : h.p;
  p.y = y.p;
  p.mean = s.rms ? nullptr : mean.as<float>();
  p.rstd = rstd.as<float>();
  p.rows = rows;
  OkOrDie((*k)->Launch(p, nullptr), "launch layernorm");
  CK(cudaDeviceSynchronize());
  h.Back(), y.Back(), mean.Back(), rstd.Back();
  Report(absl::StrCat(s.rms ? "rmsnorm " : "layernorm ", DTypeName(s.dtype), " C=", s.cols, " ", what, s.has_bias ? "" : " no-bias",
                      " rows=", rows, " threads=", (*k)->gen().threads),
         CheckLn(c));
}

void CheckAdamWCase(const AdamWSpec& s, const char* label, bool lean = false) {
  AdamWCase c = MakeAdamWCase(s, 77, lean);
  auto k = RowwiseKernel::AdamW(s);
  OkOrDie(k.status(), "compile adamw");
  std::vector<std::unique_ptr<Dev>> bufs;
  std::vector<void*> ptrs;
  for (size_t t = 0; t < c.numels.size(); ++t)
    for (HostBuf* hb : {&c.param[t], &c.grad[t], &c.m[t], &c.v[t], &c.shadow[t]}) {
      bufs.push_back(std::make_unique<Dev>(*hb));
      ptrs.push_back(hb->n > 0 ? bufs.back()->p : nullptr);
    }
  std::vector<AdamWTensor> tensors = AdamWTensorsFor(c, &ptrs);
  std::vector<AdamWChunk> chunks = AdamWTable(tensors);
  Dev lr(c.lr), step(c.step), gn(c.grad_norm);
  void *dt = nullptr, *dc = nullptr;
  CK(cudaMalloc(&dt, sizeof(AdamWTensor) * tensors.size()));
  CK(cudaMalloc(&dc, sizeof(AdamWChunk) * chunks.size()));
  CK(cudaMemcpy(dt, tensors.data(), sizeof(AdamWTensor) * tensors.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dc, chunks.data(), sizeof(AdamWChunk) * chunks.size(), cudaMemcpyHostToDevice));
  AdamWParams p{static_cast<const AdamWTensor*>(dt), static_cast<const AdamWChunk*>(dc), lr.as<float>(), step.p,
                gn.as<float>(), static_cast<int64_t>(chunks.size())};
  OkOrDie((*k)->Launch(p, nullptr), "launch adamw");
  CK(cudaDeviceSynchronize());
  for (auto& b : bufs) b->Back();
  cudaFree(dt);
  cudaFree(dc);
  Report(absl::StrCat("adamw ", label, lean ? " lean (bf16 states, split params)" : ""), CheckAdamW(c));
}

// ---- timing ----
float TimeUs(const std::function<void()>& launch) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> t;
  for (int i = 0; i < 20; ++i) {
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000);
  }
  CK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void* Alloc(int64_t bytes) {
  void* p = nullptr;
  CK(cudaMalloc(&p, bytes));
  CK(cudaMemset(p, 0, bytes));
  return p;
}

void Row(const std::string& what, double bytes, float us) {
  std::printf("  %-44s %8.1f us (%6.0f GB/s)\n", what.c_str(), us, bytes / us * 1e-3);
}

// One multi-tensor AdamW launch over `shapes` (numel, a matmul weight), timed
// with the bytes it must move: plain, param/grad/m/v f32 (read all, write
// param, m, v) and the matmul weights' bf16 shadows; lean, grads and states
// bf16 and the matmul weights split (4 bytes read and written, no shadow).
void TimeAdamW(const std::vector<std::pair<int64_t, bool>>& shapes, bool lean) {
  std::vector<AdamWTensor> gt;
  std::vector<void*> owned;
  int64_t total = 0;
  double bytes = 0;
  const int64_t sb = lean ? 2 : 4;  // grad and state bytes
  for (auto [n, matrix] : shapes) {
    AdamWTensor e;
    e.param = Alloc(n * 4);
    e.grad = Alloc(n * sb);
    e.m = Alloc(n * sb);
    e.v = Alloc(n * sb);
    e.param_bf16 = matrix && !lean ? Alloc(n * 2) : nullptr;
    e.grad_bf16 = e.states_bf16 = lean;
    e.split = lean && matrix;
    e.seed = static_cast<uint32_t>(gt.size());
    e.numel = n;
    e.weight_decay = matrix ? 0.1 : 0.0;
    owned.insert(owned.end(), {e.param, const_cast<void*>(e.grad), e.m, e.v, e.param_bf16});
    gt.push_back(e);
    total += n;
    bytes += n * (8.0 + 5 * sb) + (e.param_bf16 ? 2.0 * n : 0.0);
  }
  std::vector<AdamWChunk> chunks = AdamWTable(gt);
  void* dt = Alloc(sizeof(AdamWTensor) * gt.size());
  void* dc = Alloc(sizeof(AdamWChunk) * chunks.size());
  CK(cudaMemcpy(dt, gt.data(), sizeof(AdamWTensor) * gt.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dc, chunks.data(), sizeof(AdamWChunk) * chunks.size(), cudaMemcpyHostToDevice));
  float* lr = static_cast<float*>(Alloc(16));
  float* stepv = static_cast<float*>(Alloc(16));
  float* gn = static_cast<float*>(Alloc(16));
  const float one = 1.f, lrv = 1e-4f;
  CK(cudaMemcpy(stepv, &one, 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(lr, &lrv, 4, cudaMemcpyHostToDevice));
  AdamWSpec s;
  s.max_norm = 1.0;
  s.beta2 = 0.95;
  auto k = RowwiseKernel::AdamW(s);
  OkOrDie(k.status(), "adamw");
  AdamWParams p{static_cast<const AdamWTensor*>(dt), static_cast<const AdamWChunk*>(dc), lr, stepv, gn,
                static_cast<int64_t>(chunks.size())};
  const float us = TimeUs([&] { OkOrDie((*k)->Launch(p, nullptr), "adamw"); });
  Row(absl::StrCat("adamw ", lean ? "lean " : "", gt.size(), " tensors ", total, " params"), bytes, us);
  for (void* q : owned) cudaFree(q);
  for (void* q : {dt, dc, static_cast<void*>(lr), static_cast<void*>(stepv), static_cast<void*>(gn)}) cudaFree(q);
}

void Timing() {
  cudaDeviceProp prop{};
  const bool named = cudaGetDeviceProperties(&prop, 0) == cudaSuccess;
  std::printf("timing (%s, GPT-2 124M shapes, median of 20):\n", named ? prop.name : "device 0");
  const int64_t R = 16384, C = 768, V = 50304;
  // layernorm (+residual), bf16
  void* a = Alloc(R * C * 2);
  void* b = Alloc(R * C * 2);
  void* h = Alloc(R * C * 2);
  void* y = Alloc(R * C * 2);
  float* g = static_cast<float*>(Alloc(C * 4));
  float* be = static_cast<float*>(Alloc(C * 4));
  float* mean = static_cast<float*>(Alloc(R * 4));
  float* rstd = static_cast<float*>(Alloc(R * 4));
  float* bias = static_cast<float*>(Alloc(C * 4));
  for (int prologue : {0, 1, 2}) {
    LnSpec s;
    s.cols = C;
    s.dtype = DType::kBF16;
    if (prologue == 1) s.addends = {{DType::kBF16, 0}, {DType::kBF16, 0}};
    if (prologue == 2) s.addends = {{DType::kBF16, 0}, {DType::kF32, 1}, {DType::kBF16, 0}};
    auto k = RowwiseKernel::LayerNorm(s);
    OkOrDie(k.status(), "compile layernorm");
    LnParams p;
    p.in[0] = a;
    p.in[1] = prologue == 2 ? static_cast<const void*>(bias) : b;
    p.in[2] = b;
    p.gamma = g;
    p.beta = be;
    p.h = prologue ? h : nullptr;
    p.y = y;
    p.mean = mean;
    p.rstd = rstd;
    p.rows = R;
    const float us = TimeUs([&] { OkOrDie((*k)->Launch(p, nullptr), "ln"); });
    const char* what[] = {"layernorm bf16 16384x768", "add+layernorm bf16 16384x768",
                          "mm+bias+res+layernorm bf16 16384x768"};
    Row(what[prologue], R * C * 2.0 * (prologue ? 4 : 2) + (prologue == 2 ? R * C * 2.0 : 0), us);
  }
  cudaFree(bias);
  for (void* p : {a, b, h, y}) cudaFree(p);
  for (float* p : {g, be, mean, rstd}) cudaFree(p);
  // AdamW over GPT-2 124M: f32 params/grads/m/v with bf16 shadows of the
  // matmul weights, then the lean layouts (bf16 grads, m, v; split matmul weights).
  std::vector<std::pair<int64_t, bool>> shapes = {{V * C, true}, {1024 * C, false}};
  for (int l = 0; l < 12; ++l)
    for (auto sh : std::vector<std::pair<int64_t, bool>>{{C, false},     {C, false},    {C * 3 * C, true},
                                                         {3 * C, false}, {C * C, true}, {C, false},
                                                         {C, false},     {C, false},    {C * 4 * C, true},
                                                         {4 * C, false}, {4 * C * C, true}, {C, false}})
      shapes.push_back(sh);
  shapes.push_back({C, false});
  shapes.push_back({C, false});
  TimeAdamW(shapes, false);
  TimeAdamW(shapes, true);
}

int Main(int argc, char** argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("rowwise_gpu_check: no GPU\n");
    return 2;
  }
  std::printf("rowwise_gpu_check: %s\nchecks against f64 references:\n", NvrtcInfo().c_str());
  for (DType dt : {DType::kF32, DType::kBF16})
    for (int prologue : {0, 1, 2, 3})
      for (int64_t cols : {768, 37, 2048, 4096}) {
        LnSpec s;
        s.cols = cols;
        s.dtype = dt;
        s.has_bias = cols != 37;
        const char* what[] = {"plain", "x+res", "mm+bias[C]f32+res", "x+pos[64,C]f32"};
        if (prologue == 1) s.addends = {{dt, 0}, {dt, 0}};
        if (prologue == 2) s.addends = {{dt, 0}, {DType::kF32, 1}, {dt, 0}};
        if (prologue == 3) s.addends = {{dt, 0}, {DType::kF32, 64}};
        CheckLnCase(s, 259, what[prologue]);
        if (prologue < 2) {  // RMSNorm (llama): plain and x + residual
          s.rms = true;
          s.has_bias = false;
          CheckLnCase(s, 259, what[prologue]);
        }
      }
  AdamWSpec a;
  a.max_norm = 1.0;
  CheckAdamWCase(a, "max_norm=1 step f32");
  a.max_norm = 0;
  a.step_dtype = DType::kI64;
  CheckAdamWCase(a, "no clipping, step i64");
  CheckAdamWCase(a, "no clipping, step i64", /*lean=*/true);
  std::printf("%s: %d failure(s)\n", g_failures ? "FAIL" : "PASS", g_failures);
  if (!(argc > 1 && std::string(argv[1]) == "--no-timing")) Timing();
  return g_failures ? 1 : 0;
}

}  // namespace
}  // namespace loom::kernels::cuda::codegen

int main(int argc, char** argv) { return loom::kernels::cuda::codegen::Main(argc, argv); }
