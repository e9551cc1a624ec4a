// Throughput of ReduceInto (acc[i] = acc[i] op in[i]) per dtype, against the
// scalar per-element loop for bf16/f16 (ReduceHalfScalarForTest). Buffers of
// 256 KiB stay in cache, as a ring chunk being reduced right after it arrived.
//   bazel run -c opt //collectives/algorithms:reduce_benchmark
#include <cstring>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/algorithms/reduce.h"

namespace loom::collectives::algorithms {
namespace {

template <typename F>
double GBps(size_t bytes, F f) {
  f();
  int iters = 0;
  absl::Time t0 = absl::Now();
  while (absl::Now() - t0 < absl::Milliseconds(300)) {
    for (int i = 0; i < 50; ++i) f();
    iters += 50;
  }
  return static_cast<double>(bytes) * iters / absl::ToDoubleSeconds(absl::Now() - t0) / 1e9;
}

void Run() {
  const size_t bytes = 256 << 10;
  std::vector<char> a(bytes), b(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    a[i] = static_cast<char>(i % 61);
    b[i] = static_cast<char>(i % 37);
  }
  // Finite values: fill halves with small numbers.
  for (size_t i = 0; i + 1 < bytes; i += 2) {
    a[i + 1] = 0x3c;
    b[i + 1] = 0x3c;
  }
  struct D { DType dt; size_t es; };
  for (D d : {D{DType::kF32, 4}, D{DType::kF64, 8}, D{DType::kI32, 4}, D{DType::kBF16, 2}, D{DType::kF16, 2}}) {
    size_t n = bytes / d.es;
    std::vector<char> acc = a;
    double v = GBps(bytes, [&] { ReduceInto(d.dt, ReduceOp::kSum, acc.data(), b.data(), n); });
    std::printf("%-5s sum  ReduceInto %7.2f GB/s", std::string(DTypeName(d.dt)).c_str(), v);
    if (d.dt == DType::kBF16 || d.dt == DType::kF16) {
      acc = a;
      double s = GBps(bytes, [&] { ReduceHalfScalarForTest(d.dt, ReduceOp::kSum, acc.data(), b.data(), n); });
      std::printf("   scalar %7.2f GB/s  (%.1fx)", s, v / s);
    }
    std::printf("\n");
  }
}

}  // namespace
}  // namespace loom::collectives::algorithms

int main() {
  loom::collectives::algorithms::Run();
  return 0;
}
