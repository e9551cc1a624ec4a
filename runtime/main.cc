// The `loom` binary: one executable, many subcommands.
//
//   loom train JOB.yaml  train in this process (README command 1)
//   loom compile JOB.yaml --dump=STAGE   print the IR after a compiler stage
//   loom data prepare --input FILE... --out DIR   text -> tokenizer + token shards
//   loom sample RUN|CKPT --prompt TEXT   a trained model's continuation, decoded
//   loom plan JOB.yaml   rank parallel layouts (dp x tp, ZeRO, SP) by the cost model
//   loom run JOB.yaml    coordinator + agent in this process: launch, follow, exit
//   loom worker          one rank of a job (agents start it)
//   loom coordinator / agent             the service daemons
//   loom submit / jobs / status / cancel / logs   job control through the gRPC API
//   loom export / import / checkpoint    consolidate, import and inspect checkpoints
//   loom demo            run the kernel demo
//   loom ops [--onnx]    list the registered ops and their kernels (or the ONNX ops Loom imports)
//   loom inspect M.onnx  an ONNX model's ops, Loom's support, and the imported graph
//   loom version         print the build's version and CUDA availability
//   loom bench collectives   collective bandwidth vs torch.distributed Gloo
//   loom completion bash     a bash completion script for these commands and flags
//
// Every command takes --help (its usage on stdout, exit 0); flags are parsed
// by base/flags.h.
//
// The Kubernetes operator is a binary of its own, `loom_operator`
// (deploy/operator), so this one links nothing from deploy/.
//
// Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <iostream>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"

#include "base/flags.h"
#include "collectives/bench/bench_command.h"
#include "runtime/checkpoint/ckpt_tool.h"
#include "runtime/commands.h"
#include "runtime/data/prepare_command.h"
#include "runtime/launch/run_command.h"
#include "runtime/launch/worker_command.h"
#include "runtime/plan/planner_command.h"
#include "runtime/service/agent/agent_command.h"
#include "runtime/service/client_commands.h"
#include "runtime/service/coordinator_command.h"
#include "runtime/train/compile_command.h"
#include "runtime/train/sample_command.h"
#include "runtime/train/train_command.h"

