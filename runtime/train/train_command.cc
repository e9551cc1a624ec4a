#include "runtime/train/train_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "base/thread_pool.h"
#include "collectives/process_group.h"
#include "parallel/planner.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/plan/planner_command.h"
#include "runtime/train/run_reporter.h"
#include "runtime/train/train_loop.h"

namespace loom::runtime::train {
namespace {

int Fail(int code, absl::string_view msg) { return FailRun("loom train", code, msg); }

// The run fits this machine's memory by the planner's estimate for one rank
// (parallel::BytesPerRank, the figure the coordinator fits jobs to agents
// with); bad input naming train.batch_size otherwise.
absl::Status CheckMemoryFits(const v1::JobSpec& spec) {
  const int64_t need = parallel::BytesPerRank(spec);
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const int64_t have = pages > 0 && page > 0 ? int64_t{pages} * page : 0;
  if (need == 0 || have == 0 || need <= have) return absl::OkStatus();
  constexpr int64_t kMiB = int64_t{1} << 20;
  return absl::InvalidArgumentError(absl::StrCat(
      "train.batch_size: ", spec.train().batch_size(), ": the run needs about ", (need + kMiB - 1) / kMiB,
      " MiB (the planner's estimate for this model, batch and precision) but this machine has ", have / kMiB,
      " MiB; a smaller batch or model lowers it (or `loom run` with more dp or tp, or ZeRO)"));
}

}  // namespace

int RunTrainCommand(const std::vector<std::string>& args) { return RunTrainCommand(args, nullptr); }

int RunTrainCommand(const std::vector<std::string>& args, collectives::ProcessGroup* world,
                    checkpoint::CommitGate* gate) {
  std::vector<std::string> positional;
  int steps_override = 0;
  std::string init_from;  // --init: overrides the spec's init_from
  std::string metrics_listen;
  FlagSet fs("loom train", "JOB.yaml", "Trains a model from a job spec in this process (dp and tp 1).");
  fs.Int("steps", &steps_override, "N", "train N steps instead of the spec's train.steps", 1)
      .String("init", &init_from, "FILE", "initial parameters (overrides the spec's init_from)")
      .String("metrics-listen", &metrics_listen, "HOST:PORT", "serve live Prometheus metrics there")
      .Env("LOOM_WORKER_METRICS_LISTEN")
      .Positionals(&positional, "JOB.yaml", 1, 1);
  if (std::optional<int> rc = fs.Parse(args)) return *rc;
  const std::string& path = positional[0];
  auto loaded = jobspec::LoadJobSpec(path);
  if (!loaded.ok()) return Fail(2, loaded.status().message());
  TrainingRun run;
  run.spec = *loaded;
  v1::JobSpec& spec = run.spec;
  if (steps_override > 0) spec.mutable_train()->set_steps(steps_override);
  if (!init_from.empty()) spec.set_init_from(init_from);
  if (spec.resources().threads_per_rank() > 0) SetNumThreads(spec.resources().threads_per_rank());
  // parallel: {tp: auto}: the planner picks the layout (runtime/plan/planner_command.h);
  // its table goes into the run folder as plan.txt / plan.json.
  auto plan = plan::ResolveAutoLayout(spec, plan::DefaultHardware(spec));
  if (!plan.ok()) return Fail(2, plan.status().message());
  if (spec.parallel().dp() * std::max(1, spec.parallel().tp()) != 1)
    return Fail(2, "parallel: `loom train` runs one process; dp and tp must be 1");
  if (absl::Status s = CheckMemoryFits(spec); !s.ok()) return Fail(2, s.message());
  run.command = "loom train";
  run.world = world;
  run.gate = gate;
  run.run_dir = RunFolder(spec);
  run.metrics_listen = metrics_listen;
  run.plan = plan->get();
  return RunTraining(run);
}

}  // namespace loom::runtime::train
