// Redistribute timing over gloo on loopback (ranks as processes).
//
//   bazel run //dtensor:redistribute_benchmark -- [world=4] [rows=1024] [cols=1024] [iters=10]
//
// Runs a 1-d mesh of `world` ranks and, when world is 4, the (2, 2) mesh, and
// prints per pair the mean time of one Redistribute of an f32 [rows, cols]
// tensor (rank 0's view; every rank waits for the same collectives).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collectives/process_group.h"
#include "collectives/testing/multiprocess.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"

namespace loom::dtensor {
namespace {

using collectives::testing::WorkerContext;

int BenchWorker(WorkerContext& ctx) {
  std::vector<std::string> a = absl::StrSplit(ctx.arg, ',');  // mesh,rows,cols,iters
  MeshShape ms;
  std::vector<std::string> dims = absl::StrSplit(a[0], 'x');
  const char* names[] = {"dp", "tp"};
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t k = 1;
    (void)absl::SimpleAtoi(dims[i], &k);
    ms.names.push_back(dims.size() == 1 ? "x" : names[i]);
    ms.sizes.push_back(k);
  }
  int64_t rows = 1024, cols = 1024;
  int iters = 10;
  (void)absl::SimpleAtoi(a[1], &rows);
  (void)absl::SimpleAtoi(a[2], &cols);
  (void)absl::SimpleAtoi(a[3], &iters);
  collectives::ProcessGroupOptions po;
  po.backend = "cpu:gloo";
  auto pg = collectives::ProcessGroup::Create(ctx.store, ctx.rank, ctx.world, po);
  if (!pg.ok()) return 2;
  std::shared_ptr<collectives::ProcessGroup> world(std::move(*pg));
  auto mesh = DeviceMesh::Create(world, ms);
  if (!mesh.ok()) return 2;
  const std::vector<std::pair<std::string, std::string>> pairs =
      ms.ndim() == 1
          ? std::vector<std::pair<std::string, std::string>>{{"S(0)", "R"}, {"S(1)", "R"}, {"P", "R"},
                                                             {"P", "S(0)"}, {"S(0)", "S(1)"}, {"R", "S(1)"}}
          : std::vector<std::pair<std::string, std::string>>{{"S(0),S(1)", "R,R"}, {"S(0),S(0)", "R,R"},
                                                             {"P,P", "R,R"}, {"P,P", "S(0),S(1)"},
                                                             {"S(0),S(1)", "S(1),S(0)"}, {"R,S(0)", "S(0),R"}};
  Tensor full = Tensor::Zeros({rows, cols}, DType::kF32);
  for (int pass = 0; pass < 2; ++pass)  // pass 0 warms every pair's buffers and connections
  for (const auto& [f, t] : pairs) {
    DTensorSpec from = *ParseSpec(f, ms), to = *ParseSpec(t, ms);
    auto d = Distribute(full, from, **mesh);
    if (!d.ok()) return 3;
    auto plan = PlanRedistribute(from, to, 2);
    double total = 0;
    for (int i = -2; i < iters; ++i) {  // two warm-up rounds
      absl::Time s = absl::Now();
      auto out = Redistribute(*d, to, **mesh);
      if (!out.ok()) {
        fprintf(stderr, "%s\n", out.status().ToString().c_str());
        return 4;
      }
      if (i >= 0) total += absl::ToDoubleMilliseconds(absl::Now() - s);
    }
    if (ctx.rank == 0 && pass == 1)
      printf("%-10s %-12s -> %-12s %8.3f ms   local in %6.2f MiB   plan: %s\n", ms.ToString().c_str(),
             from.ToString().c_str(), to.ToString().c_str(), total / iters,
             d->local.nbytes() / 1048576.0, PlanToString(*plan).c_str());
  }
  fflush(stdout);
  return 0;
}
LOOM_COLLECTIVES_WORKER(bench, BenchWorker);

}  // namespace
}  // namespace loom::dtensor

int main(int argc, char** argv) {
  int rc;
  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
  int world = 4, iters = 10;
  int64_t rows = 1024, cols = 1024;
  if (argc > 1) (void)absl::SimpleAtoi(argv[1], &world);
  if (argc > 2) (void)absl::SimpleAtoi(argv[2], &rows);
  if (argc > 3) (void)absl::SimpleAtoi(argv[3], &cols);
  if (argc > 4) (void)absl::SimpleAtoi(argv[4], &iters);
  std::vector<std::string> meshes = {absl::StrCat(world)};
  if (world == 4) meshes.push_back("2x2");
  int bad = 0;
  for (const std::string& m : meshes) {
    auto r = loom::collectives::testing::RunRanks(
        {.worker = "bench", .world = world, .arg = absl::StrCat(m, ",", rows, ",", cols, ",", iters),
         .deadline = absl::Seconds(300)});
    if (!r.ok()) {
      fprintf(stderr, "mesh %s: %s\n", m.c_str(), r.Summary().c_str());
      ++bad;
    }
  }
  return bad ? 1 : 0;
}
