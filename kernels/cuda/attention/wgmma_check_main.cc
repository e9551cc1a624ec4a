// wgmma_check as a test: runs the cases of wgmma_check.cu on an sm_90 GPU and
// fails when one fails; skips ("needs a GPU") without such a device or in a
// build without the CUDA toolkit. Exit status 1 when a case failed.
#include <string>

#include "gtest/gtest.h"

#ifdef LOOM_HAVE_CUDA
namespace loom::kernels::cuda::attention::wg {
int RunWgmmaCheck(std::string* why);
}
#endif

namespace {

TEST(Wgmma, ProductFormsAndLayoutsMatchFp64) {
#ifdef LOOM_HAVE_CUDA
  std::string why;
  const int failed = loom::kernels::cuda::attention::wg::RunWgmmaCheck(&why);
  if (failed < 0) GTEST_SKIP() << "needs a GPU: " << why;
  EXPECT_EQ(failed, 0) << "wgmma cases failed (see the table above)";
#else
  GTEST_SKIP() << "needs a GPU: built without the CUDA toolkit";
#endif
}

}  // namespace
