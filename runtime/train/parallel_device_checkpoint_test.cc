// Checkpoints of a parallel device: cuda job on any machine: 2 ranks
// (processes, Gloo over loopback), each a device: cuda trainer whose CUDA
// executor is parallel/testing/host_cuda_executor.h (host memory, a
// stand-in step, no collective in it). Each rank steps, the Checkpointer
// saves every rank's blocks collectively (State(): device -> host), and a
// fresh trainer per rank restores them (StateChanged: host -> device): what
// each rank's executor holds after the restore is, tensor for tensor,
// bitwise what the saving trainer's executor held, under dp=2 with ZeRO-3
// (parameters and moments sharded over dp) and tp=2.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/rng.h"
#include "base/status.h"
#include "base/tensor.h"
#include "collectives/process_group.h"
#include "collectives/testing/multiprocess.h"
#include "compiler/comm/communicator.h"
#include "gtest/gtest.h"
#include "parallel/testing/cpu_rank_group.h"
#include "parallel/testing/host_cuda_executor.h"
#include "parallel/testing/small_spec.h"
#include "parallel/trainer.h"
#include "runtime/data/sampler.h"
#include "runtime/train/checkpointer.h"

namespace loom::runtime::train {
namespace {

using loom::parallel::testing::RandomTokens;

using collectives::testing::WorkerContext;
using parallel::testing::HostCudaExecutor;

v1::JobSpec Spec(int dp, int tp, int zero) {
  v1::JobSpec spec = parallel::testing::SmallSpec({}, 4, 1e-2f, "cuda");
  auto* p = spec.mutable_parallel();
  p->set_dp(dp);
  p->set_tp(tp);
  p->set_zero_stage(zero);
  return spec;
}

struct Rank {
  std::unique_ptr<parallel::Trainer> trainer;
  HostCudaExecutor* dev = nullptr;
  std::unique_ptr<Checkpointer> ckpt;
};

absl::StatusOr<Rank> MakeRank(const v1::JobSpec& spec, int rank, compiler::comm::Communicator* comm,
                              collectives::ProcessGroup* world) {
  Rank r;
  parallel::TrainerOptions o;
  o.layout = parallel::LayoutFromSpec(spec.parallel());
  o.rank = rank;
  o.comms[spec.parallel().dp() > 1 ? "dp" : "tp"] = comm;
  o.make_cuda_executor = HostCudaExecutor::Factory(&r.dev);
  LOOM_ASSIGN_OR_RETURN(r.trainer, parallel::Trainer::Create(spec, std::move(o)));
  LOOM_ASSIGN_OR_RETURN(r.ckpt, Checkpointer::Create(spec, *r.trainer, world));
  return r;
}

bool BitwiseEqual(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.shape() != b.shape() || a.dtype() != DType::kF32 || b.dtype() != DType::kF32)
    return false;
  for (int64_t e = 0; e < a.numel(); ++e)
    if (a.data<float>()[e] != b.data<float>()[e]) return false;
  return true;
}

// arg: "dp tp zero dir".
int SaveRestoreWorker(WorkerContext& ctx) {
  std::vector<std::string> a = absl::StrSplit(ctx.arg, ' ');
  const v1::JobSpec spec = Spec(std::stoi(a[0]), std::stoi(a[1]), std::stoi(a[2]));
  const std::string dir = a[3];
  auto fail = [&](const absl::Status& s) {
    std::fprintf(stderr, "[rank %d] %s\n", ctx.rank, std::string(s.message()).c_str());
    return 1;
  };
  auto group = parallel::testing::MakeCpuRankGroup(ctx);
  if (!group.ok()) return fail(group.status());
  const auto& comm = group->comm;
  auto saver = MakeRank(spec, ctx.rank, comm.get(), group->pg.get());
  if (!saver.ok()) return fail(saver.status());
  const auto [first, rows] = saver->trainer->BatchRows();
  for (int s = 0; s < 3; ++s) {
    auto loss = saver->trainer->StepRows(RandomTokens(4, 8, 32, 10 + s).Narrow(0, first, rows).Clone(),
                                         RandomTokens(4, 8, 32, 50 + s).Narrow(0, first, rows).Clone());
    if (!loss.ok()) return fail(loss.status());
  }
  auto sampler = data::Sampler::Create(100, 7);
  if (!sampler.ok()) return fail(sampler.status());
  sampler->Advance(6);
  if (absl::Status s = saver->ckpt->Save(dir, sampler->state(), 3); !s.ok()) return fail(s);
  // Rank 0 commits after the save's last barrier; the loop's resume waits at
  // a barrier too (train_loop.cc) before any rank loads.
  auto w = group->pg->Barrier({});
  if (!w.ok() || !(*w)->Wait().ok()) return fail(absl::InternalError("barrier after the save failed"));

  auto restorer = MakeRank(spec, ctx.rank, comm.get(), group->pg.get());
  if (!restorer.ok()) return fail(restorer.status());
  auto fresh = data::Sampler::Create(100, 7);
  if (!fresh.ok()) return fail(fresh.status());
  std::string log;
  auto step = restorer->ckpt->Restore(dir, &*fresh, &log);
  if (!step.ok()) return fail(step.status());
  WORKER_EXPECT(ctx, *step == 3, "restored step ", *step);
  WORKER_EXPECT(ctx, fresh->state() == sampler->state(), "sampler state");
  auto state = saver->trainer->State();
  if (!state.ok()) return fail(state.status());
  int sharded = 0;
  for (const parallel::Trainer::StateTensor& st : *state) {
    const Tensor saved = saver->dev->Value(st.name), restored = restorer->dev->Value(st.name);
    WORKER_EXPECT(ctx, BitwiseEqual(saved, restored), st.name, " differs on the device after the restore");
    int64_t global = 1;
    for (int64_t d : st.global_shape) global *= d;
    sharded += restored.defined() && restored.numel() < global;
  }
  WORKER_EXPECT(ctx, sharded > 0, "no tensor is a block of its global shape");
  return ctx.failures == 0 ? 0 : 1;
}
LOOM_COLLECTIVES_WORKER(save_restore, SaveRestoreWorker);

TEST(ParallelDeviceCheckpoint, EachCudaRankSavesAndRestoresItsBlocks) {
  for (const char* layout : {"2 1 3", "1 2 0"}) {
    SCOPED_TRACE(layout);
    const std::string dir = absl::StrCat(::testing::TempDir(), "/pdc_", std::string(layout).substr(0, 1),
                                         std::string(layout).substr(2, 1));
    std::filesystem::remove_all(dir);
    collectives::testing::RunSpec rs;
    rs.worker = "save_restore";
    rs.world = 2;
    rs.arg = absl::StrCat(layout, " ", dir);
    rs.deadline = absl::Seconds(120);
    auto r = collectives::testing::RunRanks(rs);
    EXPECT_TRUE(r.ok()) << r.Summary();
  }
}

}  // namespace
}  // namespace loom::runtime::train

int main(int argc, char** argv) {
  int rc = 0;
  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
