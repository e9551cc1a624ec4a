// Tile GEMM micro-benchmark behind the flash kernel's design choice: one
// 64x64x64 f32 tile product (C += A B), single thread, best of 200 x 100 calls:
//   - GemmAcc AVX2/FMA 6x16 micro-kernel (forced: AVX-512 path off),
//   - GemmAcc with its AVX-512 8x32 micro-kernel (where the CPU has avx512f),
//   - OpenBLAS cblas_sgemm on the same tile (openblas_set_num_threads(1)).
//
//   bazel --output_base=/root/.cache/bazel_ob/sdpa run //bench/sdpa:tile_gemm_bench
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "kernels/sdpa/sdpa_internal.h"

extern "C" void openblas_set_num_threads(int);

namespace {

template <typename Fn>
double BestSeconds(Fn&& fn) {
  double best = 1e9;
  for (int t = 0; t < 200; ++t) {
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < 100; ++r) fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 100);
  }
  return best;
}

}  // namespace

int main() {
  using loom::kernels::sdpa::internal::GemmAcc;
  using loom::kernels::sdpa::internal::SetAvx512ForTesting;
  alignas(64) static float A[64 * 64], B[64 * 64], C[64 * 64];
  for (int i = 0; i < 64 * 64; ++i) {
    A[i] = 1e-4f * i;
    B[i] = 1e-3f * (i % 7);
    C[i] = 0;
  }
  const double flops = 2.0 * 64 * 64 * 64;
  auto report = [&](const char* name, double s) {
    printf("%-34s %7.2f us  %6.1f GFLOP/s\n", name, s * 1e6, flops / s / 1e9);
  };
  SetAvx512ForTesting(0);
  report("GemmAcc AVX2 6x16 (A row-major)", BestSeconds([&] { GemmAcc<float>(64, 64, 64, A, 64, 1, B, 64, C, 64); }));
  report("GemmAcc AVX2 6x16 (A transposed)", BestSeconds([&] { GemmAcc<float>(64, 64, 64, A, 1, 64, B, 64, C, 64); }));
  SetAvx512ForTesting(1);
  if (loom::kernels::sdpa::internal::UseAvx512()) {
    report("GemmAcc AVX-512 8x32 (A row-major)",
           BestSeconds([&] { GemmAcc<float>(64, 64, 64, A, 64, 1, B, 64, C, 64); }));
    report("GemmAcc AVX-512 8x32 (A transposed)",
           BestSeconds([&] { GemmAcc<float>(64, 64, 64, A, 1, 64, B, 64, C, 64); }));
  } else {
    printf("GemmAcc AVX-512: CPU lacks avx512f\n");
  }
  SetAvx512ForTesting(-1);
  openblas_set_num_threads(1);
  report("cblas_sgemm (OpenBLAS, 1 thread)", BestSeconds([&] {
           cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 64, 64, 64, 1.f, A, 64, B, 64, 1.f, C, 64);
         }));
  printf("checksum %g\n", static_cast<double>(C[0]));
  return 0;
}
