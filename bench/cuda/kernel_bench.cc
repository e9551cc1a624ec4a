// kernel_bench: times Loom's hand-written memory-bound CUDA kernels
// (kernels/cuda: layernorm.h, reductions.h, cross_entropy.h, rmsnorm.h,
// rope.h) at the GPT-2 124M training shapes (B=16, T=1024: 16384 rows, C=768,
// 4C=3072, vocab 50304, bf16 activations, 124M f32 parameter gradients;
// RMSNorm and RoPE at llama-1b's shapes) and prints the achieved
// bandwidth against a device-to-device copy measured in the same run. The
// generated kernels (layernorm forward, AdamW) are timed by
// kernels/cuda/codegen/rowwise_gpu_check.
// Bytes counted: each input read once, each output written once. Correctness
// is gpu_check's job; this binary only times.
//
//   kernel_bench [--iters=20]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "base/tensor.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/device_runtime.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/reductions.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope.h"

namespace {

using namespace loom;
using namespace loom::kernels::cuda;

#define CHECK_OK(expr)                                                                          \
  do {                                                                                          \
    auto _s = (expr);                                                                           \
    if (!_s.ok()) {                                                                             \
      std::fprintf(stderr, "kernel_bench: %s: %s\n", #expr, std::string(_s.message()).c_str()); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

DeviceRuntime* rt;
int iters = 20;

// Device buffer filled with a non-zero finite pattern (0x3C bytes: ~0.0115 in f32 and bf16).
Tensor Buf(int64_t n, DType dt) {
  auto t = rt->Empty({n}, dt);
  CHECK_OK(t.status());
  CHECK_OK(FillBytes(t->raw_data(), t->nbytes(), 0x3C, rt->compute_stream()));
  return *t;
}

double MedianMs(const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<StreamEvent> ev;
  for (int i = 0; i <= iters; ++i) {
    auto e = StreamEvent::Create();
    CHECK_OK(e.status());
    ev.push_back(std::move(*e));
  }
  CHECK_OK(ev[0].Record(rt->compute_stream()));
  for (int i = 0; i < iters; ++i) {
    fn();
    CHECK_OK(ev[i + 1].Record(rt->compute_stream()));
  }
  CHECK_OK(rt->SynchronizeCompute());
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    auto t = ev[i + 1].ElapsedMsSince(ev[i]);
    CHECK_OK(t.status());
    ms.push_back(*t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double copy_gbs = 0;

void Row(const char* name, const std::string& shape, double bytes, double ms) {
  const double gbs = bytes / (ms * 1e-3) / 1e9;
  std::printf("%-34s %-28s %9.3f %9.1f %7.0f%%\n", name, shape.c_str(), ms, gbs, copy_gbs > 0 ? 100 * gbs / copy_gbs : 0);
}

#ifdef LOOM_HAVE_CUDA  // the raw-pointer kernels exist only in CUDA builds
// RMSNorm at llama-1b's rows (B 8 x T 2048, C 2048), bf16, forward and
// backward with the residual gradient: the vector path (aligned buffers)
// and the other (the same buffers one element off 16-byte alignment); then
// the f32 residual stream's backward (bf16 dy, f32 x, dresidual and dx, and
// dx's bf16 copy) on the vector path.
void BenchRmsNorm(StreamHandle s) {
  const DType bf = DType::kBF16, f32 = DType::kF32;
  const int64_t R = 16384, Cn = 2048, n = R * Cn;
  Tensor x = Buf(n + 8, bf), y = Buf(n + 8, bf), dy = Buf(n + 8, bf), dres = Buf(n + 8, bf), dx = Buf(n + 8, bf);
  Tensor w = Buf(Cn, DType::kF32), rs = Buf(R, DType::kF32), dw = Buf(Cn, DType::kF32),
         ws = Buf(kern::RmsNormBwdWorkspaceFloats(R, Cn), DType::kF32);
  const float* wp = static_cast<const float*>(w.raw_data());
  float* rsp = static_cast<float*>(rs.raw_data());
  auto at = [](Tensor& t, int64_t off) { return static_cast<char*>(t.raw_data()) + 2 * off; };
  kern::RmsNormBwdArgs a;
  a.rows = R, a.cols = Cn, a.w = wp, a.rstd = rsp, a.stream = s;
  a.dw = static_cast<float*>(dw.raw_data()), a.workspace = static_cast<float*>(ws.raw_data());
  auto bwd = [&a] {
    if (kern::RmsNormBackward(a) != 0) std::exit(1);
  };
  for (int64_t off : {int64_t{0}, int64_t{1}}) {
    const std::string path = off == 0 ? " (vector path)" : " (other path)";
    Row(("rmsnorm fwd bf16" + path).c_str(), "16384x2048", 2.0 * n * 2, MedianMs([&] {
          if (kern::RmsNormForward(kern::kBF16, R, Cn, at(x, off), wp, 1e-6, at(y, off), rsp, s) != 0) std::exit(1);
        }));
    a.dy = at(dy, off), a.x = at(x, off), a.dresidual = at(dres, off), a.dx = at(dx, off);
    Row(("rmsnorm bwd +dres bf16" + path).c_str(), "16384x2048", 4.0 * n * 2, MedianMs(bwd));
  }
  Tensor x32 = Buf(n, f32), dres32 = Buf(n, f32), dx32 = Buf(n, f32);
  a.x_dt = a.dres_dt = a.dx_dt = kern::kF32;
  a.dy = dy.raw_data(), a.x = x32.raw_data(), a.dresidual = dres32.raw_data(), a.dx = dx32.raw_data();
  a.dx_bf16 = dx.raw_data();
  // Bytes: dy 2, x 4, dresidual 4, dx 4, its copy 2.
  Row("rmsnorm bwd +dres f32 stream, copy", "16384x2048", 16.0 * n, MedianMs(bwd));
}

// RoPE of llama-1b's queries (B 8, T 2048, 32 heads, D 64), bf16: the
// vector path (aligned buffers) and the per-pair path (the same buffers
// one element off 16-byte alignment), each reading x once and writing y.
void BenchRope(StreamHandle s) {
  const DType bf = DType::kBF16;
  const int64_t B = 8, T = 2048, H = 32, D = 64, n = B * T * H * D;
  Tensor x = Buf(n + 8, bf), y = Buf(n + 8, bf), table = Buf(kern::RopeTableFloats(T, D), DType::kF32);
  float* tp = static_cast<float*>(table.raw_data());
  if (kern::RopeTable(T, D, 10000.0, 0, tp, s) != 0) std::exit(1);
  for (int64_t off : {int64_t{0}, int64_t{1}}) {
    const void* xp = static_cast<const char*>(x.raw_data()) + 2 * off;
    void* yp = static_cast<char*>(y.raw_data()) + 2 * off;
    Row(off == 0 ? "rope bf16 (vector path)" : "rope bf16 (per-pair path)", "8x2048x32x64", 2.0 * n * 2,
        MedianMs([&] {
          if (kern::Rope(kern::kBF16, B, T, H, D, false, tp, xp, yp, s) != 0) std::exit(1);
        }));
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--iters=", 8) == 0) iters = std::atoi(argv[i] + 8);
  auto r = DeviceRuntime::Get(0);
  CHECK_OK(r.status());
  rt = *r;
  StreamHandle s = rt->compute_stream();
  const DType bf = DType::kBF16;
  const int64_t rows = 16384, C = 768, V = 50304;
  std::printf("%-34s %-28s %9s %9s %8s\n", "kernel", "shape", "ms", "GB/s", "of copy");
  {
    const int64_t n = int64_t{1} << 30;  // 1 Gi bf16 elements = 2 GiB, read once and written once
    Tensor a = Buf(n, bf), b = Buf(n, bf);
    double ms = MedianMs([&] {
#ifdef LOOM_HAVE_CUDA  // (a build without the toolkit fails at DeviceRuntime::Get above)
      cudaMemcpyAsync(b.raw_data(), a.raw_data(), a.nbytes(), cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(s));
#endif
    });
    copy_gbs = 2.0 * a.nbytes() / (ms * 1e-3) / 1e9;
    Row("device copy (ceiling)", "2 GiB", 2.0 * a.nbytes(), ms);
  }
  {
    const int64_t n = rows * C;
    Tensor x = Buf(n, bf), w = Buf(C, DType::kF32), mean = Buf(rows, DType::kF32), rstd = Buf(rows, DType::kF32);
    Tensor dy = Buf(n, bf), dres = Buf(n, bf), dx = Buf(n, bf), dw = Buf(C, DType::kF32), db = Buf(C, DType::kF32),
           ws = Buf(LayerNormBwdWorkspaceFloats(rows, C), DType::kF32);
    LayerNormBwdArgs g;
    g.dtype = bf, g.rows = rows, g.cols = C, g.dy = dy.raw_data(), g.x = x.raw_data();
    g.weight = static_cast<float*>(w.raw_data()), g.mean = static_cast<float*>(mean.raw_data());
    g.rstd = static_cast<float*>(rstd.raw_data()), g.dresidual = dres.raw_data();
    g.dx = dx.raw_data(), g.dweight = static_cast<float*>(dw.raw_data()), g.dbias = static_cast<float*>(db.raw_data());
    g.workspace = static_cast<float*>(ws.raw_data()), g.stream = s;
    Row("layernorm_backward +dres bf16", "16384x768", 4.0 * n * 2, MedianMs([&] { CHECK_OK(LayerNormBackward(g)); }));
  }
#ifdef LOOM_HAVE_CUDA  // the raw-pointer kernels exist only in CUDA builds
  for (int64_t N : {int64_t{768}, int64_t{2304}, int64_t{3072}}) {
    // Bias-gradient column sums: [16384, N] bf16 -> f32 [N].
    Tensor x = Buf(rows * N, bf), o = Buf(N, DType::kF32),
           ws = Buf(kern::SumRowsWorkspaceFloats(rows, N), DType::kF32);
    Row("sum_rows (bias grad) bf16", "16384x" + std::to_string(N), 2.0 * rows * N, MedianMs([&] {
          if (kern::SumRows(kern::kBF16, kern::kF32, rows, N, x.raw_data(), o.raw_data(),
                            static_cast<float*>(ws.raw_data()), s) != 0)
            std::exit(1);
        }));
  }
  {
    const int64_t n = rows * V;
    Tensor logits = Buf(n, bf), dl = Buf(n, bf), lse = Buf(rows, DType::kF32), ws = Buf(rows + 1, DType::kF32),
           loss = Buf(1, DType::kF32), dloss = Buf(1, DType::kF32);
    std::vector<double> tv(rows);
    for (int64_t i = 0; i < rows; ++i) tv[i] = (i * 7919) % V;
    auto t = ToDevice(Tensor::FromVector({rows}, tv, DType::kI32), rt->device());
    CHECK_OK(t.status());
    const void* tp = t->raw_data();
    float* wsp = static_cast<float*>(ws.raw_data());
    float* lp = static_cast<float*>(loss.raw_data());
    float* ep = static_cast<float*>(lse.raw_data());
    const float* dp = static_cast<const float*>(dloss.raw_data());
    Row("cross_entropy fwd bf16", "16384x50304", 1.0 * n * 2, MedianMs([&] {
          if (kern::CrossEntropyForward(kern::kBF16, kern::kI32, rows, V, logits.raw_data(), tp, -100, ep, wsp, lp, s))
            std::exit(1);
        }));
    Row("cross_entropy bwd bf16", "16384x50304", 2.0 * n * 2, MedianMs([&] {
          if (kern::CrossEntropyBackward(kern::kBF16, kern::kI32, rows, V, dp, logits.raw_data(), tp, ep, -100,
                                         dl.raw_data(), wsp, s))
            std::exit(1);
        }));
    Row("cross_entropy fused fwd+bwd bf16", "16384x50304", 2.0 * n * 2, MedianMs([&] {
          if (kern::CrossEntropyFused(kern::kBF16, kern::kI32, rows, V, dp, logits.raw_data(), tp, -100, ep, lp,
                                      dl.raw_data(), wsp, s))
            std::exit(1);
        }));
  }
  BenchRmsNorm(s);
  BenchRope(s);
  {
    // Grad norm over the GPT-2 124M parameter gradients (12 layers + embeddings), f32.
    std::vector<int64_t> sizes = {50304 * 768, 1024 * 768};
    for (int l = 0; l < 12; ++l)
      for (int64_t z : {768, 768, 768 * 2304, 2304, 768 * 768, 768, 768, 768, 768 * 3072, 3072, 3072 * 768, 768})
        sizes.push_back(z);
    sizes.push_back(768);
    sizes.push_back(768);
    int64_t total = 0;
    std::vector<Tensor> keep;
    std::vector<kern::GradNormEntry> ge;
    for (int64_t z : sizes) {
      keep.push_back(Buf(z, DType::kF32));
      kern::GradNormEntry e;
      e.x = keep.back().raw_data(), e.numel = z, e.dt = kern::kF32;
      ge.push_back(e);
      total += z;
    }
    void *de = nullptr, *dc = nullptr;
    int64_t chunks = 0;
    if (kern::GradNormUpload(ge.data(), int(ge.size()), &de, &dc, &chunks) != 0) std::exit(1);
    Tensor parts = Buf(chunks, DType::kF32), gn = Buf(1, DType::kF32);
    float* pp = static_cast<float*>(parts.raw_data());
    float* gp = static_cast<float*>(gn.raw_data());
    Row("grad_norm multi-tensor (1+1 launch)", std::to_string(total) + " f32", 4.0 * total, MedianMs([&] {
          if (kern::GradNormMulti(de, dc, chunks, pp, gp, s) != 0) std::exit(1);
        }));
  }
#endif
  CHECK_OK(rt->SynchronizeAll());
  return 0;
}
