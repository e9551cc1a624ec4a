#include "runtime/train/train_command.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collectives/process_group.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/plan/planner_command.h"
#include "runtime/train/run_reporter.h"
#include "runtime/train/train_loop.h"

namespace loom::train {
namespace {

int Fail(int code, absl::string_view msg) { return FailRun("loom train", code, msg); }

}  // namespace

int RunTrainCommand(const std::vector<std::string>& args) { return RunTrainCommand(args, nullptr); }

int RunTrainCommand(const std::vector<std::string>& args, collectives::ProcessGroup* world,
                    checkpoint::CommitGate* gate) {
  std::string path;
  int steps_override = 0;
  std::string init_from;  // --init: overrides the spec's init_from
  // Live Prometheus metrics (also from env LOOM_WORKER_METRICS_LISTEN).
  std::string metrics_listen;
  if (const char* e = std::getenv("LOOM_WORKER_METRICS_LISTEN"); e != nullptr) metrics_listen = e;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--steps" && i + 1 < args.size()) {
      if (!absl::SimpleAtoi(args[++i], &steps_override) || steps_override <= 0)
        return Fail(2, absl::StrCat("--steps: expected a positive integer, got '", args[i], "'"));
    } else if (args[i] == "--metrics-listen" && i + 1 < args.size()) {
      metrics_listen = args[++i];
    } else if (args[i] == "--init" && i + 1 < args.size()) {
      init_from = args[++i];
    } else if (!args[i].empty() && args[i][0] == '-') {
      return Fail(2, absl::StrCat("unknown flag '", args[i],
                                  "' (usage: loom train JOB.yaml [--steps N] [--init FILE] [--metrics-listen HOST:PORT])"));
    } else if (path.empty()) {
      path = args[i];
    } else {
      return Fail(2, "usage: loom train JOB.yaml [--steps N]");
    }
  }
  if (path.empty()) return Fail(2, "usage: loom train JOB.yaml [--steps N]");
  auto loaded = jobspec::LoadJobSpec(path);
  if (!loaded.ok()) return Fail(2, loaded.status().message());
  TrainingRun run;
  run.spec = *loaded;
  v1::JobSpec& spec = run.spec;
  if (steps_override > 0) spec.mutable_train()->set_steps(steps_override);
  if (!init_from.empty()) spec.set_init_from(init_from);
  // parallel: {tp: auto}: the planner picks the layout (runtime/plan/planner_command.h);
  // its table goes into the run folder as plan.txt / plan.json.
  auto plan = plan::ResolveAutoLayout(spec, plan::DefaultHardware(spec));
  if (!plan.ok()) return Fail(2, plan.status().message());
  if (spec.parallel().dp() * std::max(1, spec.parallel().tp()) != 1)
    return Fail(2, "parallel: `loom train` runs one process; dp and tp must be 1");
  run.command = "loom train";
  run.world = world;
  run.gate = gate;
  run.run_dir = RunFolder(spec);
  run.metrics_listen = metrics_listen;
  run.plan = plan->get();
  return RunTraining(run);
}

}  // namespace loom::train
