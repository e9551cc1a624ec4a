// The planner's per-layout memory estimate against the real local programs,
// on held-out models and batches: for every world-4 layout of the parallel
// acceptance list (dp=4; tp=4; tp=2 x dp=2; tp=2 + SP; dp=4 with ZeRO-1/2/3;
// tp=2 x dp=2 with ZeRO-3) and the single-process layout, one rank's training
// step is compiled the way the Trainer compiles a rank of a parallel layout
// (CompileParallel; the single-process layout through the same path here) and
// lowered with do-nothing communicators (never run), which allocates its
// arena. The rank's state (its blocks of parameters and AdamW m, v) plus that
// arena must be within 12% of Estimate's total() - workspace (the workspace
// term covers the evaluation program, which is not compiled here). parallel:planner_calibrate fits the
// coefficients on layouts of world 1, 2 and 8 of other models; none of these
// (model, batch) pairs is in its calibration set. Fast subset by default;
// LOOM_FULL=1 adds two more models and a third batch.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/planner.h"
#include "base/testing/full_sweep.h"
#include "tests/parallel/memory_probe.h"

namespace loom::tests::parallel {
namespace {

using testing::ModelOf;

bool Full() { return loom::testing::FullSweep(); }

TEST(PlannerLayoutMemory, HeldOutLayoutsWithin12Percent) {
  std::vector<v1::ModelSpec> models = {ModelOf("gpt", 3, 4, 4, 96, 48, 384), ModelOf("llama", 3, 4, 4, 96, 48, 384)};
  std::vector<int64_t> batches = {4, 12};
  if (Full()) {
    models.push_back(ModelOf("gpt", 5, 8, 8, 160, 40, 320));
    models.push_back(ModelOf("llama", 2, 8, 4, 192, 24, 640));
    batches.push_back(20);
  }
  const std::vector<loom::parallel::Layout> layouts = {{1, 1, 0, false}, {4, 1, 0, false}, {1, 4, 0, false},
                                                       {2, 2, 0, false}, {1, 2, 0, true},  {4, 1, 1, false},
                                                       {4, 1, 2, false}, {4, 1, 3, false}, {2, 2, 3, false}};
  for (const auto& m : models)
    for (int64_t b : batches)
      for (const loom::parallel::Layout& l : layouts) {
        auto planned = testing::LocalProgramBytes(m, b, l);
        ASSERT_TRUE(planned.ok()) << loom::parallel::LayoutName(l) << ": " << planned.status();
        loom::parallel::Hardware hw;
        hw.world = l.dp * l.tp;
        auto est = loom::parallel::Estimate(m, b, hw, l);
        ASSERT_TRUE(est.ok()) << est.status();
        const double e = static_cast<double>(est->memory.total() - est->memory.workspace);
        const double y = static_cast<double>(planned->total());
        const double err = (e - y) / y;
        EXPECT_LT(std::abs(err), 0.12) << testing::Describe(m, b) << " " << loom::parallel::LayoutName(l)
                                       << ": estimate " << e << " planned " << y;
        std::printf("%-40s %-18s estimate %10.0f planned %10.0f (%+.1f%%)\n", testing::Describe(m, b).c_str(),
                    loom::parallel::LayoutName(l).c_str(), e, y, 100 * err);
      }
}

}  // namespace
}  // namespace loom::tests::parallel
