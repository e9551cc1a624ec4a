#include "runtime/commands.h"

#include <chrono>
#include <cstdio>
#include <string>

#include "base/rng.h"
#include "base/thread_pool.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/registry.h"

namespace loom::cli {
namespace {

using ops::Attrs;
using ops::Impl;
using ops::RunOp;

Tensor Random(absl::Span<const int64_t> shape, uint64_t seed, double scale = 1.0) {
  Tensor t = Tensor::MustEmpty(shape, DType::kF32);
  Philox rng(seed, 0);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(scale * (2 * rng.Uniform(i) - 1));
  return t;
}

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

// Runs `op` with the fast kernel (timed, best of `reps`) and the reference,
// printing the relative error of output 0 and the throughput.
bool Check(const char* label, const char* op, const std::vector<Tensor>& in, const Attrs& attrs,
           double flops, int reps) {
  std::printf("  %-34s ", label);
  std::fflush(stdout);
  double best = 1e30;
  absl::StatusOr<std::vector<Tensor>> out;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    out = RunOp(op, in, attrs, Impl::kKernel);
    best = std::min(best, Seconds(t0));
    if (!out.ok()) break;
  }
  if (!out.ok()) {
    std::printf("FAILED: %s\n", std::string(out.status().message()).c_str());
    return false;
  }
  std::vector<Tensor> in64;
  for (const Tensor& t : in) in64.push_back(IsFloating(t.dtype()) ? t.To(DType::kF64) : t);
  auto ref = RunOp(op, in64, attrs, Impl::kReference);
  if (!ref.ok()) {
    std::printf("reference FAILED: %s\n", std::string(ref.status().message()).c_str());
    return false;
  }
  double err = RelativeError((*out)[0], (*ref)[0]);
  bool ok = err < 1e-4;
  std::printf("%8.3f ms  %7.1f GFLOP/s  rel.err %.2e  %s\n", best * 1e3, flops / best * 1e-9, err,
              ok ? "ok" : "MISMATCH");
  return ok;
}

}  // namespace

int RunDemo(const std::vector<std::string>& args) {
  if (!args.empty()) {
    std::fprintf(stderr, "loom demo: takes no arguments (got '%s')\n", args[0].c_str());
    return 2;
  }
  std::printf("Loom kernel demo: fast CPU kernels against their references (%d threads)\n",
              NumThreads());
  absl::Status cuda = cuda::CudaAvailable();
  std::printf("CUDA: %s\n", cuda.ok() ? "available" : std::string(cuda.message()).c_str());
  bool ok = true;
  const int64_t n = 512;
  ok &= Check("matmul 512x512x512", "matmul", {Random({n, n}, 1), Random({n, n}, 2)}, {},
              2.0 * n * n * n, 3);
  const int64_t b = 1, h = 4, t = 1024, d = 64;
  std::vector<Tensor> qkv = {Random({b, h, t, d}, 3), Random({b, h, t, d}, 4), Random({b, h, t, d}, 5)};
  double attn_flops = 4.0 * b * h * t * t * d;
  for (const char* impl : {"flash", "memeff", "math"}) {
    std::string label = std::string("sdpa T=1024 d=64 ") + impl;
    ok &= Check(label.c_str(), "sdpa", qkv, {{"impl", std::string(impl)}}, attn_flops, 3);
  }
  ok &= Check("sdpa T=1024 causal (auto)", "sdpa", qkv, {{"is_causal", true}}, attn_flops / 2, 3);
  std::printf("%s\n", ok ? "demo: all kernels agree with their references" : "demo: FAILED");
  return ok ? 0 : 1;
}

int RunOps(const std::vector<std::string>&) {
  const auto& reg = ops::OpRegistry::Global();
  std::printf("%-24s %-10s %-6s %s\n", "op", "kernels", "grad", "doc");
  for (const std::string& name : reg.Names()) {
    const ops::OpDef* d = reg.Find(name);
    std::string kernels;
    for (const auto& [kind, fn] : d->kernels) kernels += std::string(DeviceKindName(kind)) + " ";
    std::printf("%-24s %-10s %-6s %s\n", name.c_str(), kernels.c_str(), d->grad ? "yes" : "no",
                d->doc.c_str());
  }
  return 0;
}

int RunVersion(const std::vector<std::string>&) {
  std::printf("loom 0.1.0\n");
  absl::Status cuda = cuda::CudaAvailable();
  std::printf("cuda: %s\n", cuda.ok() ? "available" : std::string(cuda.message()).c_str());
  return 0;
}

}  // namespace loom::cli
