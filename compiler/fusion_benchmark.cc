// Fused vs unfused execution of an elementwise chain on the real CPU kernels
// (a transformer MLP's bias + GELU + residual), through the executor.
//
//   bazel build -c opt //compiler:fusion_benchmark && bazel-bin/compiler/fusion_benchmark
#include <chrono>
#include <cstdio>

#include "compiler/executor.h"
#include "compiler/ir/text.h"
#include "compiler/passes/fusion.h"

namespace loom::compiler {
namespace {

constexpr char kChain[] = R"IR(graph @mlp_tail(%h: f32[2048, 1024], %b: f32[1024], %r: f32[2048, 1024]) {
  %0 = add(%h, %b) : f32[2048, 1024]
  %1 = gelu(%0) {approximate="tanh"} : f32[2048, 1024]
  %2 = scale(%1) {s=0.5} : f32[2048, 1024]
  %3 = add(%2, %r) : f32[2048, 1024]
  return %3
}
)IR";

double TimeRuns(Executor& exec, const std::vector<Tensor>& in, int reps) {
  std::vector<Tensor> out;
  if (!exec.Run(in, &out).ok()) return -1;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) (void)exec.Run(in, &out);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
}

int Main() {
  auto g = ir::ParseGraph(kChain);
  if (!g.ok()) {
    std::fprintf(stderr, "%s\n", std::string(g.status().message()).c_str());
    return 1;
  }
  std::vector<Tensor> in;
  for (const ir::GraphInput& i : g->inputs()) {
    Tensor t = Tensor::Zeros(g->meta(i.value).shape, DType::kF32);
    for (int64_t e = 0; e < t.numel(); ++e) t.data<float>()[e] = 0.001f * static_cast<float>(e % 997) - 0.5f;
    in.push_back(t);
  }
  ir::Graph fused = *g;
  (void)passes::ElementwiseFusion().Run(fused);
  auto a = Executor::Create(*g);
  auto b = Executor::Create(fused);
  if (!a.ok() || !b.ok()) {
    std::fprintf(stderr, "lowering failed: %s\n", std::string((a.ok() ? b.status() : a.status()).message()).c_str());
    return 1;
  }
  auto oa = a->Run(in);
  auto ob = b->Run(in);
  std::printf("max rel. difference fused vs unfused: %.3g\n", RelativeError((*ob)[0], (*oa)[0]));
  const int reps = 20;
  double ta = TimeRuns(*a, in, reps), tb = TimeRuns(*b, in, reps);
  std::printf("unfused: %.2f ms/step, arena %.1f MiB\n", ta, a->program().plan.peak_bytes / 1048576.0);
  std::printf("fused:   %.2f ms/step, arena %.1f MiB (+ %.2f MiB chunk scratch)\n", tb,
              b->program().plan.peak_bytes / 1048576.0, b->program().scratch_bytes / 1048576.0);
  return 0;
}

}  // namespace
}  // namespace loom::compiler

int main() { return loom::compiler::Main(); }
