// Host tensor conversion and zero fill, the costs of staging a model's state
// for a device: Tensor::To (a typed loop over the thread pool) against the
// element-by-element path it replaced (SetDouble(i, GetDouble(i))), and
// Tensor::Zeros, on the pool's threads and on one.
//
//   bazel run //base:tensor_convert_benchmark -- [elements, default 20480000]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/tensor.h"
#include "base/thread_pool.h"

namespace loom {
namespace {

template <typename Fn>
double Seconds(Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Row(const char* what, int threads, double s, int64_t n, size_t bytes) {
  std::printf("%-36s %2d thread(s) %9.3f ms %8.2f ns/element %7.2f GB/s\n", what, threads, s * 1e3, s * 1e9 / n,
              bytes / s / 1e9);
}

int Main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 20480000;
  if (n <= 0) {
    std::fprintf(stderr, "tensor_convert_benchmark: elements must be a positive integer\n");
    return 2;
  }
  Tensor src = Tensor::Zeros({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) src.data<float>()[i] = static_cast<float>(i % 1000) * 0.001f;
  Tensor ref = Tensor::MustEmpty({n}, DType::kBF16);
  const double element = Seconds([&] {
    for (int64_t i = 0; i < n; ++i) ref.SetDouble(i, src.GetDouble(i));
  });
  Row("f32 -> bf16, element by element", 1, element, n, src.nbytes() + ref.nbytes());
  for (int threads : {NumThreads(), 1}) {
    SetNumThreads(threads);
    Tensor out;
    const double to = Seconds([&] { out = src.To(DType::kBF16); });
    if (std::memcmp(out.raw_data(), ref.raw_data(), ref.nbytes()) != 0) {
      std::fprintf(stderr, "tensor_convert_benchmark: To(bf16) differs from the element path\n");
      return 1;
    }
    Row("f32 -> bf16, Tensor::To", threads, to, n, src.nbytes() + out.nbytes());
    Tensor z;
    const double zs = Seconds([&] { z = Tensor::Zeros({n}, DType::kF32); });
    Row("Tensor::Zeros f32", threads, zs, n, z.nbytes());
  }
  return 0;
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) { return loom::Main(argc, argv); }
