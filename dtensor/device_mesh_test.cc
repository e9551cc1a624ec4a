// DeviceMesh's subgroups take the world's backend spec: with
// "cpu:gloo,cuda:gloo" every mesh dim's group sends CUDA tensors to cuda:gloo
// (without a GPU that backend is Unavailable and says so by name) and CPU
// tensors to gloo, so a device: cuda parallel program's collectives on a tp
// or dp group go through the CUDA backend the job asked for. 4 ranks
// (processes), a 2 x 2 mesh.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "collectives/process_group.h"
#include "collectives/testing/multiprocess.h"
#include "dtensor/device_mesh.h"
#include "gtest/gtest.h"

namespace loom::dtensor {
namespace {

using collectives::testing::WorkerContext;

int MeshBackendWorker(WorkerContext& ctx) {
  collectives::ProcessGroupOptions po;
  po.backend = ctx.arg;
  po.timeout = absl::Seconds(30);
  auto pg = collectives::ProcessGroup::Create(ctx.store, ctx.rank, ctx.world, po);
  if (!pg.ok()) {
    fprintf(stderr, "[rank %d] process group: %s\n", ctx.rank, pg.status().ToString().c_str());
    return 2;
  }
  auto mesh = DeviceMesh::Create(std::shared_ptr<collectives::ProcessGroup>(std::move(*pg)),
                                 MeshShape{{"dp", "tp"}, {2, 2}});
  if (!mesh.ok()) {
    fprintf(stderr, "[rank %d] mesh: %s\n", ctx.rank, mesh.status().ToString().c_str());
    return 2;
  }
  for (int d = 0; d < (*mesh)->ndim(); ++d) {
    collectives::ProcessGroup* g = (*mesh)->group(d);
    auto cuda = g->BackendFor(Device::CUDA(0), collectives::OpType::kAllReduce, DType::kF32);
    const std::string said = cuda.ok() ? std::string((*cuda)->name()) : std::string(cuda.status().message());
    WORKER_EXPECT(ctx, (cuda.ok() && said == "cuda:gloo") ||
                           (absl::IsUnavailable(cuda.status()) && said.find("backend cuda:gloo is unavailable") !=
                                                                      std::string::npos),
                  "dim ", d, ": CUDA tensors go to ", said);
    auto cpu = g->BackendFor(Device::CPU(), collectives::OpType::kAllReduce, DType::kF32);
    WORKER_EXPECT(ctx, cpu.ok() && (*cpu)->name() == "gloo", "dim ", d, ": CPU tensors go to ",
                  cpu.ok() ? std::string((*cpu)->name()) : cpu.status().ToString());
  }
  return ctx.failures == 0 ? 0 : 1;
}
LOOM_COLLECTIVES_WORKER(mesh_backend, MeshBackendWorker);

TEST(DeviceMesh, SubgroupsCarryTheWorldsCudaBackend) {
  collectives::testing::RunResult r = collectives::testing::RunRanks(
      {.worker = "mesh_backend", .world = 4, .arg = "cpu:gloo,cuda:gloo", .deadline = absl::Seconds(60)});
  EXPECT_TRUE(r.ok()) << r.Summary();
}

}  // namespace
}  // namespace loom::dtensor

int main(int argc, char** argv) {
  int rc;
  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
