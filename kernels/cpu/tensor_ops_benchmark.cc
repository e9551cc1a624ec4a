// Throughput of the non-matmul tensor kernels on GPT-sized activations
// ([4096, 768] f32 = 12 MiB), in bytes moved per second (inputs + output):
// broadcasting add, exp, relu_backward, sum over the last / first dim,
// permute (transpose), slice, concat, cast to bf16. The kernels run on
// preallocated outputs (allocation is not measured). Matmul has its own
// benchmark in bench/matmul.
//
//   bazel run //kernels/cpu:tensor_ops_benchmark
#include <string>
#include <vector>

#include "base/rng.h"
#include "benchmark/benchmark.h"
#include "kernels/registry.h"

namespace {

using loom::DType;
using loom::Tensor;
using loom::kernels::Attrs;
using Ints = std::vector<int64_t>;

Tensor Rand(std::vector<int64_t> shape) {
  Tensor t = Tensor::MustEmpty(shape, DType::kF32);
  float* p = t.data<float>();
  loom::Philox rng(1, 2);
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.Uniform(i) - 0.5f;
  return t;
}

// Runs the op's CPU kernel on preallocated (already touched) outputs, so the
// figure is the kernel's, not the allocator's page faults.
void RunOpBench(benchmark::State& state, const std::string& op, std::vector<Tensor> in, Attrs attrs) {
  const loom::kernels::OpDef* def = loom::kernels::OpRegistry::Global().Find(op);
  std::vector<loom::kernels::TensorMeta> metas;
  for (const Tensor& t : in) metas.push_back(loom::kernels::MetaOf(t));
  auto out_metas = def ? def->infer(metas, attrs) : absl::NotFoundError(op);
  if (!out_metas.ok()) {
    state.SkipWithError(std::string(out_metas.status().message()).c_str());
    return;
  }
  std::vector<Tensor> out;
  int64_t bytes = 0;
  for (const Tensor& t : in) bytes += t.nbytes();
  for (const auto& m : *out_metas) {
    out.push_back(Tensor::Zeros(m.shape, m.dtype));
    bytes += out.back().nbytes();
  }
  const auto& kernel = def->kernels.at(loom::DeviceKind::kCPU);
  for (auto _ : state) {
    absl::Status s = kernel(in, absl::MakeSpan(out), attrs);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(out[0].raw_data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

const int64_t kT = 4096, kC = 768;

}  // namespace

int main(int argc, char** argv) {
  Tensor x = Rand({kT, kC}), y = Rand({kT, kC}), bias = Rand({kC});
  auto reg = [](const char* name, std::string op, std::vector<Tensor> in, Attrs attrs = {}) {
    benchmark::RegisterBenchmark(name, RunOpBench, op, in, attrs)->Unit(benchmark::kMicrosecond)->UseRealTime();
  };
  reg("add_same_shape", "add", {x, y});
  reg("add_bias_broadcast", "add", {x, bias});
  reg("exp", "exp", {x});
  reg("relu_backward", "relu_backward", {y, x});
  reg("sum_last_dim", "sum", {x}, Attrs{{"axes", Ints{-1}}});
  reg("sum_first_dim", "sum", {x}, Attrs{{"axes", Ints{0}}});
  reg("sum_to_bias_grad", "sum_to", {x}, Attrs{{"shape", Ints{kC}}});
  reg("permute_transpose", "permute", {x}, Attrs{{"dims", Ints{1, 0}}});
  reg("permute_heads_0213", "permute", {*x.Reshape({4, 1024, 12, 64})}, Attrs{{"dims", Ints{0, 2, 1, 3}}});
  reg("slice_cols", "slice", {x}, Attrs{{"axis", int64_t{1}}, {"start", int64_t{256}}, {"length", int64_t{256}}});
  reg("concat_cols", "concat", {x, y}, Attrs{{"axis", int64_t{1}}});
  reg("cast_bf16", "cast", {x}, Attrs{{"dtype", std::string("bf16")}});
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