namespace {

int CheckpointTool(const char* sub, const std::vector<std::string>& args) {
  std::vector<std::string> a;
  if (*sub) a.push_back(sub);
  a.insert(a.end(), args.begin(), args.end());
  return loom::runtime::checkpoint::RunCheckpointTool(a, std::cout, std::cerr);
}

struct Command {
  const char* name;
  const char* help;
  int (*run)(const std::vector<std::string>& args);
};

int Completion(const std::vector<std::string>& args);

const Command kCommands[] = {
    {"train", "train a model from a job spec in this process: loom train JOB.yaml [--steps N] [--init FILE]",
     loom::runtime::train::RunTrainCommand},
    {"compile", "print the IR after a compiler stage: loom compile JOB.yaml --dump=STAGE",
     loom::runtime::train::RunCompileCommand},
    {"sample",
     "continue a prompt with a trained model: loom sample RUN_DIR|CHECKPOINT --prompt TEXT [--tokens N] "
     "[--temperature T] [--top-k K] [--seed S]",
     loom::runtime::train::RunSampleCommand},
    {"data", "text files -> a tokenizer and token shards: loom data prepare --input FILE... --out DIR [--help]",
     loom::runtime::data::RunDataCommand},
    {"plan", "rank parallel layouts for a job: loom plan JOB.yaml [--world N] [--memory-gib X] ... [--json]",
     loom::runtime::plan::RunPlanCommand},
    {"run",
     "run a job here (or on several machines), torchrun style: loom run JOB.yaml [--nproc-per-node N] "
     "[--nnodes N --node-rank R --rdzv-endpoint HOST:PORT]",
     loom::runtime::launch::RunRunCommand},
    {"worker", "one rank of a job (started by an agent; reads LOOM_* variables)",
     loom::runtime::launch::RunWorkerCommand},
    {"coordinator", "run the coordinator daemon (job queue, scheduler, gRPC API, /metrics)",
     loom::runtime::service::RunCoordinatorCommand},
    {"agent", "run a node agent that launches workers: loom agent --coordinator|--rdzv-endpoint HOST:PORT",
     loom::runtime::service::agent::RunAgentCommand},
    {"submit", "submit a job spec to the coordinator", loom::runtime::service::RunSubmitCommand},
    {"jobs", "list jobs (filter, paging, --json)", loom::runtime::service::RunJobsCommand},
    {"status", "show one job's status", loom::runtime::service::RunStatusCommand},
    {"cancel", "cancel a job", loom::runtime::service::RunCancelCommand},
    {"logs", "show a job's logs (follow, rank filter)", loom::runtime::service::RunLogsCommand},
    {"export",
     "one safetensors file from a checkpoint, or in Hugging Face's layout from a run or checkpoint: "
     "loom export [--format hf [--family gpt|llama]] SRC OUT",
     [](const std::vector<std::string>& a) { return CheckpointTool("export", a); }},
    {"import", "turn a safetensors file into a checkpoint: loom import FILE CKPT_DIR",
     [](const std::vector<std::string>& a) { return CheckpointTool("import", a); }},
    {"checkpoint", "inspect or verify checkpoints: loom checkpoint inspect|verify ...",
     [](const std::vector<std::string>& a) { return CheckpointTool("", a); }},
    {"demo", "run the kernel demo: matmul and SDPA checked against references, with timings", loom::runtime::RunDemo},
    {"ops", "list the registered ops, their kernels and gradient rules (--onnx: the ONNX ops Loom imports)",
     loom::runtime::RunOps},
    {"inspect", "an ONNX model's ops, Loom's support and the imported graph: loom inspect MODEL.onnx [--help]",
     loom::runtime::RunInspect},
    {"version", "print the version and whether CUDA is available", loom::runtime::RunVersion},
    {"bench", "benchmarks: loom bench collectives [--full] [--backends=...] (vs torch Gloo)",
     loom::collectives::bench::RunBenchCommand},
    {"completion", "print a shell completion script: loom completion bash", Completion},
};

// `loom completion bash`: each command's flags are read from its own --help
// (this binary, run once per command), so the script follows the code.
int Completion(const std::vector<std::string>& args) {
  std::vector<std::string> shell;
  loom::FlagSet fs("loom completion", "bash",
                   "Prints a bash completion script generated from the commands and their flags.\n"
                   "Install: loom completion bash > /etc/bash_completion.d/loom, or source <(loom completion bash).");
  if (std::optional<int> rc = fs.Positionals(&shell, "SHELL", 1, 1).Parse(args)) return *rc;
  if (shell[0] != "bash") return fs.UsageError("SHELL: only bash is supported, got '" + shell[0] + "'");
  char self[4096] = {0};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    std::fprintf(stderr, "loom completion: cannot find this executable (/proc/self/exe)\n");
    return 1;
  }
  std::vector<loom::runtime::CompletionEntry> entries;
  for (const Command& c : kCommands) {
    std::string usage;
    if (std::string(c.name) != "completion") {
      FILE* p = popen(("'" + std::string(self, n) + "' " + std::string(c.name) + " --help 2>/dev/null").c_str(), "r");
      char buf[4096];
      while (p != nullptr && std::fgets(buf, sizeof buf, p) != nullptr) usage += buf;
      if (p == nullptr || pclose(p) != 0) {
        std::fprintf(stderr, "loom completion: `loom %s --help` failed\n", c.name);
        return 1;
      }
    }
    entries.push_back({c.name, loom::runtime::FlagsInUsage(usage)});
  }
  std::fputs(loom::runtime::BashCompletionScript(entries).c_str(), stdout);
  return 0;
}

void Usage(FILE* out) {
  std::fprintf(out, "usage: loom <command> [args]    (loom <command> --help: its flags; loom --version)\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.help);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    Usage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    Usage(stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "-V") return loom::runtime::RunVersion({});
  // A crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) writes the signal and
  // a symbolized stack trace to stderr before the process dies of it: under
  // an agent that lands in the rank's .err log, which `loom run` and
  // `loom logs` show. SIGTERM stays a plain stop (commands that handle it
  // install their own handler).
  absl::InitializeSymbolizer(argv[0]);
  absl::InstallFailureSignalHandler(absl::FailureSignalHandlerOptions());
  std::signal(SIGTERM, SIG_DFL);
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const Command& c : kCommands)
    if (cmd == c.name) return c.run(args);
  std::fprintf(stderr, "loom: unknown command '%s'\n\n", cmd.c_str());
  Usage(stderr);
  return 2;
}
