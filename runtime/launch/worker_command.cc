#include "runtime/launch/worker_command.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "absl/time/time.h"
#include "collectives/process_group.h"
#include "collectives/store/tcp_store.h"
#include "runtime/jobspec/confine.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/launch/parallel_train.h"
#include "runtime/launch/rank_gpu.h"
#include "runtime/launch/stop_signal.h"
#include "runtime/plan/planner_command.h"
#include "runtime/train/train_command.h"
#include "runtime/train/train_loop.h"

namespace loom::runtime::launch {
namespace {

int Fail(int code, const std::string& msg) { return train::FailRun("loom worker", code, msg); }

// An integer from the environment; `fallback` when unset.
absl::StatusOr<int> EnvInt(const char* name, int fallback, bool required) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    if (required) return absl::InvalidArgumentError(absl::StrCat(name, ": not set (`loom worker` runs under an agent)"));
    return fallback;
  }
  int out = 0;
  if (!absl::SimpleAtoi(v, &out)) return absl::InvalidArgumentError(absl::StrCat(name, ": expected an integer, got '", v, "'"));
  return out;
}

// The coordinator's confinement (LOOM_ALLOWED_ROOTS), checked again on this
// node right before the files are opened: a symlink may have changed since
// the submission, and another node's files are not the coordinator's.
absl::Status CheckConfined(const v1::JobSpec& spec) {
  const char* env = std::getenv("LOOM_ALLOWED_ROOTS");
  if (env == nullptr || *env == '\0') return absl::OkStatus();
  std::vector<std::string> roots = absl::StrSplit(env, ':', absl::SkipEmpty());
  return jobspec::ConfineSpecPaths("", spec, roots);
}

}  // namespace

int RunWorkerCommand(const std::vector<std::string>& args) {
  static checkpoint::CommitGate gate;  // lives until _exit or exit
  StopOnSignals(&gate);
  FlagSet fs("loom worker", "", "One rank of a job. Agents start it; the job comes through LOOM_* variables.");
  if (std::optional<int> rc = fs.Parse(args)) return *rc;
  const char* spec_path = std::getenv("LOOM_JOB_SPEC");
  if (spec_path == nullptr || *spec_path == '\0') return Fail(2, "LOOM_JOB_SPEC: not set (`loom worker` runs under an agent)");
  auto rank = EnvInt("LOOM_RANK", 0, true);
  if (!rank.ok()) return Fail(2, std::string(rank.status().message()));
  auto world = EnvInt("LOOM_WORLD_SIZE", 1, true);
  if (!world.ok()) return Fail(2, std::string(world.status().message()));
  if (*world < 1 || *rank < 0 || *rank >= *world)
    return Fail(2, absl::StrCat("LOOM_RANK ", *rank, " is outside LOOM_WORLD_SIZE ", *world));
  // Confined before validation opens the files the spec names.
  auto spec = jobspec::ReadJobSpec(spec_path);
  if (!spec.ok()) return Fail(2, std::string(spec.status().message()));
  if (absl::Status s = CheckConfined(*spec); !s.ok()) return Fail(2, std::string(s.message()));
  if (absl::Status s = jobspec::ValidateJobSpec(*spec); !s.ok())
    return Fail(2, absl::StrCat(spec_path, ": ", s.message()));
  const auto& par = spec->parallel();
  const int layout = std::max(1, par.dp()) * std::max(1, par.tp());
  if (!par.tp_auto() && layout != *world)
    return Fail(2, absl::StrCat("parallel: dp ", par.dp(), " x tp ", par.tp(), " = ", layout,
                                " ranks, but the job was launched with world size ", *world));
  // One CPU rank trains exactly as `loom train` (checkpoints included).
  const bool cuda = spec->device() == "cuda";
  if (*world == 1 && !cuda) return train::RunTrainCommand({spec_path}, nullptr, &gate);

  // Several ranks (or one GPU rank): meet at the job's store.
  auto timeout_s = EnvInt("LOOM_RENDEZVOUS_TIMEOUT_S", 120, false);
  if (!timeout_s.ok() || *timeout_s <= 0) return Fail(2, "LOOM_RENDEZVOUS_TIMEOUT_S: expected a positive integer");
  collectives::store::TcpStore::Options so;
  so.retry_refused_secret = true;  // the host admits the job's secret as its order arrives
  so.connect_timeout = absl::Seconds(*timeout_s);
  auto store = collectives::store::TcpStore::FromEnv(so);
  if (!store.ok()) return Fail(1, absl::StrCat("rendezvous: ", store.status().message()));
  // A GPU rank sees only its GPU (rank_gpu.h) before any backend binds a device.
  RankGpu gpu;
  if (cuda) {
    auto picked = PickRankGpu(std::getenv("LOOM_GPU"), std::getenv("CUDA_VISIBLE_DEVICES"), *rank,
                              std::max(1, spec->resources().ranks_per_gpu()));
    if (!picked.ok()) return Fail(2, std::string(picked.status().message()));
    if (absl::Status s = ApplyRankGpu(*picked); !s.ok()) return Fail(1, std::string(s.message()));
    gpu = *picked;
  }
  collectives::ProcessGroupOptions po;
  // PyTorch's pairing, NCCL for the GPU's tensors, where each rank has a GPU
  // of its own; Gloo staged through the host where ranks share one.
  if (cuda) po.backend = jobspec::DefaultBackend(std::max(1, spec->resources().ranks_per_gpu()));
  if (!par.backend().empty()) po.backend = par.backend();
  po.timeout = absl::Seconds(*timeout_s);
  auto pg = collectives::ProcessGroup::Create(*store, *rank, *world, po);
  if (!pg.ok()) return Fail(1, absl::StrCat("process group: ", pg.status().message()));
  // One GPU rank: the CUDA training step, its loss averaged through the
  // group's CUDA backend.
  if (cuda && *world == 1) return train::RunTrainCommand({spec_path}, pg->get(), &gate);
  // tp: auto: every rank runs the same deterministic planner for this world,
  // so all of them pick the same layout (and, for an imported model, the
  // same tp plan); rank 0 writes the plan into the run folder.
  auto plan = plan::ResolveAutoLayout(*spec, plan::DefaultHardware(*spec), *world);
  if (!plan.ok()) return Fail(absl::IsResourceExhausted(plan.status()) || absl::IsInvalidArgument(plan.status()) ? 2 : 1,
                              std::string(plan.status().message()));
  return RunParallelTraining(*spec, std::shared_ptr<collectives::ProcessGroup>(std::move(*pg)), &gate, plan->get(),
                             gpu.device);
}

}  // namespace loom::runtime::launch
