// wgmma_check: see wgmma_check.cu. Exit status 1 when a case fails; without
// the CUDA toolkit at build time it says so and exits 0.
#include <cstdio>

#ifdef LOOM_HAVE_CUDA
namespace loom::cuda::attn::wg {
int RunWgmmaCheck();
}
#endif

int main() {
#ifdef LOOM_HAVE_CUDA
  return loom::cuda::attn::wg::RunWgmmaCheck() == 0 ? 0 : 1;
#else
  std::printf("wgmma_check: skipped (built without the CUDA toolkit)\n");
  return 0;
#endif
}
