#include "runtime/launch/parallel_train.h"

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/comm/communicator.h"
#include "dtensor/device_mesh.h"
#include "parallel/styles.h"
#include "runtime/train/run_reporter.h"
#include "runtime/train/train_loop.h"

namespace loom::runtime::launch {

int RunParallelTraining(const v1::JobSpec& spec, std::shared_ptr<collectives::ProcessGroup> world,
                        checkpoint::CommitGate* gate, const parallel::Plan* plan, int cuda_device) {
  const int rank = world->rank();
  const std::string who = absl::StrCat("loom worker (rank ", rank, ")");
  // The subgroups take the world's backend spec (ProcessGroup::NewGroup), so
  // device: cuda collectives of a mesh dim go through its CUDA backend too.
  auto mesh = dtensor::DeviceMesh::Create(world, parallel::MeshOf(parallel::LayoutFromSpec(spec.parallel())));
  if (!mesh.ok()) return train::FailRun(who, 2, absl::StrCat("device mesh: ", mesh.status().message()));
  train::TrainingRun run;
  run.spec = spec;
  run.command = "loom worker";
  run.rank = rank;
  run.world = world.get();
  run.mesh = mesh->get();
  run.gate = gate;
  run.plan = plan;
  run.cuda_device = cuda_device;
  // One communicator per mesh dimension that spans several ranks.
  std::vector<std::unique_ptr<compiler::comm::Communicator>> owned;
  for (int d = 0; d < (*mesh)->ndim(); ++d) {
    if ((*mesh)->shape().sizes[d] == 1) continue;
    owned.push_back(compiler::comm::MakeProcessGroupCommunicator((*mesh)->group(d)));
    run.comms[(*mesh)->shape().names[d]] = owned.back().get();
  }
  if (rank == 0) {
    run.run_dir = train::RunFolder(spec);
    if (const char* listen = std::getenv("LOOM_WORKER_METRICS_LISTEN"); listen != nullptr) run.metrics_listen = listen;
  }
  return train::RunTraining(run);
}

}  // namespace loom::runtime::launch
