// Throughput of the NN kernels (f32, preallocated outputs) and, for scale, of
// the f64 references on the same shapes. Run:
//   bazel run -c opt //kernels/cpu/nn:nn_benchmark -- --benchmark_min_time=0.2
// items/s counts input elements processed per second.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "kernels/cpu/nn/adamw.h"
#include "kernels/cpu/nn/nn_test_util.h"
#include "kernels/registry.h"

namespace loom::kernels::cpu::nn::testing {
namespace {

using kernels::Attrs;

struct Setup {
  std::vector<Tensor> in;
  Attrs attrs;
};

Setup MakeSetup(const std::string& op, int64_t rows, int64_t c) {
  Setup s;
  auto F = [](Shape sh, uint64_t seed, double lo = -1, double hi = 1) {
    return RandomTensor(sh, DType::kF32, seed, lo, hi);
  };
  if (op == "gelu" || op == "silu" || op == "softmax" || op == "log_softmax") {
    s.in = {F({rows, c}, 1, -4, 4)};
    if (op == "gelu") s.attrs.Set("approximate", std::string("tanh"));
  } else if (op == "softmax_backward") {
    s.in = {F({rows, c}, 1), F({rows, c}, 2, 0, 1e-3)};
  } else if (op == "layernorm") {
    s.in = {F({rows, c}, 1), F({c}, 2), F({c}, 3)};
  } else if (op == "layernorm_backward") {
    s.in = {F({rows, c}, 1), F({rows, c}, 2), F({c}, 3), F({rows}, 4), F({rows}, 5, 0.5, 1.5)};
  } else if (op == "rmsnorm") {
    s.in = {F({rows, c}, 1), F({c}, 2)};
  } else if (op == "cross_entropy") {
    std::vector<double> t(rows);
    for (int64_t i = 0; i < rows; ++i) t[i] = (i * 7919) % c;
    s.in = {F({rows, c}, 1, -5, 5), Tensor::FromVector({rows}, t, DType::kI64)};
  } else if (op == "rope") {
    s.in = {F({4, rows / 4, 8, c / 8}, 1)};
  } else if (op == "embedding_backward") {
    std::vector<double> t(rows);
    for (int64_t i = 0; i < rows; ++i) t[i] = (i * 7919) % 1000;
    s.in = {F({rows, c}, 1), Tensor::FromVector({rows}, t, DType::kI64)};
    s.attrs.Set("num_embeddings", int64_t{1000});
  }
  return s;
}

void BM_Op(benchmark::State& state, std::string op, int64_t rows, int64_t c, bool reference) {
  const kernels::OpDef* def = kernels::OpRegistry::Global().Find(op);
  Setup s = MakeSetup(op, rows, c);
  if (reference)
    for (Tensor& t : s.in)
      if (IsFloating(t.dtype())) t = t.To(DType::kF64);
  std::vector<kernels::TensorMeta> metas;
  for (const Tensor& t : s.in) metas.push_back(kernels::MetaOf(t));
  auto out_metas = def->infer(metas, s.attrs);
  std::vector<Tensor> out;
  for (const auto& m : *out_metas) out.push_back(Tensor::MustEmpty(m.shape, m.dtype));
  const kernels::KernelFn& fn = reference ? def->reference : def->kernels.at(DeviceKind::kCPU);
  (void)fn(s.in, absl::MakeSpan(out), s.attrs);  // warm-up: touch the output pages
  for (auto _ : state) {
    absl::Status st = fn(s.in, absl::MakeSpan(out), s.attrs);
    if (!st.ok()) state.SkipWithError(std::string(st.message()).c_str());
    benchmark::DoNotOptimize(out[0].raw_data());
  }
  state.SetItemsProcessed(state.iterations() * s.in[0].numel());
}

void BM_AdamWMulti(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<Shape> shapes = {{n / 2}, {n / 4}, {n / 4}};
  std::vector<Tensor> p, g, m, v;
  for (size_t i = 0; i < shapes.size(); ++i) {
    p.push_back(RandomTensor(shapes[i], DType::kF32, i));
    g.push_back(RandomTensor(shapes[i], DType::kF32, 10 + i));
    m.push_back(Tensor::Zeros(shapes[i], DType::kF32));
    v.push_back(Tensor::Zeros(shapes[i], DType::kF32));
  }
  nn::AdamWOptions opt;
  opt.max_norm = 1.0;
  int64_t step = 0;
  for (auto _ : state) benchmark::DoNotOptimize(nn::AdamWStepMulti(p, g, m, v, ++step, opt));
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * 7 * 4);  // read p g m v, write p m v
}

void Register() {
  struct B {
    std::string op;
    int64_t rows, c;
  };
  for (const B& b : {B{"gelu", 1024, 4096}, B{"silu", 1024, 4096}, B{"softmax", 1024, 4096},
                     B{"log_softmax", 1024, 4096}, B{"softmax_backward", 1024, 4096}, B{"layernorm", 1024, 4096},
                     B{"layernorm_backward", 1024, 4096}, B{"rmsnorm", 1024, 4096}, B{"cross_entropy", 256, 32000},
                     B{"rope", 1024, 4096}, B{"embedding_backward", 4096, 1024}}) {
    for (bool ref : {false, true}) {
      std::string name = absl::StrCat(b.op, ref ? "/reference_f64" : "/kernel_f32");
      benchmark::RegisterBenchmark(name.c_str(), BM_Op, b.op, b.rows, b.c, ref)->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
  benchmark::RegisterBenchmark("adamw_multi/kernel_f32", BM_AdamWMulti)->Arg(1 << 22)->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

}  // namespace
}  // namespace loom::kernels::cpu::nn::testing

int main(int argc, char** argv) {
  loom::kernels::cpu::nn::testing::Register();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
