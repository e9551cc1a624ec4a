// CpuRankGroup: what a rank process of a trainer test (collectives/testing/
// multiprocess.h) builds first: the world over Gloo on the CPU, and one
// communicator over it for the mesh dim the test splits.
//
//   LOOM_ASSIGN_OR_RETURN(CpuRankGroup g, MakeCpuRankGroup(ctx));
//   o.comms["dp"] = g.comm.get();
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "collectives/process_group.h"
#include "collectives/testing/multiprocess.h"
#include "compiler/comm/communicator.h"

namespace loom::parallel::testing {

struct CpuRankGroup {
  std::unique_ptr<collectives::ProcessGroup> pg;
  std::unique_ptr<compiler::comm::Communicator> comm;  // over pg, 60 s per call
};

inline absl::StatusOr<CpuRankGroup> MakeCpuRankGroup(const collectives::testing::WorkerContext& ctx) {
  collectives::ProcessGroupOptions po;
  po.backend = "cpu:gloo";
  auto pg = collectives::ProcessGroup::Create(ctx.store, ctx.rank, ctx.world, po);
  if (!pg.ok()) return pg.status();
  CpuRankGroup g;
  g.pg = std::move(*pg);
  g.comm = compiler::comm::MakeProcessGroupCommunicator(g.pg.get(), 60000);
  return g;
}

}  // namespace loom::parallel::testing
